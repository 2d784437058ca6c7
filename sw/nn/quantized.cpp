#include "sw/nn/quantized.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "hw/common/error.h"
#include "numerics/activation.h"
#include "numerics/bf16.h"
#include "numerics/elementwise.h"
#include "numerics/fixed_point.h"
#include "numerics/quantize.h"
#include "sw/ir/ops.h"
#include "sw/nn/fast_kernels.h"
#include "sw/nn/reference.h"

namespace tpu::nn {
using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;
// A tensor of n images in the chip's encoding of one type.
struct ChipTensor {
  DType type = DType::Int8;
  std::vector<std::int8_t> i8;
  std::vector<std::uint16_t> bf;
  std::vector<float> f32;
  std::vector<std::int32_t> i32;  // token ids
};

namespace {

// int8 symmetric range: -127..127 (no -128), so negation never overflows.
constexpr float kInt8Max = 127.0f;

// An elementwise activation on fp32, as the numerics library defines it; Softmax is a row
// function (numerics::softmax_row).
float activate(Act a, float alpha, float x) {
  switch (a) {
    case Act::Linear: return x;
    case Act::Relu: return numerics::relu(x);
    case Act::Relu6: return numerics::relu6(x);
    case Act::Sigmoid: return numerics::sigmoid(x);
    case Act::Tanh: return numerics::tanh_act(x);
    case Act::LeakyRelu: return numerics::leaky_relu(x, alpha);
    case Act::Elu: return numerics::elu(x, alpha);
    case Act::Softmax: break;
  }
  return x;
}

float value_at(const ChipTensor& t, std::size_t i) {
  switch (t.type) {
    case DType::Int8: return static_cast<float>(t.i8[i]);
    case DType::Bf16: return to_float(Bf16{t.bf[i]});
    case DType::Int32: return static_cast<float>(t.i32[i]);
    default: return t.f32[i];
  }
}

void resize(ChipTensor& t, std::size_t n) {
  if (t.type == DType::Int8)
    t.i8.assign(n, 0);
  else if (t.type == DType::Bf16)
    t.bf.assign(n, 0);
  else if (t.type == DType::Int32)
    t.i32.assign(n, 0);
  else
    t.f32.assign(n, 0.0f);
}

// Union-find over tensor scales: int8 operands of an Add must share one scale (the vector
// unit's eltwise add works on the integers), so each class of tensors an Add joins gets one.
struct ScaleClasses {
  std::vector<std::size_t> parent;
  std::size_t find(std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
};

float range_of(float lo, float hi, Act f) {
  switch (f) {
    case Act::Relu: return std::max(hi, 0.0f);
    case Act::Relu6: return std::clamp(hi, 0.0f, 6.0f);
    default: return std::max(std::fabs(lo), std::fabs(hi));
  }
}

}  // namespace

std::size_t calibration_images(const Graph& m) {
  const std::uint64_t macs = std::max<std::uint64_t>(m.macs_per_image(), 1);
  return static_cast<std::size_t>(
      std::clamp<std::uint64_t>(kCalibrationMacs / macs, 1, kCalibrationImages));
}

ConvInput QuantizedModel::conv_input(std::size_t op) const {
  const Op& l = graph.ops[op];
  const ir::Pads pads = ir::window_pads(l);
  return ConvInput{tensor_of(l.inputs[0]), l.in, pads.top, pads.left};
}

Ranges calibrate(const Graph& g, const Weights& w, const float* images, std::size_t n) {
  const std::size_t L = g.ops.size();
  Ranges r;
  r.lo.assign(L, 0.0f);
  r.hi.assign(L, 0.0f);
  const std::size_t n_use = std::min(n, calibration_images(g));
  for (std::size_t i = 0; i < n_use * g.input.size(); ++i)
    r.input = std::max(r.input, std::fabs(images[i]));
  std::vector<bool> seen(L, false);
  forward_float(g, w, images, n_use, [&](std::size_t i, const float* v, std::size_t count) {
    if (count == 0) return;
    const auto [a, b] = std::minmax_element(v, v + count);
    r.lo[i] = seen[i] ? std::min(r.lo[i], *a) : *a;
    r.hi[i] = seen[i] ? std::max(r.hi[i], *b) : *b;
    seen[i] = true;
  });
  return r;
}

// What an operation's parameters are quantized from and onto (step 5 of quantize).
struct ParamArgs {
  const QuantizedModel& q;
  const Op& l;
  QuantizedLayer& ql;  // out_type and out_scale already set
  const LayerWeights& w;
  DType input_type;
  bool out_float;                              // the last weighted operation's fp32 output
  float in_scale;                              // int8: its first operand's scale
  std::function<float(std::size_t)> scale_of;  // an operand's int8 scale
};

namespace {

[[noreturn]] void refuse_op(const ParamArgs& a, const std::string& why) {
  ir::refuse(a.q.graph, a.l, why);
}

void constant_params(const ParamArgs& a) {
  for (float x : constant_values(a.l)) {
    if (a.input_type == DType::Int8) {
      a.ql.constant.push_back(
          static_cast<std::uint8_t>(numerics::quantize_int8(x, a.ql.out_scale)));
    } else {
      const std::uint16_t b = to_bf16(x).bits;
      a.ql.constant.push_back(static_cast<std::uint8_t>(b & 0xff));
      a.ql.constant.push_back(static_cast<std::uint8_t>(b >> 8));
    }
  }
}

// The table on the output's scale (its own: ScaleRule::Values), or rounded to bf16.
void embedding_params(const ParamArgs& a) {
  for (float x : a.w.kernel) {
    if (a.input_type == DType::Int8)
      a.ql.kernel_i8.push_back(numerics::quantize_int8(x, a.ql.out_scale));
    else
      a.ql.kernel_bf16.push_back(to_bf16(x).bits);
  }
}

// A map's per-channel record {a, b, alpha}: a standalone BatchNormalization's x * inv + (beta -
// mean * inv) (inv = gamma / sqrt(variance + epsilon) in fp32, as its folding computes it), a
// PReLU's alpha per channel, an activation's alpha.
void map_params(const ParamArgs& a) {
  const Op& l = a.l;
  QuantizedLayer& ql = a.ql;
  if (l.kind == OpKind::BatchNormalization) {
    for (std::uint32_t c = 0; c < l.out.c; ++c) {
      const float inv = a.w.gamma[c] / std::sqrt(a.w.moving_variance[c] + l.epsilon);
      ql.map_a.push_back(inv);
      ql.map_b.push_back(a.w.beta[c] - a.w.moving_mean[c] * inv);
      ql.map_alpha.push_back(0.0f);
    }
  } else if (l.kind == OpKind::PReLU) {
    ql.map_a.assign(l.out.c, 1.0f);
    ql.map_b.assign(l.out.c, 0.0f);
    ql.map_alpha = a.w.alpha;
  } else {
    ql.map_a = {1.0f};
    ql.map_b = {0.0f};
    ql.map_alpha = {l.alpha};
  }
}

// A ReLU runs as the eltwise max (no parameters); other activations map, but a softmax, a row
// function, only runs fused into the weighted layer that ends the network.
void activation_params(const ParamArgs& a) {
  if (a.l.activation == Act::Softmax)
    refuse_op(a,
              "the chip applies a softmax only fused into the Conv2D or Dense that ends the "
              "network");
  if (a.l.activation != Act::Relu) map_params(a);
}

// int8: each step's product requantized onto the output's scale — first s_0 * s_1 / s_out, then
// the running product (on s_out) times operand k: s_k.
void multiply_params(const ParamArgs& a) {
  if (a.input_type != DType::Int8) return;
  for (std::size_t k = 1; k < a.l.inputs.size(); ++k) {
    const double scale = (k == 1 ? double{a.in_scale} : double{a.ql.out_scale}) *
                         a.scale_of(a.l.inputs[k]) / a.ql.out_scale;
    numerics::QuantizedMultiplier qm;
    try {
      qm = numerics::quantize_multiplier(scale);
    } catch (const std::domain_error& e) {
      refuse_op(a, e.what());
    }
    a.ql.multiplier.push_back(qm.multiplier_q31);
    a.ql.shift.push_back(qm.shift);
  }
}

// A K x N kernel as the MXU multiplies it: int8 with a scale per column (max |w| / 127), or bf16.
void quantize_kernel(DType type, const std::vector<float>& kernel, std::uint32_t cols,
                     std::vector<std::int8_t>& i8, std::vector<std::uint16_t>& bf,
                     std::vector<float>& scale) {
  if (type == DType::Bf16) {
    for (float x : kernel) bf.push_back(to_bf16(x).bits);
    return;
  }
  const std::size_t rows = kernel.size() / cols;
  scale.assign(cols, 0.0f);
  for (std::size_t k = 0; k < rows; ++k)
    for (std::uint32_t c = 0; c < cols; ++c)
      scale[c] = std::max(scale[c], std::fabs(kernel[k * cols + c]));
  for (auto& s : scale) s = s > 0 ? s / kInt8Max : 1.0f;
  i8.resize(kernel.size());
  for (std::size_t k = 0; k < rows; ++k)
    for (std::uint32_t c = 0; c < cols; ++c)
      i8[k * cols + c] = numerics::quantize_int8(kernel[k * cols + c], scale[c]);
}

// An LSTM's two kernels (input W and recurrent U, 4 units columns each, gates i, f, c, o) and the
// records that turn their accumulators into fp32 gate values: zx = (acc + bias) * s_x * s_w[j],
// zh = acc * s_h * s_u[j] (s_h the output's scale, on which the recurrent h is quantized); bf16:
// zx = acc + bias, zh = acc.
void lstm_params(const ParamArgs& a) {
  const std::uint32_t cols = 4 * a.l.filters;
  QuantizedLayer& ql = a.ql;
  quantize_kernel(a.input_type, a.w.kernel, cols, ql.kernel_i8, ql.kernel_bf16, ql.weight_scale);
  quantize_kernel(a.input_type, a.w.recurrent, cols, ql.recurrent_i8, ql.recurrent_bf16,
                  ql.recurrent_weight_scale);
  std::vector<float> bias = a.w.bias;
  bias.resize(cols, 0.0f);
  if (a.input_type == DType::Bf16) {
    ql.bias_f32 = bias;
    ql.scale_f32.assign(cols, 1.0f);
    ql.recurrent_scale_f32.assign(cols, 1.0f);
    return;
  }
  for (std::uint32_t c = 0; c < cols; ++c) {
    const double b = std::round(double{bias[c]} / (double{a.in_scale} * ql.weight_scale[c]));
    ql.bias_i32.push_back(
        static_cast<std::int32_t>(std::clamp<double>(b, -2147483647.0, 2147483647.0)));
    ql.scale_f32.push_back(a.in_scale * ql.weight_scale[c]);
    ql.recurrent_scale_f32.push_back(ql.out_scale * ql.recurrent_weight_scale[c]);
  }
}

// A weighted operation's kernel and bias as the MXU and Activate use them (docs/quantization.md):
// bf16 rounding, or int8 per-channel weight scales, int32 biases and the requantization onto the
// output's scale (fp32 dequantization for the last weighted operation).
void weighted_params(const ParamArgs& a) {
  const Op& l = a.l;
  QuantizedLayer& ql = a.ql;
  const DType input_type = a.input_type;
  const bool out_float = a.out_float;
  const float in_scale = a.in_scale;
  const std::uint32_t cout = l.out.c;
  if (l.activation == Act::Softmax && !out_float)
    throw InputError(
        fmt::format("{}: layer {}: softmax must end the network (it needs an fp32 "
                    "output)",
                    a.q.graph.file, l.name));
  if (input_type == DType::Int8 && !out_float &&
      !(l.activation == Act::Linear || l.activation == Act::Relu || l.activation == Act::Relu6))
    throw InputError(
        fmt::format("{}: layer {}: activation {} on an int8 chip needs an fp32 "
                    "output; only the last layer gives one",
                    a.q.graph.file, l.name, name_of(l.activation)));
  // An int8 ReLU6 is the ReLU when 127 steps of the output scale stay within 6: the clamp at 6
  // then never bites, and Activate's integer outputs have no other (docs/quantization.md).
  if (input_type == DType::Int8 && !out_float && l.activation == Act::Relu6 &&
      ql.out_scale * kInt8Max > 6.0f)
    refuse_op(a, fmt::format("its ReLU6 output shares an int8 scale of {} (127 steps = {}) with "
                             "wider tensors through an Add; the chip's int8 ReLU6 needs at most "
                             "6 / 127",
                             ql.out_scale, ql.out_scale * kInt8Max));
  const std::vector<float>& kernel = a.w.kernel;
  std::vector<float> bias = a.w.bias;
  bias.resize(cout, 0.0f);
  const std::size_t k_total = kernel.size() / cout;
  if (input_type == DType::Bf16) {
    ql.kernel_bf16.resize(kernel.size());
    for (std::size_t k = 0; k < ql.kernel_bf16.size(); ++k)
      ql.kernel_bf16[k] = to_bf16(kernel[k]).bits;
    ql.bias_f32 = bias;
    ql.scale_f32.assign(cout, 1.0f);
    return;
  }
  ql.weight_scale.assign(cout, 0.0f);
  for (std::size_t k = 0; k < k_total; ++k)
    for (std::uint32_t c = 0; c < cout; ++c)
      ql.weight_scale[c] = std::max(ql.weight_scale[c], std::fabs(kernel[k * cout + c]));
  for (auto& s : ql.weight_scale) s = s > 0 ? s / kInt8Max : 1.0f;
  ql.kernel_i8.resize(kernel.size());
  for (std::size_t k = 0; k < k_total; ++k)
    for (std::uint32_t c = 0; c < cout; ++c)
      ql.kernel_i8[k * cout + c] =
          numerics::quantize_int8(kernel[k * cout + c], ql.weight_scale[c]);
  ql.bias_i32.assign(cout, 0);
  for (std::uint32_t c = 0; c < cout; ++c) {
    const double b = std::round(double{bias[c]} / (double{in_scale} * ql.weight_scale[c]));
    ql.bias_i32[c] = static_cast<std::int32_t>(std::clamp<double>(b, -2147483647.0, 2147483647.0));
  }
  if (out_float) {
    ql.scale_f32.resize(cout);
    for (std::uint32_t c = 0; c < cout; ++c) ql.scale_f32[c] = in_scale * ql.weight_scale[c];
    return;
  }
  ql.multiplier.resize(cout);
  ql.shift.resize(cout);
  for (std::uint32_t c = 0; c < cout; ++c) {
    numerics::QuantizedMultiplier qm;
    try {
      qm = numerics::quantize_multiplier(double{in_scale} * ql.weight_scale[c] / ql.out_scale);
    } catch (const std::domain_error& e) {
      refuse_op(a, fmt::format("output channel {}: {}", c, e.what()));
    }
    ql.multiplier[c] = qm.multiplier_q31;
    ql.shift[c] = qm.shift;
  }
}

}  // namespace

QuantizedModel quantize(Graph g, const Weights& w, DType input_type, std::uint32_t tile_rows,
                        const Calibration& cal) {
  if (input_type != DType::Int8 && input_type != DType::Bf16)
    throw InputError("quantize: the MXU input type must be int8 or bf16");
  QuantizedModel q;
  q.graph = std::move(g);
  const Graph& m = q.graph;
  q.act_type = input_type;
  q.tile_rows = tile_rows;
  const std::size_t L = m.ops.size();
  q.layers.resize(L);
  auto refuse = [&](const Op& l, const std::string& why) {
    throw InputError(fmt::format("{}: layer {} ({}): {}", m.file, l.name, name_of(l.kind), why));
  };

  // 1. Tensors: a view passes its input's on; every other operation computes its own.
  q.tensor.resize(L);
  for (std::size_t i = 0; i < L; ++i)
    q.tensor[i] = m.ops[i].is_view() ? q.tensor_of(m.ops[i].inputs[0]) : i;

  // 2. Output types: the last weighted operation gives fp32 when only views of it follow; every
  //    other tensor keeps the chip's activation type.
  std::size_t last_weighted = L;
  for (std::size_t i = 0; i < L; ++i)
    if (m.ops[i].has_weights()) last_weighted = i;
  bool final_float = last_weighted < L;
  for (std::size_t i = last_weighted + 1; i < L && final_float; ++i)
    final_float = q.tensor[i] == last_weighted;

  // 3. What the chip cannot run, named before anything is built.
  for (std::size_t i = 0; i < L; ++i) {
    const Op& l = m.ops[i];
    if (!q.computes(i) || l.has_weights()) continue;
    for (std::size_t p : l.inputs)
      if (final_float && q.tensor_of(p) == last_weighted)
        refuse(l, fmt::format("it reads the fp32 output of {}, the last weighted layer; the "
                              "vector unit works on {} tensors",
                              m.ops[last_weighted].name, name_of(input_type)));
  }
  auto scale_for = [](float range) { return range > 0 ? range / kInt8Max : 1.0f; };

  // 4. Scale classes (int8): a weighted operation's output and an Add's inputs and output;
  //    pooling, padding and standalone ReLU keep their input's scale. Source 0 is the model input.
  ScaleClasses sc;
  sc.parent.resize(L + 1);
  for (std::size_t k = 0; k <= L; ++k) sc.parent[k] = k;
  std::vector<std::size_t> source(L + 1, 0);
  auto source_of = [&](std::size_t tensor) {
    return sc.find(tensor == kGraphInput ? 0 : source[tensor + 1]);
  };
  for (std::size_t i = 0; i < L; ++i) {
    if (!q.computes(i)) continue;
    const Op& l = m.ops[i];
    const ScaleRule rule = ir::entry_for(chip_semantics(), l.kind, "chip semantics").scale(l);
    if (rule == ScaleRule::Own || rule == ScaleRule::Values) {
      source[i + 1] = i + 1;
    } else if (rule == ScaleRule::Joined) {
      const std::size_t root = source_of(q.tensor_of(l.inputs[0]));
      for (std::size_t k = 1; k < l.inputs.size(); ++k) {
        const std::size_t other = source_of(q.tensor_of(l.inputs[k]));
        if (other != root) sc.parent[other] = root;
      }
      source[i + 1] = root;
    } else {
      source[i + 1] = source_of(q.tensor_of(l.inputs[0]));
    }
  }
  // A class with a fixed member (the input, a constant) takes its scale; others cover the
  // largest range of their members, Add outputs included, so the sums do not saturate. A
  // weighted operation's range is that of its value (a folded BatchNormalization's output) with
  // its activation applied.
  std::vector<float> class_range(L + 1, 0.0f);
  std::vector<std::optional<float>> class_fixed(L + 1);
  class_fixed[sc.find(0)] = scale_for(cal.input);
  for (std::size_t i = 0; i < L; ++i) {
    if (!q.computes(i) || input_type != DType::Int8) continue;
    const Op& l = m.ops[i];
    const std::size_t root = sc.find(source[i + 1]);
    const ScaleRule rule = ir::entry_for(chip_semantics(), l.kind, "chip semantics").scale(l);
    if (rule == ScaleRule::Values) {
      const auto v = l.kind == OpKind::Constant ? constant_values(l) : w.layers[i].kernel;
      float r = 0.0f;
      for (float x : v) r = std::max(r, std::fabs(x));
      if (class_fixed[root] && *class_fixed[root] != scale_for(r))
        refuse(l,
               "an Add joins it with the model input or another constant, whose int8 scales "
               "differ");
      class_fixed[root] = scale_for(r);
    } else if (l.has_weights() && !(final_float && i == last_weighted)) {
      class_range[root] =
          std::max(class_range[root], range_of(cal.value_lo[i], cal.value_hi[i], l.activation));
    } else if (!l.has_weights() && (rule == ScaleRule::Own || rule == ScaleRule::Joined)) {
      // Its output's range: an Add's sum, a map's or a product's result.
      class_range[root] =
          std::max(class_range[root], range_of(cal.out_lo[i], cal.out_hi[i], Act::Linear));
    }
  }
  auto scale_of_tensor = [&](std::size_t tensor) {
    const std::size_t root = source_of(tensor);
    return class_fixed[root] ? *class_fixed[root] : scale_for(class_range[root]);
  };

  // 5. Parameters, operation by operation.
  q.input_scale = input_type == DType::Int8 ? scale_of_tensor(kGraphInput) : 1.0f;
  for (std::size_t i = 0; i < L; ++i) {
    const Op& l = m.ops[i];
    QuantizedLayer& ql = q.layers[i];
    const std::size_t own = q.tensor[i];
    const bool out_float = final_float && own == last_weighted;
    ql.out_type = out_float ? DType::Fp32 : input_type;
    ql.out_scale = input_type == DType::Int8 && !out_float ? scale_of_tensor(own) : 1.0f;
    const ChipSemantics& chip = ir::entry_for(chip_semantics(), l.kind, "chip semantics");
    if (!chip.params) continue;
    const float in_scale = l.inputs.empty() || input_type != DType::Int8
                               ? 1.0f
                               : scale_of_tensor(q.tensor_of(l.inputs[0]));
    chip.params(ParamArgs{q, l, ql, w.layers[i], input_type, out_float, in_scale,
                          [&](std::size_t p) { return scale_of_tensor(q.tensor_of(p)); }});
  }
  return q;
}

std::vector<std::uint8_t> encode_input(const QuantizedModel& q, const float* images,
                                       std::size_t n) {
  const std::size_t count = n * q.graph.input.size();
  const DType type = q.input_type();  // a walk over the graph: once, not per element
  std::vector<std::uint8_t> out(count * size_of(type));
  for (std::size_t i = 0; i < count; ++i) {
    if (type == DType::Int32) {
      // Token ids, little-endian int32; one outside every table is the user's input to fix.
      if (!(images[i] >= 0.0f && images[i] < static_cast<float>(ir::kMaxEmbeddingRows)))
        throw InputError(fmt::format("{}: token id {} of sample {} is not an id (0 to {})",
                                     q.graph.file, images[i], i / q.graph.input.size(),
                                     ir::kMaxEmbeddingRows - 1));
      const auto id = static_cast<std::uint32_t>(images[i]);
      for (int k = 0; k < 4; ++k) out[4 * i + k] = static_cast<std::uint8_t>(id >> (8 * k));
    } else if (q.act_type == DType::Int8) {
      out[i] = static_cast<std::uint8_t>(numerics::quantize_int8(images[i], q.input_scale));
    } else {
      const std::uint16_t b = to_bf16(images[i]).bits;
      out[2 * i] = static_cast<std::uint8_t>(b & 0xff);
      out[2 * i + 1] = static_cast<std::uint8_t>(b >> 8);
    }
  }
  return out;
}

namespace {

// The vector unit's Activate of one pixel's accumulators into `out` at element o: int8 outputs
// requantize (a ReLU6 there is the ReLU: quantize keeps its scale within 6 / 127), float outputs
// scale, apply the activation (softmax across the row) and round to the output type.
void activate_pixel(const QuantizedModel& q, const Op& l, const QuantizedLayer& ql,
                    const std::int32_t* acc_i, const float* acc_f, std::vector<float>& row,
                    ChipTensor& out, std::size_t o) {
  const std::uint32_t oc = l.out.c;
  const Act f = l.activation;
  if (ql.out_type == DType::Int8) {
    for (std::uint32_t c = 0; c < oc; ++c) {
      std::int8_t v = numerics::requantize(numerics::add_bias(acc_i[c], ql.bias_i32[c]),
                                           ql.multiplier[c], ql.shift[c]);
      if (f == Act::Relu || f == Act::Relu6) v = numerics::relu(v);
      out.i8[o + c] = v;
    }
    return;
  }
  for (std::uint32_t c = 0; c < oc; ++c)
    row[c] = q.act_type == DType::Int8
                 ? numerics::scale_int(acc_i[c], ql.bias_i32[c], ql.scale_f32[c])
                 : numerics::scale_float(acc_f[c], ql.bias_f32[c], ql.scale_f32[c]);
  if (f == Act::Softmax)
    numerics::softmax_row(row.data(), row.data(), oc);
  else
    for (auto& v : row) v = activate(f, l.alpha, v);
  for (std::uint32_t c = 0; c < oc; ++c) {
    if (ql.out_type == DType::Bf16)
      out.bf[o + c] = to_bf16(row[c]).bits;
    else
      out.f32[o + c] = row[c];
  }
}

// The int32 sums one oneDNN call of fast_weighted_int8 leaves for the requantization: within a
// core's L2 cache.
constexpr std::size_t kFastSumsBytes = std::size_t{1} << 20;

// An int8 Conv2D or Dense (a 1x1 convolution of a 1x1 image) with its sums from oneDNN
// (exact: int8 x int8 products summed in int32) and Activate's requantization, vectorised, as
// numerics/ defines it; false, nothing written, when oneDNN does not run it.
bool fast_weighted_int8(const QuantizedModel& q, const Op& l, const QuantizedLayer& ql,
                        const ConvInput& geometry, const ChipTensor& in, ChipTensor& out,
                        std::size_t n) {
  if (q.act_type != DType::Int8 || in.type != DType::Int8) return false;
  fast::ConvShape s;
  s.n = n;
  s.oc = l.out.c;
  if (l.kind == OpKind::Dense) {
    s.ic = static_cast<std::uint32_t>(l.in.size());
  } else {
    s.ih = geometry.shape.h, s.iw = geometry.shape.w, s.ic = geometry.shape.c;
    s.kh = l.kernel_h, s.kw = l.kernel_w, s.sh = l.stride_h, s.sw = l.stride_w;
    s.dh = l.dilation_h, s.dw = l.dilation_w, s.pt = geometry.pad_top, s.pl = geometry.pad_left;
    s.oh = l.out.h, s.ow = l.out.w;
  }
  // A few images per oneDNN call, requantized at once: their int32 sums stay in the cache.
  const std::size_t per_image = std::size_t{s.oh} * s.ow * s.oc;
  s.n = std::clamp<std::size_t>(kFastSumsBytes / (4 * per_image), 1, n);
  fast::ConvS8 conv(s, ql.kernel_i8.data());
  if (!conv.ok()) return false;
  out.type = ql.out_type;
  resize(out, n * per_image);
  std::vector<std::int32_t> acc(s.n * per_image);
  std::vector<float> row(s.oc);
  const std::size_t in_image = std::size_t{s.ih} * s.iw * s.ic;
  for (std::size_t b = 0; b < n; b += s.n) {
    const std::size_t count = std::min(s.n, n - b);
    conv.run(in.i8.data() + b * in_image, count, acc.data());
    const std::size_t pixels = count * std::size_t{s.oh} * s.ow;
    if (ql.out_type == DType::Int8) {
      // A ReLU6 is the ReLU here, as in activate_pixel.
      fast::requantize_rows(
          acc.data(), pixels, s.oc, ql.bias_i32.data(), ql.multiplier.data(), ql.shift.data(),
          l.activation == Act::Relu || l.activation == Act::Relu6, out.i8.data() + b * per_image);
      continue;
    }
    for (std::size_t p = 0; p < pixels; ++p)
      activate_pixel(q, l, ql, acc.data() + p * s.oc, nullptr, row, out, b * per_image + p * s.oc);
  }
  return true;
}

// A bf16 Conv2D or Dense with the MXU's sums from fast::bf16_sums (the same order per column,
// vectorised across columns and four pixels at a time), then Activate as activate_pixel applies
// it; false, nothing written, on CPUs without AVX-512 or with a weight that is not finite.
bool fast_weighted_bf16(const QuantizedModel& q, const Op& l, const QuantizedLayer& ql,
                        const ConvInput& geometry, const ChipTensor& in, ChipTensor& out,
                        std::size_t n) {
  if (q.act_type != DType::Bf16 || in.type == DType::Int8 || !fast::requantize_vectorised())
    return false;
  std::vector<float> wf(ql.kernel_bf16.size());
  for (std::size_t k = 0; k < wf.size(); ++k) {
    wf[k] = to_float(Bf16{ql.kernel_bf16[k]});
    if (!std::isfinite(wf[k])) return false;
  }
  const bool dense = l.kind == OpKind::Dense;
  const std::uint32_t ih = dense ? 1 : geometry.shape.h, iw = dense ? 1 : geometry.shape.w;
  const std::uint32_t ic = dense ? static_cast<std::uint32_t>(l.in.size()) : geometry.shape.c;
  const std::uint32_t kh = dense ? 1 : l.kernel_h, kw = dense ? 1 : l.kernel_w;
  const std::uint32_t sh = dense ? 1 : l.stride_h, sw = dense ? 1 : l.stride_w;
  const std::uint32_t dh = dense ? 1 : l.dilation_h, dw = dense ? 1 : l.dilation_w;
  const std::uint32_t oh = dense ? 1 : l.out.h, ow = dense ? 1 : l.out.w, oc = l.out.c;
  const std::int64_t pt = dense ? 0 : geometry.pad_top, pl = dense ? 0 : geometry.pad_left;
  const std::size_t K = std::size_t{kh} * kw * ic;
  const std::size_t pixels = n * std::size_t{oh} * ow;
  out.type = ql.out_type;
  resize(out, pixels * oc);
  // Pixels a block: their input rows (K floats each) within a core's L2 cache.
  const std::size_t block = std::clamp<std::size_t>(kFastSumsBytes / (4 * (K + oc)), 4, 256);
  std::vector<float> x(block * K), acc(block * oc), row(oc);
  for (std::size_t p0 = 0; p0 < pixels; p0 += block) {
    const std::size_t count = std::min(block, pixels - p0);
    // 1. The input rows, in the window order ky, kx, ci (zero outside the image).
    std::size_t b = p0 / (std::size_t{oh} * ow);
    auto oy = static_cast<std::int64_t>(p0 / ow % oh), ox = static_cast<std::int64_t>(p0 % ow);
    for (std::size_t r = 0; r < count; ++r) {
      float* xr = &x[r * K];
      for (std::uint32_t ky = 0; ky < kh; ++ky)
        for (std::uint32_t kx = 0; kx < kw; ++kx) {
          const std::int64_t y = oy * sh + std::int64_t{ky} * dh - pt;
          const std::int64_t xx = ox * sw + std::int64_t{kx} * dw - pl;
          const bool inside = y >= 0 && y < ih && xx >= 0 && xx < iw;
          float* xk = xr + (std::size_t{ky} * kw + kx) * ic;
          if (!inside) {
            std::fill(xk, xk + ic, 0.0f);
            continue;
          }
          const std::size_t src =
              ((b * ih + static_cast<std::size_t>(y)) * iw + static_cast<std::size_t>(xx)) * ic;
          if (in.type == DType::Bf16)
            for (std::uint32_t ci = 0; ci < ic; ++ci) xk[ci] = to_float(Bf16{in.bf[src + ci]});
          else
            for (std::uint32_t ci = 0; ci < ic; ++ci) xk[ci] = value_at(in, src + ci);
        }
      // The next pixel: row-major over (b, oy, ox).
      if (++ox == ow) {
        ox = 0;
        if (++oy == oh) oy = 0, ++b;
      }
    }
    // 2. The MXU's sums; 3. Activate.
    fast::bf16_sums(x.data(), count, K, wf.data(), oc, q.tile_rows, acc.data());
    if (ql.out_type == DType::Bf16 && (l.activation == Act::Linear || l.activation == Act::Relu)) {
      // activate_pixel's steps for these two, vectorised (fast::activate_bf16_rows).
      fast::activate_bf16_rows(acc.data(), count, oc, ql.bias_f32.data(), ql.scale_f32.data(),
                               l.activation == Act::Relu, out.bf.data() + p0 * oc);
      continue;
    }
    for (std::size_t r = 0; r < count; ++r)
      activate_pixel(q, l, ql, nullptr, &acc[r * oc], row, out, (p0 + r) * oc);
  }
  return true;
}

// The MXU's int8 sums of one input row xi[0..K) with a K x oc kernel w16 (int8 values widened
// to int16): exact, wrapping like the chip's int32 accumulators (unsigned adds); zero inputs add
// nothing and are skipped.
[[gnu::always_inline]] inline void int8_sums_loop(const std::int32_t* xi, std::uint64_t K,
                                                  const std::int16_t* w16, std::uint32_t oc,
                                                  std::uint32_t* acc_u) {
  std::fill(acc_u, acc_u + oc, 0u);
  for (std::uint64_t k = 0; k < K; ++k) {
    if (xi[k] == 0) continue;
    const auto xk = static_cast<std::int16_t>(xi[k]);
    // Distinct buffers: __restrict lets the column loop vectorise (columns are independent, so
    // each column's order is unchanged). int8 x int8 products fit int16 (|q| <= 127 on both
    // sides).
    const std::int16_t* __restrict wk = &w16[k * oc];
    std::uint32_t* __restrict au = acc_u;
    for (std::uint32_t c = 0; c < oc; ++c)
      au[c] += static_cast<std::uint32_t>(
          static_cast<std::int32_t>(static_cast<std::int16_t>(xk * wk[c])));
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// Kernels::Fast, for few columns over a long K (a classifier after a flatten): per column a dot
// product of the input row x16 with the column's K weights w16t[c][0..K) (int16 both), 16
// products a step, pairs summed by vpmaddwd (|a0 b0 + a1 b1| <= 2 * 128 * 128 fits int32) and
// the pairs added in int32 lanes. Integer additions wrap, and a wrapping sum is the same in any
// order: the bits of int8_sums.
__attribute__((target("avx2"))) void int8_dots_avx2(const std::int16_t* x16, std::uint64_t K,
                                                    const std::int16_t* w16t, std::uint32_t oc,
                                                    std::uint32_t* acc_u) {
  for (std::uint32_t c = 0; c < oc; ++c) {
    const std::int16_t* w = w16t + std::size_t{c} * K;
    __m256i s = _mm256_setzero_si256();
    std::uint64_t k = 0;
    for (; k + 16 <= K; k += 16)
      s = _mm256_add_epi32(
          s, _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x16 + k)),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k))));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    auto sum = static_cast<std::uint32_t>(_mm_cvtsi128_si32(t));
    for (; k < K; ++k) sum += static_cast<std::uint32_t>(std::int32_t{x16[k]} * w[k]);
    acc_u[c] = sum;
  }
}

// The same loop compiled for AVX2 (twice SSE2's lanes), where the CPU has it: integer sums, so
// the bits are the same whatever the lanes.
__attribute__((target("avx2"))) void int8_sums_avx2(const std::int32_t* xi, std::uint64_t K,
                                                    const std::int16_t* w16, std::uint32_t oc,
                                                    std::uint32_t* acc_u) {
  int8_sums_loop(xi, K, w16, oc, acc_u);
}
#endif

void int8_sums(const std::int32_t* xi, std::uint64_t K, const std::int16_t* w16, std::uint32_t oc,
               std::uint32_t* acc_u) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (fast::cpu_has(fast::Isa::Avx2)) return int8_sums_avx2(xi, K, w16, oc, acc_u);
#endif
  int8_sums_loop(xi, K, w16, oc, acc_u);
}

// Conv2D and Dense in the chip's arithmetic. A Dense layer is a 1x1 "convolution" of a 1x1
// image whose channels are the flattened input: the same loop covers both.
void weighted_layer(const QuantizedModel& q, const Op& l, const QuantizedLayer& ql,
                    const ConvInput& geometry, const ChipTensor& in, ChipTensor& out, std::size_t n,
                    Kernels kernels) {
  if (kernels == Kernels::Fast && (fast_weighted_int8(q, l, ql, geometry, in, out, n) ||
                                   fast_weighted_bf16(q, l, ql, geometry, in, out, n)))
    return;
  const bool dense = l.kind == OpKind::Dense;
  const std::uint32_t ih = dense ? 1 : geometry.shape.h, iw = dense ? 1 : geometry.shape.w;
  const std::uint32_t ic = dense ? static_cast<std::uint32_t>(l.in.size()) : geometry.shape.c;
  const std::uint32_t kh = dense ? 1 : l.kernel_h, kw = dense ? 1 : l.kernel_w;
  const std::uint32_t sh = dense ? 1 : l.stride_h, sw = dense ? 1 : l.stride_w;
  const std::uint32_t oh = dense ? 1 : l.out.h, ow = dense ? 1 : l.out.w, oc = l.out.c;
  const std::uint32_t pt = dense ? 0 : geometry.pad_top;
  const std::uint32_t pl = dense ? 0 : geometry.pad_left;
  const std::uint64_t K = std::uint64_t{kh} * kw * ic;
  const std::uint64_t tile = q.tile_rows;

  out.type = ql.out_type;
  resize(out, n * std::uint64_t{oh} * ow * oc);
  // int8 weights widened to int16 once per layer, so int8_sums's column loop vectorises.
  std::vector<std::int16_t> w16(ql.kernel_i8.begin(), ql.kernel_i8.end());
  std::vector<float> wf(ql.kernel_bf16.size());  // bf16 widened to fp32 once (exact)
  for (std::size_t k = 0; k < wf.size(); ++k) wf[k] = to_float(Bf16{ql.kernel_bf16[k]});
  std::vector<std::uint32_t> acc_u(oc);
  std::vector<std::int32_t> acc_i(oc);
  std::vector<float> acc_f(oc), psum(oc), row(oc);
  std::vector<float> x(K);
  std::vector<std::int32_t> xi(K);
  // int8 outputs with Kernels::Fast: one image's accumulators, requantized at once by
  // fast::requantize_rows (where oneDNN's sums are not exact, fast_weighted_int8 is not taken).
  const bool requantize_image =
      kernels == Kernels::Fast && q.act_type == DType::Int8 && ql.out_type == DType::Int8;
  std::vector<std::int32_t> image_acc(requantize_image ? std::size_t{oh} * ow * oc : 0);
  // int8 with Kernels::Fast, fewer columns than a vector and a long K: int8_dots_avx2 on the
  // kernel's columns (transposed once per layer).
#if defined(__x86_64__) && defined(__GNUC__)
  const bool dots = kernels == Kernels::Fast && q.act_type == DType::Int8 &&
                    fast::cpu_has(fast::Isa::Avx2) && oc < 16 && K >= 256;
#else
  const bool dots = false;
#endif
  std::vector<std::int16_t> w16t(dots ? K * oc : 0), x16(dots ? K : 0);
  if (dots)
    for (std::uint64_t k = 0; k < K; ++k)
      for (std::uint32_t c = 0; c < oc; ++c) w16t[c * K + k] = w16[k * oc + c];
  for (std::size_t b = 0; b < n; ++b)
    for (std::uint32_t oy = 0; oy < oh; ++oy)
      for (std::uint32_t ox = 0; ox < ow; ++ox) {
        // 1. The input row, in the window order ky, kx, ci (zero outside the image).
        for (std::uint32_t ky = 0; ky < kh; ++ky)
          for (std::uint32_t kx = 0; kx < kw; ++kx) {
            const std::int64_t y = std::int64_t{oy} * sh + std::int64_t{ky} * l.dilation_h - pt;
            const std::int64_t xx = std::int64_t{ox} * sw + std::int64_t{kx} * l.dilation_w - pl;
            const bool inside = y >= 0 && y < ih && xx >= 0 && xx < iw;
            for (std::uint32_t ci = 0; ci < ic; ++ci) {
              const std::uint64_t k = (std::uint64_t{ky} * kw + kx) * ic + ci;
              const std::size_t src = ((b * ih + static_cast<std::uint64_t>(inside ? y : 0)) * iw +
                                       static_cast<std::uint64_t>(inside ? xx : 0)) *
                                          ic +
                                      ci;
              if (in.type == DType::Int8)
                xi[k] = inside ? in.i8[src] : 0;
              else
                x[k] = inside ? value_at(in, src) : 0.0f;
            }
          }
        // 2. The MXU: int8 sums are exact (wrapping int32); bf16 sums run per tile of `tile`
        //    rows from +0 in row order and add into the accumulator.
        if (q.act_type == DType::Int8) {
#if defined(__x86_64__) && defined(__GNUC__)
          if (dots) {
            std::copy(xi.begin(), xi.end(), x16.begin());  // int8 values
            int8_dots_avx2(x16.data(), K, w16t.data(), oc, acc_u.data());
          } else {
            int8_sums(xi.data(), K, w16.data(), oc, acc_u.data());
          }
#else
          int8_sums(xi.data(), K, w16.data(), oc, acc_u.data());
#endif
          for (std::uint32_t c = 0; c < oc; ++c) acc_i[c] = static_cast<std::int32_t>(acc_u[c]);
        } else {
          for (std::uint64_t k0 = 0; k0 < K; k0 += tile) {
            std::fill(psum.begin(), psum.end(), 0.0f);
            for (std::uint64_t k = k0; k < std::min(K, k0 + tile); ++k) {
              // A zero input adds +-0 to a partial sum that is never -0 (it starts at +0 and
              // finite sums round to +0), so skipping it leaves every bit unchanged.
              const float xk = x[k];
              if (xk == 0.0f) continue;
              const float* __restrict wk = &wf[k * oc];
              float* __restrict ps = psum.data();
              for (std::uint32_t c = 0; c < oc; ++c) ps[c] += xk * wk[c];
            }
            for (std::uint32_t c = 0; c < oc; ++c)
              acc_f[c] = k0 == 0 ? psum[c] : acc_f[c] + psum[c];
          }
        }
        // 3. The vector unit's Activate.
        if (!requantize_image) {
          activate_pixel(q, l, ql, acc_i.data(), acc_f.data(), row, out,
                         ((b * oh + oy) * ow + ox) * oc);
          continue;
        }
        std::copy(
            acc_i.begin(), acc_i.end(),
            image_acc.begin() + static_cast<std::ptrdiff_t>((std::size_t{oy} * ow + ox) * oc));
        if (oy + 1 == oh && ox + 1 == ow)  // A ReLU6 is the ReLU here, as in activate_pixel.
          fast::requantize_rows(image_acc.data(), std::size_t{oh} * ow, oc, ql.bias_i32.data(),
                                ql.multiplier.data(), ql.shift.data(),
                                l.activation == Act::Relu || l.activation == Act::Relu6,
                                out.i8.data() + b * image_acc.size());
      }
}

// DepthwiseConv2D on the MXU (docs/quantization.md): the convolution whose kh*kw*cin x cin*m
// kernel is block-diagonal — row k = p * cin + ci (window position p, input channel ci) holds
// channel ci's taps in its own m columns and zeros elsewhere. int8 sums are exact. bf16 runs K in
// tiles of `tile_rows` rows, each summed from +0 in row order, then added into the accumulator;
// a zero weight adds +-0 to a partial sum that is never -0 and a zero tile adds +0, so output
// channel co = ci * m + j sums only channel ci's taps, grouped by the tile their row falls in
// (finite activations: an infinite one times a zero weight would be NaN on the array).
void depthwise_layer(const QuantizedModel& q, const Op& l, const QuantizedLayer& ql,
                     const ConvInput& geometry, const ChipTensor& in, ChipTensor& out,
                     std::size_t n) {
  const std::uint32_t ih = geometry.shape.h, iw = geometry.shape.w, ic = geometry.shape.c;
  const std::uint32_t m = l.depth_multiplier, oh = l.out.h, ow = l.out.w, oc = l.out.c;
  const std::uint32_t taps = l.kernel_h * l.kernel_w;
  const std::uint64_t tile = q.tile_rows;
  out.type = ql.out_type;
  resize(out, n * std::uint64_t{oh} * ow * oc);
  std::vector<std::int32_t> acc_i(oc);
  std::vector<float> acc_f(oc), row(oc);
  std::vector<std::int64_t> src(taps);  // per tap, the input pixel's first element, or -1
  for (std::size_t b = 0; b < n; ++b)
    for (std::uint32_t oy = 0; oy < oh; ++oy)
      for (std::uint32_t ox = 0; ox < ow; ++ox) {
        for (std::uint32_t p = 0; p < taps; ++p) {
          const std::int64_t y = std::int64_t{oy} * l.stride_h +
                                 std::int64_t{p / l.kernel_w} * l.dilation_h - geometry.pad_top;
          const std::int64_t x = std::int64_t{ox} * l.stride_w +
                                 std::int64_t{p % l.kernel_w} * l.dilation_w - geometry.pad_left;
          const bool inside = y >= 0 && y < ih && x >= 0 && x < iw;
          src[p] = inside ? static_cast<std::int64_t>(((b * ih + y) * iw + x) * ic) : -1;
        }
        for (std::uint32_t co = 0; co < oc; ++co) {
          const std::uint32_t ci = co / m;
          if (q.act_type == DType::Int8) {
            std::uint32_t acc = 0;  // wraps like the chip's int32 accumulator
            for (std::uint32_t p = 0; p < taps; ++p)
              if (src[p] >= 0)
                acc += static_cast<std::uint32_t>(
                    std::int32_t{in.i8[static_cast<std::size_t>(src[p]) + ci]} *
                    ql.kernel_i8[std::size_t{p} * oc + co]);
            acc_i[co] = static_cast<std::int32_t>(acc);
            continue;
          }
          float acc = 0.0f, psum = 0.0f;
          std::uint64_t current = 0;
          for (std::uint32_t p = 0; p < taps; ++p) {
            const std::uint64_t t = (std::uint64_t{p} * ic + ci) / tile;
            if (t != current) {
              acc = acc + psum;
              psum = 0.0f;
              current = t;
            }
            const float xv =
                src[p] >= 0 ? value_at(in, static_cast<std::size_t>(src[p]) + ci) : 0.0f;
            if (xv == 0.0f) continue;
            psum += xv * to_float(Bf16{ql.kernel_bf16[std::size_t{p} * oc + co]});
          }
          acc_f[co] = acc + psum;
        }
        activate_pixel(q, l, ql, acc_i.data(), acc_f.data(), row, out,
                       ((b * oh + oy) * ow + ox) * oc);
      }
}

void pool_layer(const Op& l, const ChipTensor& in, ChipTensor& out, std::size_t n,
                Kernels kernels) {
  out.type = in.type;
  const std::uint64_t oh = l.out.h, ow = l.out.w, c = l.in.c;
  resize(out, n * oh * ow * c);
  const bool avg = l.kind == OpKind::AveragePooling2D;
  // TensorFlow's "same" pooling: window positions outside the image are skipped, and an average
  // divides by the positions inside.
  const ir::Pads pads = ir::window_pads(l);
  if (kernels == Kernels::Fast && in.type == DType::Int8 && !avg) {
    // The same maxima from -128 over the positions inside, a pixel's channels at a time (the
    // loop over channels vectorises).
    for (std::size_t b = 0; b < n; ++b)
      for (std::uint64_t oy = 0; oy < oh; ++oy)
        for (std::uint64_t ox = 0; ox < ow; ++ox) {
          std::int8_t* __restrict o = &out.i8[((b * oh + oy) * ow + ox) * c];
          std::fill(o, o + c, std::int8_t{-128});
          for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
            for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
              const std::int64_t y = std::int64_t(oy * l.stride_h + ky) - pads.top;
              const std::int64_t x = std::int64_t(ox * l.stride_w + kx) - pads.left;
              if (y < 0 || y >= l.in.h || x < 0 || x >= l.in.w) continue;
              const std::int8_t* __restrict v =
                  &in.i8[((b * l.in.h + static_cast<std::uint64_t>(y)) * l.in.w +
                          static_cast<std::uint64_t>(x)) *
                         c];
              for (std::uint64_t ch = 0; ch < c; ++ch) o[ch] = std::max(o[ch], v[ch]);
            }
        }
    return;
  }
  if (kernels == Kernels::Fast && in.type == DType::Bf16 && !avg) {
    // The same: the first position's values, then max_float with each next one, rounded to
    // bf16 (0 for a window with no position inside), a pixel's channels at a time.
    std::vector<float> m(c);
    for (std::size_t b = 0; b < n; ++b)
      for (std::uint64_t oy = 0; oy < oh; ++oy)
        for (std::uint64_t ox = 0; ox < ow; ++ox) {
          bool first = true;
          for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
            for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
              const std::int64_t y = std::int64_t(oy * l.stride_h + ky) - pads.top;
              const std::int64_t x = std::int64_t(ox * l.stride_w + kx) - pads.left;
              if (y < 0 || y >= l.in.h || x < 0 || x >= l.in.w) continue;
              const std::uint16_t* v =
                  &in.bf[((b * l.in.h + static_cast<std::uint64_t>(y)) * l.in.w +
                          static_cast<std::uint64_t>(x)) *
                         c];
              float* __restrict mc = m.data();
              if (first)
                for (std::uint64_t ch = 0; ch < c; ++ch) mc[ch] = to_float(Bf16{v[ch]});
              else
                for (std::uint64_t ch = 0; ch < c; ++ch)
                  mc[ch] = numerics::max_float(mc[ch], to_float(Bf16{v[ch]}));
              first = false;
            }
          std::uint16_t* o = &out.bf[((b * oh + oy) * ow + ox) * c];
          for (std::uint64_t ch = 0; ch < c; ++ch) o[ch] = to_bf16(first ? 0.0f : m[ch]).bits;
        }
    return;
  }
  for (std::size_t b = 0; b < n; ++b)
    for (std::uint64_t oy = 0; oy < oh; ++oy)
      for (std::uint64_t ox = 0; ox < ow; ++ox)
        for (std::uint64_t ch = 0; ch < c; ++ch) {
          std::int32_t isum = 0, imax = -128, window = 0;
          float fsum = 0.0f, fmax = 0.0f;
          bool first = true;
          for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
            for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
              const std::int64_t y = std::int64_t(oy * l.stride_h + ky) - pads.top;
              const std::int64_t x = std::int64_t(ox * l.stride_w + kx) - pads.left;
              if (y < 0 || y >= l.in.h || x < 0 || x >= l.in.w) continue;
              ++window;
              const std::size_t src = ((b * l.in.h + static_cast<std::uint64_t>(y)) * l.in.w +
                                       static_cast<std::uint64_t>(x)) *
                                          c +
                                      ch;
              if (in.type == DType::Int8) {
                isum += in.i8[src];
                imax = std::max<std::int32_t>(imax, in.i8[src]);
              } else {
                const float v = value_at(in, src);
                fsum += v;
                fmax = first ? v : numerics::max_float(fmax, v);
              }
              first = false;
            }
          const std::size_t o = ((b * oh + oy) * ow + ox) * c + ch;
          if (in.type == DType::Int8)
            out.i8[o] = avg ? numerics::avg_int8(isum, window) : static_cast<std::int8_t>(imax);
          else
            out.bf[o] = avg ? numerics::avg_bf16(fsum, window).bits : to_bf16(fmax).bits;
        }
}

}  // namespace

// One operation on n images in the chip's arithmetic.
struct ChipArgs {
  const QuantizedModel& q;
  std::size_t i;
  const Op& l;
  const QuantizedLayer& ql;
  const std::vector<const ChipTensor*>& in;  // its operands' tensors, in order
  ChipTensor& out;
  std::size_t n;
  std::size_t first;  // the first image's index in the whole run (for messages)
  Kernels kernels;
};

namespace {

void run_conv(const ChipArgs& a) {
  weighted_layer(a.q, a.l, a.ql, a.q.conv_input(a.i), *a.in[0], a.out, a.n, a.kernels);
}
void run_depthwise(const ChipArgs& a) {
  depthwise_layer(a.q, a.l, a.ql, a.q.conv_input(a.i), *a.in[0], a.out, a.n);
}
void run_dense(const ChipArgs& a) {
  weighted_layer(a.q, a.l, a.ql, ConvInput{}, *a.in[0], a.out, a.n, a.kernels);
}
void run_pool(const ChipArgs& a) { pool_layer(a.l, *a.in[0], a.out, a.n, a.kernels); }

// A pooling whose window is the whole image.
void run_global_pool(const ChipArgs& a) {
  Op g = a.l;
  g.kind = a.l.kind == OpKind::GlobalMaxPooling2D ? OpKind::MaxPooling2D : OpKind::AveragePooling2D;
  g.kernel_h = a.l.in.h, g.kernel_w = a.l.in.w, g.stride_h = 1, g.stride_w = 1;
  pool_layer(g, *a.in[0], a.out, a.n, a.kernels);
}

// A standalone ReLU: the chip's elementwise max(x, +0).
void run_relu(const ChipArgs& a) {
  a.out = *a.in[0];
  for (auto& v : a.out.i8) v = numerics::relu(v);
  for (auto& v : a.out.bf) v = numerics::max_bf16(Bf16{v}, Bf16{0}).bits;
}

// Zeros, then each row copied as the chip copies it: max(x, x).
void run_zero_padding(const ChipArgs& a) {
  const Op& l = a.l;
  const ChipTensor& in = *a.in[0];
  a.out.type = in.type;
  resize(a.out, a.n * l.out.size());
  const std::size_t row = std::size_t{l.in.w} * l.in.c;
  for (std::size_t b = 0; b < a.n; ++b)
    for (std::uint32_t y = 0; y < l.in.h; ++y) {
      const std::size_t s = (b * l.in.h + y) * row;
      const std::size_t d =
          ((b * l.out.h + y + l.pad_top) * l.out.w + l.pad_left) * std::size_t{l.in.c};
      for (std::size_t k = 0; k < row; ++k) {
        if (a.out.type == DType::Int8)
          a.out.i8[d + k] = std::max(in.i8[s + k], in.i8[s + k]);
        else
          a.out.bf[d + k] = numerics::max_bf16(Bf16{in.bf[s + k]}, Bf16{in.bf[s + k]}).bits;
      }
    }
}

// The chip's eltwise add, operand after operand (int8: equal scales, saturating).
void run_add(const ChipArgs& a) {
  a.out = *a.in[0];
  for (std::size_t k = 1; k < a.in.size(); ++k) {
    const ChipTensor& o = *a.in[k];
    for (std::size_t e = 0; e < a.out.i8.size(); ++e)
      a.out.i8[e] = numerics::add_int8(a.out.i8[e], o.i8[e]);
    for (std::size_t e = 0; e < a.out.bf.size(); ++e)
      a.out.bf[e] = numerics::add_bf16(Bf16{a.out.bf[e]}, Bf16{o.bf[e]}).bits;
  }
}

// One image's values for each image.
void run_constant(const ChipArgs& a) {
  const std::size_t per = a.l.out.size();
  a.out.type = a.q.act_type;
  resize(a.out, a.n * per);
  for (std::size_t b = 0; b < a.n; ++b) {
    if (a.q.act_type == DType::Int8)
      std::memcpy(a.out.i8.data() + b * per, a.ql.constant.data(), a.ql.constant.size());
    else
      std::memcpy(a.out.bf.data() + b * per, a.ql.constant.data(), a.ql.constant.size());
  }
}

// Each token id's row of the table (in the chip's encoding), step after step; an id outside the
// table stops the run, as the chip's gather does.
void run_embedding(const ChipArgs& a) {
  const Op& l = a.l;
  const ChipTensor& ids = *a.in[0];
  const std::size_t steps = l.in.c, d = l.filters;
  a.out.type = a.q.act_type;
  resize(a.out, a.n * steps * d);
  for (std::size_t k = 0; k < a.n * steps; ++k) {
    const std::int32_t id = ids.i32[k];
    if (id < 0 || static_cast<std::uint32_t>(id) >= l.input_dim)
      throw InputError(
          fmt::format("{}: layer {} (Embedding): token id {} of sample {} is outside "
                      "its table of {} rows",
                      a.q.graph.file, l.name, id, a.first + k / steps, l.input_dim));
    const std::size_t row = static_cast<std::size_t>(id) * d;
    if (a.q.act_type == DType::Int8)
      std::copy_n(a.ql.kernel_i8.begin() + static_cast<std::ptrdiff_t>(row), d,
                  a.out.i8.begin() + static_cast<std::ptrdiff_t>(k * d));
    else
      std::copy_n(a.ql.kernel_bf16.begin() + static_cast<std::ptrdiff_t>(row), d,
                  a.out.bf.begin() + static_cast<std::ptrdiff_t>(k * d));
  }
}

// The vector unit's map: x = the input as a real number (int8: q * its scale), y = f(x * a + b;
// alpha) with the channel's record, written in the output's encoding (int8 on its own scale).
void run_map(const ChipArgs& a) {
  const ChipTensor& in = *a.in[0];
  const QuantizedLayer& ql = a.ql;
  const float in_scale = a.q.scale_of(a.l.inputs[0]);
  const std::size_t count = a.n * a.l.out.size(), channels = ql.map_a.size();
  const Act f = a.l.kind == OpKind::Activation ? a.l.activation : Act::Linear;
  const bool prelu = a.l.kind == OpKind::PReLU;
  a.out.type = ql.out_type;
  resize(a.out, count);
  for (std::size_t e = 0; e < count; ++e) {
    const std::size_t c = e % channels;
    const float x =
        in.type == DType::Int8 ? numerics::dequantize_int8(in.i8[e], in_scale) : value_at(in, e);
    const float v = numerics::affine(x, ql.map_a[c], ql.map_b[c]);
    const float y =
        prelu ? numerics::leaky_relu(v, ql.map_alpha[c]) : activate(f, ql.map_alpha[c], v);
    if (a.out.type == DType::Int8)
      a.out.i8[e] = numerics::quantize_int8(y, ql.out_scale);
    else if (a.out.type == DType::Bf16)
      a.out.bf[e] = to_bf16(y).bits;
    else
      a.out.f32[e] = y;
  }
}

// A standalone ReLU runs as the chip's eltwise max with zeros; every other activation maps.
void run_activation(const ChipArgs& a) {
  if (a.l.activation == Act::Relu) return run_relu(a);
  run_map(a);
}

// Elementwise operand after operand: int8 Subtract on the operands' shared scale, saturating;
// int8 Multiply requantizes each product onto the output's scale (the running product is on it
// after the first step); bf16 computes in fp32 and rounds.
void run_subtract(const ChipArgs& a) {
  a.out = *a.in[0];
  const ChipTensor& o = *a.in[1];
  for (std::size_t e = 0; e < a.out.i8.size(); ++e)
    a.out.i8[e] = numerics::sub_int8(a.out.i8[e], o.i8[e]);
  for (std::size_t e = 0; e < a.out.bf.size(); ++e)
    a.out.bf[e] = numerics::sub_bf16(Bf16{a.out.bf[e]}, Bf16{o.bf[e]}).bits;
}

void run_multiply(const ChipArgs& a) {
  a.out = *a.in[0];
  for (std::size_t k = 1; k < a.in.size(); ++k) {
    const ChipTensor& o = *a.in[k];
    for (std::size_t e = 0; e < a.out.i8.size(); ++e)
      a.out.i8[e] = numerics::mul_int8_requant(a.out.i8[e], o.i8[e], a.ql.multiplier[k - 1],
                                               a.ql.shift[k - 1]);
    for (std::size_t e = 0; e < a.out.bf.size(); ++e)
      a.out.bf[e] = numerics::mul_bf16(Bf16{a.out.bf[e]}, Bf16{o.bf[e]}).bits;
  }
}

// Each pixel's channels: input 0's, then input 1's, ... (one scale for all on int8).
void run_concatenate(const ChipArgs& a) {
  const std::size_t pixels = a.n * a.l.out.h * a.l.out.w, cout = a.l.out.c;
  a.out.type = a.in[0]->type;
  resize(a.out, pixels * cout);
  std::size_t at = 0;
  for (std::size_t k = 0; k < a.in.size(); ++k) {
    const std::size_t p = a.l.inputs[k];
    const std::size_t ck = (p == kGraphInput ? a.q.graph.input : a.q.graph.ops[p].out).c;
    for (std::size_t px = 0; px < pixels; ++px)
      for (std::size_t c = 0; c < ck; ++c) {
        if (a.out.type == DType::Int8)
          a.out.i8[px * cout + at + c] = a.in[k]->i8[px * ck + c];
        else
          a.out.bf[px * cout + at + c] = a.in[k]->bf[px * ck + c];
      }
    at += ck;
  }
}

// One column block of the MXU's product of `rows` input rows (each K elements at `x` + r * stride)
// and a K x N kernel, into fp32 per column as Activate gives it: int8 sums exactly, then
// float(acc + bias) * scale; bf16 sums K in tiles of tile_rows from +0 in row order, adds the
// tiles into the accumulator, then (acc + bias) * scale.
void matmul_to_fp32(const QuantizedModel& q, const ChipTensor& in, std::size_t first,
                    std::size_t stride, std::size_t rows, std::uint32_t K, std::uint32_t N,
                    const std::vector<std::int8_t>& w8, const std::vector<std::uint16_t>& wbf,
                    const std::vector<std::int32_t>* bias_i32, const std::vector<float>* bias_f32,
                    const std::vector<float>& scale, std::vector<float>& out) {
  out.assign(rows * N, 0.0f);
  // Row-major kernels, columns independent: the loops run over a row of the kernel at a time, so
  // each column keeps its own order of sums.
  std::vector<std::uint32_t> acc_u(N);
  std::vector<float> acc_f(N), psum(N);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t x0 = first + r * stride;
    float* o = &out[r * N];
    if (q.act_type == DType::Int8) {
      std::fill(acc_u.begin(), acc_u.end(), 0u);  // wraps like the int32 accumulator
      for (std::uint32_t k = 0; k < K; ++k) {
        const std::int32_t xk = in.i8[x0 + k];
        if (xk == 0) continue;
        const std::int8_t* wk = &w8[std::size_t{k} * N];
        for (std::uint32_t c = 0; c < N; ++c) acc_u[c] += static_cast<std::uint32_t>(xk * wk[c]);
      }
      for (std::uint32_t c = 0; c < N; ++c)
        o[c] = numerics::scale_int(static_cast<std::int32_t>(acc_u[c]),
                                   bias_i32 ? (*bias_i32)[c] : 0, scale[c]);
      continue;
    }
    for (std::uint32_t k0 = 0; k0 < K; k0 += q.tile_rows) {
      std::fill(psum.begin(), psum.end(), 0.0f);
      for (std::uint32_t k = k0; k < std::min<std::uint32_t>(K, k0 + q.tile_rows); ++k) {
        const float xv = value_at(in, x0 + k);
        if (xv == 0.0f) continue;  // adds +-0 to a partial sum that is never -0
        const std::uint16_t* wk = &wbf[std::size_t{k} * N];
        for (std::uint32_t c = 0; c < N; ++c) psum[c] += xv * to_float(Bf16{wk[c]});
      }
      for (std::uint32_t c = 0; c < N; ++c) acc_f[c] = k0 == 0 ? psum[c] : acc_f[c] + psum[c];
    }
    for (std::uint32_t c = 0; c < N; ++c)
      o[c] = numerics::scale_float(acc_f[c], bias_f32 ? (*bias_f32)[c] : 0.0f, scale[c]);
  }
}

// The LSTM as the chip steps it (docs/compiler.md, "LSTM"): per step t, zx = x_t W + b and
// (from the second step) zh = h U on the MXU, each activated to fp32; z = zx + zh; the gates
// i, f, o = rec(z), g = act(z) by map; c = i * g at the first step, else c = f * c + i * g (the
// product i * g first); h = o * act(c); h quantized to the chip's type by map, the next step's
// MXU input and the output.
void run_lstm(const ChipArgs& a) {
  const Op& l = a.l;
  const QuantizedLayer& ql = a.ql;
  const ChipTensor& x = *a.in[0];
  const std::uint32_t T = l.in.w, F = l.in.c, U = l.filters, G = 4 * U;
  const std::size_t n = a.n;
  a.out.type = ql.out_type;
  resize(a.out, n * l.out.size());
  ChipTensor h;  // the quantized h of the previous step, n x U
  h.type = ql.out_type;
  resize(h, n * U);
  std::vector<float> zx, zh, c(n * U, 0.0f);
  auto map = [&](Act f, float alpha, float v) {
    return activate(f, alpha, numerics::affine(v, 1.0f, 0.0f));
  };
  for (std::uint32_t t = 0; t < T; ++t) {
    matmul_to_fp32(a.q, x, std::size_t{t} * F, std::size_t{T} * F, n, F, G, ql.kernel_i8,
                   ql.kernel_bf16, &ql.bias_i32, &ql.bias_f32, ql.scale_f32, zx);
    if (t > 0) {
      matmul_to_fp32(a.q, h, 0, U, n, U, G, ql.recurrent_i8, ql.recurrent_bf16, nullptr, nullptr,
                     ql.recurrent_scale_f32, zh);
      for (std::size_t e = 0; e < zx.size(); ++e) zx[e] = zx[e] + zh[e];
    }
    for (std::size_t b = 0; b < n; ++b)
      for (std::uint32_t u = 0; u < U; ++u) {
        const float* z = &zx[b * G];
        const float ig = map(l.recurrent_activation, 0.0f, z[u]);
        const float fg = map(l.recurrent_activation, 0.0f, z[U + u]);
        const float gg = map(l.activation, l.alpha, z[2 * U + u]);
        const float og = map(l.recurrent_activation, 0.0f, z[3 * U + u]);
        float& cell = c[b * U + u];
        const float prod = ig * gg;
        cell = t == 0 ? prod : fg * cell + prod;
        const float hv = og * map(l.activation, l.alpha, cell);
        const float hm = numerics::affine(hv, 1.0f, 0.0f);
        const std::size_t at = b * U + u;
        if (h.type == DType::Int8)
          h.i8[at] = numerics::quantize_int8(hm, ql.out_scale);
        else
          h.bf[at] = to_bf16(hm).bits;
      }
    if (l.return_sequences || t + 1 == T) {
      const std::size_t steps = l.out.w;  // T or 1
      const std::size_t slot = l.return_sequences ? t : 0;
      for (std::size_t b = 0; b < n; ++b)
        for (std::uint32_t u = 0; u < U; ++u) {
          const std::size_t dst = (b * steps + slot) * U + u;
          if (h.type == DType::Int8)
            a.out.i8[dst] = h.i8[b * U + u];
          else
            a.out.bf[dst] = h.bf[b * U + u];
        }
    }
  }
}

void not_computed(const ChipArgs& a) {
  throw std::logic_error(
      fmt::format("{} ({}) reached the quantized reference; the rewrites fold "
                  "or remove it, or quantize refuses it",
                  a.l.name, name_of(a.l.kind)));
}

}  // namespace

ScaleRule own(const Op&) { return ScaleRule::Own; }
ScaleRule input(const Op&) { return ScaleRule::Input; }
ScaleRule joined(const Op&) { return ScaleRule::Joined; }
ScaleRule values(const Op&) { return ScaleRule::Values; }
// A ReLU keeps its input's scale (max(q, 0)); any other function moves the range.
ScaleRule activation_scale(const Op& l) {
  return l.activation == Act::Relu || l.activation == Act::Linear ? ScaleRule::Input
                                                                  : ScaleRule::Own;
}

const std::vector<ChipSemantics>& chip_semantics() {
  static const std::vector<ChipSemantics> table = {
      {OpKind::Conv2D, run_conv, own, weighted_params},
      {OpKind::Dense, run_dense, own, weighted_params},
      {OpKind::MaxPooling2D, run_pool, input},
      {OpKind::AveragePooling2D, run_pool, input},
      {OpKind::GlobalAveragePooling2D, run_global_pool, input},
      {OpKind::GlobalMaxPooling2D, run_global_pool, input},
      {OpKind::Activation, run_activation, activation_scale, activation_params},
      // Views pass their input's tensor on (QuantizedModel::tensor): nothing runs.
      {OpKind::Flatten, nullptr, input},
      {OpKind::Reshape, nullptr, input},
      // Folded into the layer before when it can be (rewrite.h); otherwise a per-channel map.
      {OpKind::BatchNormalization, run_map, own, map_params},
      {OpKind::ZeroPadding2D, run_zero_padding, input},
      {OpKind::Add, run_add, joined},
      {OpKind::Dropout, not_computed, input},
      {OpKind::Constant, run_constant, values, constant_params},
      {OpKind::DepthwiseConv2D, run_depthwise, own, weighted_params},
      {OpKind::SeparableConv2D, not_computed, own},
      {OpKind::Concatenate, run_concatenate, joined},
      {OpKind::Multiply, run_multiply, own, multiply_params},
      {OpKind::Subtract, run_subtract, joined},
      {OpKind::PReLU, run_map, own, map_params},
      {OpKind::Embedding, run_embedding, values, embedding_params},
      {OpKind::LSTM, run_lstm, own, lstm_params},
  };
  return table;
}

std::size_t chunk_images(const QuantizedModel& q) {
  std::size_t largest = q.graph.input.size();
  for (const Op& l : q.graph.ops) largest = std::max<std::size_t>(largest, l.out.size());
  return std::clamp<std::size_t>(kChunkBytes / (4 * std::max<std::size_t>(largest, 1)), 1,
                                 kMaxChunkImages);
}

std::vector<float> forward_quantized(const QuantizedModel& q, const float* images, std::size_t n,
                                     Kernels kernels) {
  const Graph& m = q.graph;
  const std::size_t L = m.ops.size();
  // The whole input is encoded first: a bad token id is reported with its sample's index.
  const auto enc = encode_input(q, images, n);
  const DType input_type = q.input_type();
  const std::size_t in_bytes = m.input.size() * size_of(input_type);

  // Tensors are dropped after their last reader, so a deep network holds only what is live.
  const std::size_t out_tensor = L == 0 ? kGraphInput : q.tensor[L - 1];
  std::vector<std::size_t> last_read(L, 0);
  for (std::size_t i = 0; i < L; ++i)
    if (q.computes(i))
      for (std::size_t p : m.ops[i].inputs)
        if (const std::size_t t = q.tensor_of(p); t != kGraphInput) last_read[t] = i;
  const std::size_t k_out = m.output().size();
  std::vector<float> out(n * k_out);
  const float scale = out_tensor == kGraphInput ? q.input_scale : q.layers[out_tensor].out_scale;
  std::optional<fast::SingleThread> one_thread;
  if (kernels == Kernels::Fast) one_thread.emplace();

  // Images are independent: each chunk runs the whole network, and only its tensors are live.
  const std::size_t chunk = chunk_images(q);
  std::vector<const ChipTensor*> in;
  for (std::size_t first = 0; first < n; first += chunk) {
    const std::size_t count = std::min(chunk, n - first);
    ChipTensor input;
    input.type = input_type;
    resize(input, count * m.input.size());
    const std::uint8_t* src = enc.data() + first * in_bytes;
    if (input.type == DType::Int32)
      std::memcpy(input.i32.data(), src, count * in_bytes);
    else if (input.type == DType::Int8)
      std::memcpy(input.i8.data(), src, count * in_bytes);
    else
      std::memcpy(input.bf.data(), src, count * in_bytes);
    std::vector<ChipTensor> t(L);
    auto get = [&](std::size_t k) -> const ChipTensor& { return k == kGraphInput ? input : t[k]; };
    for (std::size_t i = 0; i < L; ++i) {
      if (!q.computes(i)) continue;
      const Op& l = m.ops[i];
      in.clear();
      for (std::size_t p : l.inputs) in.push_back(&get(q.tensor_of(p)));
      ir::entry_for(chip_semantics(), l.kind, "chip semantics")
          .run(ChipArgs{q, i, l, q.layers[i], in, t[i], count, first, kernels});
      for (std::size_t k = 0; k < i; ++k)
        if (q.computes(k) && last_read[k] == i && k != out_tensor) t[k] = ChipTensor{};
    }
    const ChipTensor& cur = get(out_tensor);
    float* o = out.data() + first * k_out;
    for (std::size_t e = 0; e < count * k_out; ++e)
      o[e] = cur.type == DType::Int8 ? static_cast<float>(cur.i8[e]) * scale : value_at(cur, e);
  }
  return out;
}

}  // namespace tpu::nn
