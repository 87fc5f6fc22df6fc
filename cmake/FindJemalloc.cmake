# FindJemalloc.cmake - locates jemalloc (Debian: see the Makefile's deps list).
# Defines Jemalloc_FOUND, Jemalloc_INCLUDE_DIR, Jemalloc_LIBRARY, Jemalloc_VERSION (from pkg-config when
# available) and the imported target tai::dep::jemalloc.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_JEMALLOC QUIET jemalloc)
endif()
find_path(Jemalloc_INCLUDE_DIR NAMES jemalloc/jemalloc.h HINTS ${PC_JEMALLOC_INCLUDEDIR} ${PC_JEMALLOC_INCLUDE_DIRS})
find_library(Jemalloc_LIBRARY NAMES jemalloc HINTS ${PC_JEMALLOC_LIBDIR} ${PC_JEMALLOC_LIBRARY_DIRS})
set(Jemalloc_VERSION "${PC_JEMALLOC_VERSION}")
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Jemalloc REQUIRED_VARS Jemalloc_LIBRARY Jemalloc_INCLUDE_DIR
                                  VERSION_VAR Jemalloc_VERSION)
mark_as_advanced(Jemalloc_INCLUDE_DIR Jemalloc_LIBRARY)
if(Jemalloc_FOUND AND NOT TARGET tai::dep::jemalloc)
  add_library(tai::dep::jemalloc UNKNOWN IMPORTED)
  set_target_properties(tai::dep::jemalloc PROPERTIES IMPORTED_LOCATION "${Jemalloc_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${Jemalloc_INCLUDE_DIR}")
endif()
