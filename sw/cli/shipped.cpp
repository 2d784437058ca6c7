#include "sw/cli/shipped.h"

#include <filesystem>
#include <system_error>

namespace tpu::cli {

const std::string& data_dir() {
  static const std::string dir = TPUSIM_DATA_DIR;
  return dir;
}

std::string shipped_file(const std::string& rel) {
  namespace fs = std::filesystem;
  const fs::path full = (fs::path(data_dir()) / rel).lexically_normal();
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (!ec) {
    const fs::path from_here = full.lexically_relative(cwd);
    if (!from_here.empty() && *from_here.begin() != "..") return from_here.string();
  }
  return full.string();
}

}  // namespace tpu::cli
