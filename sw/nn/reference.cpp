#include "sw/nn/reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <type_traits>

#include "hw/common/error.h"
#include "sw/ir/ops.h"
#include "sw/nn/fast_kernels.h"
#include "sw/nn/weights.h"

namespace tpu::nn {
using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;
namespace {

// Output channels are computed in blocks of whole 4-lane vectors, so the inner loops run on SSE
// registers at -O2 without target-specific flags; kernels are repacked with their channel count
// padded to a multiple of kLane. Each lane computes exactly the scalar expression, in the same
// order, so results do not depend on the vector width.
constexpr std::uint32_t kLane = 8;
using F4 = float __attribute__((vector_size(16)));  // GCC/Clang vector extension

F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store4(float* p, F4 v) { std::memcpy(p, &v, sizeof v); }

std::uint32_t round_up(std::uint32_t x, std::uint32_t m) { return (x + m - 1) / m * m; }

// std::max / std::min per lane (the same NaN behaviour: the first operand unless the test holds).
F4 max_of(F4 a, F4 b) { return a < b ? b : a; }
F4 min_of(F4 a, F4 b) { return b < a ? b : a; }
float max_of(float a, float b) { return a < b ? b : a; }
float min_of(float a, float b) { return b < a ? b : a; }
template <class T>
T splat(float x) {
  if constexpr (std::is_same_v<T, F4>)
    return F4{x, x, x, x};
  else
    return x;
}

// o[i] = f(o[i], v[i]) for i in [0, n), four lanes at a time; f is generic over float and F4.
template <class F>
void combine(std::size_t n, float* o, const float* v, F f) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) store4(o + i, f(load4(o + i), load4(v + i)));
  for (; i < n; ++i) o[i] = f(o[i], v[i]);
}

// A weighted layer as the inner loops want it: Conv2D kernel [kh][kw][cin][cout_padded], Dense
// viewed as a 1x1 convolution of a 1x1 image with in.size() channels.
struct Packed {
  std::uint32_t cout = 0, cout_padded = 0;
  std::vector<float> kernel, bias;
};

Packed pack(const Op& l, const LayerWeights& w) {
  Packed p;
  p.cout = l.out.c;
  p.cout_padded = round_up(p.cout, kLane);
  const std::size_t rows = w.kernel.size() / p.cout;
  p.kernel.assign(rows * p.cout_padded, 0.0f);
  for (std::size_t r = 0; r < rows; ++r)
    std::copy_n(w.kernel.data() + r * p.cout, p.cout, p.kernel.data() + r * p.cout_padded);
  p.bias.assign(p.cout_padded, 0.0f);
  if (l.use_bias) std::copy(w.bias.begin(), w.bias.end(), p.bias.begin());
  return p;
}

// One output pixel's window, clipped to the image (SAME padding contributes zeros).
struct Window {
  const float* in;  // input pixel at (ky0, kx0)
  std::uint32_t rows, cols;
  std::size_t in_row_stride;      // floats between input rows
  const float* kernel;            // kernel at (ky0, kx0, 0, 0)
  std::size_t kernel_row_stride;  // floats between kernel rows
  std::uint32_t cin;
  std::uint32_t cout;  // padded
};

// out[j] = bias[j] + sum over the window (rows, cols, cin in that order) of x * k[.][j]:
// convolution then bias add, as TensorFlow's Conv2D + BiasAdd. V vectors = 4V channels.
template <std::uint32_t V>
void window_block(const Window& w, std::uint32_t co, const float* bias, float* out) {
  F4 acc[V] = {};
  for (std::uint32_t r = 0; r < w.rows; ++r) {
    const float* x = w.in + r * w.in_row_stride;
    const float* k = w.kernel + r * w.kernel_row_stride + co;
    const std::size_t taps = std::size_t{w.cols} * w.cin;
    for (std::size_t t = 0; t < taps; ++t) {
      const F4 xv = {x[t], x[t], x[t], x[t]};
      const float* kr = k + t * w.cout;
#pragma GCC unroll 8
      for (std::uint32_t v = 0; v < V; ++v) acc[v] += xv * load4(kr + 4 * v);
    }
  }
#pragma GCC unroll 8
  for (std::uint32_t v = 0; v < V; ++v) store4(out + co + 4 * v, acc[v] + load4(bias + co + 4 * v));
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same blocks on wider registers where the CPU has them (the float reference runs on every
// checked image, issue 16): 16 lanes on AVX-512, 8 on AVX2. Each lane still sums its channel in
// the window order, so the bits are those of the 4-lane loop; -ffp-contract=off keeps products
// and sums apart (and the AVX2 variant is compiled without FMA).
#define TPUSIM_AVX512 __attribute__((target("avx512f")))
#define TPUSIM_AVX2 __attribute__((target("avx2")))
using F16 = float __attribute__((vector_size(64)));
using F8 = float __attribute__((vector_size(32)));

// Inlined into the callers below, so compiled for their instruction set.
template <typename FV, std::uint32_t V>
[[gnu::always_inline]] inline void window_block_wide(const Window& w, std::uint32_t co,
                                                     const float* bias, float* out) {
  constexpr std::uint32_t L = sizeof(FV) / sizeof(float);
  FV acc[V] = {};
  for (std::uint32_t r = 0; r < w.rows; ++r) {
    const float* x = w.in + r * w.in_row_stride;
    const float* k = w.kernel + r * w.kernel_row_stride + co;
    const std::size_t taps = std::size_t{w.cols} * w.cin;
    for (std::size_t t = 0; t < taps; ++t) {
      const FV xv = FV{} + x[t];
      const float* kr = k + t * w.cout;
#pragma GCC unroll 8
      for (std::uint32_t v = 0; v < V; ++v) {
        FV kv;
        std::memcpy(&kv, kr + L * v, sizeof kv);
        acc[v] += xv * kv;
      }
    }
  }
#pragma GCC unroll 8
  for (std::uint32_t v = 0; v < V; ++v) {
    FV b;
    std::memcpy(&b, bias + co + L * v, sizeof b);
    const FV o = acc[v] + b;
    std::memcpy(out + co + L * v, &o, sizeof o);
  }
}

TPUSIM_AVX512 void window_all_avx512(const Window& w, const float* bias, float* out) {
  std::uint32_t co = 0;
  for (; co + 64 <= w.cout; co += 64) window_block_wide<F16, 4>(w, co, bias, out);
  for (; co + 16 <= w.cout; co += 16) window_block_wide<F16, 1>(w, co, bias, out);
  for (; co < w.cout; co += kLane) window_block_wide<F8, kLane / 8>(w, co, bias, out);
}

TPUSIM_AVX2 void window_all_avx2(const Window& w, const float* bias, float* out) {
  std::uint32_t co = 0;
  for (; co + 32 <= w.cout; co += 32) window_block_wide<F8, 4>(w, co, bias, out);
  for (; co < w.cout; co += kLane) window_block_wide<F8, kLane / 8>(w, co, bias, out);
}

bool has_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}

#endif

void window_all(const Window& w, const float* bias, float* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx512()) return window_all_avx512(w, bias, out);
  if (fast::cpu_has(fast::Isa::Avx2)) return window_all_avx2(w, bias, out);
#endif
  std::uint32_t co = 0;
  for (; co + 32 <= w.cout; co += 32) window_block<8>(w, co, bias, out);
  for (; co + 16 <= w.cout; co += 16) window_block<4>(w, co, bias, out);
  for (; co < w.cout; co += kLane) window_block<kLane / 4>(w, co, bias, out);
}

// A window with dilation: every tap on its own, in the window order (ky, kx, ci) as the
// contiguous path sums them; taps outside the image are zeros and add nothing.
void conv2d_dilated(const Op& l, const Packed& p, const float* in, float* out) {
  const ir::Pads pads = ir::window_pads(l);
  const std::int64_t ih = l.in.h, iw = l.in.w;
  const std::uint32_t cin = l.in.c;
  for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
    for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
      float* o = out + (std::size_t{oy} * l.out.w + ox) * p.cout_padded;
      for (std::uint32_t co = 0; co < p.cout_padded; ++co) o[co] = 0.0f;
      for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
        for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
          const std::int64_t y = std::int64_t{oy} * l.stride_h + ky * l.dilation_h - pads.top;
          const std::int64_t x = std::int64_t{ox} * l.stride_w + kx * l.dilation_w - pads.left;
          if (y < 0 || y >= ih || x < 0 || x >= iw) continue;
          const float* v = in + (y * iw + x) * cin;
          const float* k =
              p.kernel.data() + (std::size_t{ky} * l.kernel_w + kx) * cin * p.cout_padded;
          for (std::uint32_t ci = 0; ci < cin; ++ci)
            for (std::uint32_t co = 0; co < p.cout_padded; ++co)
              o[co] += v[ci] * k[std::size_t{ci} * p.cout_padded + co];
        }
      for (std::uint32_t co = 0; co < p.cout_padded; ++co) o[co] += p.bias[co];
    }
}

// `out` holds out.h x out.w x cout_padded floats.
void conv2d(const Op& l, const Packed& p, const float* in, float* out) {
  if (l.dilation_h != 1 || l.dilation_w != 1) return conv2d_dilated(l, p, in, out);
  // TensorFlow's SAME padding (tf.nn.convolution): the smaller half of the total before.
  const ir::Pads pads = ir::window_pads(l);
  const std::int64_t pt = pads.top, pl = pads.left;
  const std::int64_t ih = l.in.h, iw = l.in.w;
  const std::uint32_t cin = l.in.c;
  for (std::uint32_t oy = 0; oy < l.out.h; ++oy) {
    const std::int64_t y0 = std::int64_t{oy} * l.stride_h - pt;
    const std::int64_t ky0 = std::max<std::int64_t>(0, -y0);
    const std::int64_t ky1 = std::min<std::int64_t>(l.kernel_h, ih - y0);
    for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
      const std::int64_t x0 = std::int64_t{ox} * l.stride_w - pl;
      const std::int64_t kx0 = std::max<std::int64_t>(0, -x0);
      const std::int64_t kx1 = std::min<std::int64_t>(l.kernel_w, iw - x0);
      Window w;
      w.in = in + ((y0 + ky0) * iw + x0 + kx0) * cin;
      w.rows = static_cast<std::uint32_t>(std::max<std::int64_t>(ky1 - ky0, 0));
      w.cols = static_cast<std::uint32_t>(std::max<std::int64_t>(kx1 - kx0, 0));
      w.in_row_stride = static_cast<std::size_t>(iw) * cin;
      w.kernel = p.kernel.data() + ((ky0 * l.kernel_w + kx0) * cin) * p.cout_padded;
      w.kernel_row_stride = std::size_t{l.kernel_w} * cin * p.cout_padded;
      w.cin = cin;
      w.cout = p.cout_padded;
      window_all(w, p.bias.data(), out + (std::size_t{oy} * l.out.w + ox) * p.cout_padded);
    }
  }
}

void dense(const Op& l, const Packed& p, const float* in, float* out) {
  Window w{};
  w.in = in;
  w.rows = 1;
  w.cols = 1;
  w.kernel = p.kernel.data();
  w.cin = static_cast<std::uint32_t>(l.in.size());
  w.cout = p.cout_padded;
  window_all(w, p.bias.data(), out);
}

// TensorFlow's pooling: SAME windows are clipped to the image, so max ignores the padding and
// average divides by the number of pixels inside (tf.nn.avg_pool).
void pool(const Op& l, const float* in, float* out) {
  const bool is_max = l.kind == OpKind::MaxPooling2D;
  // TensorFlow's SAME padding (tf.nn.convolution): the smaller half of the total before.
  const ir::Pads pads = ir::window_pads(l);
  const std::int64_t pt = pads.top, pl = pads.left;
  const std::int64_t ih = l.in.h, iw = l.in.w;
  const std::uint32_t c = l.in.c;
  for (std::uint32_t oy = 0; oy < l.out.h; ++oy) {
    const std::int64_t y0 = std::int64_t{oy} * l.stride_h - pt;
    const std::int64_t ya = std::max<std::int64_t>(y0, 0);
    const std::int64_t yb = std::min<std::int64_t>(y0 + l.kernel_h, ih);
    for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
      const std::int64_t x0 = std::int64_t{ox} * l.stride_w - pl;
      const std::int64_t xa = std::max<std::int64_t>(x0, 0);
      const std::int64_t xb = std::min<std::int64_t>(x0 + l.kernel_w, iw);
      float* o = out + (std::size_t{oy} * l.out.w + ox) * c;
      std::fill(o, o + c, is_max ? -std::numeric_limits<float>::infinity() : 0.0f);
      for (std::int64_t y = ya; y < yb; ++y)
        for (std::int64_t x = xa; x < xb; ++x) {
          const float* v = in + (y * iw + x) * c;
          if (is_max)
            combine(c, o, v, [](auto p, auto q) { return max_of(p, q); });
          else
            combine(c, o, v, [](auto p, auto q) { return p + q; });
        }
      if (!is_max) {
        const float count = static_cast<float>((yb - ya) * (xb - xa));
        combine(c, o, o, [count](auto p, auto) { return p / splat<decltype(p)>(count); });
      }
    }
  }
}

// Keras activations; softmax runs over the channels of each pixel (Keras: the last axis) and
// subtracts the maximum first so exp never overflows.
void activate(Act a, float alpha, std::size_t pixels, std::uint32_t c, float* v) {
  const std::size_t n = pixels * c;
  switch (a) {
    case Act::Linear: return;
    case Act::Relu:
      combine(n, v, v, [](auto p, auto) { return max_of(p, splat<decltype(p)>(0.0f)); });
      return;
    case Act::Relu6:
      combine(n, v, v, [](auto p, auto) {
        using T = decltype(p);
        return min_of(max_of(p, splat<T>(0.0f)), splat<T>(6.0f));
      });
      return;
    case Act::Sigmoid:
      for (std::size_t i = 0; i < n; ++i) v[i] = 1.0f / (1.0f + std::exp(-v[i]));
      return;
    case Act::Tanh:
      for (std::size_t i = 0; i < n; ++i) v[i] = std::tanh(v[i]);
      return;
    case Act::LeakyRelu:
      for (std::size_t i = 0; i < n; ++i) v[i] = v[i] > 0.0f ? v[i] : alpha * v[i];
      return;
    case Act::Elu:
      for (std::size_t i = 0; i < n; ++i) v[i] = v[i] > 0.0f ? v[i] : alpha * std::expm1(v[i]);
      return;
    case Act::Softmax:
      for (std::size_t p = 0; p < pixels; ++p) {
        float* x = v + p * c;
        const float mx = *std::max_element(x, x + c);
        float sum = 0.0f;
        for (std::uint32_t i = 0; i < c; ++i) sum += (x[i] = std::exp(x[i] - mx));
        for (std::uint32_t i = 0; i < c; ++i) x[i] /= sum;
      }
      return;
  }
}

// Keras's batch_normalization at inference: inv = gamma / sqrt(variance + epsilon),
// y = x * inv + (beta - mean * inv), per channel.
void batch_norm(const Op& l, const LayerWeights& w, const float* in, float* out) {
  const std::uint32_t c = l.out.c;
  std::vector<float> inv(c), off(c);
  for (std::uint32_t k = 0; k < c; ++k) {
    inv[k] = w.gamma[k] / std::sqrt(w.moving_variance[k] + l.epsilon);
    off[k] = w.beta[k] - w.moving_mean[k] * inv[k];
  }
  const std::size_t pixels = std::size_t{l.out.h} * l.out.w;
  for (std::size_t p = 0; p < pixels; ++p)
    for (std::uint32_t k = 0; k < c; ++k) out[p * c + k] = in[p * c + k] * inv[k] + off[k];
}

void zero_pad(const Op& l, const float* in, float* out) {
  std::fill(out, out + l.out.size(), 0.0f);
  const std::size_t row = std::size_t{l.in.w} * l.in.c;
  for (std::uint32_t y = 0; y < l.in.h; ++y)
    std::copy_n(in + y * row, row,
                out + ((std::size_t{y} + l.pad_top) * l.out.w + l.pad_left) * l.in.c);
}

}  // namespace

std::vector<float> constant_values(const Op& l) {
  std::mt19937_64 rng(l.seed);
  std::vector<float> v(l.out.size());
  for (auto& x : v) x = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-52 - 1.0);
  return v;
}

std::vector<float> forward_float(const Graph& m, const Weights& w, const float* input,
                                 std::size_t n) {
  return forward_float(m, w, input, n, nullptr);
}

namespace {

// What one operation needs besides its inputs: its weights repacked, a constant's values.
struct Prepared {
  Packed packed;
  std::vector<float> constant;
  std::vector<ir::Shape> input_shapes;  // Concatenate
};

// One image's output of `l` (NHWC floats; a weighted operation's `out` holds its padded channel
// count) from its inputs'.
struct FloatArgs {
  const Op& l;
  const LayerWeights& w;
  const Prepared& p;
  const std::vector<const float*>& in;
  float* out;
};

void run_weighted(const FloatArgs& a) {
  const Op& l = a.l;
  const Packed& p = a.p.packed;
  if (l.kind == OpKind::Conv2D)
    conv2d(l, p, a.in[0], a.out);
  else
    dense(l, p, a.in[0], a.out);
  // Drop the padding channels.
  const std::size_t pixels = std::size_t{l.out.h} * l.out.w;
  if (p.cout_padded != p.cout)
    for (std::size_t px = 0; px < pixels; ++px)
      std::copy_n(a.out + px * p.cout_padded, p.cout, a.out + px * p.cout);
  activate(l.activation, l.alpha, pixels, l.out.c, a.out);
}

// A pooling whose window is the whole image.
void run_global_pool(const FloatArgs& a) {
  Op g = a.l;
  g.kind = a.l.kind == OpKind::GlobalMaxPooling2D ? OpKind::MaxPooling2D : OpKind::AveragePooling2D;
  g.kernel_h = a.l.in.h, g.kernel_w = a.l.in.w, g.padding = Padding::Valid;
  pool(g, a.in[0], a.out);
}

void run_activation(const FloatArgs& a) {
  std::copy_n(a.in[0], a.l.out.size(), a.out);
  activate(a.l.activation, a.l.alpha, std::size_t{a.l.out.h} * a.l.out.w, a.l.out.c, a.out);
}

// NHWC is already (h, w, c) order in memory: a view changes only the shape.
void run_view(const FloatArgs& a) { std::copy_n(a.in[0], a.l.out.size(), a.out); }

void run_add(const FloatArgs& a) {
  std::copy_n(a.in[0], a.l.out.size(), a.out);
  for (std::size_t k = 1; k < a.in.size(); ++k)
    combine(a.l.out.size(), a.out, a.in[k], [](auto p, auto q) { return p + q; });
}

// Keras's DepthwiseConv2D: output channel c * m + j sums input channel c's window times
// kernel[ky][kx][c][j], then its bias.
void depthwise(const Op& l, const std::vector<float>& kernel, const std::vector<float>& bias,
               const float* in, float* out) {
  const ir::Pads pads = ir::window_pads(l);
  const std::int64_t ih = l.in.h, iw = l.in.w;
  const std::uint32_t cin = l.in.c, m = l.depth_multiplier, cout = cin * m;
  for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
    for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
      float* o = out + (std::size_t{oy} * l.out.w + ox) * cout;
      std::fill(o, o + cout, 0.0f);
      for (std::uint32_t ky = 0; ky < l.kernel_h; ++ky)
        for (std::uint32_t kx = 0; kx < l.kernel_w; ++kx) {
          const std::int64_t y = std::int64_t{oy} * l.stride_h + ky * l.dilation_h - pads.top;
          const std::int64_t x = std::int64_t{ox} * l.stride_w + kx * l.dilation_w - pads.left;
          if (y < 0 || y >= ih || x < 0 || x >= iw) continue;
          const float* v = in + (y * iw + x) * cin;
          const float* k = kernel.data() + (std::size_t{ky} * l.kernel_w + kx) * cout;
          for (std::uint32_t co = 0; co < cout; ++co) o[co] += v[co / m] * k[co];
        }
      if (!bias.empty())
        for (std::uint32_t co = 0; co < cout; ++co) o[co] += bias[co];
    }
}

void run_depthwise(const FloatArgs& a) {
  const Op& l = a.l;
  depthwise(l, a.w.kernel, a.w.bias, a.in[0], a.out);
  activate(l.activation, l.alpha, std::size_t{l.out.h} * l.out.w, l.out.c, a.out);
}

// Keras's SeparableConv2D: the depthwise convolution (no bias), then the pointwise 1x1
// convolution with the bias and the activation.
void run_separable(const FloatArgs& a) {
  const Op& l = a.l;
  Op dw = l;
  dw.out.c = l.in.c * l.depth_multiplier;
  const std::size_t pixels = std::size_t{l.out.h} * l.out.w;
  std::vector<float> mid(pixels * dw.out.c);
  depthwise(dw, a.w.kernel, {}, a.in[0], mid.data());
  const std::uint32_t cm = dw.out.c, cout = l.out.c;
  for (std::size_t px = 0; px < pixels; ++px)
    for (std::uint32_t co = 0; co < cout; ++co) {
      float acc = 0.0f;
      for (std::uint32_t ci = 0; ci < cm; ++ci)
        acc += mid[px * cm + ci] * a.w.pointwise[std::size_t{ci} * cout + co];
      a.out[px * cout + co] = acc + (a.w.bias.empty() ? 0.0f : a.w.bias[co]);
    }
  activate(l.activation, l.alpha, pixels, cout, a.out);
}

// Channels of each pixel: input 0's, then input 1's, ...
void run_concatenate(const FloatArgs& a, const std::vector<ir::Shape>& shapes) {
  const std::size_t pixels = std::size_t{a.l.out.h} * a.l.out.w;
  for (std::size_t px = 0; px < pixels; ++px) {
    float* o = a.out + px * a.l.out.c;
    for (std::size_t k = 0; k < a.in.size(); ++k) {
      o = std::copy_n(a.in[k] + px * shapes[k].c, shapes[k].c, o);
    }
  }
}

template <class F>
void run_elementwise(const FloatArgs& a, F f) {
  std::copy_n(a.in[0], a.l.out.size(), a.out);
  for (std::size_t k = 1; k < a.in.size(); ++k)
    for (std::size_t e = 0; e < a.l.out.size(); ++e) a.out[e] = f(a.out[e], a.in[k][e]);
}

void run_prelu(const FloatArgs& a) {
  const std::uint32_t c = a.l.out.c;
  for (std::size_t e = 0; e < a.l.out.size(); ++e) {
    const float x = a.in[0][e];
    a.out[e] = x > 0.0f ? x : a.w.alpha[e % c] * x;
  }
}

// Token ids as Keras reads them (a cast to int, truncating); one outside the table is an error.
void run_embedding(const FloatArgs& a) {
  const std::uint32_t steps = a.l.in.c, d = a.l.filters;
  for (std::uint32_t t = 0; t < steps; ++t) {
    const float x = a.in[0][t];
    if (!(x >= 0.0f && x < static_cast<float>(a.l.input_dim)))
      throw InputError(
          fmt::format("layer {} (Embedding): token id {} at step {} is outside its "
                      "table of {} rows",
                      a.l.name, x, t, a.l.input_dim));
    const auto id = static_cast<std::size_t>(x);
    std::copy_n(a.w.kernel.data() + id * d, d, a.out + std::size_t{t} * d);
  }
}

float apply(Act f, float alpha, float x) {
  activate(f, alpha, 1, 1, &x);
  return x;
}

// Keras's LSTM cell (gates i, f, c, o in that order of the 4 * units columns):
//   z = x_t W + h_{t-1} U + b;  i, f, o = rec(z_i), rec(z_f), rec(z_o);  g = act(z_c)
//   c_t = f * c_{t-1} + i * g;  h_t = o * act(c_t)
void run_lstm(const FloatArgs& a) {
  const Op& l = a.l;
  const std::uint32_t steps = l.in.w, feats = l.in.c, u = l.filters, g4 = 4 * u;
  std::vector<float> h(u, 0.0f), c(u, 0.0f), z(g4);
  for (std::uint32_t t = 0; t < steps; ++t) {
    const float* x = a.in[0] + std::size_t{t} * feats;
    for (std::uint32_t j = 0; j < g4; ++j) z[j] = a.w.bias.empty() ? 0.0f : a.w.bias[j];
    for (std::uint32_t k = 0; k < feats; ++k)
      for (std::uint32_t j = 0; j < g4; ++j) z[j] += x[k] * a.w.kernel[std::size_t{k} * g4 + j];
    for (std::uint32_t k = 0; k < u; ++k)
      for (std::uint32_t j = 0; j < g4; ++j) z[j] += h[k] * a.w.recurrent[std::size_t{k} * g4 + j];
    for (std::uint32_t j = 0; j < u; ++j) {
      const float ig = apply(l.recurrent_activation, 0.0f, z[j]);
      const float fg = apply(l.recurrent_activation, 0.0f, z[u + j]);
      const float gg = apply(l.activation, l.alpha, z[2 * u + j]);
      const float og = apply(l.recurrent_activation, 0.0f, z[3 * u + j]);
      c[j] = fg * c[j] + ig * gg;
      h[j] = og * apply(l.activation, l.alpha, c[j]);
    }
    if (l.return_sequences) std::copy(h.begin(), h.end(), a.out + std::size_t{t} * u);
  }
  if (!l.return_sequences) std::copy(h.begin(), h.end(), a.out);
}

// The float semantics of each operation kind: the network as Keras computes it.
struct FloatSemantics {
  OpKind kind;
  void (*run)(const FloatArgs&);
};
const std::vector<FloatSemantics> kFloatSemantics = {
    {OpKind::Conv2D, run_weighted},
    {OpKind::Dense, run_weighted},
    {OpKind::MaxPooling2D, [](const FloatArgs& a) { pool(a.l, a.in[0], a.out); }},
    {OpKind::AveragePooling2D, [](const FloatArgs& a) { pool(a.l, a.in[0], a.out); }},
    {OpKind::GlobalAveragePooling2D, run_global_pool},
    {OpKind::GlobalMaxPooling2D, run_global_pool},
    {OpKind::Activation, run_activation},
    {OpKind::Flatten, run_view},
    {OpKind::Reshape, run_view},
    {OpKind::BatchNormalization, [](const FloatArgs& a) { batch_norm(a.l, a.w, a.in[0], a.out); }},
    {OpKind::ZeroPadding2D, [](const FloatArgs& a) { zero_pad(a.l, a.in[0], a.out); }},
    {OpKind::Add, run_add},
    {OpKind::Dropout, [](const FloatArgs&) { throw std::logic_error(ir::kIdentityRemoved); }},
    {OpKind::Constant,
     [](const FloatArgs& a) { std::copy(a.p.constant.begin(), a.p.constant.end(), a.out); }},
    {OpKind::DepthwiseConv2D, run_depthwise},
    {OpKind::SeparableConv2D, run_separable},
    {OpKind::Concatenate, [](const FloatArgs& a) { run_concatenate(a, a.p.input_shapes); }},
    {OpKind::Multiply,
     [](const FloatArgs& a) { run_elementwise(a, [](float x, float y) { return x * y; }); }},
    {OpKind::Subtract,
     [](const FloatArgs& a) { run_elementwise(a, [](float x, float y) { return x - y; }); }},
    {OpKind::PReLU, run_prelu},
    {OpKind::Embedding, run_embedding},
    {OpKind::LSTM, run_lstm},
};

}  // namespace

bool has_float_semantics(OpKind k) { return ir::find_entry(kFloatSemantics, k) != nullptr; }

std::vector<float> forward_float(const Graph& m, const Weights& w, const float* input,
                                 std::size_t n, const LayerObserver& observe) {
  check_weights(m, w);
  const std::size_t L = m.ops.size();
  std::vector<Prepared> prepared(L);
  std::vector<const FloatSemantics*> semantics(L);
  std::vector<std::vector<float>> out(L);
  for (std::size_t i = 0; i < L; ++i) {
    const Op& l = m.ops[i];
    semantics[i] = &ir::entry_for(kFloatSemantics, l.kind, "float semantics");
    if (l.kind == OpKind::Conv2D || l.kind == OpKind::Dense)
      prepared[i].packed = pack(l, w.layers[i]);
    const std::size_t c = prepared[i].packed.cout_padded ? prepared[i].packed.cout_padded : l.out.c;
    out[i].resize(std::size_t{l.out.h} * l.out.w * c);
    if (l.kind == OpKind::Constant) prepared[i].constant = constant_values(l);
    for (std::size_t p : l.inputs)
      prepared[i].input_shapes.push_back(p == kGraphInput ? m.input : m.ops[p].out);
  }
  const Shape out_shape = m.output();
  std::vector<float> result(n * out_shape.size());
  std::vector<const float*> in;
  for (std::size_t img = 0; img < n; ++img) {
    const float* image = input + img * m.input.size();
    for (std::size_t i = 0; i < L; ++i) {
      const Op& l = m.ops[i];
      in.clear();
      for (std::size_t p : l.inputs) in.push_back(p == kGraphInput ? image : out[p].data());
      semantics[i]->run(FloatArgs{l, w.layers[i], prepared[i], in, out[i].data()});
      if (observe) observe(i, out[i].data(), l.out.size());
    }
    const float* last = L == 0 ? image : out[L - 1].data();
    std::copy_n(last, out_shape.size(), result.data() + img * out_shape.size());
  }
  return result;
}

std::vector<std::uint32_t> argmax_rows(const std::vector<float>& v, std::size_t k) {
  if (k == 0 || v.size() % k != 0)
    throw std::invalid_argument(
        fmt::format("argmax_rows: {} values are not rows of {}", v.size(), k));
  std::vector<std::uint32_t> out(v.size() / k);
  for (std::size_t r = 0; r < out.size(); ++r) {
    const float* row = v.data() + r * k;
    out[r] = static_cast<std::uint32_t>(std::max_element(row, row + k) - row);
  }
  return out;
}

}  // namespace tpu::nn
