// IDX files (the MNIST / Fashion-MNIST format), read directly from their .gz through zlib.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpu::data {

struct Images {
  std::uint32_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count x rows x cols
};

struct Dataset {
  Images images;
  std::vector<std::uint8_t> labels;
};

// Debian's dataset-fashion-mnist package puts the files here.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Throws InputError naming the file and what is wrong: missing, not gzip, truncated, bad magic,
// dimensions that do not match the data.
Images read_idx_images(const std::string& path);
std::vector<std::uint8_t> read_idx_labels(const std::string& path);
// split: "train" or "t10k". Checks images and labels agree in count.
Dataset load_fashion_mnist(const std::string& dir, const std::string& split);

}  // namespace tpu::data
