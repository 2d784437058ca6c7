#include "sw/nn/quantized.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "hw/common/bf16.h"
#include "hw/common/error.h"
#include "hw/vector_unit/functions.h"
#include "sw/nn/reference.h"
#include "sw/nn/rewrite.h"

namespace tpu::nn {
using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;
namespace {

// int8 symmetric range: -127..127 (no -128), so negation never overflows.
constexpr float kInt8Max = 127.0f;

std::int8_t quantize_value(float x, float scale) {
  const long q = std::lround(x / scale);
  return static_cast<std::int8_t>(std::clamp<long>(q, -127, 127));
}

isa::ActFunc act_func(Act a) {
  switch (a) {
    case Act::Linear: return isa::ActFunc::None;
    case Act::Relu: return isa::ActFunc::Relu;
    case Act::Relu6: return isa::ActFunc::Relu6;
    case Act::Sigmoid: return isa::ActFunc::Sigmoid;
    case Act::Tanh: return isa::ActFunc::Tanh;
    case Act::Softmax: return isa::ActFunc::Softmax;
  }
  return isa::ActFunc::None;
}

bool monotonic(Act a) { return a == Act::Relu || a == Act::Relu6 || a == Act::Linear; }

// TensorFlow's SAME padding: the total pad split with the smaller half at the top/left.
std::uint32_t pad_before(std::uint32_t in, std::uint32_t out, std::uint32_t k, std::uint32_t s,
                         Padding p) {
  if (p == Padding::Valid) return 0;
  const std::int64_t total = std::int64_t{out - 1} * s + k - in;
  return static_cast<std::uint32_t>(std::max<std::int64_t>(total, 0) / 2);
}

// A tensor of n images in the chip's encoding of one type.
struct Tensor {
  DType type = DType::Int8;
  std::vector<std::int8_t> i8;
  std::vector<std::uint16_t> bf;
  std::vector<float> f32;
};

float value_at(const Tensor& t, std::size_t i) {
  switch (t.type) {
    case DType::Int8: return static_cast<float>(t.i8[i]);
    case DType::Bf16: return to_float(Bf16{t.bf[i]});
    default: return t.f32[i];
  }
}

void resize(Tensor& t, std::size_t n) {
  if (t.type == DType::Int8)
    t.i8.assign(n, 0);
  else if (t.type == DType::Bf16)
    t.bf.assign(n, 0);
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

ConvInput QuantizedModel::conv_input(std::size_t layer) const {
  const Op& l = model->ops[layer];
  ConvInput c;
  std::size_t p = l.inputs[0];
  std::uint32_t extra_top = 0, extra_left = 0;
  c.shape = l.in;
  if (p != kGraphInput && layers[p].folded_padding) {
    const Op& zp = model->ops[p];
    extra_top = zp.pad_top, extra_left = zp.pad_left;
    c.shape = zp.in;
    p = zp.inputs[0];
  }
  c.tensor = tensor_of(p);
  c.pad_top = extra_top + pad_before(l.in.h, l.out.h, l.kernel_h, l.stride_h, l.padding);
  c.pad_left = extra_left + pad_before(l.in.w, l.out.w, l.kernel_w, l.stride_w, l.padding);
  return c;
}

QuantizedModel quantize(const Graph& m, const Weights& w, DType input_type, std::uint32_t tile_rows,
                        const float* calibration, std::size_t n_cal) {
  if (input_type != DType::Int8 && input_type != DType::Bf16)
    throw InputError("quantize: the MXU input type must be int8 or bf16");
  QuantizedModel q;
  q.model = &m;
  q.act_type = input_type;
  q.tile_rows = tile_rows;
  const std::size_t L = m.ops.size();
  q.layers.resize(L);
  const auto readers = consumers(m);
  // Whether layer p's only reader is c (so an operation fused into p changes nothing else).
  auto only_reader = [&](std::size_t p, std::size_t c) {
    return p != kGraphInput && readers[p].size() == 1 && readers[p][0] == c;
  };
  auto refuse = [&](const Op& l, const std::string& why) {
    throw InputError(fmt::format("{}: layer {} ({}): {}", m.file, l.name, name_of(l.kind), why));
  };

  // 1. What the producing layer's Activate applies. BatchNormalization folds into the Conv2D or
  //    Dense before it; an Activation fuses into the weighted layer before it, also through
  //    folded normalisations, flattens and max pools (for monotonic functions only: max commutes
  //    with them, bit for bit, also after rounding).
  std::vector<std::size_t> value_layer(L);  // the float layer whose output a weighted layer's is
  std::vector<std::size_t> bn_of(L, L);     // the BatchNormalization folded into layer i
  for (std::size_t i = 0; i < L; ++i) {
    const Op& l = m.ops[i];
    value_layer[i] = i;
    if (l.has_weights()) q.layers[i].fused_activation = l.activation;
    if (l.kind == OpKind::BatchNormalization) {
      const std::size_t p = l.inputs[0];
      if (p == kGraphInput || !m.ops[p].has_weights() || !only_reader(p, i) ||
          q.layers[p].fused_activation != Act::Linear || bn_of[p] != L)
        refuse(l,
               "the chip applies a BatchNormalization only folded into the Conv2D or Dense "
               "(linear, read by nothing else) that produces its input");
      q.layers[i].fused_into_previous = true;
      bn_of[p] = i;
      value_layer[p] = i;
    }
    if (l.kind != OpKind::Activation || l.activation == Act::Linear) continue;
    std::size_t j = l.inputs[0], reader = i;
    bool through_pool = false;
    while (j != kGraphInput && only_reader(j, reader)) {
      const Op& k = m.ops[j];
      if (k.is_view() || q.layers[j].fused_into_previous || k.kind == OpKind::MaxPooling2D) {
        through_pool = through_pool || k.kind == OpKind::MaxPooling2D;
        reader = j;
        j = k.inputs[0];
        continue;
      }
      break;
    }
    if (j == kGraphInput || !only_reader(j, reader) || !m.ops[j].has_weights()) continue;
    QuantizedLayer& producer = q.layers[j];
    if (producer.fused_activation != Act::Linear) continue;
    if (through_pool && !monotonic(l.activation)) continue;
    producer.fused_activation = l.activation;
    q.layers[i].fused_into_previous = true;
  }
  for (std::size_t i = 0; i < L; ++i) {
    const Op& l = m.ops[i];
    if (l.kind != OpKind::ZeroPadding2D || readers[i].empty()) continue;
    q.layers[i].folded_padding = std::all_of(readers[i].begin(), readers[i].end(), [&](auto r) {
      return m.ops[r].kind == OpKind::Conv2D;
    });
  }
  q.tensor.resize(L);
  for (std::size_t i = 0; i < L; ++i) {
    const Op& l = m.ops[i];
    const QuantizedLayer& ql = q.layers[i];
    const bool passes_on = l.is_view() || ql.fused_into_previous || ql.folded_padding ||
                           (l.kind == OpKind::Activation && l.activation == Act::Linear);
    q.tensor[i] = passes_on ? q.tensor_of(l.inputs[0]) : i;
  }

  // 2. Output types: the last weighted layer gives fp32 when only layers that compute nothing
  //    follow it; every other tensor keeps the chip's activation type.
  std::size_t last_weighted = L;
  for (std::size_t i = 0; i < L; ++i)
    if (m.ops[i].has_weights()) last_weighted = i;
  bool final_float = last_weighted < L;
  for (std::size_t i = last_weighted + 1; i < L && final_float; ++i)
    final_float = q.tensor[i] == last_weighted;

  // 3. What the chip cannot run, named before anything is built.
  for (std::size_t i = 0; i < L; ++i) {
    const Op& l = m.ops[i];
    const QuantizedLayer& ql = q.layers[i];
    if (l.kind == OpKind::Activation && !ql.fused_into_previous &&
        !(l.activation == Act::Relu || l.activation == Act::Linear))
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

  // 4. int8 ranges: one float pass over the calibration images records each layer's range.
  std::vector<float> lo(L, 0.0f), hi(L, 0.0f);
  float in_range = 0.0f;
  if (input_type == DType::Int8) {
    const std::size_t n_use = std::min(n_cal, calibration_images(m));
    for (std::size_t i = 0; i < n_use * m.input.size(); ++i)
      in_range = std::max(in_range, std::fabs(calibration[i]));
    std::vector<bool> seen(L, false);
    forward_float(m, w, calibration, n_use, [&](std::size_t i, const float* v, std::size_t n) {
      if (n == 0) return;
      const auto [a, b] = std::minmax_element(v, v + n);
      lo[i] = seen[i] ? std::min(lo[i], *a) : *a;
      hi[i] = seen[i] ? std::max(hi[i], *b) : *b;
      seen[i] = true;
    });
  }
  auto scale_for = [](float range) { return range > 0 ? range / kInt8Max : 1.0f; };

  // 5. Scale classes (int8): a weighted layer's output and an Add's inputs and output; pooling,
  //    padding and standalone ReLU keep their input's scale. Source 0 is the model input.
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
    if (l.has_weights() || l.kind == OpKind::Constant) {
      source[i + 1] = i + 1;
    } else if (l.kind == OpKind::Add) {
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
  // largest range of their members, Add outputs included, so the sums do not saturate.
  std::vector<float> class_range(L + 1, 0.0f);
  std::vector<std::optional<float>> class_fixed(L + 1);
  std::vector<std::size_t> fixed_by(L + 1, L);
  class_fixed[sc.find(0)] = scale_for(in_range);
  for (std::size_t i = 0; i < L; ++i) {
    if (!q.computes(i) || input_type != DType::Int8) continue;
    const Op& l = m.ops[i];
    const std::size_t root = sc.find(source[i + 1]);
    if (l.kind == OpKind::Constant) {
      const auto v = constant_values(l);
      float r = 0.0f;
      for (float x : v) r = std::max(r, std::fabs(x));
      if (class_fixed[root] && *class_fixed[root] != scale_for(r))
        refuse(l,
               "an Add joins it with the model input or another constant, whose int8 scales "
               "differ");
      class_fixed[root] = scale_for(r);
      fixed_by[root] = i;
    } else if (l.has_weights() && !(final_float && i == last_weighted)) {
      const std::size_t v = value_layer[i];
      class_range[root] =
          std::max(class_range[root], range_of(lo[v], hi[v], q.layers[i].fused_activation));
    } else if (l.kind == OpKind::Add) {
      class_range[root] = std::max(class_range[root], range_of(lo[i], hi[i], Act::Linear));
    }
  }
  auto scale_of_tensor = [&](std::size_t tensor) {
    const std::size_t root = source_of(tensor);
    return class_fixed[root] ? *class_fixed[root] : scale_for(class_range[root]);
  };

  // 6. Parameters, layer by layer.
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
    if (!l.has_weights()) continue;
    const std::uint32_t cout = l.out.c;
    if (ql.fused_activation == Act::Softmax && !out_float)
      throw InputError(
          fmt::format("{}: layer {}: softmax must end the network (it needs an fp32 "
                      "output)",
                      m.file, l.name));
    if (input_type == DType::Int8 && !out_float &&
        !(ql.fused_activation == Act::Linear || ql.fused_activation == Act::Relu))
      throw InputError(
          fmt::format("{}: layer {}: activation {} on an int8 chip needs an fp32 "
                      "output; only the last layer gives one",
                      m.file, l.name, name_of(ql.fused_activation)));
    // The kernel and bias the chip uses: with a folded BatchNormalization, per output channel
    // w' = w * inv and b' = b * inv + (beta - mean * inv), inv = gamma / sqrt(var + epsilon).
    std::vector<float> kernel = w.layers[i].kernel;
    std::vector<float> bias = w.layers[i].bias;
    bias.resize(cout, 0.0f);
    if (bn_of[i] != L) {
      const Op& bn = m.ops[bn_of[i]];
      const LayerWeights& bw = w.layers[bn_of[i]];
      for (std::uint32_t c = 0; c < cout; ++c) {
        const float inv = bw.gamma[c] / std::sqrt(bw.moving_variance[c] + bn.epsilon);
        bias[c] = bias[c] * inv + (bw.beta[c] - bw.moving_mean[c] * inv);
        for (std::size_t k = c; k < kernel.size(); k += cout) kernel[k] *= inv;
      }
    }
    const std::size_t k_total = kernel.size() / cout;
    if (input_type == DType::Bf16) {
      ql.kernel_bf16.resize(kernel.size());
      for (std::size_t k = 0; k < ql.kernel_bf16.size(); ++k)
        ql.kernel_bf16[k] = to_bf16(kernel[k]).bits;
      ql.bias_f32 = bias;
      ql.scale_f32.assign(cout, 1.0f);
      continue;
    }
    const float in_scale = scale_of_tensor(l.kind == OpKind::Conv2D ? q.conv_input(i).tensor
                                                                    : q.tensor_of(l.inputs[0]));
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
      const auto qm = quantize_multiplier(double{in_scale} * ql.weight_scale[c] / ql.out_scale);
      ql.multiplier[c] = qm.multiplier_q31;
      ql.shift[c] = qm.shift;
    }
  }
  return q;
}

std::vector<std::uint8_t> encode_input(const QuantizedModel& q, const float* images,
                                       std::size_t n) {
  const std::size_t count = n * q.model->input.size();
  std::vector<std::uint8_t> out(count * size_of(q.act_type));
  for (std::size_t i = 0; i < count; ++i) {
    if (q.act_type == DType::Int8) {
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

// Conv2D and Dense in the chip's arithmetic. A Dense layer is a 1x1 "convolution" of a 1x1
// image whose channels are the flattened input: the same loop covers both.
void weighted_layer(const QuantizedModel& q, const Op& l, const QuantizedLayer& ql,
                    const ConvInput& geometry, const Tensor& in, Tensor& out, std::size_t n) {
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
            const std::int64_t y = std::int64_t{oy} * sh + ky - pt;
            const std::int64_t xx = std::int64_t{ox} * sw + kx - pl;
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
        const std::size_t o = ((b * oh + oy) * ow + ox) * oc;
        const isa::ActFunc f = act_func(ql.fused_activation);
        if (ql.out_type == DType::Int8) {
          for (std::uint32_t c = 0; c < oc; ++c) {
            std::int8_t v =
                requantize(add_bias(acc_i[c], ql.bias_i32[c]), ql.multiplier[c], ql.shift[c]);
            if (f == isa::ActFunc::Relu) v = relu(v);
            out.i8[o + c] = v;
          }
          continue;
        }
        for (std::uint32_t c = 0; c < oc; ++c)
          row[c] = q.act_type == DType::Int8
                       ? scale_int(acc_i[c], ql.bias_i32[c], ql.scale_f32[c])
                       : scale_float(acc_f[c], ql.bias_f32[c], ql.scale_f32[c]);
        if (f == isa::ActFunc::Softmax)
          softmax_row(row.data(), row.data(), oc);
        else
          for (auto& v : row) v = activate_float(f, v);
        for (std::uint32_t c = 0; c < oc; ++c) {
          if (ql.out_type == DType::Bf16)
            out.bf[o + c] = to_bf16(row[c]).bits;
          else
            out.f32[o + c] = row[c];
        }
      }
}

void pool_layer(const Op& l, const Tensor& in, Tensor& out, std::size_t n) {
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
                fmax = first ? v : max_float(fmax, v);
              }
              first = false;
            }
          const std::size_t o = ((b * oh + oy) * ow + ox) * c + ch;
          if (in.type == DType::Int8)
            out.i8[o] = avg ? avg_int8(isum, window) : static_cast<std::int8_t>(imax);
          else
            out.bf[o] = avg ? avg_bf16(fsum, window).bits : to_bf16(fmax).bits;
        }
}

}  // namespace

std::vector<float> forward_quantized(const QuantizedModel& q, const float* images, std::size_t n) {
  const Graph& m = *q.model;
  const std::size_t L = m.ops.size();
  Tensor input;
  input.type = q.act_type;
  const auto enc = encode_input(q, images, n);
  resize(input, n * m.input.size());
  if (q.act_type == DType::Int8)
    std::memcpy(input.i8.data(), enc.data(), enc.size());
  else
    std::memcpy(input.bf.data(), enc.data(), enc.size());

  // Tensors are dropped after their last reader, so a deep network holds only what is live.
  const std::size_t out_tensor = L == 0 ? kGraphInput : q.tensor[L - 1];
  std::vector<std::size_t> last_read(L, 0);
  for (std::size_t i = 0; i < L; ++i)
    if (q.computes(i))
      for (std::size_t p : m.ops[i].inputs) {
        const std::size_t t =
            m.ops[i].kind == OpKind::Conv2D ? q.conv_input(i).tensor : q.tensor_of(p);
        if (t != kGraphInput) last_read[t] = i;
      }
  std::vector<Tensor> t(L);
  auto get = [&](std::size_t k) -> const Tensor& { return k == kGraphInput ? input : t[k]; };
  for (std::size_t i = 0; i < L; ++i) {
    if (!q.computes(i)) continue;
    const Op& l = m.ops[i];
    const QuantizedLayer& ql = q.layers[i];
    Tensor& next = t[i];
    const Tensor& in0 = get(q.tensor_of(l.inputs.empty() ? kGraphInput : l.inputs[0]));
    switch (l.kind) {
      case OpKind::Conv2D: {
        const ConvInput ci = q.conv_input(i);
        weighted_layer(q, l, ql, ci, get(ci.tensor), next, n);
        break;
      }
      case OpKind::Dense: weighted_layer(q, l, ql, ConvInput{}, in0, next, n); break;
      case OpKind::MaxPooling2D:
      case OpKind::AveragePooling2D: pool_layer(l, in0, next, n); break;
      case OpKind::GlobalAveragePooling2D:
      case OpKind::GlobalMaxPooling2D: {
        // A pooling whose window is the whole image.
        Op g = l;
        g.kind =
            l.kind == OpKind::GlobalMaxPooling2D ? OpKind::MaxPooling2D : OpKind::AveragePooling2D;
        g.kernel_h = l.in.h, g.kernel_w = l.in.w, g.stride_h = 1, g.stride_w = 1;
        pool_layer(g, in0, next, n);
        break;
      }
      case OpKind::Activation:
        // A standalone ReLU: the chip's elementwise max(x, +0).
        next = in0;
        for (auto& v : next.i8) v = relu(v);
        for (auto& v : next.bf) v = max_bf16(Bf16{v}, Bf16{0}).bits;
        break;
      case OpKind::ZeroPadding2D: {
        // Zeros, then each row copied as the chip copies it: max(x, x).
        next.type = in0.type;
        resize(next, n * l.out.size());
        const std::size_t row = std::size_t{l.in.w} * l.in.c;
        for (std::size_t b = 0; b < n; ++b)
          for (std::uint32_t y = 0; y < l.in.h; ++y) {
            const std::size_t s = (b * l.in.h + y) * row;
            const std::size_t d =
                ((b * l.out.h + y + l.pad_top) * l.out.w + l.pad_left) * std::size_t{l.in.c};
            for (std::size_t k = 0; k < row; ++k) {
              if (next.type == DType::Int8)
                next.i8[d + k] = std::max(in0.i8[s + k], in0.i8[s + k]);
              else
                next.bf[d + k] = max_bf16(Bf16{in0.bf[s + k]}, Bf16{in0.bf[s + k]}).bits;
            }
          }
        break;
      }
      case OpKind::Add:
        // The chip's eltwise add, operand after operand (int8: equal scales, saturating).
        next = in0;
        for (std::size_t k = 1; k < l.inputs.size(); ++k) {
          const Tensor& o = get(q.tensor_of(l.inputs[k]));
          for (std::size_t e = 0; e < next.i8.size(); ++e)
            next.i8[e] = add_int8(next.i8[e], o.i8[e]);
          for (std::size_t e = 0; e < next.bf.size(); ++e)
            next.bf[e] = add_bf16(Bf16{next.bf[e]}, Bf16{o.bf[e]}).bits;
        }
        break;
      case OpKind::Constant:
        next.type = q.act_type;
        resize(next, n * l.out.size());
        for (std::size_t b = 0; b < n; ++b) {
          if (q.act_type == DType::Int8)
            std::memcpy(next.i8.data() + b * l.out.size(), ql.constant.data(), ql.constant.size());
          else
            std::memcpy(next.bf.data() + b * l.out.size(), ql.constant.data(), ql.constant.size());
        }
        break;
      case OpKind::Dropout: throw std::logic_error(kIdentityRemoved);
      case OpKind::Flatten:
      case OpKind::Reshape:
      case OpKind::BatchNormalization: break;  // never computed: they pass a tensor on
    }
    for (std::size_t k = 0; k < i; ++k)
      if (q.computes(k) && last_read[k] == i && k != out_tensor) t[k] = Tensor{};
  }
  const Tensor& cur = get(out_tensor);
  const std::size_t count = n * m.output().size();
  std::vector<float> out(count);
  const float scale = out_tensor == kGraphInput ? q.input_scale : q.layers[out_tensor].out_scale;
  for (std::size_t i = 0; i < count; ++i)
    out[i] = cur.type == DType::Int8 ? static_cast<float>(cur.i8[i]) * scale : value_at(cur, i);
  return out;
}

}  // namespace tpu::nn
