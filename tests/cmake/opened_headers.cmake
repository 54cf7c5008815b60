# mwstrat_opened_headers(<command> <directory> <deps-file> <out-list> <out-error>): re-runs a compile command from
# compile_commands.json as a preprocessing with -H instead of its output and dependency options, and returns every
# header the translation unit opened (the compiler's -H list; <deps-file> keeps it). <out-error> is empty on
# success, the compiler's message otherwise. Used by the component boundary check and the components consumer:
# compiling alone proves nothing about which packages a header reaches where they all sit in /usr/include; the list
# of opened files does. Not -M: Clang 14 lists there every file a __has_include found (libstdc++ probes
# <tbb/tbb.h> from every standard header), opened or not.
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
  execute_process(COMMAND ${kept} -E -H -o /dev/null WORKING_DIRECTORY "${directory}"
                  RESULT_VARIABLE rc ERROR_VARIABLE listing OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    set(${out_list} "" PARENT_SCOPE)
    set(${out_error} "${listing}" PARENT_SCOPE)
    return()
  endif()
  file(WRITE "${deps_file}" "${listing}")
  # One line per opened header: its depth in dots, a space, its path. Other lines (GCC's "Multiple include guards
  # may be useful for:" list, warnings) are not openings.
  string(REGEX MATCHALL "(^|\n)\\.+ [^\n]+" lines "${listing}")
  set(headers "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^\n?\\.+ " "" path "${line}")
    list(APPEND headers "${path}")
  endforeach()
  list(REMOVE_DUPLICATES headers)
  set(${out_list} "${headers}" PARENT_SCOPE)
  set(${out_error} "" PARENT_SCOPE)
endfunction()
