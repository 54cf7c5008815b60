# Fails unless every header opens only headers of its own component's closure: mwstrat headers of the components
# it uses (cmake/mwstratComponents.cmake) and headers of the packages those components link. Compiling a header
# with only its component's targets cannot prove this where every package's headers are in /usr/include (Debian),
# so this re-runs the header checks' own compile commands with -M and reads the list of files each one opened.
# Inputs: COMPILE_COMMANDS (compile_commands.json), CHECKS_DIR (header_checks/<component>/<stem>.cpp),
#         WORK_DIR (scratch), SOURCE_DIR, COMPONENTS (the components this build defines).
cmake_policy(VERSION 3.25)
include("${SOURCE_DIR}/cmake/mwstratComponents.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/opened_headers.cmake")

# Which package a header outside mwstrat comes from, by the path packages install their headers under. A path
# that matches none is the standard library's, the C library's or the system's.
set(package_signatures
  "TBB=/oneapi/tbb[./]|/tbb/"
  "ZLIB=/zlib\\.h$|/zconf\\.h$"
  "OpenSSL=/openssl/"
  "MPI=/mpi\\.h$|/openmpi/|/mpich/|/mpi/"
  "Boost=/boost/"
  "PNG=/png\\.h$|/pngconf\\.h$|/pnglibconf\\.h$|/libpng[0-9]*/"
  "JPEG=/jpeglib\\.h$|/jconfig\\.h$|/jmorecfg\\.h$|/jerror\\.h$")

set(prefix "${SOURCE_DIR}/include/mwstrat/")
string(LENGTH "${prefix}" prefix_length)
file(READ "${COMPILE_COMMANDS}" json)
string(JSON count LENGTH "${json}")
math(EXPR last "${count} - 1")
set(check_sources "")
foreach(component IN ITEMS whole LISTS COMPONENTS)
  file(GLOB sources "${CHECKS_DIR}/${component}/*.cpp")
  list(APPEND check_sources ${sources})
endforeach()
file(MAKE_DIRECTORY "${WORK_DIR}")
set(problems "")
set(checked 0)
foreach(i RANGE ${last})
  string(JSON file GET "${json}" ${i} file)
  if(NOT file IN_LIST check_sources)
    continue()
  endif()
  list(REMOVE_ITEM check_sources "${file}")
  string(JSON directory GET "${json}" ${i} directory)
  string(JSON command GET "${json}" ${i} command)
  get_filename_component(component "${file}" DIRECTORY)
  get_filename_component(component "${component}" NAME)
  get_filename_component(stem "${file}" NAME_WE)
  file(STRINGS "${file}" first LIMIT_COUNT 1)
  string(REGEX REPLACE "^#include <mwstrat/(.*)>$" "\\1" header "${first}")

  # Every file the header's compile command opens.
  mwstrat_opened_headers("${command}" "${directory}" "${WORK_DIR}/${component}_${stem}.d" deps err)
  if(err)
    string(APPEND problems "\n  ${header}: listing its includes failed:\n${err}")
    continue()
  endif()

  # What this component may open: its closure's headers and packages.
  if(component STREQUAL "whole")
    mwstrat_component_closure(closure ${mwstrat_whole_components})
  else()
    mwstrat_component_closure(closure ${component})
  endif()
  set(allowed_packages "")
  foreach(c IN LISTS closure)
    foreach(package IN LISTS mwstrat_${c}_packages)
      string(REGEX MATCH "^[^ ]+" name "${package}")
      list(APPEND allowed_packages ${name})
    endforeach()
  endforeach()

  set(reported "")  # one line per package a header should not reach
  foreach(dep IN LISTS deps)
    if(dep STREQUAL "" OR dep STREQUAL file)
      continue()
    endif()
    get_filename_component(dep "${dep}" ABSOLUTE BASE_DIR "${directory}")
    string(SUBSTRING "${dep}" 0 ${prefix_length} head)
    if(head STREQUAL prefix)
      string(SUBSTRING "${dep}" ${prefix_length} -1 path)
      mwstrat_component_of("${path}" owner)
      if(NOT owner IN_LIST closure AND NOT owner STREQUAL component)
        string(APPEND problems "\n  ${header} (${component}) includes mwstrat/${path} (${owner}): "
                               "${component} does not use ${owner}")
      endif()
      continue()
    endif()
    foreach(signature IN LISTS package_signatures)
      string(REGEX MATCH "^([^=]+)=(.*)$" _ "${signature}")
      set(package "${CMAKE_MATCH_1}")
      if(dep MATCHES "${CMAKE_MATCH_2}")
        if(NOT package IN_LIST allowed_packages AND NOT package IN_LIST reported)
          list(APPEND reported ${package})
          string(APPEND problems "\n  ${header} (${component}) opens ${dep}, a header of ${package}, which "
                                 "${component} does not link")
        endif()
        break()
      endif()
    endforeach()
  endforeach()
  math(EXPR checked "${checked} + 1")
endforeach()

if(check_sources)
  list(JOIN check_sources "\n  " text)
  string(APPEND problems "\n  no compile command (compile_commands.json is written at configure time) for:\n  ${text}")
endif()
if(problems)
  message(FATAL_ERROR "component boundaries crossed:${problems}")
endif()
message(STATUS "all ${checked} headers stay inside their components (${COMPONENTS})")
