# Every public header compiles on its own, with only its component's dependencies (the target mwstrat::<component>
# it belongs to, see cmake/mwstratComponents.cmake) and this project's warnings: one generated translation unit
# per header that includes it twice (which also proves the include guard). Built with the default target.
# The boundary test below then proves what no compiler can on a machine where every package's headers sit in
# /usr/include: that each of these translation units opens only headers of its component's closure.
set(header_check_targets "")
foreach(component IN ITEMS whole LISTS mwstrat_components)
  if(component STREQUAL "whole")
    set(target mwstrat::mwstrat)
  else()
    set(target mwstrat::${component})
  endif()
  set(sources "")
  foreach(header IN LISTS mwstrat_${component}_headers)
    # A header of the nn compute's ISA pass (nn/detail/kernel_isa_pass.hpp lists them) included alone only includes
    # nn/detail/kernel_isas.hpp, which includes every one of them: its check is kernel_isas.hpp's, 27 times over.
    file(STRINGS "${PROJECT_SOURCE_DIR}/${header}" pass_guard REGEX "^#ifndef MWSTRAT_ISA_NS$")
    if(pass_guard)
      continue()
    endif()
    string(REGEX REPLACE "^include/" "" include_path "${header}")
    string(MAKE_C_IDENTIFIER "${include_path}" stem)
    set(source "${CMAKE_CURRENT_BINARY_DIR}/header_checks/${component}/${stem}.cpp")
    file(CONFIGURE OUTPUT "${source}" CONTENT "#include <${include_path}>\n#include <${include_path}>\n")
    list(APPEND sources "${source}")
  endforeach()
  # A header that moved leaves its old check behind: remove it (the boundary test reads the folder).
  file(GLOB stale "${CMAKE_CURRENT_BINARY_DIR}/header_checks/${component}/*.cpp")
  if(sources)
    list(REMOVE_ITEM stale ${sources})
  endif()
  if(stale)
    file(REMOVE ${stale})
  endif()
  if(NOT sources)
    continue()
  endif()
  add_library(mwstrat_header_checks_${component} OBJECT ${sources})
  target_link_libraries(mwstrat_header_checks_${component} PRIVATE ${target} mwstrat::warnings)
  target_compile_options(mwstrat_header_checks_${component} PRIVATE ${mwstrat_unsanitized_options})
  # Each header alone, with the build's own kernels only: the ISA passes (nn/detail/kernel_isas.hpp) would parse the
  # nn compute three times in every nn header's check; tests/nn compiles every pass.
  target_compile_definitions(mwstrat_header_checks_${component} PRIVATE MWSTRAT_NO_KERNEL_DISPATCH)
  # The boundary test re-runs these exact compile commands to list the headers each one opens.
  set_target_properties(mwstrat_header_checks_${component} PROPERTIES EXPORT_COMPILE_COMMANDS ON)
  list(APPEND header_check_targets mwstrat_header_checks_${component})
endforeach()
add_custom_target(mwstrat_header_checks DEPENDS ${header_check_targets})

if(CMAKE_EXPORT_COMPILE_COMMANDS OR CMAKE_GENERATOR MATCHES "Ninja|Makefiles")
  add_test(NAME component_boundaries
    COMMAND "${CMAKE_COMMAND}" -DCOMPILE_COMMANDS=${PROJECT_BINARY_DIR}/compile_commands.json
            -DCHECKS_DIR=${CMAKE_CURRENT_BINARY_DIR}/header_checks -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/boundaries
            -DSOURCE_DIR=${PROJECT_SOURCE_DIR} "-DCOMPONENTS=${mwstrat_components}"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/cmake/check_boundaries.cmake")
  set_tests_properties(component_boundaries PROPERTIES LABELS "core" TIMEOUT 600)
endif()
