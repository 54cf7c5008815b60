# Install rules: headers, the exported target and a relocatable package config.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MWSTRAT_CMAKE_DIR "${CMAKE_INSTALL_DATADIR}/cmake/mwstrat" CACHE STRING
    "Where mwstratConfig.cmake is installed (header-only: architecture independent)")

install(TARGETS mwstrat EXPORT mwstratTargets
        FILE_SET HEADERS DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        FILE_SET mpi_headers DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")  # mwstrat/collective/mpi/: link MPI yourself
install(EXPORT mwstratTargets NAMESPACE mwstrat:: DESTINATION "${MWSTRAT_CMAKE_DIR}")

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/mwstratConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/mwstratConfig.cmake" INSTALL_DESTINATION "${MWSTRAT_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/mwstratConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/mwstratConfig.cmake" "${PROJECT_BINARY_DIR}/mwstratConfigVersion.cmake"
        DESTINATION "${MWSTRAT_CMAKE_DIR}")
