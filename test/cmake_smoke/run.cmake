# Driver of the CMake smoke tests (run with cmake -P by ctest; see CMakeLists.txt here).
#   -DSTEP=install        cmake --install TAI_BINARY_DIR into a fresh PREFIX
#   -DSTEP=package        build consumer/ with find_package(tai COMPONENTS testing) from PREFIX,
#                         run the three programs (tai::tai, tai::posix, tai::testing)
#   -DSTEP=subdirectory   build consumer/ with add_subdirectory(TAI_SOURCE_DIR) and
#                         -DTAI_WITH_LIBAIO=OFF -DTAI_WITH_URING=OFF, run the three and
#                         consumer/list_engines.cpp, check the reasons it gives
#   -DSTEP=pkgconfig      compile consumer/main.cpp with `pkg-config --cflags --libs tai`,
#                         consumer/posix.cpp with `... tai-posix` and consumer/testing.cpp with
#                         `... tai-testing`, run them
# Every step fails on the first command that fails and shows that command's output.
cmake_minimum_required(VERSION 3.25)

function(step)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "smoke[${STEP}]: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "smoke[${STEP}] failed (${rc}): ${shown}\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

# Runs a consumer program on a scratch file and checks that it printed `expected` (the plain
# consumer: "round trip ok"; the tai::testing one: "testing engines ok").
function(run_consumer program)
  set(expected "round trip ok")
  set(scratch roundtrip.bin)
  if(ARGC GREATER 1)
    set(expected "${ARGV1}")
    set(scratch "${ARGV2}")
  endif()
  step(${program} ${WORK_DIR}/${scratch})
  if(NOT step_output MATCHES "${expected}")
    message(FATAL_ERROR "smoke[${STEP}]: ${program} did not print '${expected}':\n${step_output}")
  endif()
  message(STATUS "smoke[${STEP}]: ${step_output}")
endfunction()
function(run_testing_consumer program)
  run_consumer(${program} "testing engines ok" testing.bin)
endfunction()
function(run_posix_consumer program)
  run_consumer(${program} "drop-in ok" posix.bin)
endfunction()

# The consumer is configured like the build under test: same compilers, generator, build type.
set(consumer_args -G ${GENERATOR} -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_C_COMPILER=${C_COMPILER}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE ${PREFIX})
  step(${CMAKE_COMMAND} --install ${TAI_BINARY_DIR} --prefix ${PREFIX})
  foreach(expected IN ITEMS include/tai/engine.hpp include/tai/config.hpp include/tai/engines/posix/posix_engine.hpp
                            include/tai/engines/fault/fault_engine.hpp include/tai/testing/crash_workload.hpp
                            include/tai/posix.hpp ${LIBDIR}/cmake/tai/taiConfig.cmake ${LIBDIR}/pkgconfig/tai.pc
                            ${LIBDIR}/pkgconfig/tai-posix.pc ${LIBDIR}/pkgconfig/tai-testing.pc)
    if(NOT EXISTS ${PREFIX}/${expected})
      message(FATAL_ERROR "smoke[install]: ${PREFIX}/${expected} was not installed")
    endif()
  endforeach()
  # The package asks a consumer for what libtai's interface needs, nothing more. None of these is
  # part of it: PAPI and jemalloc serve TAI's own programs, and Boost.Lockfree is used only inside
  # libtai's sources (no installed header includes it; it is header-only, so nothing to link).
  file(GLOB package_files ${PREFIX}/${LIBDIR}/cmake/tai/*.cmake)
  set(mentions "")
  foreach(file IN LISTS package_files ITEMS ${PREFIX}/${LIBDIR}/pkgconfig/tai.pc ${PREFIX}/${LIBDIR}/pkgconfig/tai-posix.pc
                                            ${PREFIX}/${LIBDIR}/pkgconfig/tai-testing.pc)
    file(READ ${file} text)
    foreach(unneeded IN ITEMS papi jemalloc boost)
      # Case-insensitive: "papi" matches PAPI, FindPAPI, -lpapi.
      string(TOUPPER "${unneeded}" upper)
      set(pattern "")
      string(LENGTH "${unneeded}" n)
      math(EXPR last "${n} - 1")
      foreach(i RANGE ${last})
        string(SUBSTRING "${unneeded}" ${i} 1 lower_char)
        string(SUBSTRING "${upper}" ${i} 1 upper_char)
        string(APPEND pattern "[${lower_char}${upper_char}]")
      endforeach()
      string(REGEX MATCH "[^\n]*${pattern}[^\n]*" line "${text}")
      if(line)
        string(APPEND mentions "\n  ${file} mentions ${unneeded}:\n    ${line}")
      endif()
    endforeach()
  endforeach()
  # What makes that true: no installed header includes a header of libtai's private dependencies
  # (cmake_smoke.find_package cannot see such an include: the compiler searches /usr/include).
  file(GLOB_RECURSE installed_headers ${PREFIX}/include/tai/*.hpp)
  foreach(header IN LISTS installed_headers)
    file(STRINGS ${header} includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](boost/|liburing|libaio|papi|jemalloc)")
    foreach(include IN LISTS includes)
      string(APPEND mentions "\n  ${header} includes a private dependency's header:\n    ${include}")
    endforeach()
  endforeach()
  if(mentions)
    message(FATAL_ERROR "smoke[install]: the installed package asks for what libtai's consumers do not need:${mentions}")
  endif()
  # Only the internals the public headers need are installed: every include/tai/detail header is
  # included by another installed header (a private one belongs in src/detail or engines/common).
  set(all_includes "")
  foreach(header IN LISTS installed_headers)
    file(STRINGS ${header} includes REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]tai/detail/")
    list(APPEND all_includes ${includes})
  endforeach()
  file(GLOB detail_headers RELATIVE ${PREFIX}/include/tai/detail ${PREFIX}/include/tai/detail/*.hpp)
  set(unused "")
  foreach(name IN LISTS detail_headers)
    string(FIND "${all_includes}" "tai/detail/${name}" at)
    if(at EQUAL -1)
      string(APPEND unused " ${name}")
    endif()
  endforeach()
  if(unused)
    message(FATAL_ERROR "smoke[install]: installed detail headers no installed header includes:${unused}")
  endif()
elseif(STEP STREQUAL "package")
  # Consumed as on a machine with only what the package may ask for: find_package of a library
  # libtai's interface does not need fails, and find_path does not see the directories of its
  # private dependencies' headers (the compiler still searches them; the install step checks that
  # no installed header includes one).
  # An initial-cache file (-C) carries the list: step() would split a ";" inside an argument.
  string(REPLACE "|" ";" hidden_dirs "${PRIVATE_HEADER_DIRS}")
  set(unavailable "set(CMAKE_IGNORE_PATH \"${hidden_dirs}\" CACHE STRING \"\")\n")
  foreach(package IN ITEMS Boost PAPI Jemalloc LibAIO LibURing)
    string(APPEND unavailable "set(CMAKE_DISABLE_FIND_PACKAGE_${package} ON CACHE BOOL \"\")\n")
  endforeach()
  file(WRITE ${WORK_DIR}/unavailable.cmake "${unavailable}")
  step(${CMAKE_COMMAND} -C ${WORK_DIR}/unavailable.cmake -S ${CONSUMER_DIR} -B ${WORK_DIR} ${consumer_args}
       -DTAI_CONSUME=package -DCMAKE_PREFIX_PATH=${PREFIX} -DEXPECTED_PREFIX=${PREFIX})
  step(${CMAKE_COMMAND} --build ${WORK_DIR})
  run_consumer(${WORK_DIR}/consumer)
  run_posix_consumer(${WORK_DIR}/posix_consumer)
  run_testing_consumer(${WORK_DIR}/testing_consumer)
elseif(STEP STREQUAL "subdirectory")
  # add_subdirectory(TAI_SOURCE_DIR) with both asynchronous engines turned off by their options:
  # one compile of the library checks both what a parent project gets (the three consumers link
  # and run) and the configure-time engine choice. The reason tai::list_engines() gives must say
  # "turned off" when configure found the library, and "not found" only when it searched for it
  # and did not find it (LIBAIO_FOUND, LIBURING_FOUND: what the build under test found on this
  # machine). The engines-on configuration is the build under test itself.
  # No debug information (-O0 alone): what is checked is CMake logic, and -g made the compile of
  # the library about a fifth longer.
  step(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR} ${consumer_args} -DTAI_CONSUME=subdirectory
       -DTAI_SOURCE_DIR=${TAI_SOURCE_DIR} -DTAI_WITH_LIBAIO=OFF -DTAI_WITH_URING=OFF
       -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DCMAKE_C_FLAGS_DEBUG=-O0)
  step(${CMAKE_COMMAND} --build ${WORK_DIR} --target consumer posix_consumer testing_consumer list_engines -- -j${JOBS})
  run_consumer(${WORK_DIR}/consumer)
  run_posix_consumer(${WORK_DIR}/posix_consumer)
  run_testing_consumer(${WORK_DIR}/testing_consumer)
  step(${WORK_DIR}/list_engines)
  set(listing "${step_output}")
  set(missing "")
  message(STATUS "smoke[${STEP}]:\n${listing}")
  foreach(engine IN ITEMS "libaio|libaio|libaio-dev|TAI_WITH_LIBAIO|${LIBAIO_FOUND}"
                          "uring|liburing|liburing-dev|TAI_WITH_URING|${LIBURING_FOUND}")
    string(REPLACE "|" ";" engine "${engine}")
    list(GET engine 0 name)
    list(GET engine 1 library)
    list(GET engine 2 package)
    list(GET engine 3 option)
    list(GET engine 4 found)
    if(found)
      string(CONCAT expected "${name}: unavailable: not built (turned off at configure time with "
                             "${option}=OFF; reconfigure with -D${option}=ON to build it)")
    else()
      string(CONCAT expected "${name}: unavailable: not built (${library} was not found at configure "
                             "time; install ${package} and reconfigure with -D${option}=ON)")
    endif()
    string(FIND "${listing}" "${expected}\n" at)
    if(at EQUAL -1)
      string(APPEND missing "\n  ${expected}")
    endif()
  endforeach()
  if(missing)
    message(FATAL_ERROR "smoke[${STEP}]: expected the lines${missing}\nin the listing:\n${listing}")
  endif()
elseif(STEP STREQUAL "pkgconfig")
  set(ENV{PKG_CONFIG_PATH} ${PREFIX}/${LIBDIR}/pkgconfig)
  step(${PKG_CONFIG} --cflags --libs tai)
  separate_arguments(pc_flags UNIX_COMMAND "${step_output}")
  # -std=c++17: the .pc file leaves the standard to the consumer (see cmake/tai.pc.in).
  step(${CXX_COMPILER} -std=c++17 ${CONSUMER_DIR}/main.cpp -o ${WORK_DIR}/consumer ${pc_flags})
  run_consumer(${WORK_DIR}/consumer)
  step(${PKG_CONFIG} --cflags --libs tai-posix)
  separate_arguments(pc_flags UNIX_COMMAND "${step_output}")
  step(${CXX_COMPILER} -std=c++17 ${CONSUMER_DIR}/posix.cpp -o ${WORK_DIR}/posix_consumer ${pc_flags})
  run_posix_consumer(${WORK_DIR}/posix_consumer)
  step(${PKG_CONFIG} --cflags --libs tai-testing)
  separate_arguments(pc_flags UNIX_COMMAND "${step_output}")
  step(${CXX_COMPILER} -std=c++17 ${CONSUMER_DIR}/testing.cpp -o ${WORK_DIR}/testing_consumer ${pc_flags})
  run_testing_consumer(${WORK_DIR}/testing_consumer)
else()
  message(FATAL_ERROR "unknown STEP '${STEP}'")
endif()
