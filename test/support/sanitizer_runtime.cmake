# tai_sanitizer_runtime(OUT): the sanitizer runtime to preload before libtai-preload.so in a
# sanitizer build (the preload.* cases and the kill suite's preload tests).
#
# In such a build the library is instrumented and the programs it goes into are not, so the
# runtime must be the first library loaded. GCC ships it as libasan.so / libtsan.so beside its
# other libraries, which -print-file-name finds; clang's shared runtimes are
# libclang_rt.<name>-<arch>.so or, in newer layouts, libclang_rt.<name>.so. OUT is empty in a
# build without those sanitizers; when none is found, OUT holds a sentence saying so (not a
# file: the tests skip with it as the reason) and configuring warns once per caller.
function(tai_sanitizer_runtime out_var)
  set(found "")
  if(TAI_SANITIZE MATCHES "address")
    set(names libasan.so libclang_rt.asan-${CMAKE_SYSTEM_PROCESSOR}.so libclang_rt.asan.so)
  elseif(TAI_SANITIZE MATCHES "thread")
    set(names libtsan.so libclang_rt.tsan-${CMAKE_SYSTEM_PROCESSOR}.so libclang_rt.tsan.so)
  else()
    set(names "")
  endif()
  foreach(name IN LISTS names)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${name}
                    OUTPUT_VARIABLE path OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
    # -print-file-name echoes the bare name when it finds nothing.
    if(rc EQUAL 0 AND IS_ABSOLUTE "${path}" AND EXISTS "${path}")
      set(found "${path}")
      break()
    endif()
  endforeach()
  if(names AND NOT found)
    list(JOIN names ", " listed)
    message(WARNING "${CMAKE_CURRENT_SOURCE_DIR}: TAI_SANITIZE=${TAI_SANITIZE} but ${CMAKE_CXX_COMPILER} -print-file-name "
                    "found none of ${listed}; the tests that preload libtai-preload.so will be skipped")
    set(found "none of ${listed} (searched with ${CMAKE_CXX_COMPILER} -print-file-name)")
  endif()
  set(${out_var} "${found}" PARENT_SCOPE)
endfunction()
