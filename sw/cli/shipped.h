// The files tpusim ships and uses by default (the Fashion-MNIST CNN's model and trained
// weights) are found in its data directory, never relative to the current directory, so
// `tpusim run --chip /abs/configs/chips/v3.json` works from anywhere (docs/cli.md, "Shipped
// files").
#pragma once

#include <string>

namespace tpu::cli {

// The data directory: an installed binary's <prefix>/share/tpusim (found from /proc/self/exe,
// cmake/TpusimInstall.cmake) when it holds configs/; otherwise the source tree this binary was
// built from (TPUSIM_DATA_DIR, sw/CMakeLists.txt).
const std::string& data_dir();

// `rel` (a path from the data directory's top, "configs/models/x.json") as a path that opens
// from the current directory: relative when the file lies below the current directory, so a
// report run from the source tree names "configs/models/x.json" as before; absolute otherwise.
std::string shipped_file(const std::string& rel);

}  // namespace tpu::cli
