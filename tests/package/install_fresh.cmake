# Installs the build tree BUILD_DIR into an emptied PREFIX, then checks the layout consumers rely on.
file(REMOVE_RECURSE "${PREFIX}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${PREFIX}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(file include/mwstrat/mwstrat.hpp include/mwstrat/error.hpp share/cmake/mwstrat/mwstratConfig.cmake
             share/cmake/mwstrat/mwstratConfigVersion.cmake share/cmake/mwstrat/mwstratTargets.cmake
             share/cmake/mwstrat/mwstrat_coreTargets.cmake share/cmake/mwstrat/mwstrat_ringTargets.cmake
             share/cmake/mwstrat/mwstrat_dataTargets.cmake share/cmake/mwstrat/mwstrat_nnTargets.cmake)
  if(NOT EXISTS "${PREFIX}/${file}")
    message(FATAL_ERROR "install is missing ${file}")
  endif()
endforeach()
