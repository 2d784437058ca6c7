// The weights file (sw/nn/weights, docs/weights.md): layout byte by byte, round trip, atomic
// save, Glorot-uniform random weights, and a load that validates everything against the model
// and never crashes on a truncated or hostile file.
#include "sw/nn/weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hw/common/error.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"

namespace tpu::nn {
namespace {
using importers::load_model;
using importers::parse_model;
using importers::parse_topology;
using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

// conv (bias) -> flatten -> dense without bias -> dense with bias: every tensor kind.
Graph small_model() {
  const json doc = {
      {"name", "small"},
      {"input", {5, 4, 2}},
      {"layers",
       {{{"class_name", "Conv2D"},
         {"config", {{"name", "c"}, {"filters", 3}, {"kernel_size", {2, 3}}}}},
        {{"class_name", "Flatten"}, {"config", json::object()}},
        {{"class_name", "Dense"}, {"config", {{"name", "d"}, {"units", 4}, {"use_bias", false}}}},
        {{"class_name", "Dense"}, {"config", {{"name", "e"}, {"units", 2}}}}}}};
  return parse_model(doc, "small.json");
}

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("tpusim_weights_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    return out;
  }

 private:
  fs::path path_;
};

std::vector<std::uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_raw(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// The layout of docs/weights.md, written independently of sw/nn/weights.cpp.
struct FileWriter {
  std::vector<std::uint8_t> b;
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void f32(float f) {
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    u32(u);
  }
  void header(std::uint32_t count) {
    b.insert(b.end(), {'T', 'P', 'U', 'W'});
    u32(1);
    u32(count);
  }
  void tensor(const std::string& name, const std::vector<std::uint32_t>& dims, float fill = 0.5f) {
    u32(static_cast<std::uint32_t>(name.size()));
    b.insert(b.end(), name.begin(), name.end());
    u32(static_cast<std::uint32_t>(dims.size()));
    std::uint64_t n = 1;
    for (std::uint32_t d : dims) {
      u32(d);
      n *= d;
    }
    for (std::uint64_t i = 0; i < n; ++i) f32(fill);
  }
};

// The small model's tensors in model order, with Keras's shapes.
void write_small_tensors(FileWriter& w) {
  w.tensor("c/kernel", {2, 3, 2, 3});
  w.tensor("c/bias", {3});
  w.tensor("d/kernel", {4 * 2 * 3, 4});
  w.tensor("e/kernel", {4, 2});
  w.tensor("e/bias", {2});
}

std::string load_error(const std::string& path, const Graph& m) {
  try {
    load_weights(path, m);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

// Bit patterns, so that -0.0 differs from 0.0 and a NaN equals itself.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

bool same_bits(const Weights& a, const Weights& b) {
  if (a.layers.size() != b.layers.size()) return false;
  for (std::size_t i = 0; i < a.layers.size(); ++i)
    if (!same_bits(a.layers[i].kernel, b.layers[i].kernel) ||
        !same_bits(a.layers[i].bias, b.layers[i].bias))
      return false;
  return true;
}

TEST(RandomWeights, AreGlorotUniformWithZeroBiases) {
  const Graph m =
      load_model(std::string(TPUSIM_SOURCE_DIR) + "/configs/models/fashion_mnist_cnn.json");
  const Weights w = random_weights(m, 42);
  ASSERT_EQ(w.layers.size(), m.ops.size());
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const Op& l = m.ops[i];
    if (!l.has_weights()) {
      EXPECT_TRUE(w.layers[i].kernel.empty());
      continue;
    }
    // Glorot & Bengio 2010, Keras glorot_uniform: fans count the receptive field.
    const double rf = l.kind == OpKind::Conv2D ? double(l.kernel_h) * l.kernel_w : 1.0;
    const double fan_in = l.kind == OpKind::Conv2D ? rf * l.in.c : double(l.in.size());
    const double fan_out = rf * l.out.c;
    const double limit = std::sqrt(6.0 / (fan_in + fan_out));
    const auto& k = w.layers[i].kernel;
    ASSERT_EQ(k.size(), static_cast<std::size_t>(fan_in * l.out.c));
    double lo = 0, hi = 0, sum = 0;
    for (float x : k) {
      lo = std::min(lo, double(x));
      hi = std::max(hi, double(x));
      sum += x;
    }
    EXPECT_GE(lo, -limit) << l.name;
    EXPECT_LE(hi, limit) << l.name;
    // A uniform sample of hundreds of values reaches near both ends and averages near zero.
    EXPECT_LT(lo, -0.9 * limit) << l.name;
    EXPECT_GT(hi, 0.9 * limit) << l.name;
    EXPECT_LT(std::abs(sum / double(k.size())), 0.1 * limit) << l.name;
    EXPECT_EQ(w.layers[i].bias, std::vector<float>(l.out.c, 0.0f)) << l.name;
  }
}

TEST(RandomWeights, AreDeterministicForASeed) {
  const Graph m = small_model();
  EXPECT_TRUE(same_bits(random_weights(m, 7), random_weights(m, 7)));
  EXPECT_FALSE(same_bits(random_weights(m, 7), random_weights(m, 8)));
}

TEST(WeightsFile, RoundTripKeepsEveryBit) {
  TempDir dir;
  const Graph m = small_model();
  Weights w = random_weights(m, 3);
  // Values that must survive exactly: biases, signed zero, extremes.
  w.layers[0].bias = {-0.0f, std::numeric_limits<float>::denorm_min(),
                      std::numeric_limits<float>::max()};
  w.layers[3].bias = {1.0f / 3.0f, -2.5f};
  save_weights(dir.file("w.bin"), m, w);
  EXPECT_TRUE(same_bits(load_weights(dir.file("w.bin"), m), w));
}

TEST(WeightsFile, LayerWithoutBiasStoresNoBiasAndLoadsZeros) {
  TempDir dir;
  const Graph m = small_model();
  const Weights w = random_weights(m, 3);
  save_weights(dir.file("w.bin"), m, w);
  const Weights back = load_weights(dir.file("w.bin"), m);
  EXPECT_EQ(back.layers[2].bias, std::vector<float>(4, 0.0f));
}

TEST(WeightsFile, LayoutIsTheDocumentedOne) {
  TempDir dir;
  const Graph m = small_model();
  const Weights w = random_weights(m, 5);
  save_weights(dir.file("w.bin"), m, w);
  FileWriter expected;
  expected.header(5);
  auto tensor = [&](const std::string& name, const std::vector<std::uint32_t>& dims,
                    const std::vector<float>& data) {
    expected.u32(static_cast<std::uint32_t>(name.size()));
    expected.b.insert(expected.b.end(), name.begin(), name.end());
    expected.u32(static_cast<std::uint32_t>(dims.size()));
    for (std::uint32_t d : dims) expected.u32(d);
    for (float f : data) expected.f32(f);
  };
  tensor("c/kernel", {2, 3, 2, 3}, w.layers[0].kernel);
  tensor("c/bias", {3}, w.layers[0].bias);
  tensor("d/kernel", {24, 4}, w.layers[2].kernel);
  tensor("e/kernel", {4, 2}, w.layers[3].kernel);
  tensor("e/bias", {2}, w.layers[3].bias);
  EXPECT_EQ(read_raw(dir.file("w.bin")), expected.b);
}

TEST(WeightsFile, TensorsMayComeInAnyOrder) {
  TempDir dir;
  const Graph m = small_model();
  FileWriter f;
  f.header(5);
  f.tensor("e/bias", {2}, 1.0f);
  f.tensor("d/kernel", {24, 4}, 2.0f);
  f.tensor("c/kernel", {2, 3, 2, 3}, 3.0f);
  f.tensor("e/kernel", {4, 2}, 4.0f);
  f.tensor("c/bias", {3}, 5.0f);
  write_raw(dir.file("w.bin"), f.b);
  const Weights w = load_weights(dir.file("w.bin"), m);
  EXPECT_EQ(w.layers[3].bias, std::vector<float>(2, 1.0f));
  EXPECT_EQ(w.layers[0].bias, std::vector<float>(3, 5.0f));
  EXPECT_EQ(w.layers[2].kernel, std::vector<float>(96, 2.0f));
}

TEST(WeightsFile, SaveReplacesTheFileAtomicallyAndLeavesNoTemporary) {
  TempDir dir;
  const Graph m = small_model();
  write_raw(dir.file("w.bin"), {'o', 'l', 'd'});
  save_weights(dir.file("w.bin"), m, random_weights(m, 1));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.bin"});
  EXPECT_TRUE(same_bits(load_weights(dir.file("w.bin"), m), random_weights(m, 1)));
}

TEST(WeightsFile, SaveIntoAMissingDirectoryFailsAndNamesIt) {
  TempDir dir;
  const Graph m = small_model();
  const std::string path = dir.file("absent/w.bin");
  try {
    save_weights(path, m, random_weights(m, 1));
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(WeightsFile, SaveNeedsAFileName) {
  TempDir dir;
  const Graph m = small_model();
  EXPECT_THROW(save_weights("", m, random_weights(m, 1)), InputError);
  EXPECT_THROW(save_weights(dir.file("") + "/", m, random_weights(m, 1)), InputError);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(WeightsFile, SaveRefusesWeightsOfAnotherShape) {
  TempDir dir;
  const Graph m = small_model();
  Weights w = random_weights(m, 1);
  w.layers[2].kernel.pop_back();
  EXPECT_THROW(save_weights(dir.file("w.bin"), m, w), InputError);
  EXPECT_TRUE(dir.entries().empty());
}

struct BadFile {
  const char* what;
  std::function<void(FileWriter&)> build;
  std::vector<std::string> message;
};

std::vector<BadFile> bad_files() {
  return {
      {"bad magic",
       [](FileWriter& f) { f.b = {'T', 'P', 'U', 'X', 1, 0, 0, 0, 5, 0, 0, 0}; },
       {"bad magic", "54 50 55 58", "TPUW"}},
      {"version 2",
       [](FileWriter& f) { f.b = {'T', 'P', 'U', 'W', 2, 0, 0, 0, 5, 0, 0, 0}; },
       {"version 2", "reads version 1"}},
      {"too few tensors",
       [](FileWriter& f) { f.header(4); },
       {"4 tensors", "needs 5", "c/kernel, c/bias, d/kernel, e/kernel, e/bias"}},
      {"unknown tensor",
       [](FileWriter& f) {
         f.header(5);
         f.tensor("c/kernel", {2, 3, 2, 3});
         f.tensor("x/bias", {3});
       },
       {"tensor 1 \"x/bias\" is not a tensor of model small", "c/bias"}},
      {"duplicate tensor",
       [](FileWriter& f) {
         f.header(5);
         f.tensor("c/bias", {3});
         f.tensor("c/bias", {3});
       },
       {"\"c/bias\" appears twice"}},
      {"transposed dense kernel",
       [](FileWriter& f) {
         f.header(5);
         f.tensor("c/kernel", {2, 3, 2, 3});
         f.tensor("c/bias", {3});
         f.tensor("d/kernel", {4, 24});
       },
       {"tensor \"d/kernel\"", "shape [4, 24]", "layer d (Dense) expects [24, 4]"}},
      {"wrong rank",
       [](FileWriter& f) {
         f.header(5);
         f.tensor("c/kernel", {36});
       },
       {"tensor \"c/kernel\"", "shape [36]", "expects [2, 3, 2, 3]"}},
      {"rank zero",
       [](FileWriter& f) {
         f.header(5);
         f.u32(6);
         f.b.insert(f.b.end(), {'c', '/', 'b', 'i', 'a', 's'});
         f.u32(0);
       },
       {"tensor \"c/bias\"", "rank 0", "expects shape [3]"}},
      {"hostile dimensions",
       [](FileWriter& f) {
         f.header(5);
         f.u32(8);
         f.b.insert(f.b.end(), {'c', '/', 'k', 'e', 'r', 'n', 'e', 'l'});
         f.u32(4);
         for (int i = 0; i < 4; ++i) f.u32(0xffffffffu);
       },
       {"tensor \"c/kernel\"", "[4294967295, 4294967295, 4294967295, 4294967295]"}},
      {"hostile name length",
       [](FileWriter& f) {
         f.header(5);
         f.u32(0xffffffffu);
       },
       {"tensor 0: name length 4294967295", "1 to 256 bytes"}},
      {"data cut short",
       [](FileWriter& f) {
         f.header(5);
         write_small_tensors(f);
         f.b.resize(f.b.size() - 3);
       },
       {"truncated", "tensor \"e/bias\"'s 2 fp32 values"}},
      {"trailing bytes",
       [](FileWriter& f) {
         f.header(5);
         write_small_tensors(f);
         f.b.push_back(0);
       },
       {"1 bytes after the last tensor"}},
      {"NaN",
       [](FileWriter& f) {
         f.header(5);
         f.tensor("c/kernel", {2, 3, 2, 3}, std::numeric_limits<float>::quiet_NaN());
       },
       {"tensor \"c/kernel\"", "value 0 is nan", "finite"}},
  };
}

TEST(WeightsFile, MalformedFilesAreRefusedNamingFileAndTensor) {
  TempDir dir;
  const Graph m = small_model();
  for (const BadFile& c : bad_files()) {
    FileWriter f;
    c.build(f);
    const std::string path = dir.file("bad.bin");
    write_raw(path, f.b);
    const std::string msg = load_error(path, m);
    EXPECT_THAT(msg, HasSubstr(path + ": ")) << c.what;
    for (const std::string& part : c.message) EXPECT_THAT(msg, HasSubstr(part)) << c.what;
  }
}

TEST(WeightsFile, EveryTruncationIsAnInputError) {
  TempDir dir;
  const Graph m = small_model();
  FileWriter f;
  f.header(5);
  write_small_tensors(f);
  for (std::size_t len = 0; len < f.b.size(); ++len) {
    write_raw(dir.file("cut.bin"), std::vector<std::uint8_t>(f.b.begin(), f.b.begin() + len));
    EXPECT_THAT(load_error(dir.file("cut.bin"), m), HasSubstr("truncated")) << len;
  }
}

TEST(WeightsFile, MissingFileIsNamed) {
  TempDir dir;
  EXPECT_THAT(load_error(dir.file("none.bin"), small_model()),
              AllOf(HasSubstr(dir.file("none.bin")),
                    HasSubstr("cannot read the weights file (no such file")));
}

}  // namespace
}  // namespace tpu::nn
