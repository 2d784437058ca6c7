// Loaders that take a path get the fuzzer's bytes through a file in a private directory, so they
// run exactly as `tpusim` runs them (includes, size checks, format sniffing and all).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tpu::fuzz {

// Writes `size` bytes to <private dir>/<name> and returns the path; the directory is made once.
inline std::string write_input(const char* name, const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/tpusim_fuzz.XXXXXX";
    if (!mkdtemp(tmpl)) std::abort();
    return std::string(tmpl);
  }();
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size != 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace tpu::fuzz
