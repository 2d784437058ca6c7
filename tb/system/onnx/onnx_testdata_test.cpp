// Debian's libonnx-testdata (the ONNX project's backend test data): every pytorch-converted and
// pytorch-operator model either imports, runs on TPU v3 (bf16) and TPU v1 (int8) bit-exact with
// the quantized reference, and agrees with ONNX's expected outputs within the bounds derived in
// docs/onnx.md ("Tolerances"); or is refused with the reason the table below (and docs/onnx.md's
// table) gives. One model and one chip per test: a simulation per process.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "hw/chip/chip.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/compiler/compiler.h"
#include "sw/driver/driver.h"
#include "sw/import/onnx.h"
#include "sw/ir/ops.h"
#include "sw/nn/quantized.h"
#include "sw/nn/reference.h"
#include "sw/nn/weights.h"
#include "sw/sim/workload.h"

namespace tpu {
namespace {
namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kTestData = "/usr/share/libonnx-testdata/data";

// What each model does: runs (""), is refused by the importer with a message holding `refused`,
// imports but the chips refuse it with a message holding `chip`, or imports but its data set
// cannot be fed to any chip (`data`, checked below).
struct Outcome {
  const char* refused = "";
  const char* chip = "";
  const char* data = "";  // imports, but its test data cannot be fed to it: why
};
constexpr const char* k3d = "3-D convolutions and pooling cannot be expressed";
constexpr const char* kInputs = "inputs besides its initializers";
constexpr const char* kSoftmax = "a softmax only fused into the Conv2D or Dense";

// Every model of the two suites (docs/onnx.md lists the same).
const std::map<std::string, Outcome>& expected() {
  static const std::map<std::string, Outcome> table = {
      {"test_AvgPool1d", {}},
      {"test_AvgPool1d_stride", {}},
      {"test_AvgPool2d", {}},
      {"test_AvgPool2d_stride", {}},
      {"test_AvgPool3d", {k3d}},
      {"test_AvgPool3d_stride", {k3d}},
      {"test_AvgPool3d_stride1_pad0_gpu_input", {k3d}},
      {"test_BatchNorm1d_3d_input_eval", {}},
      {"test_BatchNorm2d_eval", {}},
      {"test_BatchNorm2d_momentum_eval", {}},
      {"test_BatchNorm3d_eval", {k3d}},
      {"test_BatchNorm3d_momentum_eval", {k3d}},
      {"test_ConstantPad2d", {"node 0 (Pad): value 2: tpusim pads with zeros"}},
      {"test_Conv1d", {}},
      {"test_Conv1d_dilated", {}},
      {"test_Conv1d_groups", {"node 0 (Conv): group = 2"}},
      {"test_Conv1d_pad1", {}},
      {"test_Conv1d_pad1size1", {}},
      {"test_Conv1d_pad2", {}},
      {"test_Conv1d_pad2size1", {}},
      {"test_Conv1d_stride", {}},
      {"test_Conv2d", {}},
      {"test_Conv2d_depthwise", {}},
      {"test_Conv2d_depthwise_padded", {}},
      {"test_Conv2d_depthwise_strided", {}},
      {"test_Conv2d_depthwise_with_multiplier", {}},
      {"test_Conv2d_dilated", {}},
      {"test_Conv2d_groups", {"node 0 (Conv): group = 2"}},
      {"test_Conv2d_groups_thnn", {"node 0 (Conv): group = 2"}},
      {"test_Conv2d_no_bias", {}},
      {"test_Conv2d_padding", {}},
      {"test_Conv2d_strided", {}},
      {"test_Conv3d", {k3d}},
      {"test_Conv3d_dilated", {k3d}},
      {"test_Conv3d_dilated_strided", {k3d}},
      {"test_Conv3d_groups", {k3d}},
      {"test_Conv3d_no_bias", {k3d}},
      {"test_Conv3d_stride", {k3d}},
      {"test_Conv3d_stride_padding", {k3d}},
      {"test_ConvTranspose2d", {"node 0 (ConvTranspose): operator ConvTranspose is not supported"}},
      {"test_ConvTranspose2d_no_bias",
       {"node 0 (ConvTranspose): operator ConvTranspose is not supported"}},
      {"test_ELU", {}},
      {"test_Embedding", {}},
      {"test_Embedding_sparse", {}},
      {"test_GLU", {"node 0 (Split): operator Split is not supported ("}},
      {"test_GLU_dim", {"node 0 (Split): operator Split is not supported ("}},
      {"test_LeakyReLU", {}},
      {"test_LeakyReLU_with_negval", {}},
      {"test_Linear", {}},
      {"test_Linear_no_bias", {}},
      {"test_LogSoftmax", {"node 0 (LogSoftmax): operator LogSoftmax is not supported"}},
      {"test_MaxPool1d", {}},
      {"test_MaxPool1d_stride", {}},
      {"test_MaxPool1d_stride_padding_dilation", {"dimension 2 is 220000 (must be a number in"}},
      {"test_MaxPool2d", {}},
      {"test_MaxPool2d_stride_padding_dilation",
       {"node 0 (MaxPool): dilations [10, 10]: tpusim's pooling has no dilation"}},
      {"test_MaxPool3d", {k3d}},
      {"test_MaxPool3d_stride", {k3d}},
      {"test_MaxPool3d_stride_padding", {k3d}},
      {"test_PReLU_1d", {}},
      {"test_PReLU_1d_multiparam", {}},
      {"test_PReLU_2d", {}},
      {"test_PReLU_2d_multiparam", {}},
      {"test_PReLU_3d", {k3d}},
      {"test_PReLU_3d_multiparam", {k3d}},
      {"test_PixelShuffle", {"node 1 (Reshape): a 6-D result"}},
      {"test_PoissonNLLLLoss_no_reduce",
       {"2 ONNX nodes cannot be expressed in tpusim's graph IR: node 1 (Exp): operator Exp is not "
        "supported; node 2 (Mul): a constant of dims [10, 10]"}},
      {"test_ReLU", {}},
      {"test_ReflectionPad2d", {"node 0 (Pad): mode \"reflect\""}},
      {"test_ReplicationPad2d", {"node 0 (Pad): mode \"edge\""}},
      {"test_SELU", {"node 0 (Selu): operator Selu is not supported"}},
      {"test_Sigmoid", {}},
      {"test_Softmax", {"", kSoftmax}},
      {"test_Softmin", {"node 0 (Neg): operator Neg is not supported ("}},
      {"test_Softplus", {"node 0 (Softplus): operator Softplus is not supported"}},
      {"test_Softsign",
       {"2 ONNX nodes cannot be expressed in tpusim's graph IR: node 0 (Abs): operator Abs is not "
        "supported; node 3 (Div): Div of two tensors"}},
      {"test_Tanh", {}},
      {"test_ZeroPad2d", {}},
      {"test_log_softmax_dim3", {"node 0 (LogSoftmax): operator LogSoftmax is not supported"}},
      {"test_log_softmax_lastdim", {"node 0 (LogSoftmax): operator LogSoftmax is not supported"}},
      {"test_softmax_functional_dim3", {"", kSoftmax}},
      {"test_softmax_lastdim", {"", kSoftmax}},
      {"test_operator_add_broadcast", {kInputs}},
      {"test_operator_add_size1_broadcast", {kInputs}},
      {"test_operator_add_size1_right_broadcast", {kInputs}},
      {"test_operator_add_size1_singleton_broadcast", {kInputs}},
      {"test_operator_addconstant",
       {"", "",
        "its input_0.pb holds the doubles 9.0e223 and 1.3e219 (the exporter's uninitialised "
        "memory), beyond fp32's range: the chips' inputs are fp32"}},
      {"test_operator_addmm", {kInputs}},
      {"test_operator_basic", {kInputs}},
      {"test_operator_chunk", {"graph has 2 outputs"}},
      {"test_operator_clip", {"node 0 (Clip): min -0.5 max 0.5"}},
      {"test_operator_concat2", {kInputs}},
      {"test_operator_conv", {}},
      {"test_operator_convtranspose",
       {"node 0 (ConvTranspose): operator ConvTranspose is not supported"}},
      {"test_operator_exp", {"node 0 (Exp): operator Exp is not supported"}},
      {"test_operator_flatten", {"is the graph input under another shape"}},
      {"test_operator_index", {"node 0 (Slice): operator Slice is not supported ("}},
      {"test_operator_max", {kInputs}},
      {"test_operator_maxpool", {}},
      {"test_operator_min", {kInputs}},
      {"test_operator_mm", {kInputs}},
      {"test_operator_non_float_params",
       {"node 0 (Add): reads the graph input's integer token ids: only a Gather (an Embedding) "
        "may"}},
      {"test_operator_pad", {"node 0 (Pad): mode \"reflect\""}},
      {"test_operator_params",
       {"2 ONNX nodes cannot be expressed in tpusim's graph IR: node 0 (Add): a constant of dims "
        "[2, 2] on a [2] input: tpusim applies one value, or one per element of one axis, the "
        "same to every sample; node 4 (Neg): operator Neg is not supported"}},
      {"test_operator_permute2", {"the graph input is 6-D"}},
      {"test_operator_pow", {kInputs}},
      {"test_operator_reduced_mean", {"node 0 (ReduceMean): operator ReduceMean is not supported"}},
      {"test_operator_reduced_mean_keepdim",
       {"node 0 (ReduceMean): operator ReduceMean is not supported"}},
      {"test_operator_reduced_sum", {"node 0 (ReduceSum): operator ReduceSum is not supported"}},
      {"test_operator_reduced_sum_keepdim",
       {"node 0 (ReduceSum): operator ReduceSum is not supported"}},
      {"test_operator_repeat", {"node 1 (Tile): operator Tile is not supported"}},
      {"test_operator_repeat_dim_overflow", {"node 3 (Tile): operator Tile is not supported"}},
      {"test_operator_selu", {"node 0 (Selu): operator Selu is not supported"}},
      {"test_operator_sqrt", {"node 0 (Sqrt): operator Sqrt is not supported"}},
      {"test_operator_symbolic_override",
       {"node 0 (InstanceNormalization): operator InstanceNormalization is not supported"}},
      {"test_operator_symbolic_override_nested", {"graph has 3 outputs"}},
      {"test_operator_view", {"is the graph input under another shape"}},
  };
  return table;
}

std::vector<std::string> model_dirs() {
  std::vector<std::string> dirs;
  for (const char* suite : {"pytorch-converted", "pytorch-operator"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(kTestData + "/" + suite, ec))
      if (fs::exists(e.path() / "model.onnx")) dirs.push_back(e.path().string());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::string model_name(const std::string& dir) { return fs::path(dir).filename().string(); }

TEST(OnnxTestData, EveryModelOfBothSuitesIsInTheTable) {
  const auto dirs = model_dirs();
  if (dirs.empty())
    GTEST_SKIP() << kTestData << " is missing: apt-get install libonnx-testdata (scripts/setup.sh)";
  std::size_t runs = 0;
  for (const std::string& d : dirs) {
    const auto it = expected().find(model_name(d));
    ASSERT_NE(it, expected().end()) << d << " is not in the table (tb/system/onnx, docs/onnx.md)";
    runs += *it->second.refused == '\0' && *it->second.chip == '\0' && *it->second.data == '\0';
  }
  EXPECT_EQ(dirs.size(), expected().size());
  EXPECT_EQ(dirs.size(), 117u) << "82 pytorch-converted and 35 pytorch-operator models in 1.12";
  EXPECT_EQ(runs, 43u) << "docs/onnx.md's headline";
}

// ---- One model ----

struct Model {
  importers::OnnxModel onnx;
  nn::Weights weights;
  std::vector<float> inputs, expected;  // IR order (inputs) and ONNX order (expected), n samples
  std::size_t n = 0;
};

// Runs the first samples of the data set (at most 4: test_operator_conv's batch of 20 would
// take most of the suite's time for no more coverage).
constexpr std::size_t kMaxSamples = 4;

Model load(const std::string& dir) {
  Model m;
  m.onnx = importers::load_onnx(dir + "/model.onnx");
  sim::RunOptions opt;
  opt.model = dir + "/model.onnx";
  std::string source;
  m.weights = sim::load_weights(m.onnx.graph, opt, source, m.onnx.parameters);
  const auto in = importers::load_onnx_tensor(dir + "/test_data_set_0/input_0.pb");
  const auto out = importers::load_onnx_tensor(dir + "/test_data_set_0/output_0.pb");
  const std::size_t per_in = m.onnx.graph.input.size(), per_out = m.onnx.graph.output().size();
  EXPECT_EQ(in.values.size() % per_in, 0u);
  EXPECT_EQ(out.values.size() % per_out, 0u);
  m.n = std::min(in.values.size() / per_in, kMaxSamples);
  const auto in_index = m.onnx.input.ir_index();
  m.inputs.resize(m.n * per_in);
  for (std::size_t s = 0; s < m.n; ++s)
    for (std::size_t k = 0; k < per_in; ++k)
      m.inputs[s * per_in + in_index[k]] = in.values[s * per_in + k];
  m.expected.assign(out.values.begin(), out.values.begin() + static_cast<long>(m.n * per_out));
  return m;
}

// The chip's (or a reference's) outputs in ONNX's order.
std::vector<float> onnx_order(const Model& m, const std::vector<float>& ir) {
  const auto index = m.onnx.output.ir_index();
  const std::size_t per = index.size();
  std::vector<float> out(m.n * per);
  for (std::size_t s = 0; s < m.n; ++s)
    for (std::size_t k = 0; k < per; ++k) out[s * per + k] = ir[s * per + index[k]];
  return out;
}

// ---- The error bound (docs/onnx.md, "Tolerances") ----

// The magnitude model: every operation replaced by the linear envelope of its error, so that an
// error of e·|value| in any tensor reaches the output as at most e·M (M its output). Kernels and
// biases by their magnitudes (int8: each output channel's kernel by its largest magnitude, the
// table by its largest, as the quantizer's scales), normalisations by |a|·x + |b|, activations by
// the identity (their Lipschitz constants multiply `lipschitz`), Subtract by Add.
struct Envelope {
  ir::Graph graph;
  nn::Weights weights;
  double lipschitz = 1;
  std::size_t stages = 0;       // operations that compute (and may round) a tensor
  std::uint64_t reduction = 1;  // the longest sum of products (fp32's rounding)
};

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

Envelope envelope(const Model& m, bool per_channel_max) {
  Envelope e;
  e.graph = m.onnx.graph;
  e.weights = m.weights;
  for (std::size_t i = 0; i < e.graph.ops.size(); ++i) {
    ir::Op& op = e.graph.ops[i];
    nn::LayerWeights& w = e.weights.layers[i];
    if (!op.is_view()) ++e.stages;
    auto lip = [&](ir::Act a, float alpha) {
      if (a == ir::Act::LeakyRelu || a == ir::Act::Elu)
        e.lipschitz *= std::max(1.0, std::fabs(static_cast<double>(alpha)));
    };
    lip(op.activation, op.alpha);
    op.activation = ir::Act::Linear;
    for (float& x : w.bias) x = std::fabs(x);
    switch (op.kind) {
      case ir::OpKind::Conv2D:
      case ir::OpKind::Dense:
      case ir::OpKind::DepthwiseConv2D: {
        const std::size_t cols = op.kind == ir::OpKind::DepthwiseConv2D
                                     ? std::size_t{op.in.c} * op.depth_multiplier
                                     : op.out.c;
        std::vector<float> col_max(cols, 0.0f);
        for (std::size_t k = 0; k < w.kernel.size(); ++k)
          col_max[k % cols] = std::max(col_max[k % cols], std::fabs(w.kernel[k]));
        for (std::size_t k = 0; k < w.kernel.size(); ++k)
          w.kernel[k] = per_channel_max ? col_max[k % cols] : std::fabs(w.kernel[k]);
        const std::uint64_t fan = op.kind == ir::OpKind::Dense ? op.in.size()
                                  : op.kind == ir::OpKind::Conv2D
                                      ? std::uint64_t{op.kernel_h} * op.kernel_w * op.in.c
                                      : std::uint64_t{op.kernel_h} * op.kernel_w;
        e.reduction = std::max(e.reduction, fan);
        break;
      }
      case ir::OpKind::Embedding: {
        const float t = max_abs(w.kernel);
        for (float& x : w.kernel) x = per_channel_max ? t : std::fabs(x);
        break;
      }
      case ir::OpKind::BatchNormalization:
        for (std::size_t c = 0; c < w.gamma.size(); ++c) {
          const float a = w.gamma[c] / std::sqrt(w.moving_variance[c] + op.epsilon);
          const float b = w.beta[c] - w.moving_mean[c] * a;
          w.gamma[c] = std::fabs(a), w.beta[c] = std::fabs(b);
          w.moving_mean[c] = 0, w.moving_variance[c] = 0;
        }
        op.epsilon = 1;
        break;
      case ir::OpKind::PReLU:
        e.lipschitz *= std::max(1.0f, max_abs(w.alpha));
        std::fill(w.alpha.begin(), w.alpha.end(), 1.0f);
        break;
      case ir::OpKind::AveragePooling2D:
        e.reduction =
            std::max<std::uint64_t>(e.reduction, std::uint64_t{op.kernel_h} * op.kernel_w);
        break;
      case ir::OpKind::Subtract: op.kind = ir::OpKind::Add; break;
      default: break;
    }
  }
  return e;
}

// M per output element, in ONNX's order.
std::vector<float> magnitudes(const Model& m, const Envelope& e, bool per_tensor_max_input) {
  std::vector<float> x = m.inputs;
  const bool ids = ir::input_is_token_ids(m.onnx.graph);
  const float top = max_abs(x);
  if (!ids)
    for (float& v : x) v = per_tensor_max_input ? top : std::fabs(v);
  return onnx_order(m, nn::forward_float(e.graph, e.weights, x.data(), m.n));
}

struct Worst {
  double ratio = 0;  // the largest |error| / bound
  std::size_t at = 0;
};

// Every |got - want| <= bound[k]; returns the largest ratio (reported, and < 1).
Worst check(const std::vector<float>& got, const std::vector<float>& want,
            const std::vector<double>& bound, const std::string& what) {
  EXPECT_EQ(got.size(), want.size());
  Worst w;
  std::size_t bad = 0;
  for (std::size_t k = 0; k < std::min(got.size(), want.size()); ++k) {
    const double err = std::fabs(static_cast<double>(got[k]) - want[k]);
    const double ratio = bound[k] > 0 ? err / bound[k] : (err == 0 ? 0 : INFINITY);
    if (!(ratio <= w.ratio)) w = {ratio, k};
    if (!(ratio <= 1) && bad++ < 3)
      ADD_FAILURE() << what << ": element " << k << " is " << got[k] << ", ONNX expects " << want[k]
                    << " (|error| " << err << " > bound " << bound[k] << ")";
  }
  return w;
}

// The simulated chip's outputs (IR order).
std::vector<float> simulate(const ChipConfig& cfg, const compiler::Program& prog,
                            const std::vector<std::uint8_t>& encoded) {
  Chip chip("chip", cfg);
  driver::Driver drv("driver", prog, encoded.data(), encoded.size(), chip.clock(), false);
  driver::attach(drv, chip);
  sc_core::sc_start();
  EXPECT_TRUE(drv.done()) << "the chip did not halt";
  return drv.outputs();
}

ChipConfig chip(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json");
}

class OnnxModelTest : public ::testing::TestWithParam<std::string> {};

// The importer's part: it imports and its float reference agrees with ONNX to fp32's rounding,
// or it is refused with the table's reason.
TEST_P(OnnxModelTest, ImportsAndAgreesInFp32OrIsRefusedByName) {
  const std::string dir = GetParam();
  const Outcome want = expected().at(model_name(dir));
  if (*want.refused) {
    try {
      importers::load_onnx(dir + "/model.onnx");
      ADD_FAILURE() << dir << " imported; the table says: " << want.refused;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(want.refused));
      EXPECT_THAT(e.what(), HasSubstr(dir + "/model.onnx: ")) << "the message names the file";
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
    }
    return;
  }
  const Model m = load(dir);
  if (*want.data) {
    // The data set's inputs, as the chips take them (fp32), are not all finite.
    EXPECT_FALSE(
        std::all_of(m.inputs.begin(), m.inputs.end(), [](float x) { return std::isfinite(x); }));
    GTEST_SKIP() << want.data;
  }
  const Envelope e = envelope(m, false);
  const std::vector<float> mag = magnitudes(m, e, false);
  const std::vector<float> got =
      onnx_order(m, nn::forward_float(m.onnx.graph, m.weights, m.inputs.data(), m.n));
  // Both ONNX and the reference sum `reduction` products in fp32 (each within reduction·2^-24
  // of the exact sum's magnitude) and round once per stage.
  const double rel = (2.0 * static_cast<double>(e.reduction) + static_cast<double>(e.stages) + 2) *
                     std::ldexp(1.0, -24) * e.lipschitz;
  std::vector<double> bound(mag.size());
  for (std::size_t k = 0; k < mag.size(); ++k)
    bound[k] = rel * (mag[k] + std::fabs(m.expected[k])) + 1e-30;
  const Worst w = check(got, m.expected, bound, "fp32 reference");
  RecordProperty("fp32_worst_error_over_bound", std::to_string(w.ratio));
}

// On a chip: bit-exact with the quantized reference, and within the chip's bound of ONNX.
void run_on(const std::string& dir, const std::string& chip_name) {
  const Outcome want = expected().at(model_name(dir));
  if (*want.refused) GTEST_SKIP() << "refused by the importer: " << want.refused;
  if (*want.data) GTEST_SKIP() << want.data;
  const ChipConfig cfg = chip(chip_name);
  const Model m = load(dir);
  const ir::Graph g = m.onnx.graph;
  // Calibrated on the samples it runs, as `tpusim run` calibrates on the images it streams first.
  auto prepare = [&] {
    return compiler::prepare(g, m.weights, cfg.mxu.input_type, cfg.mxu.rows, m.inputs.data(), m.n);
  };
  if (*want.chip) {
    try {
      compiler::compile(prepare(), g, cfg, compiler::Options{m.n, static_cast<std::uint32_t>(m.n)});
      ADD_FAILURE() << dir << " compiled; the table says the chips refuse it: " << want.chip;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(want.chip));
    }
    return;
  }
  const nn::QuantizedModel q = prepare();
  const compiler::Program prog =
      compiler::compile(q, g, cfg, compiler::Options{m.n, static_cast<std::uint32_t>(m.n)});
  const std::vector<float> out = simulate(cfg, prog, nn::encode_input(q, m.inputs.data(), m.n));
  const std::vector<float> ref = nn::forward_quantized(q, m.inputs.data(), m.n);
  ASSERT_EQ(out.size(), ref.size());
  EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)))
      << "the chip is not bit-exact with the quantized reference";
  const std::vector<float> got = onnx_order(m, out);
  const bool int8 = cfg.mxu.input_type == DType::Int8;
  const Envelope e = envelope(m, int8);
  const std::vector<float> mag = magnitudes(m, e, int8);
  std::vector<double> bound(mag.size());
  // docs/onnx.md: c = 2 + stages roundings (inputs, weights, each stage's output), bf16's unit
  // roundoff u = 2^-8 each, plus fp32's sums (ONNX's and the chip's, 2 more); int8: half a step
  // of each tensor's scale (its largest magnitude / 127), plus the products of two such errors.
  const double c = 2.0 + static_cast<double>(e.stages);
  if (int8) {
    const double top = max_abs(mag);
    const double rel = (c / 254.0 + 1.0 / (254.0 * 254.0)) * e.lipschitz;
    std::fill(bound.begin(), bound.end(), rel * top);
  } else {
    const double u = std::ldexp(1.0, -8);
    const double rel = (std::pow(1 + u, c + 2) - 1) * e.lipschitz;
    for (std::size_t k = 0; k < mag.size(); ++k)
      bound[k] = rel * (mag[k] + std::fabs(m.expected[k])) + 1e-30;
  }
  const Worst w = check(got, m.expected, bound, chip_name);
  ::testing::Test::RecordProperty("worst_error_over_bound", std::to_string(w.ratio));
  std::printf("%s on %s: worst |error| / bound = %.4f\n", model_name(dir).c_str(),
              chip_name.c_str(), w.ratio);
}

TEST_P(OnnxModelTest, RunsOnV3InBf16WithinItsBoundOfOnnx) { run_on(GetParam(), "v3"); }
TEST_P(OnnxModelTest, RunsOnV1InInt8WithinItsBoundOfOnnx) { run_on(GetParam(), "v1"); }

INSTANTIATE_TEST_SUITE_P(Debian, OnnxModelTest, ::testing::ValuesIn(model_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return model_name(p.param);
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnnxModelTest);

}  // namespace
}  // namespace tpu
