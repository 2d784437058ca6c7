#include "sw/nn/quantized.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "hw/common/error.h"
#include "numerics/activation.h"
#include "numerics/bf16.h"
#include "numerics/elementwise.h"
#include "numerics/fixed_point.h"
#include "sw/ir/ops.h"
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

std::int8_t quantize_value(float x, float scale) {
  const long q = std::lround(x / scale);
  return static_cast<std::int8_t>(std::clamp<long>(q, -127, 127));
}

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
    const ChipSemantics& chip = ir::entry_for(chip_semantics(), l.kind, "chip semantics");
    if (chip.unsupported) refuse(l, chip.unsupported);
    if (l.kind == OpKind::Activation && !(l.activation == Act::Relu || l.activation == Act::Linear))
      throw InputError(
          fmt::format("{}: layer {} ({} {}): the chip applies this activation only "
                      "fused into the Conv2D or Dense before it",
                      m.file, l.name, name_of(l.kind), name_of(l.activation)));
    if ((l.kind == OpKind::MaxPooling2D || l.kind == OpKind::AveragePooling2D) &&
        l.padding != Padding::Valid)
      throw InputError(
          fmt::format("{}: layer {} ({}): the vector unit pools with padding "
                      "\"valid\" only",
                      m.file, l.name, name_of(l.kind)));
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
    const ScaleRule rule = ir::entry_for(chip_semantics(), l.kind, "chip semantics").scale;
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
    if (ir::entry_for(chip_semantics(), l.kind, "chip semantics").scale == ScaleRule::Values) {
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
    } else if (l.kind == OpKind::Add) {
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
    if (l.kind == OpKind::Constant) {
      const auto v = constant_values(l);
      for (float x : v) {
        if (input_type == DType::Int8) {
          ql.constant.push_back(static_cast<std::uint8_t>(quantize_value(x, ql.out_scale)));
        } else {
          const std::uint16_t b = to_bf16(x).bits;
          ql.constant.push_back(static_cast<std::uint8_t>(b & 0xff));
          ql.constant.push_back(static_cast<std::uint8_t>(b >> 8));
        }
      }
    }
    if (l.kind == OpKind::Embedding) {
      // The table on the output's scale (its own: ScaleRule::Values), or rounded to bf16.
      for (float x : w.layers[i].kernel) {
        if (input_type == DType::Int8)
          ql.kernel_i8.push_back(quantize_value(x, ql.out_scale));
        else
          ql.kernel_bf16.push_back(to_bf16(x).bits);
      }
    }
    if (!l.has_weights()) continue;
    const std::uint32_t cout = l.out.c;
    if (l.activation == Act::Softmax && !out_float)
      throw InputError(
          fmt::format("{}: layer {}: softmax must end the network (it needs an fp32 "
                      "output)",
                      m.file, l.name));
    if (input_type == DType::Int8 && !out_float &&
        !(l.activation == Act::Linear || l.activation == Act::Relu || l.activation == Act::Relu6))
      throw InputError(
          fmt::format("{}: layer {}: activation {} on an int8 chip needs an fp32 "
                      "output; only the last layer gives one",
                      m.file, l.name, name_of(l.activation)));
    // An int8 ReLU6 is the ReLU when 127 steps of the output scale stay within 6: the clamp at 6
    // then never bites, and Activate's integer outputs have no other (docs/quantization.md).
    if (input_type == DType::Int8 && !out_float && l.activation == Act::Relu6 &&
        ql.out_scale * kInt8Max > 6.0f)
      refuse(l, fmt::format("its ReLU6 output shares an int8 scale of {} (127 steps = {}) with "
                            "wider tensors through an Add; the chip's int8 ReLU6 needs at most "
                            "6 / 127",
                            ql.out_scale, ql.out_scale * kInt8Max));
    const std::vector<float>& kernel = w.layers[i].kernel;
    std::vector<float> bias = w.layers[i].bias;
    bias.resize(cout, 0.0f);
    const std::size_t k_total = kernel.size() / cout;
    if (input_type == DType::Bf16) {
      ql.kernel_bf16.resize(kernel.size());
      for (std::size_t k = 0; k < ql.kernel_bf16.size(); ++k)
        ql.kernel_bf16[k] = to_bf16(kernel[k]).bits;
      ql.bias_f32 = bias;
      ql.scale_f32.assign(cout, 1.0f);
      continue;
    }
    const float in_scale = scale_of_tensor(q.tensor_of(l.inputs[0]));
    ql.weight_scale.assign(cout, 0.0f);
    for (std::size_t k = 0; k < k_total; ++k)
      for (std::uint32_t c = 0; c < cout; ++c)
        ql.weight_scale[c] = std::max(ql.weight_scale[c], std::fabs(kernel[k * cout + c]));
    for (auto& s : ql.weight_scale) s = s > 0 ? s / kInt8Max : 1.0f;
    ql.kernel_i8.resize(kernel.size());
    for (std::size_t k = 0; k < k_total; ++k)
      for (std::uint32_t c = 0; c < cout; ++c)
        ql.kernel_i8[k * cout + c] = quantize_value(kernel[k * cout + c], ql.weight_scale[c]);
    ql.bias_i32.assign(cout, 0);
    for (std::uint32_t c = 0; c < cout; ++c) {
      const double b = std::round(double{bias[c]} / (double{in_scale} * ql.weight_scale[c]));
      ql.bias_i32[c] =
          static_cast<std::int32_t>(std::clamp<double>(b, -2147483647.0, 2147483647.0));
    }
    if (out_float) {
      ql.scale_f32.resize(cout);
      for (std::uint32_t c = 0; c < cout; ++c) ql.scale_f32[c] = in_scale * ql.weight_scale[c];
      continue;
    }
    ql.multiplier.resize(cout);
    ql.shift.resize(cout);
    for (std::uint32_t c = 0; c < cout; ++c) {
      numerics::QuantizedMultiplier qm;
      try {
        qm = numerics::quantize_multiplier(double{in_scale} * ql.weight_scale[c] / ql.out_scale);
      } catch (const std::domain_error& e) {
        refuse(l, fmt::format("output channel {}: {}", c, e.what()));
      }
      ql.multiplier[c] = qm.multiplier_q31;
      ql.shift[c] = qm.shift;
    }
  }
  return q;
}

std::vector<std::uint8_t> encode_input(const QuantizedModel& q, const float* images,
                                       std::size_t n) {
  const std::size_t count = n * q.graph.input.size();
  std::vector<std::uint8_t> out(count * size_of(q.input_type()));
  for (std::size_t i = 0; i < count; ++i) {
    if (q.input_type() == DType::Int32) {
      // Token ids, little-endian int32; one outside every table is the user's input to fix.
      if (!(images[i] >= 0.0f && images[i] < static_cast<float>(ir::kMaxEmbeddingRows)))
        throw InputError(fmt::format("{}: token id {} of sample {} is not an id (0 to {})",
                                     q.graph.file, images[i], i / q.graph.input.size(),
                                     ir::kMaxEmbeddingRows - 1));
      const auto id = static_cast<std::uint32_t>(images[i]);
      for (int k = 0; k < 4; ++k) out[4 * i + k] = static_cast<std::uint8_t>(id >> (8 * k));
    } else if (q.act_type == DType::Int8) {
      out[i] = static_cast<std::uint8_t>(quantize_value(images[i], q.input_scale));
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
                    const std::vector<std::int32_t>& acc_i, const std::vector<float>& acc_f,
                    std::vector<float>& row, ChipTensor& out, std::size_t o) {
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

// Conv2D and Dense in the chip's arithmetic. A Dense layer is a 1x1 "convolution" of a 1x1
// image whose channels are the flattened input: the same loop covers both.
void weighted_layer(const QuantizedModel& q, const Op& l, const QuantizedLayer& ql,
                    const ConvInput& geometry, const ChipTensor& in, ChipTensor& out,
                    std::size_t n) {
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
  // int8 x int8 products fit int16 (|q| <= 127 on both sides); widened once per layer so the
  // column loop vectorises. Sums wrap like the chip's int32 accumulators (unsigned adds).
  std::vector<std::int16_t> w16(ql.kernel_i8.begin(), ql.kernel_i8.end());
  std::vector<float> wf(ql.kernel_bf16.size());  // bf16 widened to fp32 once (exact)
  for (std::size_t k = 0; k < wf.size(); ++k) wf[k] = to_float(Bf16{ql.kernel_bf16[k]});
  std::vector<std::uint32_t> acc_u(oc);
  std::vector<std::int32_t> acc_i(oc);
  std::vector<float> acc_f(oc), psum(oc), row(oc);
  std::vector<float> x(K);
  std::vector<std::int32_t> xi(K);
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
          std::fill(acc_u.begin(), acc_u.end(), 0u);
          for (std::uint64_t k = 0; k < K; ++k) {
            if (xi[k] == 0) continue;
            const auto xk = static_cast<std::int16_t>(xi[k]);
            // Distinct buffers: __restrict lets the column loops vectorise (columns are
            // independent, so each column's order is unchanged).
            const std::int16_t* __restrict wk = &w16[k * oc];
            std::uint32_t* __restrict au = acc_u.data();
            for (std::uint32_t c = 0; c < oc; ++c)
              au[c] += static_cast<std::uint32_t>(
                  static_cast<std::int32_t>(static_cast<std::int16_t>(xk * wk[c])));
          }
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
        activate_pixel(q, l, ql, acc_i, acc_f, row, out, ((b * oh + oy) * ow + ox) * oc);
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
        activate_pixel(q, l, ql, acc_i, acc_f, row, out, ((b * oh + oy) * ow + ox) * oc);
      }
}

void pool_layer(const Op& l, const ChipTensor& in, ChipTensor& out, std::size_t n) {
  out.type = in.type;
  const std::uint64_t oh = l.out.h, ow = l.out.w, c = l.in.c;
  resize(out, n * oh * ow * c);
  const bool avg = l.kind == OpKind::AveragePooling2D;
  const auto window = static_cast<std::int32_t>(l.kernel_h * l.kernel_w);
  for (std::size_t b = 0; b < n; ++b)
    for (std::uint64_t oy = 0; oy < oh; ++oy)
      for (std::uint64_t ox = 0; ox < ow; ++ox)
        for (std::uint64_t ch = 0; ch < c; ++ch) {
          std::int32_t isum = 0, imax = -128;
          float fsum = 0.0f, fmax = 0.0f;
          bool first = true;
          for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
            for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
              const std::size_t src =
                  ((b * l.in.h + oy * l.stride_h + ky) * l.in.w + ox * l.stride_w + kx) * c + ch;
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
};

namespace {

void run_conv(const ChipArgs& a) {
  weighted_layer(a.q, a.l, a.ql, a.q.conv_input(a.i), *a.in[0], a.out, a.n);
}
void run_depthwise(const ChipArgs& a) {
  depthwise_layer(a.q, a.l, a.ql, a.q.conv_input(a.i), *a.in[0], a.out, a.n);
}
void run_dense(const ChipArgs& a) {
  weighted_layer(a.q, a.l, a.ql, ConvInput{}, *a.in[0], a.out, a.n);
}
void run_pool(const ChipArgs& a) { pool_layer(a.l, *a.in[0], a.out, a.n); }

// A pooling whose window is the whole image.
void run_global_pool(const ChipArgs& a) {
  Op g = a.l;
  g.kind = a.l.kind == OpKind::GlobalMaxPooling2D ? OpKind::MaxPooling2D : OpKind::AveragePooling2D;
  g.kernel_h = a.l.in.h, g.kernel_w = a.l.in.w, g.stride_h = 1, g.stride_w = 1;
  pool_layer(g, *a.in[0], a.out, a.n);
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
                      a.q.graph.file, l.name, id, k / steps, l.input_dim));
    const std::size_t row = static_cast<std::size_t>(id) * d;
    if (a.q.act_type == DType::Int8)
      std::copy_n(a.ql.kernel_i8.begin() + static_cast<std::ptrdiff_t>(row), d,
                  a.out.i8.begin() + static_cast<std::ptrdiff_t>(k * d));
    else
      std::copy_n(a.ql.kernel_bf16.begin() + static_cast<std::ptrdiff_t>(row), d,
                  a.out.bf.begin() + static_cast<std::ptrdiff_t>(k * d));
  }
}

void not_computed(const ChipArgs& a) {
  throw std::logic_error(
      fmt::format("{} ({}) reached the quantized reference; the rewrites fold "
                  "or remove it, or quantize refuses it",
                  a.l.name, name_of(a.l.kind)));
}

}  // namespace

// Kinds the importers read and the float reference computes, whose lowering is not written yet.
constexpr const char* kNotYet = "tpusim does not lower this layer to the chips yet";

const std::vector<ChipSemantics>& chip_semantics() {
  static const std::vector<ChipSemantics> table = {
      {OpKind::Conv2D, run_conv, ScaleRule::Own},
      {OpKind::Dense, run_dense, ScaleRule::Own},
      {OpKind::MaxPooling2D, run_pool, ScaleRule::Input},
      {OpKind::AveragePooling2D, run_pool, ScaleRule::Input},
      {OpKind::GlobalAveragePooling2D, run_global_pool, ScaleRule::Input},
      {OpKind::GlobalMaxPooling2D, run_global_pool, ScaleRule::Input},
      {OpKind::Activation, run_relu, ScaleRule::Input},
      // Views pass their input's tensor on (QuantizedModel::tensor): nothing runs.
      {OpKind::Flatten, nullptr, ScaleRule::Input},
      {OpKind::Reshape, nullptr, ScaleRule::Input},
      {OpKind::BatchNormalization, not_computed, ScaleRule::Input},
      {OpKind::ZeroPadding2D, run_zero_padding, ScaleRule::Input},
      {OpKind::Add, run_add, ScaleRule::Joined},
      {OpKind::Dropout, not_computed, ScaleRule::Input},
      {OpKind::Constant, run_constant, ScaleRule::Values},
      {OpKind::DepthwiseConv2D, run_depthwise, ScaleRule::Own},
      {OpKind::SeparableConv2D, not_computed, ScaleRule::Own},
      {OpKind::Concatenate, nullptr, ScaleRule::Joined, kNotYet},
      {OpKind::Multiply, nullptr, ScaleRule::Own, kNotYet},
      {OpKind::Subtract, nullptr, ScaleRule::Joined, kNotYet},
      {OpKind::PReLU, nullptr, ScaleRule::Own, kNotYet},
      {OpKind::Embedding, run_embedding, ScaleRule::Values},
      {OpKind::LSTM, nullptr, ScaleRule::Own, kNotYet},
  };
  return table;
}

std::vector<float> forward_quantized(const QuantizedModel& q, const float* images, std::size_t n) {
  const Graph& m = q.graph;
  const std::size_t L = m.ops.size();
  ChipTensor input;
  input.type = q.act_type;
  input.type = q.input_type();
  const auto enc = encode_input(q, images, n);
  resize(input, n * m.input.size());
  if (input.type == DType::Int32)
    std::memcpy(input.i32.data(), enc.data(), enc.size());
  else if (input.type == DType::Int8)
    std::memcpy(input.i8.data(), enc.data(), enc.size());
  else
    std::memcpy(input.bf.data(), enc.data(), enc.size());

  // Tensors are dropped after their last reader, so a deep network holds only what is live.
  const std::size_t out_tensor = L == 0 ? kGraphInput : q.tensor[L - 1];
  std::vector<std::size_t> last_read(L, 0);
  for (std::size_t i = 0; i < L; ++i)
    if (q.computes(i))
      for (std::size_t p : m.ops[i].inputs)
        if (const std::size_t t = q.tensor_of(p); t != kGraphInput) last_read[t] = i;
  std::vector<ChipTensor> t(L);
  auto get = [&](std::size_t k) -> const ChipTensor& { return k == kGraphInput ? input : t[k]; };
  std::vector<const ChipTensor*> in;
  for (std::size_t i = 0; i < L; ++i) {
    if (!q.computes(i)) continue;
    const Op& l = m.ops[i];
    in.clear();
    for (std::size_t p : l.inputs) in.push_back(&get(q.tensor_of(p)));
    ir::entry_for(chip_semantics(), l.kind, "chip semantics")
        .run(ChipArgs{q, i, l, q.layers[i], in, t[i], n});
    for (std::size_t k = 0; k < i; ++k)
      if (q.computes(k) && last_read[k] == i && k != out_tensor) t[k] = ChipTensor{};
  }
  const ChipTensor& cur = get(out_tensor);
  const std::size_t count = n * m.output().size();
  std::vector<float> out(count);
  const float scale = out_tensor == kGraphInput ? q.input_scale : q.layers[out_tensor].out_scale;
  for (std::size_t i = 0; i < count; ++i)
    out[i] = cur.type == DType::Int8 ? static_cast<float>(cur.i8[i]) * scale : value_at(cur, i);
  return out;
}

}  // namespace tpu::nn
