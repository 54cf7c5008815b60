# mwstrat_opened_headers(<command> <directory> <deps-file> <out-list> <out-error>): re-runs a compile command from
# compile_commands.json with -M instead of its output and dependency options, and returns every file the
# translation unit opened (its source first). <out-error> is empty on success, the compiler's message otherwise.
# Used by the component boundary check and the components consumer: compiling alone proves nothing about which
# packages a header reaches where they all sit in /usr/include; the list of opened files does.
function(mwstrat_opened_headers command directory deps_file out_list out_error)
  separate_arguments(args UNIX_COMMAND "${command}")
  set(kept "")
  set(skip FALSE)
  foreach(arg IN LISTS args)
    if(skip)
      set(skip FALSE)
    elseif(arg MATCHES "^-(o|MT|MF|MQ)$")
      set(skip TRUE)
    elseif(NOT arg MATCHES "^-(c|MD|MMD)$")
      list(APPEND kept "${arg}")
    endif()
  endforeach()
  execute_process(COMMAND ${kept} -M -MF "${deps_file}" WORKING_DIRECTORY "${directory}"
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    set(${out_list} "" PARENT_SCOPE)
    set(${out_error} "${err}" PARENT_SCOPE)
    return()
  endif()
  file(READ "${deps_file}" deps)
  string(REGEX REPLACE "^[^:]*:" "" deps "${deps}")  # "target: source header header \\\n header ..."
  string(REPLACE "\\\n" " " deps "${deps}")
  string(STRIP "${deps}" deps)
  string(REGEX REPLACE "[ \t\r\n]+" ";" deps "${deps}")
  set(${out_list} "${deps}" PARENT_SCOPE)
  set(${out_error} "" PARENT_SCOPE)
endfunction()
