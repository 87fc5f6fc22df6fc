# FindPAPI.cmake - locates papi (Debian: see the Makefile's deps list).
# Defines PAPI_FOUND, PAPI_INCLUDE_DIR, PAPI_LIBRARY, PAPI_VERSION (from pkg-config when
# available) and the imported target tai::dep::papi.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_PAPI QUIET papi)
endif()
find_path(PAPI_INCLUDE_DIR NAMES papi.h HINTS ${PC_PAPI_INCLUDEDIR} ${PC_PAPI_INCLUDE_DIRS})
find_library(PAPI_LIBRARY NAMES papi HINTS ${PC_PAPI_LIBDIR} ${PC_PAPI_LIBRARY_DIRS})
set(PAPI_VERSION "${PC_PAPI_VERSION}")
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PAPI REQUIRED_VARS PAPI_LIBRARY PAPI_INCLUDE_DIR
                                  VERSION_VAR PAPI_VERSION)
mark_as_advanced(PAPI_INCLUDE_DIR PAPI_LIBRARY)
if(PAPI_FOUND AND NOT TARGET tai::dep::papi)
  add_library(tai::dep::papi UNKNOWN IMPORTED)
  set_target_properties(tai::dep::papi PROPERTIES IMPORTED_LOCATION "${PAPI_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${PAPI_INCLUDE_DIR}")
endif()
