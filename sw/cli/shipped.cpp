#include "sw/cli/shipped.h"

#include <filesystem>
#include <system_error>

namespace tpu::cli {

namespace {

// An installed binary's data directory: <prefix>/share/tpusim beside <prefix>/bin/tpusim
// (cmake/TpusimInstall.cmake), when it holds the shipped configs; "" otherwise (a build).
std::string installed_data_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path dir = (exe.parent_path() / ".." / "share" / "tpusim").lexically_normal();
  return fs::is_directory(dir / "configs", ec) ? dir.string() : "";
}

}  // namespace

const std::string& data_dir() {
  static const std::string dir = [] {
    std::string installed = installed_data_dir();
    return installed.empty() ? std::string(TPUSIM_DATA_DIR) : installed;
  }();
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
