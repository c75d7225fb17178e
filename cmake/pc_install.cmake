# SPDX-License-Identifier: MIT
# Runs at install time (client/CMakeLists.txt includes it through
# install(CODE)): writes ferry.pc for the prefix installed to, with absolute
# paths (pkg-config then leaves out /usr/include and the multiarch library
# directory, as Debian's other .pc files do), and installs it. DESTDIR is
# honoured by file(INSTALL) and not written into the file.
#
# In: FERRY_PC_IN, FERRY_PC_TMP, FERRY_PC_LIBDIR_REL, FERRY_PC_INCLUDEDIR_REL
#     (relative: under the prefix), PROJECT_VERSION.
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")
foreach(v LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${FERRY_PC_${v}_REL}")
    set(FERRY_PC_${v} "${FERRY_PC_${v}_REL}")
  else()
    set(FERRY_PC_${v} "${prefix}/${FERRY_PC_${v}_REL}")
  endif()
endforeach()
set(FERRY_PC_PREFIX "${prefix}")
if(FERRY_PC_PREFIX STREQUAL "")
  set(FERRY_PC_PREFIX "/")
endif()
configure_file("${FERRY_PC_IN}" "${FERRY_PC_TMP}/ferry.pc" @ONLY)
file(INSTALL "${FERRY_PC_TMP}/ferry.pc" DESTINATION "${FERRY_PC_LIBDIR}/pkgconfig")
