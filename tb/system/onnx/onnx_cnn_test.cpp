// The tutorial's CNN as an ONNX model: its trained weights (configs/weights) written in ONNX's
// layouts — an NCHW input, OIHW kernels, the classifier's rows in the channel-major order in
// which ONNX flattens the 64 x 13 x 13 map — with libonnx's classes. `tpusim run`, `compare` and
// `sweep` on it must report what they report for the JSON model and its weights file: the same
// accuracy (so the same outputs), cycles and rows, on an int8 and a bf16 chip. The Flatten before
// the Gemm is the layout an importer gets wrong most easily (docs/onnx.md, "Layouts").
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli.h"
#include "common/onnx_build.h"
#include "common/temp_dir.h"
#include "onnx/onnx_pb.h"
#include "sw/import/import.h"
#include "sw/nn/weights.h"

namespace tpu {
namespace {

const std::string kSource = TPUSIM_SOURCE_DIR;

onnx::TensorProto tensor(const std::string& name, std::vector<std::int64_t> dims,
                         const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto_DataType_FLOAT);
  for (std::int64_t d : dims) t.add_dims(d);
  // raw_data, as PyTorch's exporter writes initializers.
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  return t;
}

// Named as PyTorch names its nodes, slashes and all.
onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op,
                      const std::vector<std::string>& in, const std::string& out) {
  return test::onnx_node(g, op, in, out, "/" + out + "/" + op);
}

// configs/models/fashion_mnist_cnn.json with configs/weights/fashion_mnist_cnn.bin, as ONNX.
std::string cnn_onnx() {
  const ir::Graph m = importers::load_model(kSource + "/configs/models/fashion_mnist_cnn.json");
  const nn::Weights w = nn::load_weights(kSource + "/configs/weights/fashion_mnist_cnn.bin", m);
  const std::vector<float>& ck = w.layers[0].kernel;  // [3][3][1][64]
  const std::vector<float>& dk = w.layers[4].kernel;  // [13 * 13 * 64][10], rows (y, x, c)
  std::vector<float> conv(64 * 9), dense(10816 * 10);
  for (int o = 0; o < 64; ++o)
    for (int k = 0; k < 9; ++k) conv[o * 9 + k] = ck[k * 64 + o];
  for (int c = 0; c < 64; ++c)
    for (int p = 0; p < 169; ++p)
      for (int j = 0; j < 10; ++j) dense[(c * 169 + p) * 10 + j] = dk[(p * 64 + c) * 10 + j];
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("tb/system/onnx/onnx_cnn_test.cpp");
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("fashion_mnist_cnn_onnx");
  test::onnx_value(g->add_input(), "image", {test::kOnnxBatch, 1, 28, 28});
  test::onnx_value(g->add_output(), "probabilities", {test::kOnnxBatch, 10});
  *g->add_initializer() = tensor("conv.weight", {64, 1, 3, 3}, conv);
  *g->add_initializer() = tensor("conv.bias", {64}, w.layers[0].bias);
  *g->add_initializer() = tensor("fc.weight", {10816, 10}, dense);
  *g->add_initializer() = tensor("fc.bias", {10}, w.layers[4].bias);
  test::onnx_attr_ints(node(g, "Conv", {"image", "conv.weight", "conv.bias"}, "conv"),
                       "kernel_shape", {3, 3});
  onnx::NodeProto* pool = node(g, "MaxPool", {"conv"}, "pool");
  test::onnx_attr_ints(pool, "kernel_shape", {2, 2});
  test::onnx_attr_ints(pool, "strides", {2, 2});
  node(g, "Relu", {"pool"}, "relu");
  node(g, "Flatten", {"relu"}, "flat");
  node(g, "Gemm", {"flat", "fc.weight", "fc.bias"}, "fc");
  node(g, "Softmax", {"fc"}, "probabilities");
  return model.SerializeAsString();
}

struct Files {
  test::TempDir dir{"tpusim-onnx-cnn"};
  std::string onnx = dir / "cnn.onnx";
  Files() { std::ofstream(onnx, std::ios::binary) << cnn_onnx(); }
};

nlohmann::json run(const std::string& args, const std::string& json) {
  const auto r = test::run_tpusim(args + " --json " + json);
  EXPECT_EQ(r.status, 0) << r.out;
  std::ifstream in(json);
  return nlohmann::json::parse(in);
}

void same_run(const std::string& chip) {
  const Files f;
  const std::string common =
      "run --chip " + kSource + "/configs/chips/" + chip + ".json --images 256 --batch 128";
  const auto a = run(common + " --model " + kSource + "/configs/models/fashion_mnist_cnn.json",
                     f.dir / "json.json");
  const auto b = run(common + " --model " + f.onnx, f.dir / "onnx.json");
  EXPECT_EQ(b["workload"]["weights"], f.onnx + " (its initializers)");
  for (const char* k : {"top1", "reference_top1", "float_top1", "bit_exact", "mismatches"})
    EXPECT_EQ(a["accuracy"][k], b["accuracy"][k]) << k;
  EXPECT_EQ(a["totals"]["cycles"], b["totals"]["cycles"]);
  EXPECT_EQ(a["totals"]["macs"], b["totals"]["macs"]);
  ASSERT_EQ(a["layers"].size(), b["layers"].size());
  for (std::size_t i = 0; i < a["layers"].size(); ++i) {
    EXPECT_EQ(a["layers"][i]["type"], b["layers"][i]["type"]) << "row " << i;
    EXPECT_EQ(a["layers"][i]["cycles"], b["layers"][i]["cycles"]) << "row " << i;
  }
  EXPECT_GT(b["accuracy"]["top1"].get<double>(), 0.85) << "the tutorial's accuracy";
}

TEST(OnnxCnn, TheTutorialsCnnAsOnnxRunsAsItsJsonDoesOnV1InInt8) { same_run("v1"); }
TEST(OnnxCnn, TheTutorialsCnnAsOnnxRunsAsItsJsonDoesOnV3InBf16) { same_run("v3"); }

TEST(OnnxCnn, CompareAndSweepTakeAnOnnxModel) {
  const Files f;
  const auto c =
      test::run_tpusim("compare --chip " + kSource + "/configs/chips/v1.json --chip " + kSource +
                       "/configs/chips/edge.json --model " + f.onnx + " --images 32 --batch 32");
  EXPECT_EQ(c.status, 0) << c.out;
  const nlohmann::json spec = {
      {"name", "onnx_rows"},
      {"base", kSource + "/configs/chips/v1.json"},
      {"axes", {{{"name", "rows"}, {"pointer", "/mxu/rows"}, {"values", {128, 256}}}}},
      {"workloads", {{{"name", "cnn"}, {"model", f.onnx}, {"images", 32}, {"batch", 32}}}}};
  std::ofstream(f.dir / "spec.json") << spec.dump();
  const auto s =
      test::run_tpusim("sweep " + (f.dir / "spec.json") + " -j 2 --out " + (f.dir / "sweep"));
  EXPECT_EQ(s.status, 0) << s.out;
}

}  // namespace
}  // namespace tpu
