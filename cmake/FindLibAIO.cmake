# FindLibAIO.cmake - locates aio (Debian: see the Makefile's deps list).
# Defines LibAIO_FOUND, LibAIO_INCLUDE_DIR, LibAIO_LIBRARY, LibAIO_VERSION (from pkg-config when
# available) and the imported target tai::dep::aio.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_LIBAIO QUIET libaio)
endif()
find_path(LibAIO_INCLUDE_DIR NAMES libaio.h HINTS ${PC_LIBAIO_INCLUDEDIR} ${PC_LIBAIO_INCLUDE_DIRS})
find_library(LibAIO_LIBRARY NAMES aio HINTS ${PC_LIBAIO_LIBDIR} ${PC_LIBAIO_LIBRARY_DIRS})
set(LibAIO_VERSION "${PC_LIBAIO_VERSION}")
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LibAIO REQUIRED_VARS LibAIO_LIBRARY LibAIO_INCLUDE_DIR
                                  VERSION_VAR LibAIO_VERSION)
mark_as_advanced(LibAIO_INCLUDE_DIR LibAIO_LIBRARY)
if(LibAIO_FOUND AND NOT TARGET tai::dep::aio)
  add_library(tai::dep::aio UNKNOWN IMPORTED)
  set_target_properties(tai::dep::aio PROPERTIES IMPORTED_LOCATION "${LibAIO_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${LibAIO_INCLUDE_DIR}")
endif()
