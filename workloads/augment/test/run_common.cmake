# Included by the ctest scripts that run tai-augment (program_run.cmake, mpi_run.cmake,
# mpi_shared_direct_stress.cmake):
#   tai_command_after_dashes(<script> <out_var>): the command line after `--` of `cmake -P <script> --
#   <program> <args...>`, as a list; a fatal error naming <script> when there is none.
#   tai_mpirun_flags(<flags_file> <out_var>): the launcher's flags, one or more a line in
#   <flags_file> (lines starting with # left out), as a list.
#   tai_mpirun_cannot_start(<mpirun> <flags> <np> <out_var>): <out_var> is "" when `mpirun -np <np>
#   true` works here, else why not (the caller skips with it).
#   tai_expect_output(<out> <expect>): a fatal error unless <out> matches the regular expression
#   <expect> and no line of it says FAILED (a method that failed while the others verified).
function(tai_command_after_dashes script out_var)
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
    message(FATAL_ERROR "${script}: no command after --")
  endif()
  set(${out_var} "${cmd}" PARENT_SCOPE)
endfunction()

function(tai_expect_output out expect)
  if(NOT out MATCHES "${expect}")
    message(FATAL_ERROR "the output does not say '${expect}'")
  endif()
  if(out MATCHES "FAILED")
    message(FATAL_ERROR "a line of the output says FAILED")
  endif()
endfunction()

function(tai_mpirun_flags flags_file out_var)
  file(STRINGS ${flags_file} flag_lines REGEX "^[^#]")
  string(JOIN " " flags ${flag_lines})
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${out_var} "${flags}" PARENT_SCOPE)
endfunction()

function(tai_mpirun_cannot_start mpirun flags np out_var)
  set(${out_var} "" PARENT_SCOPE)
  execute_process(COMMAND ${mpirun} ${flags} -np ${np} true OUTPUT_VARIABLE probe_out ERROR_VARIABLE probe_err
                  RESULT_VARIABLE probe_rc TIMEOUT 30)
  if(NOT probe_rc EQUAL 0)
    set(${out_var} "'${mpirun} ${flags} -np ${np} true' cannot start here (exit '${probe_rc}'): ${probe_out}${probe_err}"
        PARENT_SCOPE)
  endif()
endfunction()
