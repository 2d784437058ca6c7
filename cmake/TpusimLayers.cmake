# One CMake library per layer (DESIGN.md, "Layers of the build are libraries"; docs/layers.md).
#
# Every source includes with paths from the repository root ("hw/mxu/mxu.h"). A layer does not
# put the root on the include path: it gets its own include directory under
# build/layers/<layer>/ that holds a link to each of its source directories only, and sees the
# directories of the layers it links. An include of a layer it does not link is then "No such
# file or directory": a wrong-direction include fails the build (tb/layers/ tests that it does).
#
#   tpusim_layer(<name> DIRS <dir>... [EXCLUDE <file name>...] [DEPS <target>...]
#                [PRIVATE_DEPS <target>...] [UNINSTALLED_HEADERS <file name>...])
#
# makes target tpusim_<name> (alias tpu::<name>) from the *.cpp files of DIRS but EXCLUDE (an
# INTERFACE library when there are none). DEPS are public (its headers include theirs), PRIVATE_DEPS are
# its .cpp files' own.
#
# Installed (cmake --install, docs/library.md): the library, exported as tpusim::<name>, and the
# headers of DIRS under include/tpusim/ with their paths ("include/tpusim/hw/mxu/mxu.h"), which
# the installed target puts on the include path in place of the build's directory;
# UNINSTALLED_HEADERS are for the layer's own .cpp files only (e.g. ones that need Verilator's).
function(tpusim_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DIRS;EXCLUDE;DEPS;PRIVATE_DEPS;UNINSTALLED_HEADERS")
  if(NOT arg_DIRS OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tpusim_layer(${name}): DIRS needed; unknown ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(target tpusim_${name})
  set(farm ${PROJECT_BINARY_DIR}/layers/${name})
  set(sources "")
  foreach(dir IN LISTS arg_DIRS)
    if(NOT IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${dir})
      message(FATAL_ERROR "tpusim_layer(${name}): ${dir} is not a directory")
    endif()
    get_filename_component(parent ${farm}/${dir} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${farm}/${dir} SYMBOLIC)
    file(GLOB dir_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
    foreach(excluded IN LISTS arg_EXCLUDE)
      list(REMOVE_ITEM dir_sources ${PROJECT_SOURCE_DIR}/${dir}/${excluded})
    endforeach()
    list(APPEND sources ${dir_sources})
  endforeach()
  if(sources)
    add_library(${target} STATIC ${sources})
    # Position-independent: the Python extension (python/, docs/python.md) is a shared object
    # that links the layers. The code generated is the same arithmetic: no result changes.
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${farm}>
                               $<INSTALL_INTERFACE:${TPUSIM_INSTALL_INCLUDEDIR}>)
    # tpusim_warnings is our code's flags only: a static library's private dependencies stay in
    # its link interface, so it is kept out of the installed one.
    target_link_libraries(${target} PUBLIC ${arg_DEPS} PRIVATE ${arg_PRIVATE_DEPS}
                          $<BUILD_INTERFACE:tpusim_warnings>)
  else()
    if(arg_PRIVATE_DEPS)
      message(FATAL_ERROR "tpusim_layer(${name}): a header-only layer has no PRIVATE_DEPS")
    endif()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${farm}>
                               $<INSTALL_INTERFACE:${TPUSIM_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${target} INTERFACE ${arg_DEPS})
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  install(TARGETS ${target} EXPORT tpusimTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  foreach(dir IN LISTS arg_DIRS)
    set(excluded_headers "")
    foreach(header IN LISTS arg_UNINSTALLED_HEADERS)
      list(APPEND excluded_headers PATTERN ${header} EXCLUDE)
    endforeach()
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${TPUSIM_INSTALL_INCLUDEDIR}/${dir}
            FILES_MATCHING PATTERN "*.h" ${excluded_headers})
  endforeach()
  add_library(tpu::${name} ALIAS ${target})
  set_property(GLOBAL APPEND PROPERTY TPUSIM_LAYERS ${name})
endfunction()
