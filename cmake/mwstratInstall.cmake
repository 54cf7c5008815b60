# Install rules: headers, one export set per component (so find_package(mwstrat COMPONENTS ...) loads only the
# components asked for) and a relocatable package config.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MWSTRAT_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/mwstrat" CACHE STRING
    "Where mwstratConfig.cmake is installed (header-only: architecture independent)")

# mwstrat_<component>Targets.cmake defines mwstrat::<component>; mwstratTargets.cmake defines mwstrat::mwstrat.
foreach(component IN LISTS mwstrat_components)
  install(TARGETS mwstrat_${component} EXPORT mwstrat_${component}Targets
          FILE_SET HEADERS DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
  install(EXPORT mwstrat_${component}Targets NAMESPACE mwstrat:: DESTINATION "${MWSTRAT_CMAKE_DIR}")
endforeach()
if(mwstrat_has_whole)
  install(TARGETS mwstrat EXPORT mwstratTargets FILE_SET HEADERS DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
  install(EXPORT mwstratTargets NAMESPACE mwstrat:: DESTINATION "${MWSTRAT_CMAKE_DIR}")
endif()

# The config learns from the same table (cmake/mwstratComponents.cmake) what each component uses and needs, and
# which components this install has.
set(MWSTRAT_CONFIG_TABLE "")
foreach(component IN LISTS mwstrat_components)
  string(APPEND MWSTRAT_CONFIG_TABLE "set(_mwstrat_${component}_uses ${mwstrat_${component}_uses})\n"
                                     "set(_mwstrat_${component}_packages")
  foreach(package IN LISTS mwstrat_${component}_packages)
    string(APPEND MWSTRAT_CONFIG_TABLE " \"${package}\"")
  endforeach()
  string(APPEND MWSTRAT_CONFIG_TABLE ")\n")
endforeach()
set(MWSTRAT_CONFIG_COMPONENTS ${mwstrat_components})
set(MWSTRAT_CONFIG_WHOLE ${mwstrat_whole_components})
set(MWSTRAT_CONFIG_OPTIONAL ${mwstrat_optional_components})
set(MWSTRAT_CONFIG_HAS_WHOLE ${mwstrat_has_whole})
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/mwstratConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/mwstratConfig.cmake" INSTALL_DESTINATION "${MWSTRAT_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/mwstratConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/mwstratConfig.cmake" "${PROJECT_BINARY_DIR}/mwstratConfigVersion.cmake"
        DESTINATION "${MWSTRAT_CMAKE_DIR}")
