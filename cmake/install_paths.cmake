# SPDX-License-Identifier: MIT
# Runs at install time (install(CODE) includes it): CMAKE_INSTALL_PREFIX is
# then the prefix being installed to, including `cmake --install --prefix P`,
# so the paths written into the systemd units are those of the installed
# tree, whatever the build was configured with. DESTDIR is honoured by
# file(INSTALL).
#
# In: FERRY_SRC (systemd/ sources), FERRY_TMP (scratch dir), FERRY_BINDIR_REL,
#     FERRY_UNITDIR_REL (relative: under the prefix).
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")
# GNU coding standards and GNUInstallDirs: the system prefixes keep their
# configuration in /etc (/usr/etc is read by nobody), others under the prefix.
if(prefix STREQUAL "/usr" OR prefix STREQUAL "")
  set(FERRY_SYSCONFDIR "/etc")
else()
  set(FERRY_SYSCONFDIR "${prefix}/etc")
endif()
foreach(v BINDIR UNITDIR)
  if(IS_ABSOLUTE "${FERRY_${v}_REL}")
    set(FERRY_${v} "${FERRY_${v}_REL}")
  else()
    set(FERRY_${v} "${prefix}/${FERRY_${v}_REL}")
  endif()
endforeach()
configure_file("${FERRY_SRC}/ferryd@.service.in" "${FERRY_TMP}/ferryd@.service" @ONLY)
configure_file("${FERRY_SRC}/ferryd@.socket.in" "${FERRY_TMP}/ferryd@.socket" @ONLY)
configure_file("${FERRY_SRC}/ferry-metrics.service.in" "${FERRY_TMP}/ferry-metrics.service" @ONLY)
file(INSTALL "${FERRY_TMP}/ferryd@.service" "${FERRY_TMP}/ferryd@.socket" "${FERRY_TMP}/ferry-metrics.service"
     "${FERRY_SRC}/ferry-metrics.timer" "${FERRY_SRC}/ferry-mps.service" DESTINATION "${FERRY_UNITDIR}")
file(INSTALL "${FERRY_SRC}/ferryd@.service.d/mps.conf" DESTINATION "${FERRY_UNITDIR}/ferryd@.service.d")
file(INSTALL "${FERRY_SRC}/ferryd.conf" DESTINATION "${FERRY_SYSCONFDIR}/ferry")
