# Runs JOBS two-rank MPI jobs of the configuration in which an end-of-file padding trim would cut
# off the other rank's writes: one shared O_DIRECT file, unpadded records (TAI does the
# read-modify-write), chunks of one 4 KiB block, so that the ranks take turns extending the file
# and every rank's last record in a chunk is an unaligned direct write past end of file. Each job
# checks every record (stage 2 on the other rank, then rank 0's check of the whole file, which
# counts "bytes lost or clobbered"); then `tai-augment verify` reads the job's output again.
# Passes when every job succeeded and the clobbered bytes add up to 0.
#
#   cmake -DMPIRUN=<mpirun> -DFLAGS_FILE=<mpirun-flags> -DPROGRAM=<tai-augment> -DOUT=<dir>
#         [-DJOBS=<n, default 10>] [-DDEADLINE=<s per job, default 60>] -P mpi_shared_direct_stress.cmake
# The environment variable TAI_MPI_STRESS_JOBS overrides JOBS (e.g. 200 by hand). Skipped
# ("MPI-SKIP: <why>") when mpirun cannot start two ranks here or the file system of OUT refuses
# O_DIRECT.
if(NOT DEFINED JOBS)
  set(JOBS 10)
endif()
if(DEFINED ENV{TAI_MPI_STRESS_JOBS})
  set(JOBS $ENV{TAI_MPI_STRESS_JOBS})
endif()
if(NOT DEFINED DEADLINE)
  set(DEADLINE 60)
endif()
include(${CMAKE_CURRENT_LIST_DIR}/run_common.cmake)
tai_mpirun_flags(${FLAGS_FILE} flags)
tai_mpirun_cannot_start(${MPIRUN} "${flags}" 2 why)
if(why)
  message("MPI-SKIP: ${why}")
  return()
endif()
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
include(${CMAKE_CURRENT_LIST_DIR}/direct_probe.cmake)
tai_direct_io_unsupported(${OUT} why)
if(why)
  message("MPI-SKIP: ${why}")
  return()
endif()

set(failed_jobs 0)
set(clobbered 0)
set(checked_files 0)
set(first_failure "")
math(EXPR hard_deadline "${DEADLINE} + 15")
foreach(job RANGE 1 ${JOBS})
  set(dir ${OUT}/job)
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir})
  execute_process(COMMAND timeout -k 5 ${DEADLINE} ${MPIRUN} ${flags} -np 2 ${PROGRAM} --mpi --threads 1 --images 120
                          --sizes 24x24,32x16,40x40 --batch 6 --method tai-def,tai-triv --shared-file --chunk 4096
                          --direct --direct-unpadded --handoff stream --output ${dir}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT ${hard_deadline})
  set(job_clobbered 0)
  string(REGEX MATCHALL "([0-9]+) bytes lost or clobbered" lines "${out}")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^([0-9]+) .*" "\\1" n "${line}")
    math(EXPR job_clobbered "${job_clobbered} + ${n}")
    math(EXPR checked_files "${checked_files} + 1")
  endforeach()
  math(EXPR clobbered "${clobbered} + ${job_clobbered}")
  set(job_ok TRUE)
  list(LENGTH lines n_lines)
  if(NOT rc EQUAL 0 OR out MATCHES "FAILED" OR NOT out MATCHES "mpi: ok" OR NOT n_lines EQUAL 2)
    set(job_ok FALSE)
  else()
    execute_process(COMMAND ${PROGRAM} verify --no-decode ${dir} OUTPUT_VARIABLE vout ERROR_VARIABLE verr
                    RESULT_VARIABLE vrc TIMEOUT 60)
    if(NOT vrc EQUAL 0 OR NOT vout MATCHES "verify: ok")
      set(job_ok FALSE)
      set(out "${out}\nverify: exit ${vrc}\n${vout}${verr}")
    endif()
  endif()
  if(NOT job_ok)
    math(EXPR failed_jobs "${failed_jobs} + 1")
    if(first_failure STREQUAL "")
      set(first_failure "job ${job} (exit '${rc}'):\n${out}${err}")
    endif()
    message("job ${job}: FAILED, ${job_clobbered} bytes lost or clobbered")
  elseif(job EQUAL 1 OR job EQUAL JOBS OR job MATCHES "0$")
    message("job ${job}: ok, ${job_clobbered} bytes lost or clobbered")
  endif()
endforeach()
message("stress: ${JOBS} two-rank jobs (shared O_DIRECT file, unpadded records, 4096-byte chunks, tai-def and "
        "tai-triv): ${failed_jobs} failed, ${clobbered} bytes lost or clobbered over ${checked_files} shared-file checks")
if(NOT failed_jobs EQUAL 0 OR NOT clobbered EQUAL 0)
  message(FATAL_ERROR "the shared direct file lost data or a job failed; first failure: ${first_failure}")
endif()
