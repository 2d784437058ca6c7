// Bad-input rows for weights files (sw/nn/weights.cpp, docs/weights.md), fed to
// `tpusim run --weights` with the seed's CNN.
#include <cstring>
#include <limits>

#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

const EntryPoint kWeights{
    "weights", "report.json", [](const Paths& p) {
      return run_tpusim({"run", "--chip", source_path("configs/chips/v1.json"), "--model",
                         source_path("configs/models/fashion_mnist_cnn.json"), "--weights",
                         p.input.string(), "--images", "1", "--no-check", "--json",
                         p.out.string()});
    }};

// docs/weights.md: "TPUW", version 1, the tensor count, then per tensor the name's length, the
// name, the rank, the dimensions and the fp32 values, all little-endian.
struct Tensor {
  std::string name;
  std::vector<std::uint32_t> dims;
  std::vector<float> values;  // filled with 0.01 when left empty
};

std::string tensor_bytes(const Tensor& t) {
  std::string s = le32({static_cast<std::uint32_t>(t.name.size())}) + t.name;
  s += le32({static_cast<std::uint32_t>(t.dims.size())});
  std::uint64_t n = 1;
  for (std::uint32_t d : t.dims) {
    s += le32({d});
    n *= d;
  }
  std::vector<float> v = t.values;
  v.resize(static_cast<std::size_t>(n), 0.01f);
  for (float f : v) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    s += le32({bits});
  }
  return s;
}

// The seed CNN's tensors (configs/models/fashion_mnist_cnn.json): a 3x3 convolution of one
// channel into 64, then Dense from the 13x13x64 pooled map to 10 classes.
std::vector<Tensor> cnn_tensors() {
  return {{"conv2d/kernel", {3, 3, 1, 64}, {}},
          {"conv2d/bias", {64}, {}},
          {"dense/kernel", {13 * 13 * 64, 10}, {}},
          {"dense/bias", {10}, {}}};
}

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string header(std::uint32_t count, std::uint32_t version = 1) {
  return "TPUW" + le32({version, count});
}

std::string weights_file(const std::vector<Tensor>& tensors) {
  std::string s = header(static_cast<std::uint32_t>(tensors.size()));
  for (const Tensor& t : tensors) s += tensor_bytes(t);
  return s;
}

Case text(std::string name, std::string bytes, std::string expect) {
  return Case{&kWeights, std::move(name), file("w.bin", std::move(bytes)), {std::move(expect)}};
}
// The CNN's tensors with tensor `i` changed by `edit`.
template <class Edit>
Case edited(std::string name, std::size_t i, Edit edit, std::string expect) {
  std::vector<Tensor> t = cnn_tensors();
  edit(t[i]);
  return text(std::move(name), weights_file(t), std::move(expect));
}

std::vector<Case> cases() {
  const std::string good = weights_file(cnn_tensors());
  const std::string shipped = read_bytes(source_path("configs/weights/fashion_mnist_cnn.bin"));
  const std::size_t first_tensor = header(4).size();
  return {
      text("empty_file", "", "truncated"),
      Case{&kWeights,
           "no_such_file",
           [](const fs::path& d) { return d / "missing.bin"; },
           {"cannot read the weights file (no such file"}},
      Case{&kWeights,
           "a_directory",
           [](const fs::path& d) {
             fs::create_directory(d / "w.bin");
             return d / "w.bin";
           },
           {"is a directory"}},
      text("binary_garbage", garbage(4096, 4), "bad magic"),
      text("a_model_json_instead", read_bytes(source_path("configs/models/fashion_mnist_cnn.json")),
           "bad magic"),
      text("gzip_of_the_file", gzip(good), "bad magic"),
      text("version_2", header(4, 2) + good.substr(first_tensor), "version 2"),
      text("version_max", header(4, 0xffffffffu) + good.substr(first_tensor), "version 4294967295"),
      text("header_only", "TPUW", "truncated"),
      text("count_zero", header(0), "0 tensors"),
      text("count_max", header(0xffffffffu) + good.substr(first_tensor), "4294967295 tensors"),
      text("name_length_zero", header(4) + le32({0}), "name length 0"),
      text("name_length_max", header(4) + le32({0xffffffffu}) + "conv2d/kernel",
           "name length 4294967295"),
      text("name_truncated", header(4) + le32({13}) + "conv", "truncated"),
      edited(
          "unknown_tensor_name", 0, [](Tensor& t) { t.name = "conv2d/kernels"; }, "conv2d/kernels"),
      edited(
          "name_with_a_nul_byte", 1, [](Tensor& t) { t.name = std::string("conv2d\0bias", 11); },
          "\"conv2d\\x00bias\" is not a tensor"),
      text("duplicate_tensor",
           header(4) + tensor_bytes(cnn_tensors()[1]) + tensor_bytes(cnn_tensors()[1]),
           "appears twice"),
      edited(
          "rank_zero", 0, [](Tensor& t) { t.dims.clear(); }, "rank 0"),
      text("rank_max", header(4) + le32({13}) + "conv2d/kernel" + le32({0xffffffffu}),
           "rank 4294967295"),
      edited(
          "shape_of_another_model", 0,
          [](Tensor& t) {
            t.dims = {3, 3, 1, 32};
          },
          "expects [3, 3, 1, 64]"),
      text("dimensions_overflowing_64_bits",
           header(4) + le32({13}) + "conv2d/kernel" +
               le32({4, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}),
           "expects [3, 3, 1, 64]"),
      text("values_truncated", good.substr(0, good.size() - 10), "truncated"),
      text("shipped_file_cut_in_half", shipped.substr(0, shipped.size() / 2), "truncated"),
      edited(
          "a_nan_weight", 0,
          [](Tensor& t) {
            t.values = {0.5f, std::numeric_limits<float>::quiet_NaN()};
          },
          "weights must be finite"),
      edited(
          "an_infinite_weight", 2, [](Tensor& t) { t.values = {kInf}; }, "weights must be finite"),
      edited(
          "a_negative_infinite_bias", 3,
          [](Tensor& t) {
            t.values = {1, 2, -kInf};
          },
          "weights must be finite"),
      text("trailing_bytes", good + "junk", "4 bytes after the last tensor"),
  };
}

INSTANTIATE_TEST_SUITE_P(Weights, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
