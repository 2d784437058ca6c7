#include "sw/report/files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "hw/common/error.h"

namespace tpu::report {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file ({})", path, std::strerror(errno)));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_atomically(const std::string& path, const std::string& text) {
  // The process id keeps concurrent writers of the same target (a sweep's points) apart.
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw InputError(fmt::format("{}: cannot open for writing ({})", path, std::strerror(errno)));
    out << text;
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      throw InputError(fmt::format("{}: write failed", path));
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw InputError(
        fmt::format("{}: cannot rename the finished file into place ({})", path, ec.message()));
  }
}

void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw InputError(fmt::format("{}: cannot create directory ({})", dir,
                                 ec ? ec.message() : "a file of that name exists"));
}

}  // namespace tpu::report
