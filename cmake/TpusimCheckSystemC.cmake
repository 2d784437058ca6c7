# SystemC's headers name the C++ standard they are compiled with in a symbol
# (sc_api_version_2_3_4_cxx<__cplusplus>, sysc/kernel/sc_ver.h) that libsystemc defines only for
# the standard it was built with: a program built for another standard fails at link time on that
# symbol (Debian's libsystemc-dev is built for C++17, so -std=c++20 fails on
# sc_api_version_2_3_4_cxx202002L). This check turns that into a configure-time error that says
# what to do. Used by tpusim's own CMakeLists.txt and by the installed tpusimConfig.cmake
# (docs/library.md, "The C++ standard").
#
#   tpusim_check_systemc_standard(<systemc target> <who>)
#
# links a two-line SystemC program against <systemc target> for CMAKE_CXX_STANDARD (the
# compiler's default when unset); on failure names the standard libsystemc was built for and
# stops. <who> says where the standard came from in the message. The result is cached per
# standard, so a reconfigure costs nothing.
function(tpusim_check_systemc_standard systemc who)
  set(std "${CMAKE_CXX_STANDARD}")
  set(std_name "${std}")
  if(std_name STREQUAL "")
    set(std_name "default")
  endif()
  set(result_var TPUSIM_SYSTEMC_LINKS_CXX_${std_name})
  if(DEFINED CACHE{${result_var}})
    if(${result_var})
      return()
    endif()
  else()
    set(program [=[
#include <systemc>
int sc_main(int, char*[]) { return sc_core::sc_time_stamp() == sc_core::SC_ZERO_TIME ? 0 : 1; }
]=])
    set(std_args "")
    if(NOT std STREQUAL "")
      set(std_args CXX_STANDARD ${std} CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
    endif()
    message(CHECK_START "Checking that SystemC links for C++ standard ${std_name}")
    try_compile(links SOURCE_FROM_CONTENT sc_api_check.cpp "${program}"
                LINK_LIBRARIES ${systemc} ${std_args} OUTPUT_VARIABLE log)
    set(${result_var} ${links} CACHE INTERNAL "SystemC links for C++ standard ${std_name}")
    if(links)
      message(CHECK_PASS "yes")
      return()
    endif()
    message(CHECK_FAIL "no")
  endif()

  # Which standard was libsystemc built for? Its sc_api_version symbol says; found by trying
  # the standards SystemC 2.3 supports (only on failure, so a normal configure never pays).
  set(built_for "")
  foreach(candidate 17 14 20 23 11)
    if(candidate STREQUAL std)
      continue()
    endif()
    try_compile(other SOURCE_FROM_CONTENT sc_api_check.cpp
                "#include <systemc>\nint sc_main(int, char*[]) { return 0; }\n"
                LINK_LIBRARIES ${systemc} CXX_STANDARD ${candidate} CXX_STANDARD_REQUIRED ON
                CXX_EXTENSIONS OFF)
    if(other)
      set(built_for ${candidate})
      break()
    endif()
  endforeach()
  if(built_for STREQUAL "")
    message(FATAL_ERROR
            "tpusim: a SystemC program does not link against ${systemc} for any C++ standard "
            "(${std_name} tried first): is libsystemc-dev installed and usable by this compiler "
            "(${CMAKE_CXX_COMPILER})?")
  endif()
  unset(${result_var} CACHE)  # check again once the standard is changed
  if(std STREQUAL "")
    set(compiles_for "the compiler's default standard (CMAKE_CXX_STANDARD unset)")
    set(rebuild "the compiler's default")
  else()
    set(compiles_for "C++${std} (CMAKE_CXX_STANDARD)")
    set(rebuild "-std=c++${std}")
  endif()
  message(FATAL_ERROR
          "tpusim: SystemC was built for C++${built_for}, but ${who} compiles for "
          "${compiles_for}. SystemC's headers and library must agree on the standard, or "
          "the link fails on sc_api_version_..._cxx<standard>. Set CMAKE_CXX_STANDARD to "
          "${built_for} (set(CMAKE_CXX_STANDARD ${built_for}) before find_package(tpusim), or "
          "-DCMAKE_CXX_STANDARD=${built_for}), or rebuild SystemC with ${rebuild} and "
          "point pkg-config (PKG_CONFIG_PATH) at it.")
endfunction()
