#include "sw/nn/quantized.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hw/common/bf16.h"
#include "hw/common/error.h"
#include "hw/vector_unit/functions.h"
#include "sw/nn/reference.h"

namespace tpu::nn {
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

// The float value the calibration measures for layer i: the float model up to and including
// layer i, with the activation fused into it applied.
std::vector<float> float_prefix(const Model& m, const Weights& w, std::size_t i, Act fused,
                                const float* images, std::size_t n) {
  Model prefix = m;
  prefix.layers.resize(i + 1);
  prefix.layers[i].activation = fused;
  Weights pw;
  pw.layers.assign(w.layers.begin(), w.layers.begin() + static_cast<std::ptrdiff_t>(i + 1));
  return forward_float(prefix, pw, images, n);
}

}  // namespace

QuantizedModel quantize(const Model& m, const Weights& w, DType input_type, std::uint32_t tile_rows,
                        const float* calibration, std::size_t n_cal) {
  if (input_type != DType::Int8 && input_type != DType::Bf16)
    throw InputError("quantize: the MXU input type must be int8 or bf16");
  QuantizedModel q;
  q.model = &m;
  q.act_type = input_type;
  q.tile_rows = tile_rows;
  const std::size_t L = m.layers.size();
  q.layers.resize(L);

  // 1. Activations the vector unit applies in the producing layer's Activate. Through a max
  //    pool only monotonic ones (max commutes with them, bit for bit, also after rounding).
  for (std::size_t i = 0; i < L; ++i) {
    const Layer& l = m.layers[i];
    if (l.has_weights()) q.layers[i].fused_activation = l.activation;
    if (l.kind != LayerKind::Activation) continue;
    std::size_t j = i;
    bool through_pool = false;
    while (j > 0) {
      const LayerKind k = m.layers[j - 1].kind;
      if (k == LayerKind::Flatten)
        --j;
      else if (k == LayerKind::MaxPooling2D)
        --j, through_pool = true;
      else
        break;
    }
    if (j == 0 || !m.layers[j - 1].has_weights()) continue;
    QuantizedLayer& producer = q.layers[j - 1];
    if (producer.fused_activation != Act::Linear) continue;
    if (through_pool && !monotonic(l.activation)) continue;
    producer.fused_activation = l.activation;
    q.layers[i].fused_into_previous = true;
  }

  // 2. Output types: the last weighted layer gives fp32 when only fused activations and
  //    flattens follow it; every other tensor keeps the chip's activation type.
  std::size_t last_weighted = L;
  for (std::size_t i = 0; i < L; ++i)
    if (m.layers[i].has_weights()) last_weighted = i;
  bool final_float = last_weighted < L;
  for (std::size_t i = last_weighted + 1; i < L && final_float; ++i)
    final_float = m.layers[i].kind == LayerKind::Flatten || q.layers[i].fused_into_previous;

  // 3. Scales and parameters, layer by layer.
  float in_scale = 1.0f;
  if (input_type == DType::Int8) {
    float mx = 0.0f;
    for (std::size_t i = 0; i < n_cal * m.input.size(); ++i)
      mx = std::max(mx, std::fabs(calibration[i]));
    in_scale = mx > 0 ? mx / kInt8Max : 1.0f;
  }
  q.input_scale = in_scale;
  DType in_type = input_type;
  for (std::size_t i = 0; i < L; ++i) {
    const Layer& l = m.layers[i];
    QuantizedLayer& ql = q.layers[i];
    if (l.kind == LayerKind::Activation && !ql.fused_into_previous &&
        !(l.activation == Act::Relu || l.activation == Act::Linear))
      throw InputError(
          fmt::format("{}: layer {} ({} {}): the chip applies this activation only "
                      "fused into the Conv2D or Dense before it",
                      m.file, l.name, name_of(l.kind), name_of(l.activation)));
    if ((l.kind == LayerKind::MaxPooling2D || l.kind == LayerKind::AveragePooling2D) &&
        l.padding != Padding::Valid)
      throw InputError(
          fmt::format("{}: layer {} ({}): the vector unit pools with padding "
                      "\"valid\" only",
                      m.file, l.name, name_of(l.kind)));
    if (!l.has_weights()) {
      ql.out_type = in_type;
      ql.out_scale = in_scale;
      continue;
    }
    const bool out_float = final_float && i == last_weighted;
    ql.out_type = out_float ? DType::Fp32 : input_type;
    const std::uint32_t cout = l.out.c;
    const std::size_t k_total = w.layers[i].kernel.size() / cout;
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
    if (input_type == DType::Bf16) {
      ql.kernel_bf16.resize(w.layers[i].kernel.size());
      for (std::size_t k = 0; k < ql.kernel_bf16.size(); ++k)
        ql.kernel_bf16[k] = to_bf16(w.layers[i].kernel[k]).bits;
      ql.bias_f32 = w.layers[i].bias;
      ql.scale_f32.assign(cout, 1.0f);
      ql.out_scale = 1.0f;
    } else {
      ql.weight_scale.assign(cout, 0.0f);
      for (std::size_t k = 0; k < k_total; ++k)
        for (std::uint32_t c = 0; c < cout; ++c)
          ql.weight_scale[c] =
              std::max(ql.weight_scale[c], std::fabs(w.layers[i].kernel[k * cout + c]));
      for (auto& s : ql.weight_scale) s = s > 0 ? s / kInt8Max : 1.0f;
      ql.kernel_i8.resize(w.layers[i].kernel.size());
      for (std::size_t k = 0; k < k_total; ++k)
        for (std::uint32_t c = 0; c < cout; ++c)
          ql.kernel_i8[k * cout + c] =
              quantize_value(w.layers[i].kernel[k * cout + c], ql.weight_scale[c]);
      ql.bias_i32.assign(cout, 0);
      for (std::uint32_t c = 0; c < cout; ++c) {
        const double b =
            std::round(double{w.layers[i].bias[c]} / (double{in_scale} * ql.weight_scale[c]));
        ql.bias_i32[c] =
            static_cast<std::int32_t>(std::clamp<double>(b, -2147483647.0, 2147483647.0));
      }
      if (out_float) {
        ql.scale_f32.resize(cout);
        for (std::uint32_t c = 0; c < cout; ++c) ql.scale_f32[c] = in_scale * ql.weight_scale[c];
        ql.out_scale = 1.0f;
      } else {
        const auto y = float_prefix(m, w, i, ql.fused_activation, calibration, n_cal);
        float mx = 0.0f;
        for (float v : y) mx = std::max(mx, std::fabs(v));
        ql.out_scale = mx > 0 ? mx / kInt8Max : 1.0f;
        ql.multiplier.resize(cout);
        ql.shift.resize(cout);
        for (std::uint32_t c = 0; c < cout; ++c) {
          const auto qm = quantize_multiplier(double{in_scale} * ql.weight_scale[c] / ql.out_scale);
          ql.multiplier[c] = qm.multiplier_q31;
          ql.shift[c] = qm.shift;
        }
      }
    }
    in_type = ql.out_type;
    in_scale = ql.out_scale;
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
void weighted_layer(const QuantizedModel& q, const Layer& l, const QuantizedLayer& ql,
                    const Tensor& in, Tensor& out, std::size_t n) {
  const bool dense = l.kind == LayerKind::Dense;
  const std::uint32_t ih = dense ? 1 : l.in.h, iw = dense ? 1 : l.in.w;
  const std::uint32_t ic = dense ? static_cast<std::uint32_t>(l.in.size()) : l.in.c;
  const std::uint32_t kh = dense ? 1 : l.kernel_h, kw = dense ? 1 : l.kernel_w;
  const std::uint32_t sh = dense ? 1 : l.stride_h, sw = dense ? 1 : l.stride_w;
  const std::uint32_t oh = dense ? 1 : l.out.h, ow = dense ? 1 : l.out.w, oc = l.out.c;
  const std::uint32_t pt = dense ? 0 : pad_before(ih, oh, kh, sh, l.padding);
  const std::uint32_t pl = dense ? 0 : pad_before(iw, ow, kw, sw, l.padding);
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
              const float xk = x[k];
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

void pool_layer(const Layer& l, const Tensor& in, Tensor& out, std::size_t n) {
  out.type = in.type;
  const std::uint64_t oh = l.out.h, ow = l.out.w, c = l.in.c;
  resize(out, n * oh * ow * c);
  const bool avg = l.kind == LayerKind::AveragePooling2D;
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
  const Model& m = *q.model;
  Tensor cur;
  cur.type = q.act_type;
  const auto enc = encode_input(q, images, n);
  resize(cur, n * m.input.size());
  if (q.act_type == DType::Int8)
    std::memcpy(cur.i8.data(), enc.data(), enc.size());
  else
    std::memcpy(cur.bf.data(), enc.data(), enc.size());

  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const Layer& l = m.layers[i];
    const QuantizedLayer& ql = q.layers[i];
    Tensor next;
    switch (l.kind) {
      case LayerKind::Conv2D:
      case LayerKind::Dense: weighted_layer(q, l, ql, cur, next, n); break;
      case LayerKind::MaxPooling2D:
      case LayerKind::AveragePooling2D: pool_layer(l, cur, next, n); break;
      case LayerKind::Flatten: continue;
      case LayerKind::Activation:
        if (ql.fused_into_previous || l.activation == Act::Linear) continue;
        // A standalone ReLU: the chip's elementwise max(x, +0).
        next = cur;
        for (auto& v : next.i8) v = relu(v);
        for (auto& v : next.bf) v = max_bf16(Bf16{v}, Bf16{0}).bits;
        for (auto& v : next.f32) v = max_float(v, 0.0f);
        break;
    }
    cur = std::move(next);
  }
  const std::size_t count = n * m.output().size();
  std::vector<float> out(count);
  const float scale = q.layers.empty() ? q.input_scale : q.layers.back().out_scale;
  for (std::size_t i = 0; i < count; ++i)
    out[i] = cur.type == DType::Int8 ? static_cast<float>(cur.i8[i]) * scale : value_at(cur, i);
  return out;
}

}  // namespace tpu::nn
