# mwstrat_add_compile_fail(<name> SOURCE <file> EXPECT <regex> [EXPECT_CLANG <regex>] LABEL <label>): a misuse
# that must not compile.
# The test runs the compiler on <file> with -fsyntax-only (fast: no code generation) and passes only when the
# compiler's output matches <regex> — the diagnostic the library promises for that misuse (a static_assert's
# message, the concept that was not satisfied). A file that compiles, or fails for another reason, fails the test.
# EXPECT_CLANG is Clang's wording where it differs: Clang 14 names the class template whose constraints failed, not
# the concept, when a deduction guide or an alias fails (scripts/test's asan stage builds with Clang, tsan with GCC).
function(mwstrat_add_compile_fail name)
  cmake_parse_arguments(arg "" "SOURCE;EXPECT;EXPECT_CLANG;LABEL" "" ${ARGN})
  set(expect "${arg_EXPECT}")
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang" AND arg_EXPECT_CLANG)
    set(expect "${arg_EXPECT_CLANG}")
  endif()
  set(includes -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}/tests)
  foreach(dir IN LISTS Boost_INCLUDE_DIRS)
    if(NOT dir IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)  # -isystem /usr/include breaks #include_next
      list(APPEND includes -isystem ${dir})
    endif()
  endforeach()
  set(flags -std=c++20 -fsyntax-only)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND flags -fconcepts-diagnostics-depth=2)  # name the unsatisfied concept, not only "constraints not satisfied"
  endif()
  add_test(NAME compile_fail_${name}
           COMMAND ${CMAKE_CXX_COMPILER} ${flags} ${includes}
                   ${CMAKE_CURRENT_SOURCE_DIR}/${arg_SOURCE})
  set_tests_properties(compile_fail_${name} PROPERTIES LABELS "${arg_LABEL}" TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "${expect}")
endfunction()
