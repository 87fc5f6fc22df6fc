# Runs one `mpirun ... tai-augment --mpi ...` for ctest, under a deadline.
#   cmake -DMPIRUN=<mpirun> -DFLAGS_FILE=<mpirun-flags> -DNP=<ranks> -DDEADLINE=<s> -DEXPECT=<regex>
#         [-DEXPECT_EXIT=0|nonzero] [-DCLEAN=<dir, emptied and made>] [-DSAVE_DIGEST=<file>] [-DSAME_DIGEST=<file>]
#         [-DDIRECT_DIR=<dir the job opens with O_DIRECT: skipped where its file system refuses that>]
#         -P mpi_run.cmake -- <program> <args...>
# First it checks that the launcher can start NP processes here at all (`mpirun -np NP true`); if it
# cannot, it prints "MPI-SKIP: <why>" and the test is skipped (SKIP_REGULAR_EXPRESSION) instead of
# failed. Then it passes only when the exit status is as expected (0 by default; "nonzero" for the
# failure tests, which must end, not hang, and name the failing rank), the output matches EXPECT, and
# (exit 0) no line says FAILED. SAVE_DIGEST/SAME_DIGEST keep the record set's digest of one run and
# compare another's with it: the records must not depend on the number of ranks.
set(cmd)
set(after_dashes FALSE)
foreach(i RANGE ${CMAKE_ARGC})
  if(after_dashes AND DEFINED CMAKE_ARGV${i})
    list(APPEND cmd "${CMAKE_ARGV${i}}")
  elseif("${CMAKE_ARGV${i}}" STREQUAL "--")
    set(after_dashes TRUE)
  endif()
endforeach()
if(NOT cmd)
  message(FATAL_ERROR "mpi_run.cmake: no command after --")
endif()
if(NOT DEFINED EXPECT_EXIT)
  set(EXPECT_EXIT 0)
endif()
file(STRINGS ${FLAGS_FILE} flag_lines REGEX "^[^#]")
string(JOIN " " flags ${flag_lines})
separate_arguments(flags UNIX_COMMAND "${flags}")

execute_process(COMMAND ${MPIRUN} ${flags} -np ${NP} true OUTPUT_VARIABLE probe_out ERROR_VARIABLE probe_err
                RESULT_VARIABLE probe_rc TIMEOUT 30)
if(NOT probe_rc EQUAL 0)
  message("MPI-SKIP: '${MPIRUN} ${flags} -np ${NP} true' cannot start here (exit '${probe_rc}'): ${probe_out}${probe_err}")
  return()
endif()

if(DEFINED CLEAN)
  file(REMOVE_RECURSE ${CLEAN})  # a fresh output directory: files of an earlier build must not count
  file(MAKE_DIRECTORY ${CLEAN})
endif()
# DIRECT_DIR: the job uses O_DIRECT there; skipped with the reason where the file system refuses it.
if(DEFINED DIRECT_DIR)
  include(${CMAKE_CURRENT_LIST_DIR}/direct_probe.cmake)
  tai_direct_io_unsupported(${DIRECT_DIR} why)
  if(why)
    message("MPI-SKIP: ${why}")
    return()
  endif()
endif()
# timeout(1) sends mpirun SIGTERM at the deadline, which it passes on to its ranks (a plain
# execute_process TIMEOUT would kill mpirun alone and could leave ranks behind).
math(EXPR hard_deadline "${DEADLINE} + 15")
execute_process(COMMAND timeout -k 5 ${DEADLINE} ${MPIRUN} ${flags} -np ${NP} ${cmd} OUTPUT_VARIABLE out
                ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT ${hard_deadline})
if(rc EQUAL 124 OR rc EQUAL 137 OR NOT rc MATCHES "^[0-9]+$")
  message("${out}${err}")
  message(FATAL_ERROR "the job did not end within ${DEADLINE} s (exit '${rc}'): a hang")
endif()
message("${out}${err}")
if(EXPECT_EXIT STREQUAL "nonzero")
  if(rc EQUAL 0)
    message(FATAL_ERROR "the job exited 0; a failing rank must fail the whole job")
  endif()
  if(NOT "${out}${err}" MATCHES "${EXPECT}")
    message(FATAL_ERROR "the output does not say '${EXPECT}'")
  endif()
  return()
endif()
if(NOT rc EQUAL ${EXPECT_EXIT})
  message(FATAL_ERROR "the job exited with '${rc}' (not ${EXPECT_EXIT})")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not say '${EXPECT}'")
endif()
if(out MATCHES "FAILED")
  message(FATAL_ERROR "a line of the output says FAILED")
endif()
string(REGEX MATCHALL "digest=[0-9a-f]+" digests "${out}")
list(REMOVE_DUPLICATES digests)
if(DEFINED SAVE_DIGEST OR DEFINED SAME_DIGEST)
  list(LENGTH digests n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one record-set digest over every method, found: ${digests}")
  endif()
endif()
if(DEFINED SAVE_DIGEST)
  file(WRITE ${SAVE_DIGEST} "${digests}")
endif()
if(DEFINED SAME_DIGEST)
  file(READ ${SAME_DIGEST} saved)
  if(NOT saved STREQUAL digests)
    message(FATAL_ERROR "the records differ from the other rank count's: ${digests} here, ${saved} there")
  endif()
  message("same record set as the other rank count: ${digests}")
endif()
