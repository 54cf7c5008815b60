# The environment variables the code reads and the ones docs/environment.md lists are the same set, and no page
# names an MWSTRAT_ variable that exists nowhere.
#   cmake -DSOURCE_DIR=<repo> -P check_environment_docs.cmake
# A variable is "read by the code" when its name is a whole string literal in include/, tools/ or examples/
# ("TF_CONFIG", "MWSTRAT_RING_SPIN_US"): every read goes through such a literal (environment::get, getenv, setenv).
# The table's rows start with the name in backticks: | `MWSTRAT_JOB_TOKEN` | ...
cmake_minimum_required(VERSION 3.25)

set(name_pattern "(TF_CONFIG|SLURM_[A-Z_]+|OMPI_[A-Za-z_]+|PMIX?_[A-Z_]+|MPI_[A-Z_]+|MWSTRAT_[A-Z0-9_]+)")
file(GLOB_RECURSE code_files "${SOURCE_DIR}/include/*.hpp" "${SOURCE_DIR}/tools/*.cpp" "${SOURCE_DIR}/tools/*.hpp"
     "${SOURCE_DIR}/examples/*.cpp" "${SOURCE_DIR}/examples/*.hpp")
set(in_code "")
foreach(file IN LISTS code_files)
  file(STRINGS "${file}" hits REGEX "\"${name_pattern}\"")
  foreach(line IN LISTS hits)
    string(REGEX MATCHALL "\"${name_pattern}\"" names "${line}")
    foreach(quoted IN LISTS names)
      string(REPLACE "\"" "" name "${quoted}")
      list(APPEND in_code "${name}")
    endforeach()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES in_code)

file(STRINGS "${SOURCE_DIR}/docs/environment.md" rows REGEX "^\\| `${name_pattern}` \\|")
set(in_table "")
foreach(row IN LISTS rows)
  string(REGEX MATCH "^\\| `${name_pattern}`" _ "${row}")
  list(APPEND in_table "${CMAKE_MATCH_1}")
endforeach()

set(problems "")
foreach(name IN LISTS in_code)
  if(NOT name IN_LIST in_table)
    string(APPEND problems "\n  ${name}: read by the code, missing from docs/environment.md's table")
  endif()
endforeach()
foreach(name IN LISTS in_table)
  if(NOT name IN_LIST in_code)
    string(APPEND problems "\n  ${name}: in docs/environment.md's table, read nowhere in include/, tools/, examples/")
  endif()
endforeach()

# Any MWSTRAT_ name on a page is a variable of the table, a CMake option, a macro of the code or a variable of the
# scripts: anything else is a stale name.
file(GLOB pages "${SOURCE_DIR}/docs/*.md")
list(APPEND pages "${SOURCE_DIR}/README.md" "${SOURCE_DIR}/CONTRIBUTING.md")
file(GLOB_RECURSE known_files "${SOURCE_DIR}/CMakeLists.txt" "${SOURCE_DIR}/cmake/*" "${SOURCE_DIR}/tests/*.txt"
     "${SOURCE_DIR}/tests/*.cmake" "${SOURCE_DIR}/scripts/*" "${SOURCE_DIR}/benchmarks/*.py"
     "${SOURCE_DIR}/benchmarks/*.txt" "${SOURCE_DIR}/conanfile.py")
list(APPEND known_files ${code_files})
set(known_text "")
foreach(file IN LISTS known_files)
  file(READ "${file}" text)
  string(APPEND known_text "${text}\n")
endforeach()
foreach(page IN LISTS pages)
  file(STRINGS "${page}" lines REGEX "MWSTRAT_[A-Z0-9_]+")
  foreach(line IN LISTS lines)
    string(REGEX MATCHALL "MWSTRAT_[A-Z0-9_]+" names "${line}")
    foreach(name IN LISTS names)
      if(name IN_LIST in_table)
        continue()
      endif()
      string(REGEX MATCH "${name}([^A-Z0-9_]|$)" found "${known_text}")
      if(found STREQUAL "")
        file(RELATIVE_PATH where "${SOURCE_DIR}" "${page}")
        string(APPEND problems "\n  ${name}: named in ${where}, defined nowhere (not a variable, option or macro)")
      endif()
    endforeach()
  endforeach()
endforeach()

if(problems)
  message(FATAL_ERROR "environment variables and their docs disagree:${problems}")
endif()
list(LENGTH in_table count)
message(STATUS "${count} environment variables, each read by the code and listed in docs/environment.md")
