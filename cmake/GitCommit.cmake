# Writes OUT, the C++ definition of tpu::cli::kGitCommit (sw/cli/build_info.h): the commit of
# SOURCE_DIR that `tpusim --version` names. sw/CMakeLists.txt runs this script at every build,
# not at configure time, so an incremental build after a checkout or a commit never names the old
# commit; the file is rewritten only when its text changes, so an unchanged commit relinks
# nothing.
#
#   cmake -DSOURCE_DIR=<source tree> -DOUT=<file.cpp> -P cmake/GitCommit.cmake
#
# The commit is `git rev-parse --short=12 HEAD`, with "-dirty" when tracked files differ from it;
# "unknown" when SOURCE_DIR is not the top of a git checkout (a release tarball, even one
# unpacked inside another repository) or git is missing.
if(NOT SOURCE_DIR OR NOT OUT)
  message(FATAL_ERROR "GitCommit.cmake: give -DSOURCE_DIR=... -DOUT=...")
endif()
set(commit unknown)
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --show-toplevel
                  OUTPUT_VARIABLE top RESULT_VARIABLE top_status
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  file(REAL_PATH "${SOURCE_DIR}" source_real)
  if(top_status EQUAL 0)
    file(REAL_PATH "${top}" top)
  endif()
  if(top_status EQUAL 0 AND top STREQUAL source_real)
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --short=12 HEAD
                    OUTPUT_VARIABLE head RESULT_VARIABLE head_status
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(head_status EQUAL 0 AND head)
      set(commit ${head})
      execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} status --porcelain
                              --untracked-files=no
                      OUTPUT_VARIABLE changes RESULT_VARIABLE status_status ERROR_QUIET)
      if(NOT status_status EQUAL 0 OR changes)
        string(APPEND commit "-dirty")
      endif()
    endif()
  endif()
endif()
set(text "// Generated at build time by cmake/GitCommit.cmake (sw/CMakeLists.txt); every build
// regenerates it. Do not edit.
#include \"sw/cli/build_info.h\"

namespace tpu::cli {
const char* const kGitCommit = \"${commit}\";
}  // namespace tpu::cli
")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
