# FindLibURing.cmake - locates uring (Debian: see the Makefile's deps list).
# Defines LibURing_FOUND, LibURing_INCLUDE_DIR, LibURing_LIBRARY, LibURing_VERSION (from pkg-config when
# available) and the imported target tai::dep::uring.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_LIBURING QUIET liburing)
endif()
find_path(LibURing_INCLUDE_DIR NAMES liburing.h HINTS ${PC_LIBURING_INCLUDEDIR} ${PC_LIBURING_INCLUDE_DIRS})
find_library(LibURing_LIBRARY NAMES uring HINTS ${PC_LIBURING_LIBDIR} ${PC_LIBURING_LIBRARY_DIRS})
set(LibURing_VERSION "${PC_LIBURING_VERSION}")
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LibURing REQUIRED_VARS LibURing_LIBRARY LibURing_INCLUDE_DIR
                                  VERSION_VAR LibURing_VERSION)
mark_as_advanced(LibURing_INCLUDE_DIR LibURing_LIBRARY)
if(LibURing_FOUND AND NOT TARGET tai::dep::uring)
  add_library(tai::dep::uring UNKNOWN IMPORTED)
  set_target_properties(tai::dep::uring PROPERTIES IMPORTED_LOCATION "${LibURing_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${LibURing_INCLUDE_DIR}")
endif()
