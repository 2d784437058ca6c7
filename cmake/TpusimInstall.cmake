# `cmake --install build --prefix P` (docs/library.md): the layers' static libraries and headers
# (cmake/TpusimLayers.cmake installs each layer's), tpusim::hw and tpusim::sw over them, the CMake
# package that find_package(tpusim) reads, the tpusim binary and its data directory.
include(CMakePackageConfigHelpers)

set_target_properties(tpusim_hw PROPERTIES EXPORT_NAME hw)
set_target_properties(tpusim_sw PROPERTIES EXPORT_NAME sw)
set_target_properties(tpusim_rtl PROPERTIES EXPORT_NAME rtl)
install(TARGETS tpusim_hw tpusim_sw tpusim_rtl EXPORT tpusimTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT tpusimTargets NAMESPACE tpusim:: DESTINATION ${TPUSIM_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tpusimConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tpusimConfig.cmake
                              INSTALL_DESTINATION ${TPUSIM_INSTALL_CMAKEDIR}
                              PATH_VARS TPUSIM_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tpusimConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tpusimConfig.cmake
              ${PROJECT_BINARY_DIR}/tpusimConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/TpusimCheckSystemC.cmake
        DESTINATION ${TPUSIM_INSTALL_CMAKEDIR})

# The binary finds its shipped files in ../share/tpusim (sw/cli/shipped.cpp).
install(TARGETS tpusim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs DESTINATION ${TPUSIM_INSTALL_DATADIR})
