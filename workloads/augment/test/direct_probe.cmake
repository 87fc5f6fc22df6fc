# Included by program_run.cmake and mpi_run.cmake: whether files in a directory can be opened with
# O_DIRECT. The runs with --direct write their output into the build directory, and whether that
# works depends on the file system the build directory is on (tmpfs before Linux 6.6, ramfs and
# some FUSE, overlay and network file systems refuse O_DIRECT): such a run is skipped with the
# reason instead of failed. The probe is dd(1) with oflag=direct writing one 4 KiB block; without
# dd nothing is known and the run goes ahead.
#   tai_direct_io_unsupported(<dir> <out_var>): <out_var> is "" when O_DIRECT works in <dir>,
#   else why not.
function(tai_direct_io_unsupported dir out_var)
  set(${out_var} "" PARENT_SCOPE)
  find_program(tai_dd dd)
  if(NOT tai_dd)
    return()
  endif()
  file(MAKE_DIRECTORY ${dir})
  set(probe ${dir}/.tai-direct-probe)
  execute_process(COMMAND ${tai_dd} if=/dev/zero of=${probe} bs=4096 count=1 oflag=direct
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 30)
  file(REMOVE ${probe})
  if(NOT rc EQUAL 0)
    string(STRIP "${err}" err)
    set(${out_var} "O_DIRECT is not supported in ${dir} (dd oflag=direct: ${err}); put the build directory on a disk file system to run this test" PARENT_SCOPE)
  endif()
endfunction()
