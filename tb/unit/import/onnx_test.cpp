// The ONNX importer's layout rules (docs/onnx.md, "Layouts"), on small models built here with
// libonnx's classes and checked against ONNX's definitions computed here in NCHW: a Transpose is
// free, a Flatten of an NCHW image permutes the Gemm's rows, a Reshape that would move data is
// refused by name, a MatMul over the channels is a 1x1 convolution, a MatMul's Add is its bias,
// Concat and global pooling on the channels, a constant per channel without any operation on
// channels (the input layout's second attempt), and which refusal is reported when both fail.
#include "sw/import/onnx.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/onnx_build.h"
#include "hw/common/error.h"
#include "onnx/onnx_pb.h"
#include "sw/ir/ops.h"
#include "sw/nn/reference.h"
#include "sw/nn/weights.h"

namespace tpu::importers {
namespace {
using test::onnx_attr_int;
using test::onnx_attr_ints;
using test::onnx_value;
using ::testing::HasSubstr;

struct Builder {
  onnx::ModelProto m;
  onnx::GraphProto* g = m.mutable_graph();
  Builder(std::vector<std::int64_t> in, std::vector<std::int64_t> out) {
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    onnx_value(g->add_input(), "x", in);
    onnx_value(g->add_output(), "y", out);
  }
  void constant(const std::string& name, const std::vector<std::int64_t>& dims,
                const std::vector<float>& v) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_FLOAT);
    for (std::int64_t d : dims) t->add_dims(d);
    for (float x : v) t->add_float_data(x);
  }
  void ints(const std::string& name, const std::vector<std::int64_t>& v) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_INT64);
    t->add_dims(static_cast<std::int64_t>(v.size()));
    for (std::int64_t x : v) t->add_int64_data(x);
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& in,
                        const std::string& out) {
    return test::onnx_node(g, op, in, out);
  }
  OnnxModel load() const { return parse_onnx(m.SerializeAsString(), "m.onnx"); }
};

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = scale * static_cast<float>((k * 7) % 11) - scale * 5;
  return v;
}

nn::Weights weights_of(const OnnxModel& m) {
  nn::Weights w;
  w.layers.resize(m.graph.ops.size());
  for (std::size_t i = 0; i < m.graph.ops.size(); ++i) {
    const ir::Op& op = m.graph.ops[i];
    for (const ir::ParamSpec& spec : ir::op_info(op.kind).params(op))
      for (const Parameter& p : m.parameters)
        if (p.name == op.name + "/" + std::string(spec.suffix))
          nn::tensor_of(w.layers[i], spec.param) = p.values;
    if (op.has_weights() && !op.use_bias) w.layers[i].bias.assign(op.out.c, 0.0f);
  }
  nn::check_weights(m.graph, w);
  return w;
}

// The imported model on one ONNX sample (NCHW in, ONNX order out).
std::vector<float> run(const OnnxModel& m, const std::vector<float>& onnx_input) {
  std::vector<float> in(onnx_input.size());
  const auto ii = m.input.ir_index();
  for (std::size_t k = 0; k < in.size(); ++k) in[ii[k]] = onnx_input[k];
  const std::vector<float> out = nn::forward_float(m.graph, weights_of(m), in.data(), 1);
  const auto oi = m.output.ir_index();
  std::vector<float> y(oi.size());
  for (std::size_t k = 0; k < y.size(); ++k) y[k] = out[oi[k]];
  return y;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < got.size(); ++k)
    EXPECT_NEAR(got[k], want[k], 1e-5 * (1 + std::fabs(want[k]))) << "element " << k;
}

// y[j] = b[j] + Σ_k x[k] · B[k][j] over x's elements in ONNX's order.
std::vector<double> gemm(const std::vector<float>& x, const std::vector<float>& b,
                         const std::vector<float>& bias, std::size_t units) {
  std::vector<double> y(units, 0);
  for (std::size_t j = 0; j < units; ++j) {
    y[j] = bias.empty() ? 0 : bias[j];
    for (std::size_t k = 0; k < x.size(); ++k) y[j] += double{x[k]} * b[k * units + j];
  }
  return y;
}

TEST(OnnxImport, AFlattenOfAnNchwImagePermutesTheGemmsRowsIntoTheIrsOrder) {
  Builder b({1, 3, 2, 4}, {1, 5});
  const auto w = ramp(24 * 5, 0.1f), bias = ramp(5, 0.3f);
  b.constant("w", {24, 5}, w);
  b.constant("c", {5}, bias);
  // A 1x1 max pool (the identity) makes the input an image held channels-last.
  onnx_attr_ints(b.node("MaxPool", {"x"}, "p"), "kernel_shape", {1, 1});
  b.node("Flatten", {"p"}, "f");
  b.node("Gemm", {"f", "w", "c"}, "y");
  const OnnxModel m = b.load();
  ASSERT_EQ(m.graph.ops.size(), 3u);
  EXPECT_EQ(m.graph.ops[1].kind, ir::OpKind::Flatten);
  EXPECT_EQ(m.graph.ops[2].kind, ir::OpKind::Dense);
  EXPECT_EQ(m.graph.input, (ir::Shape{2, 4, 3}));
  const auto x = ramp(24, 1.0f);
  expect_near(run(m, x), gemm(x, w, bias, 5));
}

TEST(OnnxImport, ATransposeToNhwcBeforeAReshapeCostsNothingAndKeepsTheRows) {
  Builder b({1, 3, 2, 4}, {1, 5});
  const auto w = ramp(24 * 5, 0.1f), bias = ramp(5, 0.3f);
  b.constant("w", {24, 5}, w);
  b.constant("c", {5}, bias);
  b.ints("shape", {0, -1});
  onnx_attr_ints(b.node("MaxPool", {"x"}, "q"), "kernel_shape", {1, 1});
  onnx_attr_ints(b.node("Transpose", {"q"}, "t"), "perm", {0, 2, 3, 1});
  b.node("Reshape", {"t", "shape"}, "r");
  b.node("MatMul", {"r", "w"}, "p");
  b.node("Add", {"p", "c"}, "y");
  const OnnxModel m = b.load();
  ASSERT_EQ(m.graph.ops.size(), 3u) << "the pool, a Flatten and a Dense whose bias is the Add";
  EXPECT_TRUE(m.graph.ops[2].use_bias);
  // ONNX's x transposed to NHWC, flattened: the Dense reads it in that order.
  const auto x = ramp(24, 1.0f);
  std::vector<float> nhwc(24);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 8; ++p) nhwc[p * 3 + c] = x[c * 8 + p];
  expect_near(run(m, x), gemm(nhwc, w, bias, 5));
  for (const Parameter& p : m.parameters) {
    if (p.name == m.graph.ops[2].name + "/kernel") {
      EXPECT_EQ(p.values, w) << "the IR's order is the rows' order: no permutation";
    }
  }
}

TEST(OnnxImport, AMatMulOverASequencesFeaturesIsAOneByOneConvolution) {
  Builder b({1, 4, 3}, {1, 4, 2});
  const auto w = ramp(6, 0.2f);
  b.constant("w", {3, 2}, w);
  b.node("MatMul", {"x", "w"}, "y");
  const OnnxModel m = b.load();
  ASSERT_EQ(m.graph.ops.size(), 1u);
  EXPECT_EQ(m.graph.ops[0].kind, ir::OpKind::Conv2D);
  EXPECT_EQ(m.graph.input, (ir::Shape{1, 4, 3})) << "no channel operation: ONNX's own order";
  const auto x = ramp(12, 1.0f);
  std::vector<double> want(8);
  for (int t = 0; t < 4; ++t)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 3; ++k) want[t * 2 + j] += double{x[t * 3 + k]} * w[k * 2 + j];
  expect_near(run(m, x), want);
}

TEST(OnnxImport, AReshapeThatWouldMoveDataIsRefusedNamingTheNode) {
  // [N, 2, 2, 3] as channels-last is 2x3x2; [N, 4, 3] then read by a Conv (channels 4) would
  // need the channels of two pixels side by side.
  Builder b({1, 2, 2, 3}, {1, 1, 3});
  b.constant("w", {1, 4, 1}, ramp(4, 0.5f));
  b.ints("shape", {0, 4, 3});
  b.node("Reshape", {"x", "shape"}, "r");
  b.node("Conv", {"r", "w"}, "y");
  try {
    b.load();
    FAIL() << "imported";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("m.onnx: node 1 (Conv): Conv needs its input [4, 3] in "
                                    "channels-last order"));
  }
}

TEST(OnnxImport, ConvolutionKernelsAreTransposedFromOihw) {
  Builder b({1, 2, 3, 3}, {1, 2, 2, 2});
  const auto w = ramp(2 * 2 * 2 * 2, 0.25f);
  b.constant("w", {2, 2, 2, 2}, w);
  b.node("Conv", {"x", "w"}, "y");
  const OnnxModel m = b.load();
  const auto x = ramp(18, 1.0f);
  std::vector<double> want(8);
  for (int o = 0; o < 2; ++o)
    for (int oy = 0; oy < 2; ++oy)
      for (int ox = 0; ox < 2; ++ox)
        for (int c = 0; c < 2; ++c)
          for (int ky = 0; ky < 2; ++ky)
            for (int kx = 0; kx < 2; ++kx)
              want[(o * 2 + oy) * 2 + ox] +=
                  double{x[(c * 3 + oy + ky) * 3 + ox + kx]} * w[((o * 2 + c) * 2 + ky) * 2 + kx];
  expect_near(run(m, x), want);
}

TEST(OnnxImport, ConcatAlongTheChannelsAndGlobalPoolingAreTheIrsOwn) {
  for (const char* pool : {"GlobalAveragePool", "GlobalMaxPool"}) {
    Builder b({1, 2, 3, 3}, {1, 4});
    b.node("Relu", {"x"}, "r");
    onnx_attr_int(b.node("Concat", {"x", "r"}, "c"), "axis", 1);
    b.node(pool, {"c"}, "g");
    b.node("Flatten", {"g"}, "y");
    const OnnxModel m = b.load();
    ASSERT_EQ(m.graph.ops.size(), 3u) << pool;
    EXPECT_EQ(m.graph.ops[1].kind, ir::OpKind::Concatenate);
    const auto x = ramp(18, 1.0f);
    std::vector<double> want(4);
    const bool avg = std::string(pool) == "GlobalAveragePool";
    for (int c = 0; c < 4; ++c) {
      double acc = avg ? 0 : -1e30;
      for (int p = 0; p < 9; ++p) {
        const double v = c < 2 ? x[c * 9 + p] : std::max(0.0f, x[(c - 2) * 9 + p]);
        acc = avg ? acc + v / 9 : std::max(acc, v);
      }
      want[c] = acc;
    }
    expect_near(run(m, x), want);
  }
}

TEST(OnnxImport, AConstantPerChannelIsAnAffineBatchNormalization) {
  Builder b({1, 3, 2, 2}, {1, 3, 2, 2});
  b.constant("s", {1, 3, 1, 1}, {2.0f, -0.5f, 4.0f});
  b.constant("t", {3, 1, 1}, {1.0f, 2.0f, -3.0f});
  b.node("Mul", {"x", "s"}, "m");
  b.node("Sub", {"t", "m"}, "y");
  const OnnxModel m = b.load();
  ASSERT_EQ(m.graph.ops.size(), 2u);
  EXPECT_EQ(m.graph.ops[0].kind, ir::OpKind::BatchNormalization);
  const auto x = ramp(12, 1.0f);
  const float s[] = {2.0f, -0.5f, 4.0f}, t[] = {1.0f, 2.0f, -3.0f};
  std::vector<double> want(12);
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 4; ++p) want[c * 4 + p] = t[c] - double{x[c * 4 + p]} * s[c];
  expect_near(run(m, x), want);
}

TEST(OnnxImport, WhenNeitherInputLayoutWorksTheFirstAttemptsRefusalIsReported) {
  // No operation on channels, so the input is first held in ONNX's order (3x2x2): the Mul's
  // constant per element of axis 1 is then not on the IR's channels. Held channels-last (2x2x3)
  // the Mul works but the softmax over the last axis is not on the channels: the first message,
  // naming the Mul alone, is the one reported.
  Builder b({1, 3, 2, 2}, {1, 3, 2, 2});
  b.constant("s", {1, 3, 1, 1}, {2.0f, -0.5f, 4.0f});
  b.node("Mul", {"x", "s"}, "m");
  b.node("Softmax", {"m"}, "y");
  try {
    b.load();
    FAIL() << "imported";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("m.onnx: node 0 (Mul): "));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("node 1 (Softmax)")));
  }
}

}  // namespace
}  // namespace tpu::importers
