// What `tpusim --version` names besides the project version and the SystemC release
// (sw/cli/main.cpp): the git commit of the build.
#pragma once

namespace tpu::cli {

// The commit of the source tree at the last build (12 hex digits, "-dirty" when tracked files
// differed from it) or "unknown" outside a git checkout. Defined in a file generated at every
// build (cmake/GitCommit.cmake), so an incremental build never keeps an old commit.
extern const char* const kGitCommit;

}  // namespace tpu::cli
