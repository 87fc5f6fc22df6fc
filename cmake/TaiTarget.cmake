# TaiTarget.cmake - the one place that sets TAI's compiler options: link-time optimisation,
# sanitizers, warnings. Included once by the top-level CMakeLists.txt; defines
#   tai_setup_target(target)   warnings and C++17 on any TAI target
#   tai_setup_library(target)  the library: tai_setup_target + what consumers must inherit
#   tai_setup_program(target)  an executable of this project (bench, test, workload)
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
endfunction()

function(tai_setup_library target)
  tai_setup_target(${target})
  if(TAI_SANITIZE)
    target_link_options(${target} INTERFACE -fsanitize=${TAI_SANITIZE})
  endif()
  # GCC's LTO objects hold only GIMPLE by default (-fno-fat-lto-objects): an installed libtai.a
  # built that way links only with the same GCC and LTO on. Fat objects also carry machine code,
  # so the installed archive links with any compiler; programs of this build still get LTO.
  get_target_property(type ${target} TYPE)
  if(TAI_LTO AND type STREQUAL "STATIC_LIBRARY" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -ffat-lto-objects)
  endif()
endfunction()

function(tai_setup_program target)
  tai_setup_target(${target})
  target_link_libraries(${target} PRIVATE tai::tai)
  if(TAI_WITH_JEMALLOC)
    target_link_libraries(${target} PRIVATE tai::dep::jemalloc)
  endif()
endfunction()

# A libFuzzer target (clang only; the caller checks the compiler). libFuzzer's main and its
# coverage instrumentation come from -fsanitize=fuzzer; AddressSanitizer and
# UndefinedBehaviorSanitizer turn memory errors and undefined behaviour into findings. In the
# `fuzz` preset (TAI_SANITIZE=fuzzer-no-link,address,undefined) every target already has the
# sanitizers and the library's code is instrumented for coverage too, so only the fuzzer is added.
# Without sanitizers the target gets all three (the library is then covered only through what
# the target inlines); under ThreadSanitizer only the fuzzer (ASan and TSan exclude each other).
function(tai_setup_fuzz_target target)
  if(NOT TAI_SANITIZE)
    set(flags fuzzer,address,undefined)
  else()
    set(flags fuzzer)
  endif()
  target_compile_options(${target} PRIVATE -fsanitize=${flags})
  target_link_options(${target} PRIVATE -fsanitize=${flags})
endfunction()
