# SPDX-License-Identifier: MIT
# Runs at install time (python/CMakeLists.txt includes it through
# install(CODE)): installs the Python package for the prefix installed to,
# with ferry/_build.py naming this build's version and the installed library.
#
# In: FERRY_PY_SRC (the package's sources), FERRY_PY_TMP (scratch), FERRY_PY_DIR
#     (override, may be empty), FERRY_PY_SYSTEM_REL / FERRY_PY_LOCAL_REL (for
#     the /usr prefix and for others), FERRY_PY_VERSION, FERRY_PY_LIBDIR,
#     FERRY_PY_LIBRARY (the library's file name, libferry.so.0).
set(prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" prefix "${prefix}")
if(FERRY_PY_DIR)
  set(rel "${FERRY_PY_DIR}")
elseif(prefix STREQUAL "/usr" OR prefix STREQUAL "")
  set(rel "${FERRY_PY_SYSTEM_REL}")
else()
  set(rel "${FERRY_PY_LOCAL_REL}")
endif()
if(IS_ABSOLUTE "${rel}")
  set(dest "${rel}")
else()
  set(dest "${prefix}/${rel}")
endif()
if(prefix STREQUAL "/usr" OR prefix STREQUAL "")
  # A system install (a distribution's package): the library is in one of
  # the dynamic linker's own directories; its soname finds it there, and the
  # package does not depend on the architecture's library directory.
  set(library "${FERRY_PY_LIBRARY}")
elseif(IS_ABSOLUTE "${FERRY_PY_LIBDIR}")
  set(library "${FERRY_PY_LIBDIR}/${FERRY_PY_LIBRARY}")
else()
  set(library "${prefix}/${FERRY_PY_LIBDIR}/${FERRY_PY_LIBRARY}")
endif()
file(WRITE "${FERRY_PY_TMP}/_build.py"
     "\"\"\"Written by cmake --install: the build this package belongs to.\"\"\"\n\n"
     "VERSION = \"${FERRY_PY_VERSION}\"\nLIBRARY = \"${library}\"\n")
file(GLOB sources "${FERRY_PY_SRC}/*.py")
list(FILTER sources EXCLUDE REGEX "/_build\\.py$")
file(INSTALL ${sources} "${FERRY_PY_TMP}/_build.py" DESTINATION "${dest}/ferry")
# The subpackages (ferry.torch), each a folder of modules.
file(GLOB subpackages LIST_DIRECTORIES true "${FERRY_PY_SRC}/*")
foreach(sub IN LISTS subpackages)
  if(IS_DIRECTORY "${sub}" AND EXISTS "${sub}/__init__.py")
    get_filename_component(name "${sub}" NAME)
    file(GLOB sub_sources "${sub}/*.py")
    file(INSTALL ${sub_sources} DESTINATION "${dest}/ferry/${name}")
  endif()
endforeach()
