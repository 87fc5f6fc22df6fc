# Runs one tai-augment command for ctest and passes only when the program exits 0 AND its output
# holds EXPECT (a regular expression) AND no line says FAILED. A plain PASS_REGULAR_EXPRESSION would
# ignore the exit status, so a crash after the verify line, or a method that failed while the
# others verified, would pass.
#   cmake -DEXPECT=<regex> -DDEADLINE=<s> [-DCLEAN=<dir to empty first>] [-DDIRECT_DIR=<dir>]
#         -P program_run.cmake -- <program> <args...>
# DIRECT_DIR: the run uses O_DIRECT in <dir>; where that file system refuses it, the script prints
# "DIRECT-SKIP: <why>" and returns (the test's SKIP_REGULAR_EXPRESSION makes that a skip).
include(${CMAKE_CURRENT_LIST_DIR}/run_common.cmake)
tai_command_after_dashes(program_run.cmake cmd)
if(DEFINED CLEAN)
  file(REMOVE_RECURSE ${CLEAN})  # a fresh output directory: runs of an earlier build must not count
endif()
if(DEFINED DIRECT_DIR)
  include(${CMAKE_CURRENT_LIST_DIR}/direct_probe.cmake)
  tai_direct_io_unsupported(${DIRECT_DIR} why)
  if(why)
    message("DIRECT-SKIP: ${why}")
    return()
  endif()
endif()
execute_process(COMMAND ${cmd} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT ${DEADLINE})
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the program exited with '${rc}' (not 0)")
endif()
tai_expect_output("${out}" "${EXPECT}")
