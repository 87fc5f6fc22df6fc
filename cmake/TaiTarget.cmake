# TaiTarget.cmake - the one place that sets TAI's compiler options: link-time optimisation,
# sanitizers, warnings. Included once by the top-level CMakeLists.txt; defines
#   tai_setup_target(target)   warnings and C++17 on any TAI target
#   tai_setup_library(target)  the library: tai_setup_target + what consumers must inherit
#   tai_setup_program(target)  an executable of this project (bench, workload)
#   tai_setup_test(target)     a test executable or a program only the tests run
# and sets TAI_LTO (ON/OFF) and TAI_LTO_NOTE for the configure summary.

# --- link-time optimisation ----------------------------------------------------------------------
# The `release` preset asks for it with CMAKE_INTERPROCEDURAL_OPTIMIZATION=ON. CheckIPOSupported
# tries it with this compiler and linker; when it fails, the build goes on without LTO and says why
# instead of failing at the first link.
set(TAI_LTO OFF)
set(TAI_LTO_NOTE "off (set CMAKE_INTERPROCEDURAL_OPTIMIZATION=ON, as the release preset does)")
if(CMAKE_INTERPROCEDURAL_OPTIMIZATION)
  include(CheckIPOSupported)
  check_ipo_supported(RESULT tai_ipo_supported OUTPUT tai_ipo_output LANGUAGES C CXX)
  if(tai_ipo_supported)
    set(TAI_LTO ON)
    set(TAI_LTO_NOTE "on")
  else()
    # A normal variable shadows the cache entry for this directory tree: no target gets -flto.
    set(CMAKE_INTERPROCEDURAL_OPTIMIZATION OFF)
    set(TAI_LTO_NOTE "requested but not supported by this toolchain: building without it")
    message(WARNING "LTO was requested but CheckIPOSupported says this toolchain cannot do it; "
                    "building without LTO. Details:\n${tai_ipo_output}")
  endif()
endif()

# --- sanitizers ----------------------------------------------------------------------------------
# TAI_SANITIZE (address,undefined / thread) instruments every target of this project. Consumers of
# an instrumented libtai must link the sanitizer runtime too: tai_setup_library adds the flag to
# the library's INTERFACE link options (exported and written to tai.pc as well).
if(TAI_SANITIZE)
  add_compile_options(-fsanitize=${TAI_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${TAI_SANITIZE})
endif()

function(tai_setup_target target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)
  # GCC's LTO objects hold only GIMPLE by default (-fno-fat-lto-objects). A library that the test
  # executables link (which are built without LTO, see tai_setup_test) must also carry machine
  # code, and so must an installed libtai.a, which then links with any compiler; the programs of
  # this build still get LTO from the same objects.
  get_target_property(type ${target} TYPE)
  if(TAI_LTO AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND type MATCHES "^(STATIC|OBJECT)_LIBRARY$")
    target_compile_options(${target} PRIVATE -ffat-lto-objects)
  endif()
endfunction()

function(tai_setup_library target)
  tai_setup_target(${target})
  if(TAI_SANITIZE)
    target_link_options(${target} INTERFACE -fsanitize=${TAI_SANITIZE})
  endif()
endfunction()

function(tai_setup_program target)
  tai_setup_target(${target})
  target_link_libraries(${target} PRIVATE tai::tai)
  if(TAI_WITH_JEMALLOC)
    target_link_libraries(${target} PRIVATE tai::dep::jemalloc)
  endif()
endfunction()

# A test executable, or a helper program only the tests run: tai_setup_test(target [GTEST]).
# LTO buys a test nothing (it checks behaviour, not speed; the shipped programs the tests run,
# tai-bench, tai-augment, tai-serial and the preload library, keep it) and it cost most of the
# release build: the LTO link of the main test binary alone ran for minutes on 2 cores. So a test
# is compiled and linked without it (-fno-lto: the linker takes the machine code of the fat
# library objects and runs no LTO step). GTEST links GoogleTest and precompiles its header and
# TAI's umbrella header, which every test file includes and which otherwise dominate each file's
# compile time.
function(tai_setup_test target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "GTEST" "" "")
  tai_setup_program(${target})
  if(TAI_LTO)
    set_property(TARGET ${target} PROPERTY INTERPROCEDURAL_OPTIMIZATION OFF)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_link_options(${target} PRIVATE -fno-lto)
    endif()
  endif()
  if(arg_GTEST)
    target_link_libraries(${target} PRIVATE GTest::gtest)
    target_precompile_headers(${target} PRIVATE <gtest/gtest.h> <tai/tai.hpp>)
    if(TAI_UNITY_TESTS)
      set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${TAI_UNITY_TESTS_BATCH})
    endif()
    # Under AddressSanitizer a test binary is linked at a fixed address (-no-pie): ctest starts it
    # once per GoogleTest case, and as a position-independent executable the dynamic loader spent
    # about a third of each start applying its relocations (perf: _dl_relocate_object 27 %;
    # tai_tests, 117 MB, started in 0.74-0.91 s, and in 0.40-0.53 s linked -no-pie, with no test
    # run). ThreadSanitizer keeps PIE: its shadow layout expects the program mapped high.
    if(TAI_SANITIZE MATCHES "address")
      target_link_options(${target} PRIVATE -no-pie)
    endif()
  endif()
endfunction()

# A libFuzzer target (clang only; the caller checks the compiler). libFuzzer's main and its
# coverage instrumentation come from -fsanitize=fuzzer; AddressSanitizer and
# UndefinedBehaviorSanitizer turn memory errors and undefined behaviour into findings. In the
# `fuzz` preset (TAI_SANITIZE=fuzzer-no-link,address,undefined) every target already has the
# sanitizers and the library's code is instrumented for coverage too, so only the fuzzer is added.
# Without sanitizers the target gets all three (the library is then covered only through what
# the target inlines); under ThreadSanitizer only the fuzzer (ASan and TSan exclude each other).
# (Restored: the change that added tai_setup_test replaced this function instead of adding
# beside it, and `cmake --preset fuzz` then failed on the fuzz directories.)
function(tai_setup_fuzz_target target)
  if(NOT TAI_SANITIZE)
    set(flags fuzzer,address,undefined)
  else()
    set(flags fuzzer)
  endif()
  target_compile_options(${target} PRIVATE -fsanitize=${flags})
  target_link_options(${target} PRIVATE -fsanitize=${flags})
endfunction()
