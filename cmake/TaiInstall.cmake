# TaiInstall.cmake - what `cmake --install` puts under the prefix:
#   include/tai/...                  every header under include/tai, and config.hpp. include/
#                                    holds only what users include and what those headers need
#                                    (detail/); libtai's private headers are in src/detail/ and
#                                    engines/common/, which are not installed wholesale
#   include/tai/engines/<name>/*.hpp the headers of the engines this build contains, and of
#                                    engines/common what engine headers and users' engines need
#   include/tai/testing/*.hpp        the rigs of tai::testing (src/testing), when it is built
#   lib/libtai.a                     the library (libtai.so with -DBUILD_SHARED_LIBS=ON)
#   lib/libtai_posix.a               the drop-in layer tai::posix (tai/posix.hpp)
#   lib/libtai_testing.a             the test engines fault, recording and crashsim and the rigs
#                                    (TAI_BUILD_TESTING_ENGINES)
#   lib/cmake/tai/                   find_package(tai) -> tai::tai, tai::posix, and tai::testing when built
#                                    (find_package(tai COMPONENTS testing) requires it)
#   lib/pkgconfig/tai.pc             pkg-config --cflags --libs tai
#   lib/pkgconfig/tai-posix.pc       pkg-config --cflags --libs tai-posix (the drop-in layer)
#   lib/pkgconfig/tai-testing.pc     pkg-config --cflags --libs tai-testing (with tai::testing)
# test/cmake_smoke checks all three ways of consuming it.
include(CMakePackageConfigHelpers)

set(TAI_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/tai)

set(tai_installed_targets tai tai_posix)
if(TARGET tai_testing)
  list(APPEND tai_installed_targets tai_testing)
endif()
install(TARGETS ${tai_installed_targets} EXPORT taiTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The whole directory: nothing private lives under include/ (cmake_smoke.install checks that every
# installed detail/ header is included by another installed header).
install(DIRECTORY include/tai DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/include/tai/config.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tai)
# Only the engines compiled into this libtai: a header of an engine that is not built would
# declare a factory the library does not define.
foreach(engine IN LISTS TAI_ENGINES TAI_TESTING_ENGINES)
  install(DIRECTORY engines/${engine} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tai/engines
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
# engines/common: only what an engine header or a user's own engine needs: the wrapper base of
# fault and recording, the stream base of cstdio and fstream, direct-I/O alignment discovery and
# the write-behind count of posix and uring files (defined in libtai). The others there (open(2)
# flags, the completion backlog, the kernel-probe test seam) are private to the engines.
install(FILES engines/common/wrapper_engine.hpp engines/common/stream_file.hpp engines/common/alignment.hpp
              engines/common/write_behind.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tai/engines/common)
# The rigs of tai::testing, which include the test engines' headers and the controller's.
if(TARGET tai_testing)
  install(DIRECTORY src/testing/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tai/testing
          FILES_MATCHING PATTERN "*.hpp")
endif()

# CMake package. It asks for what a consumer of libtai needs and nothing more: no installed
# header includes a header of libaio, liburing, Boost or PAPI, and libtai calls no PAPI function.
# A static libtai leaves the symbols of its private dependencies libaio and liburing to the
# program's link: the exported target names them as link-only items (tai::dep::aio,
# tai::dep::uring), which taiConfig.cmake defines from the library file alone (no find module,
# no headers), looking first in the directory this build linked.
get_target_property(tai_type tai TYPE)
set(TAI_LINK_ONLY_DEPS "")
if(tai_type STREQUAL "STATIC_LIBRARY")
  if(TAI_WITH_LIBAIO)
    get_filename_component(dir "${LibAIO_LIBRARY}" DIRECTORY)
    list(APPEND TAI_LINK_ONLY_DEPS "aio|libaio-dev|${dir}")
  endif()
  if(TAI_WITH_URING)
    get_filename_component(dir "${LibURing_LIBRARY}" DIRECTORY)
    list(APPEND TAI_LINK_ONLY_DEPS "uring|liburing-dev|${dir}")
  endif()
endif()
install(EXPORT taiTargets NAMESPACE tai:: DESTINATION ${TAI_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/taiConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/taiConfig.cmake
                              INSTALL_DESTINATION ${TAI_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/taiConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/taiConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/taiConfigVersion.cmake
        DESTINATION ${TAI_INSTALL_CMAKEDIR})

# pkg-config. The libraries libtai needs go to Libs for a static libtai (the linker must see them)
# and to Libs.private for a shared one. The prefix is computed from the .pc file's own location
# (${pcfiledir}), so an installed tree can be moved.
set(tai_pc_deps "")
if(TAI_WITH_LIBAIO)
  string(APPEND tai_pc_deps " -laio")
endif()
if(TAI_WITH_URING)
  string(APPEND tai_pc_deps " -luring")
endif()
string(APPEND tai_pc_deps " -pthread")
if(TAI_SANITIZE)
  string(APPEND tai_pc_deps " -fsanitize=${TAI_SANITIZE}")
endif()
if(tai_type STREQUAL "STATIC_LIBRARY")
  set(TAI_PC_LIBS "-ltai${tai_pc_deps}")
  set(TAI_PC_LIBS_PRIVATE "")
else()
  set(TAI_PC_LIBS "-ltai")
  set(TAI_PC_LIBS_PRIVATE "${tai_pc_deps}")
endif()
file(RELATIVE_PATH TAI_PC_PREFIX_FROM_PCDIR
     ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" TAI_PC_PREFIX_FROM_PCDIR "${TAI_PC_PREFIX_FROM_PCDIR}")
configure_file(cmake/tai.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tai.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tai.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# pkg-config for tai::posix: its own library, then libtai's flags (Requires).
configure_file(cmake/tai-posix.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tai-posix.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tai-posix.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# pkg-config for tai::testing: its own library, then libtai's flags (Requires).
if(TARGET tai_testing)
  configure_file(cmake/tai-testing.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tai-testing.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tai-testing.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
