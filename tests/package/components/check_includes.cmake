# Fails if the consumer's translation unit opens a header of oneTBB, zlib, nn/ or data/, or if the built program
# loads libtbb or libz (directly or through another library). Re-runs the consumer's own compile command (from
# compile_commands.json) with -M.
# Inputs: COMPILE_COMMANDS, SOURCE (consumer.cpp), EXECUTABLE, WORK_DIR.
cmake_policy(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/opened_headers.cmake")  # tests/cmake/
file(READ "${COMPILE_COMMANDS}" json)
string(JSON count LENGTH "${json}")
math(EXPR last "${count} - 1")
set(command "")
foreach(i RANGE ${last})
  string(JSON file GET "${json}" ${i} file)
  if(file STREQUAL SOURCE)
    string(JSON command GET "${json}" ${i} command)
    string(JSON directory GET "${json}" ${i} directory)
  endif()
endforeach()
if(NOT command)
  message(FATAL_ERROR "no compile command for ${SOURCE} in ${COMPILE_COMMANDS}")
endif()
mwstrat_opened_headers("${command}" "${directory}" "${WORK_DIR}/consumer_includes.d" headers err)
if(err)
  message(FATAL_ERROR "listing the consumer's includes failed:\n${err}")
endif()
list(REMOVE_ITEM headers "${SOURCE}")
list(LENGTH headers count)
set(found "")
foreach(header IN LISTS headers)
  # data/cursor.hpp is core's (the position a training state stores; cmake/mwstratComponents.cmake pins it).
  if(header MATCHES "/oneapi/tbb[./]|/tbb/|/zlib\\.h$|/zconf\\.h$|/mwstrat/nn/|/mwstrat/nn\\.hpp|/mwstrat/data/" AND
     NOT header MATCHES "/mwstrat/data/cursor\\.hpp$")
    list(APPEND found "${header}")
  endif()
endforeach()
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "the consumer opens headers that mwstrat::core and mwstrat::ring do not bring:\n  ${text}")
endif()
# The check means something only if the ring and fit were really compiled in.
foreach(expected mwstrat/collective/ring/ring_collective.hpp mwstrat/train/fit.hpp)
  string(FIND "${headers}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the consumer did not include ${expected}: the check proves nothing")
  endif()
endforeach()

file(GET_RUNTIME_DEPENDENCIES EXECUTABLES "${EXECUTABLE}" RESOLVED_DEPENDENCIES_VAR libraries
     UNRESOLVED_DEPENDENCIES_VAR unresolved)
foreach(library IN LISTS libraries unresolved)
  get_filename_component(name "${library}" NAME)
  if(name MATCHES "^lib(tbb|z\\.)")
    message(FATAL_ERROR "the consumer loads ${library}")
  endif()
endforeach()
message(STATUS "the consumer opens ${count} headers, none of oneTBB, zlib, nn/ or data/; "
               "it loads neither libtbb nor libz")
