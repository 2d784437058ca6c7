// Loaders that take a path get the fuzzer's bytes through a file in a private directory, so they
// run exactly as `tpusim` runs them (includes, size checks, format sniffing and all).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace tpu::fuzz {

// A directory of the process's own under /tmp, removed when the fuzzer exits normally (a crash
// leaves it with the input that caused it).
class PrivateDir {
 public:
  PrivateDir() {
    char tmpl[] = "/tmp/tpusim_fuzz.XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    path_ = tmpl;
  }
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  ~PrivateDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The process's private directory, made once.
inline const PrivateDir& private_dir() {
  static const PrivateDir dir;
  return dir;
}

// Writes `size` bytes to <private dir>/<name> and returns the path.
inline std::string write_input(const char* name, const std::uint8_t* data, std::size_t size) {
  const std::string path = private_dir().path() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size != 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace tpu::fuzz
