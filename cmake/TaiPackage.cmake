# TaiPackage.cmake - Debian packages with CPack (`make package`, or `cpack` in a build directory).
# One package per install component:
#   libtai-dev  (component dev)    the headers, libtai.a, libtai_posix.a and libtai_testing.a, the CMake package
#                                  (find_package(tai)) and the pkg-config files
#   tai-tools   (component tools)  tai-bench, tai-augment, tai-serial and libtai-preload.so
# libtai is a static library unless BUILD_SHARED_LIBS=ON; then libtai.so goes to a runtime
# package of its own, libtai<major> (component runtime), which libtai-dev depends on.
# dpkg-shlibdeps works out each package's shared-library dependencies; libtai-dev names the -dev
# packages a static libtai's consumers link (libaio, liburing) by hand, as that is a link-time need
# dpkg-shlibdeps cannot see. test/package checks the result: it unpacks the packages into an
# empty root, builds a consumer against them with find_package(tai) and with pkg-config, runs it,
# and runs lintian, which must report no error.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tai)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VENDOR "TAI developers")
# The maintainer: TAI_PACKAGE_MAINTAINER, else Debian's own convention (DEBFULLNAME and DEBEMAIL
# in the environment, as dch uses them), else a documentation address (RFC 2606) that says a
# packager has not named one.
if(NOT TAI_PACKAGE_MAINTAINER)
  if(DEFINED ENV{DEBEMAIL} AND NOT "$ENV{DEBEMAIL}" STREQUAL "")
    set(tai_debname "$ENV{DEBFULLNAME}")
    if(tai_debname STREQUAL "")
      set(tai_debname "TAI packager")
    endif()
    set(tai_default_maintainer "${tai_debname} <$ENV{DEBEMAIL}>")
  else()
    set(tai_default_maintainer "TAI developers <tai-developers@example.org>")
  endif()
endif()
set(TAI_PACKAGE_MAINTAINER "${tai_default_maintainer}" CACHE STRING "Maintainer of the Debian packages (make package)")
set(CPACK_PACKAGE_CONTACT "${TAI_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)  # seconds instead of xz's minute for the tools package
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

get_target_property(tai_package_type tai TYPE)
set(CPACK_COMPONENTS_ALL dev tools)
set(tai_dev_depends "")
if(TAI_WITH_LIBAIO)
  list(APPEND tai_dev_depends libaio-dev)
endif()
if(TAI_WITH_URING)
  list(APPEND tai_dev_depends liburing-dev)
endif()
if(tai_package_type STREQUAL "SHARED_LIBRARY")
  list(PREPEND CPACK_COMPONENTS_ALL runtime)
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libtai${PROJECT_VERSION_MAJOR})
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
  set(CPACK_COMPONENT_DEV_DEPENDS runtime)
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtai-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
string(REPLACE ";" ", " CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${tai_dev_depends}")
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME tai-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_DEV_DESCRIPTION "TAI: asynchronous file I/O for HPC programs - development files
 The C++17 headers, the static library, the CMake package and the pkg-config
 files of TAI, a library that takes file reads, writes and fsyncs off the
 critical path of a program: worker threads do the I/O over io_uring, libaio
 or POSIX, behind a per-file cache held under a memory quota.")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "TAI: asynchronous file I/O for HPC programs - programs
 tai-bench (I/O benchmarks), tai-augment (the image-augmentation workload),
 tai-serial (a serial write loop through libc and through TAI) and
 libtai-preload.so, which routes the file writes of unmodified programs
 through TAI's cache.")
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "TAI: asynchronous file I/O for HPC programs - shared library
 The shared library of TAI.")

# Every package carries a copyright file and a changelog in /usr/share/doc/<package>, as Debian
# policy asks (lintian reports their absence as errors). The changelog is compressed reproducibly.
find_program(TAI_GZIP gzip)
set(tai_changelog_gz ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog.gz)
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/packaging)
string(TIMESTAMP tai_changelog_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/packaging/changelog.in ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog @ONLY)
if(TAI_GZIP)
  execute_process(COMMAND ${TAI_GZIP} -9nc ${CMAKE_CURRENT_BINARY_DIR}/packaging/changelog
                  OUTPUT_FILE ${tai_changelog_gz})
endif()
foreach(component IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER ${component} upper)
  set(package ${CPACK_DEBIAN_${upper}_PACKAGE_NAME})
  install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/packaging/copyright DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
          COMPONENT ${component})
  if(TAI_GZIP)
    install(FILES ${tai_changelog_gz} DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package} COMPONENT ${component})
  endif()
endforeach()
include(CPack)
