# Runs one `mpirun ... tai-augment --mpi ...` for ctest, under a deadline.
#   cmake -DMPIRUN=<mpirun> -DFLAGS_FILE=<mpirun-flags> -DNP=<ranks> -DDEADLINE=<s> -DEXPECT=<regex>
#         [-DEXPECT_EXIT=0|nonzero] [-DCLEAN=<dir, emptied and made>] [-DSAVE_DIGEST=<file>] [-DSAME_DIGEST=<file>]
#         [-DDIRECT_DIR=<dir the job opens with O_DIRECT: skipped where its file system refuses that>]
#         [-DVERIFY=<dir> [-DCORRUPT=1]]
#         -P mpi_run.cmake -- <program> <args...>
# First it checks that the launcher can start NP processes here at all (`mpirun -np NP true`); if it
# cannot, it prints "MPI-SKIP: <why>" and the test is skipped (SKIP_REGULAR_EXPRESSION) instead of
# failed. Then it passes only when the exit status is as expected (0 by default; "nonzero" for the
# failure tests, which must end, not hang, and name the failing rank), the output matches EXPECT, and
# (exit 0) no line says FAILED. SAVE_DIGEST/SAME_DIGEST keep the record set's digest of one run and
# compare another's with it: the records must not depend on the number of ranks.
# VERIFY=<dir> (exit 0 jobs): afterwards `<program> verify <dir>` must say "verify: ok" and exit 0,
# reading the job's files back through the manifest rank 0 wrote. CORRUPT=1 with VERIFY: first one
# byte inside the first record of the first record file in <dir> is changed, and verify must then
# exit non-zero and say FAILED.
include(${CMAKE_CURRENT_LIST_DIR}/run_common.cmake)
tai_command_after_dashes(mpi_run.cmake cmd)
if(NOT DEFINED EXPECT_EXIT)
  set(EXPECT_EXIT 0)
endif()
tai_mpirun_flags(${FLAGS_FILE} flags)
tai_mpirun_cannot_start(${MPIRUN} "${flags}" ${NP} why)
if(why)
  message("MPI-SKIP: ${why}")
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
tai_expect_output("${out}" "${EXPECT}")
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

if(DEFINED VERIFY)
  list(GET cmd 0 program)
  if(CORRUPT)
    file(GLOB record_files ${VERIFY}/*.taia)
    list(SORT record_files)
    if(NOT record_files)
      message(FATAL_ERROR "no record file (*.taia) in ${VERIFY} to corrupt")
    endif()
    list(GET record_files 0 victim)
    # Byte 40 of the first record: inside its payload (the header is 24 bytes); records start at
    # offset 0 of every record file (own files, and the shared file's first chunk is rank 0's).
    set(at 40)
    file(READ ${victim} old_byte OFFSET ${at} LIMIT 1 HEX)
    if(old_byte STREQUAL "58")
      file(WRITE ${VERIFY}/corrupt.byte "Y")
    else()
      file(WRITE ${VERIFY}/corrupt.byte "X")
    endif()
    execute_process(COMMAND dd if=${VERIFY}/corrupt.byte of=${victim} bs=1 seek=${at} count=1 conv=notrunc
                    RESULT_VARIABLE dd_rc OUTPUT_QUIET ERROR_QUIET)
    file(REMOVE ${VERIFY}/corrupt.byte)
    if(NOT dd_rc EQUAL 0)
      message(FATAL_ERROR "could not change byte ${at} of ${victim}")
    endif()
    message("changed byte ${at} of ${victim} (was 0x${old_byte})")
  endif()
  execute_process(COMMAND ${program} verify ${VERIFY} OUTPUT_VARIABLE vout ERROR_VARIABLE verr RESULT_VARIABLE vrc
                  TIMEOUT 120)
  message("${program} verify ${VERIFY}: exit ${vrc}\n${vout}${verr}")
  if(CORRUPT)
    if(vrc EQUAL 0 OR NOT "${vout}${verr}" MATCHES "FAILED")
      message(FATAL_ERROR "verify did not catch the changed byte")
    endif()
  else()
    if(NOT vrc EQUAL 0 OR NOT vout MATCHES "verify: ok")
      message(FATAL_ERROR "verify of the job's output failed")
    endif()
  endif()
endif()
