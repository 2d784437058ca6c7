#include "sw/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <type_traits>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <fmt/format.h>

#include "hw/common/error.h"
#include "sw/data/shuffle.h"

namespace tpu::train {
namespace {

using ir::Act;
using ir::Op;
using ir::OpKind;
using ir::Padding;

// Four fp32 lanes (GCC/Clang vector extension, one SSE register at -O2 without target flags).
// Each lane computes the scalar expression, so results do not depend on the vector width.
using F4 = float __attribute__((vector_size(16)));
using U4 = std::uint32_t __attribute__((vector_size(16)));

// Unaligned loads and stores of F4 or float (memcpy: no aliasing or alignment assumptions).
template <class T>
constexpr std::size_t width = sizeof(T) / sizeof(float);
template <class T>
T load(const float* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
void store(float* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// y[i] += a * x[i]
inline void axpy(std::size_t n, float a, const float* x, float* y) {
  const F4 av = {a, a, a, a};
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) store(y + i, load<F4>(y + i) + av * load<F4>(x + i));
  for (; i < n; ++i) y[i] += a * x[i];
}

// y[i] += x[i]
inline void add(std::size_t n, const float* x, float* y) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) store(y + i, load<F4>(y + i) + load<F4>(x + i));
  for (; i < n; ++i) y[i] += x[i];
}

// sum of a[i] * b[i] as eight interleaved partial sums, combined in a fixed order.
inline float dot(std::size_t n, const float* a, const float* b) {
  F4 s0 = {}, s1 = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 += load<F4>(a + i) * load<F4>(b + i);
    s1 += load<F4>(a + i + 4) * load<F4>(b + i + 4);
  }
  const F4 s4 = s0 + s1;
  float sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

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
void map4(std::size_t n, float* o, const float* v, F f) {
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) store(o + i, f(load<F4>(o + i), load<F4>(v + i)));
  for (; i < n; ++i) o[i] = f(o[i], v[i]);
}

// TensorFlow's SAME padding: the total max((out - 1) * stride + k - in, 0) split with the smaller
// half before (the same rule as nn::forward_float).
std::int64_t pad_before(std::uint32_t in, std::uint32_t out, std::uint32_t k, std::uint32_t s,
                        Padding p) {
  if (p == Padding::Valid) return 0;
  const std::int64_t total = std::int64_t{out - 1} * s + k - in;
  return std::max<std::int64_t>(total, 0) / 2;
}

// TensorFlow runs its CPU kernels with denormals flushed to zero
// (tensorflow/core/platform/denormal.h, ScopedFlushDenormal); the trainer does too. Raw 0-255
// inputs saturate the softmax early, and the tiny gradients that follow would otherwise be
// denormal, which x86 processes many times slower. The caller's mode is restored on exit.
class FlushDenormals {
 public:
  FlushDenormals() {
#if defined(__SSE__)
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ | kFlushToZero | kDenormalsAreZero);
#endif
  }
  ~FlushDenormals() {
#if defined(__SSE__)
    _mm_setcsr(saved_);
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  static constexpr unsigned kFlushToZero = 0x8000;       // MXCSR.FTZ (Intel SDM vol. 1 §10.2.3)
  static constexpr unsigned kDenormalsAreZero = 0x0040;  // MXCSR.DAZ
  unsigned saved_ = 0;
};

// The shuffle draws from its own stream, so changing the initialisation never changes the order
// of the samples (the constant is 2^64 / golden ratio, a common stream separator).
constexpr std::uint64_t kShuffleStream = 0x9E3779B97F4A7C15ull;

struct Param {
  std::vector<float> value, grad, m, v;  // v: Adam's second moment
  void init(std::vector<float> w) {
    value = std::move(w);
    grad.assign(value.size(), 0.0f);
    m.assign(value.size(), 0.0f);
    v.assign(value.size(), 0.0f);
  }
};

struct LayerState {
  const Op* l = nullptr;
  // The activation the forward pass applies: a final softmax is left to the loss (fused).
  Act act = Act::Linear;
  std::int64_t pad_top = 0, pad_left = 0;
  Param kernel, bias;
  // Kernel with its last two axes swapped (Conv2D [kh][kw][cout][cin], Dense [units][in]), so the
  // input gradient is a sum of contiguous rows.
  std::vector<float> kernel_t;
  std::vector<float> grad_t;  // Dense: kernel gradient in the transposed layout, [units][in]
  std::vector<std::uint32_t> argmax;  // MaxPooling2D: input element of each output's maximum
};

// The taps of output pixel (oy, ox) that fall inside the image: rows [ky0, ky1), columns
// [kx0, kx1) of the kernel; (y0, x0) is the input position of tap (0, 0) (negative in padding).
struct Window {
  std::size_t ky0, ky1, kx0, kx1;
  std::int64_t y0, x0;
};

Window window(const LayerState& s, std::uint32_t oy, std::uint32_t ox) {
  const Op& l = *s.l;
  Window w;
  w.y0 = std::int64_t{oy} * l.stride_h - s.pad_top;
  w.x0 = std::int64_t{ox} * l.stride_w - s.pad_left;
  w.ky0 = static_cast<std::size_t>(std::max<std::int64_t>(0, -w.y0));
  w.kx0 = static_cast<std::size_t>(std::max<std::int64_t>(0, -w.x0));
  w.ky1 = static_cast<std::size_t>(
      std::max<std::int64_t>(std::min<std::int64_t>(l.kernel_h, std::int64_t{l.in.h} - w.y0), 0));
  w.kx1 = static_cast<std::size_t>(
      std::max<std::int64_t>(std::min<std::int64_t>(l.kernel_w, std::int64_t{l.in.w} - w.x0), 0));
  w.ky1 = std::max(w.ky1, w.ky0);
  w.kx1 = std::max(w.kx1, w.kx0);
  return w;
}

// f(ky, kx, input pixel index) over the taps of output pixel (oy, ox) inside the image.
template <class F>
void for_window(const LayerState& s, std::uint32_t oy, std::uint32_t ox, F f) {
  const Window w = window(s, oy, ox);
  const std::int64_t iw = s.l->in.w;
  for (std::size_t ky = w.ky0; ky < w.ky1; ++ky)
    for (std::size_t kx = w.kx0; kx < w.kx1; ++kx)
      f(ky, kx,
        static_cast<std::size_t>((w.y0 + static_cast<std::int64_t>(ky)) * iw + w.x0 +
                                 static_cast<std::int64_t>(kx)));
}

// The output rows (or columns) [lo, hi) whose window puts kernel row `k` inside the image:
// 0 <= o * stride + k - pad < in.
struct Range {
  std::size_t lo = 0, hi = 0;
};
Range tap_range(std::int64_t pad, std::size_t k, std::uint32_t stride, std::uint32_t in,
                std::uint32_t out) {
  const std::int64_t first = pad - static_cast<std::int64_t>(k);  // o * stride >= first
  const std::int64_t last = std::int64_t{in} - 1 + first;         // o * stride <= last
  Range r;
  if (last < 0) return r;
  r.lo = first <= 0 ? 0 : static_cast<std::size_t>((first + stride - 1) / stride);
  r.hi = std::min<std::size_t>(out, static_cast<std::size_t>(last / stride) + 1);
  r.hi = std::max(r.hi, r.lo);
  return r;
}

// block(co, lane, vectors) over the channels [0, n): blocks of `vectors` x 4 channels in F4
// lanes while they fit, then single channels in float lanes.
template <class F>
void channel_blocks(std::size_t n, F block) {
  using Vec = std::common_type<F4>;
  using One = std::common_type<float>;
  std::size_t co = 0;
  for (; co + 32 <= n; co += 32) block(co, Vec{}, std::integral_constant<std::size_t, 8>{});
  for (; co + 16 <= n; co += 16) block(co, Vec{}, std::integral_constant<std::size_t, 4>{});
  for (; co + 4 <= n; co += 4) block(co, Vec{}, std::integral_constant<std::size_t, 1>{});
  for (; co < n; ++co) block(co, One{}, std::integral_constant<std::size_t, 1>{});
}

// Keras activations over `pixels` x `c` values; softmax per pixel over the channels.
void activate(Act a, std::size_t pixels, std::size_t c, float* v) {
  const std::size_t n = pixels * c;
  switch (a) {
    case Act::Linear: return;
    case Act::Relu:
      map4(n, v, v, [](auto x, auto) { return max_of(x, splat<decltype(x)>(0.0f)); });
      return;
    case Act::Relu6:
      map4(n, v, v, [](auto x, auto) {
        using T = decltype(x);
        return min_of(max_of(x, splat<T>(0.0f)), splat<T>(6.0f));
      });
      return;
    case Act::Sigmoid:
      for (std::size_t i = 0; i < n; ++i) v[i] = 1.0f / (1.0f + std::exp(-v[i]));
      return;
    case Act::Tanh:
      for (std::size_t i = 0; i < n; ++i) v[i] = std::tanh(v[i]);
      return;
    case Act::LeakyRelu:
    case Act::Elu: throw std::logic_error("the trainer refuses leaky_relu and elu layers");
    case Act::Softmax:
      for (std::size_t p = 0; p < pixels; ++p) {
        float* x = v + p * c;
        const float mx = *std::max_element(x, x + c);
        float sum = 0.0f;
        for (std::size_t i = 0; i < c; ++i) sum += (x[i] = std::exp(x[i] - mx));
        for (std::size_t i = 0; i < c; ++i) x[i] /= sum;
      }
      return;
  }
}

// d <- d * f'(x), written with the activation's output y = f(x).
void activate_backward(Act a, std::size_t pixels, std::size_t c, const float* y, float* d) {
  const std::size_t n = pixels * c;
  switch (a) {
    case Act::Linear: return;
    case Act::Relu:
      map4(n, d, y, [](auto g, auto x) {
        using T = decltype(g);
        return x > splat<T>(0.0f) ? g : splat<T>(0.0f);
      });
      return;
    case Act::Relu6:
      for (std::size_t i = 0; i < n; ++i) d[i] = y[i] > 0.0f && y[i] < 6.0f ? d[i] : 0.0f;
      return;
    case Act::Sigmoid:
      for (std::size_t i = 0; i < n; ++i) d[i] *= y[i] * (1.0f - y[i]);
      return;
    case Act::Tanh:
      for (std::size_t i = 0; i < n; ++i) d[i] *= 1.0f - y[i] * y[i];
      return;
    case Act::LeakyRelu:
    case Act::Elu: throw std::logic_error("the trainer refuses leaky_relu and elu layers");
    case Act::Softmax:
      // dx_i = y_i (d_i - sum_j d_j y_j)
      for (std::size_t p = 0; p < pixels; ++p) {
        const float* yp = y + p * c;
        float* dp = d + p * c;
        float dot = 0.0f;
        for (std::size_t i = 0; i < c; ++i) dot += dp[i] * yp[i];
        for (std::size_t i = 0; i < c; ++i) dp[i] = yp[i] * (dp[i] - dot);
      }
      return;
  }
}

// Forward and backward passes of one image at a time; gradients of a batch accumulate in the
// order of its images, so the summation order is fixed.
class Network {
 public:
  Network(const ir::Graph& m, nn::Weights w) {
    check_weights(m, w);
    layers_.resize(m.ops.size());
    act_.resize(m.ops.size() + 1);
    grad_.resize(m.ops.size() + 1);
    act_[0].resize(m.input.size());
    grad_[0].resize(m.input.size());
    for (std::size_t i = 0; i < m.ops.size(); ++i) {
      const Op& l = m.ops[i];
      LayerState& s = layers_[i];
      s.l = &l;
      s.act = l.activation;
      s.pad_top = pad_before(l.in.h, l.out.h, l.kernel_h, l.stride_h, l.padding);
      s.pad_left = pad_before(l.in.w, l.out.w, l.kernel_w, l.stride_w, l.padding);
      if (l.has_weights()) {
        s.kernel.init(std::move(w.layers[i].kernel));
        s.bias.init(std::move(w.layers[i].bias));
        s.kernel_t.resize(s.kernel.value.size());
        if (l.kind == OpKind::Dense) s.grad_t.resize(s.kernel.value.size());
      }
      if (l.kind == OpKind::MaxPooling2D) s.argmax.resize(l.out.size());
      act_[i + 1].resize(l.out.size());
      grad_[i + 1].resize(l.out.size());
    }
    layers_.back().act = Act::Linear;  // the loss applies the final softmax
    transpose_kernels();
  }

  [[nodiscard]] std::size_t classes() const { return act_.back().size(); }
  float* input() { return act_[0].data(); }

  void forward() {
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      LayerState& s = layers_[i];
      const Op& l = *s.l;
      const float* in = act_[i].data();
      float* out = act_[i + 1].data();
      const std::size_t pixels = std::size_t{l.out.h} * l.out.w;
      switch (l.kind) {
        case OpKind::Conv2D: conv_forward(s, in, out); break;
        case OpKind::Dense: dense_forward(s, in, out); break;
        case OpKind::MaxPooling2D: max_pool_forward(s, in, out); break;
        case OpKind::AveragePooling2D: avg_pool_forward(s, in, out); break;
        case OpKind::Activation: std::copy_n(in, l.out.size(), out); break;
        case OpKind::Flatten:
        case OpKind::Reshape: std::copy_n(in, l.out.size(), out); break;
        default: break;  // refused by check_weights
      }
      if (l.kind == OpKind::Conv2D || l.kind == OpKind::Dense || l.kind == OpKind::Activation)
        activate(s.act, pixels, l.out.c, out);
    }
  }

  // Sparse categorical cross-entropy of the logits against `label`, computed through the
  // log-sum-exp (what TensorFlow does when the softmax output feeds the loss); with `batch` > 0
  // it also sets the gradient of the batch's mean loss at the logits: (softmax - onehot) / batch.
  double loss(std::uint32_t label, std::uint32_t batch, bool& correct) {
    const float* z = act_.back().data();
    const std::size_t c = classes();
    const std::size_t top = static_cast<std::size_t>(std::max_element(z, z + c) - z);
    correct = top == label;
    const float mx = z[top];
    float sum = 0.0f;
    for (std::size_t j = 0; j < c; ++j) sum += std::exp(z[j] - mx);
    const double value = double{mx} + std::log(double{sum}) - double{z[label]};
    if (batch > 0) {
      float* g = grad_.back().data();
      const float b = static_cast<float>(batch);
      for (std::size_t j = 0; j < c; ++j)
        g[j] = (std::exp(z[j] - mx) / sum - (j == label ? 1.0f : 0.0f)) / b;
    }
    return value;
  }

  void backward() {
    for (std::size_t i = layers_.size(); i-- > 0;) {
      LayerState& s = layers_[i];
      const Op& l = *s.l;
      const float* in = act_[i].data();
      const float* out = act_[i + 1].data();
      float* d = grad_[i + 1].data();
      // The first layer's input is the image: no gradient needed.
      float* din = i > 0 ? grad_[i].data() : nullptr;
      const std::size_t pixels = std::size_t{l.out.h} * l.out.w;
      if (din && l.kind != OpKind::Activation && !l.is_view()) std::fill_n(din, l.in.size(), 0.0f);
      switch (l.kind) {
        case OpKind::Conv2D:
          activate_backward(s.act, pixels, l.out.c, out, d);
          conv_backward(s, in, d, din);
          break;
        case OpKind::Dense:
          activate_backward(s.act, pixels, l.out.c, out, d);
          dense_backward(s, in, d, din);
          break;
        case OpKind::MaxPooling2D:
          if (din)
            for (std::size_t e = 0; e < l.out.size(); ++e) din[s.argmax[e]] += d[e];
          break;
        case OpKind::AveragePooling2D:
          if (din) avg_pool_backward(s, d, din);
          break;
        case OpKind::Activation:
          if (din) {
            std::copy_n(d, l.out.size(), din);
            activate_backward(s.act, pixels, l.out.c, out, din);
          }
          break;
        case OpKind::Flatten:
        case OpKind::Reshape:
          if (din) std::copy_n(d, l.out.size(), din);
          break;
        default: break;  // refused by check_weights
      }
    }
  }

  // Before each batch.
  void zero_gradients() {
    for (LayerState& s : layers_) {
      std::fill(s.kernel.grad.begin(), s.kernel.grad.end(), 0.0f);
      std::fill(s.grad_t.begin(), s.grad_t.end(), 0.0f);
      std::fill(s.bias.grad.begin(), s.bias.grad.end(), 0.0f);
    }
  }

  // Keras's Adam (keras.optimizers.Adam, Kingma & Ba 2015 with the bias correction folded into
  // the step size): alpha = lr sqrt(1 - b2^t) / (1 - b1^t); m += (g - m)(1 - b1);
  // v += (g^2 - v)(1 - b2); w -= alpha m / (sqrt(v) + eps).
  void adam_step(const TrainOptions& opt, std::uint64_t t) {
    const double td = static_cast<double>(t);
    const float alpha =
        static_cast<float>(opt.learning_rate * std::sqrt(1.0 - std::pow(opt.beta2, td)) /
                           (1.0 - std::pow(opt.beta1, td)));
    const float c1 = static_cast<float>(1.0 - opt.beta1), c2 = static_cast<float>(1.0 - opt.beta2);
    const float eps = static_cast<float>(opt.epsilon);
    for (LayerState& s : layers_) {
      if (!s.l->has_weights()) continue;
      if (!s.grad_t.empty()) {
        const std::size_t units = s.l->out.c, n = s.grad_t.size() / units;
        for (std::size_t j = 0; j < units; ++j)
          for (std::size_t i = 0; i < n; ++i) s.kernel.grad[i * units + j] = s.grad_t[j * n + i];
      }
      for (Param* p : {&s.kernel, &s.bias}) {
        if (p == &s.bias && !s.l->use_bias) continue;
        for (std::size_t k = 0; k < p->value.size(); ++k) {
          const float g = p->grad[k];
          p->m[k] += (g - p->m[k]) * c1;
          p->v[k] += (g * g - p->v[k]) * c2;
          p->value[k] -= p->m[k] * alpha / (std::sqrt(p->v[k]) + eps);
        }
      }
    }
    transpose_kernels();
  }

  [[nodiscard]] nn::Weights weights() const {
    nn::Weights w;
    w.layers.resize(layers_.size());
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      if (!layers_[i].l->has_weights()) continue;
      w.layers[i].kernel = layers_[i].kernel.value;
      w.layers[i].bias = layers_[i].bias.value;
    }
    return w;
  }

 private:
  // kernel_t follows every change of the kernels.
  void transpose_kernels() {
    for (LayerState& s : layers_) {
      if (!s.l->has_weights()) continue;
      const std::size_t cout = s.l->out.c, cin = s.kernel.value.size() / cout / taps(*s.l);
      for (std::size_t t = 0; t < taps(*s.l); ++t)
        for (std::size_t ci = 0; ci < cin; ++ci)
          for (std::size_t co = 0; co < cout; ++co)
            s.kernel_t[(t * cout + co) * cin + ci] = s.kernel.value[(t * cin + ci) * cout + co];
    }
  }

  static std::size_t taps(const Op& l) {
    return l.kind == OpKind::Conv2D ? std::size_t{l.kernel_h} * l.kernel_w : 1;
  }

  // out = conv(in, kernel) + bias; the taps in (ky, kx, ci) order, zero inputs skipped (their
  // products add nothing).
  // out = conv(in, kernel) + bias, each output pixel's taps in (ky, kx, ci) order.
  static void conv_forward(const LayerState& s, const float* in, float* out) {
    const Op& l = *s.l;
    const std::size_t cin = l.in.c, cout = l.out.c, kw = l.kernel_w, iw = l.in.w;
    const float* k = s.kernel.value.data();
    for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
      for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
        float* o = out + (std::size_t{oy} * l.out.w + ox) * cout;
        const Window w = window(s, oy, ox);
        const std::size_t taps = (w.kx1 - w.kx0) * cin;
        channel_blocks(cout, [&](std::size_t co, auto lane, auto vectors) {
          using T = typename decltype(lane)::type;
          constexpr std::size_t V = decltype(vectors)::value, kW = width<T>;
          T acc[V] = {};
          for (std::size_t ky = w.ky0; ky < w.ky1; ++ky) {
            const float* x = in + ((w.y0 + ky) * iw + w.x0 + w.kx0) * cin;
            const float* kr = k + (ky * kw + w.kx0) * cin * cout + co;
            for (std::size_t t = 0; t < taps; ++t) {
              const T xv = splat<T>(x[t]);
#pragma GCC unroll 8
              for (std::size_t v = 0; v < V; ++v) acc[v] += xv * load<T>(kr + t * cout + kW * v);
            }
          }
#pragma GCC unroll 8
          for (std::size_t v = 0; v < V; ++v) store(o + co + kW * v, acc[v]);
        });
        if (l.use_bias) add(cout, s.bias.value.data(), o);
      }
  }

  // Kernel gradient: per tap, the sum over the output pixels whose window holds it of
  // input x output gradient (pixels in scan order); then bias and input gradients.
  static void conv_backward(LayerState& s, const float* in, const float* d, float* din) {
    const Op& l = *s.l;
    const std::size_t cin = l.in.c, cout = l.out.c, kw = l.kernel_w, iw = l.in.w, ow = l.out.w;
    float* gk = s.kernel.grad.data();
    for (std::size_t ky = 0; ky < l.kernel_h; ++ky) {
      const Range ry = tap_range(s.pad_top, ky, l.stride_h, l.in.h, l.out.h);
      for (std::size_t kx = 0; kx < l.kernel_w; ++kx) {
        const Range rx = tap_range(s.pad_left, kx, l.stride_w, l.in.w, l.out.w);
        for (std::size_t ci = 0; ci < cin; ++ci) {
          float* g = gk + ((ky * kw + kx) * cin + ci) * cout;
          channel_blocks(cout, [&](std::size_t co, auto lane, auto vectors) {
            using T = typename decltype(lane)::type;
            constexpr std::size_t V = decltype(vectors)::value, kW = width<T>;
            T acc[V] = {};
            for (std::size_t oy = ry.lo; oy < ry.hi; ++oy) {
              const std::size_t iy = oy * l.stride_h + ky - static_cast<std::size_t>(s.pad_top);
              const float* xrow = in + iy * iw * cin + ci;
              const float* drow = d + oy * ow * cout + co;
              for (std::size_t ox = rx.lo; ox < rx.hi; ++ox) {
                const std::size_t ix = ox * l.stride_w + kx - static_cast<std::size_t>(s.pad_left);
                const T xv = splat<T>(xrow[ix * cin]);
#pragma GCC unroll 8
                for (std::size_t v = 0; v < V; ++v)
                  acc[v] += xv * load<T>(drow + ox * cout + kW * v);
              }
            }
#pragma GCC unroll 8
            for (std::size_t v = 0; v < V; ++v)
              store(g + co + kW * v, load<T>(g + co + kW * v) + acc[v]);
          });
        }
      }
    }
    const std::size_t pixels = std::size_t{l.out.h} * ow;
    if (l.use_bias)
      for (std::size_t p = 0; p < pixels; ++p) add(cout, d + p * cout, s.bias.grad.data());
    if (!din) return;
    const float* kt = s.kernel_t.data();
    for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
      for (std::uint32_t ox = 0; ox < ow; ++ox) {
        const float* dp = d + (std::size_t{oy} * ow + ox) * cout;
        for_window(s, oy, ox, [&](std::size_t ky, std::size_t kx, std::size_t px) {
          const std::size_t tap = ky * kw + kx;
          for (std::size_t co = 0; co < cout; ++co)
            axpy(cin, dp[co], kt + (tap * cout + co) * cin, din + px * cin);
        });
      }
  }

  // Dense through the transposed kernel: one contiguous dot product per unit.
  static void dense_forward(const LayerState& s, const float* in, float* out) {
    const Op& l = *s.l;
    const std::size_t n = l.in.size(), units = l.out.c;
    for (std::size_t j = 0; j < units; ++j) {
      out[j] = dot(n, in, s.kernel_t.data() + j * n);
      if (l.use_bias) out[j] += s.bias.value[j];
    }
  }

  static void dense_backward(LayerState& s, const float* in, const float* d, float* din) {
    const Op& l = *s.l;
    const std::size_t n = l.in.size(), units = l.out.c;
    if (l.use_bias) add(units, d, s.bias.grad.data());
    for (std::size_t j = 0; j < units; ++j) axpy(n, d[j], in, s.grad_t.data() + j * n);
    if (!din) return;
    for (std::size_t j = 0; j < units; ++j) axpy(n, d[j], s.kernel_t.data() + j * n, din);
  }

  // TensorFlow's pooling: windows clipped to the image; ties go to the first maximum in scan
  // order, which also receives the gradient.
  static void max_pool_forward(LayerState& s, const float* in, float* out) {
    const Op& l = *s.l;
    const std::size_t c = l.in.c;
    for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
      for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
        const std::size_t p = std::size_t{oy} * l.out.w + ox;
        float* o = out + p * c;
        std::uint32_t* am = s.argmax.data() + p * c;
        bool first = true;
        for_window(s, oy, ox, [&](std::size_t, std::size_t, std::size_t px) {
          const float* x = in + px * c;
          const auto base = static_cast<std::uint32_t>(px * c);
          if (first) {
            std::copy_n(x, c, o);
            for (std::size_t ch = 0; ch < c; ++ch) am[ch] = base + static_cast<std::uint32_t>(ch);
            first = false;
            return;
          }
          // Vector selects, not branches: which input wins is data-dependent and unpredictable.
          std::size_t ch = 0;
          for (; ch + 4 <= c; ch += 4) {
            const auto i0 = base + static_cast<std::uint32_t>(ch);
            const F4 xv = load<F4>(x + ch), ov = load<F4>(o + ch);
            const U4 iv = {i0, i0 + 1, i0 + 2, i0 + 3};
            U4 av;
            std::memcpy(&av, am + ch, sizeof av);
            const auto greater = xv > ov;
            store(o + ch, greater ? xv : ov);
            av = greater ? iv : av;
            std::memcpy(am + ch, &av, sizeof av);
          }
          for (; ch < c; ++ch)
            if (x[ch] > o[ch]) {
              o[ch] = x[ch];
              am[ch] = base + static_cast<std::uint32_t>(ch);
            }
        });
      }
  }

  // tf.nn.avg_pool: the mean over the window's pixels inside the image.
  static void avg_pool_forward(const LayerState& s, const float* in, float* out) {
    const Op& l = *s.l;
    const std::size_t c = l.in.c;
    for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
      for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
        float* o = out + (std::size_t{oy} * l.out.w + ox) * c;
        std::fill_n(o, c, 0.0f);
        std::size_t count = 0;
        for_window(s, oy, ox, [&](std::size_t, std::size_t, std::size_t px) {
          add(c, in + px * c, o);
          ++count;
        });
        const float n = static_cast<float>(count);
        for (std::size_t ch = 0; ch < c; ++ch) o[ch] /= n;
      }
  }

  static void avg_pool_backward(const LayerState& s, const float* d, float* din) {
    const Op& l = *s.l;
    const std::size_t c = l.in.c;
    for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
      for (std::uint32_t ox = 0; ox < l.out.w; ++ox) {
        const float* dp = d + (std::size_t{oy} * l.out.w + ox) * c;
        std::size_t count = 0;
        for_window(s, oy, ox, [&](std::size_t, std::size_t, std::size_t) { ++count; });
        const float n = static_cast<float>(count);
        for_window(s, oy, ox, [&](std::size_t, std::size_t, std::size_t px) {
          for (std::size_t ch = 0; ch < c; ++ch) din[px * c + ch] += dp[ch] / n;
        });
      }
  }

  static void check_weights(const ir::Graph& m, const nn::Weights& w) {
    // The trainer runs chains of the classes below; graphs and the other classes are inference
    // only (docs/models.md).
    for (std::size_t i = 0; i < m.ops.size(); ++i) {
      const Op& l = m.ops[i];
      const bool chained =
          l.inputs.size() == 1 && l.inputs[0] == (i == 0 ? ir::kGraphInput : i - 1);
      const bool trainable = l.kind == OpKind::Conv2D || l.kind == OpKind::Dense ||
                             l.kind == OpKind::MaxPooling2D || l.kind == OpKind::AveragePooling2D ||
                             l.kind == OpKind::Activation || l.is_view();
      if (!chained || !trainable)
        throw InputError(
            fmt::format("{}: layer {} ({}): the trainer takes a Sequential chain of "
                        "Conv2D, MaxPooling2D, AveragePooling2D, Activation, Flatten, "
                        "Reshape and Dense layers",
                        m.file, l.name, ir::name_of(l.kind)));
      if (l.activation == Act::LeakyRelu || l.activation == Act::Elu)
        throw InputError(
            fmt::format("{}: layer {}: the trainer's activations are linear, relu, "
                        "relu6, sigmoid, tanh and softmax",
                        m.file, l.name));
    }
    bool ok = w.layers.size() == m.ops.size();
    for (std::size_t i = 0; ok && i < m.ops.size(); ++i) {
      const Op& l = m.ops[i];
      if (!l.has_weights()) continue;
      const std::size_t fan_in = l.kind == OpKind::Dense ? l.in.size() : taps(l) * l.in.c;
      ok = w.layers[i].kernel.size() == fan_in * l.out.c && w.layers[i].bias.size() == l.out.c;
    }
    if (!ok)
      throw InputError(
          fmt::format("{}: the weights do not match model {}'s layers", m.file, m.name));
  }

  std::vector<LayerState> layers_;
  std::vector<std::vector<float>> act_, grad_;  // per layer input; [layers] = logits
};

void check_trainable(const ir::Graph& m, const data::Dataset& d, const char* role) {
  if (m.ops.empty()) throw InputError(fmt::format("{}: the model has no layers", m.file));
  const Op& last = m.ops.back();
  const Act final_act = last.activation;
  const bool softmax_last =
      final_act == Act::Softmax && (last.kind == OpKind::Activation || last.has_weights());
  if (!softmax_last)
    throw InputError(
        fmt::format("{}: layer {} ({}): the trainer needs a softmax as the last "
                    "layer (fused with the cross-entropy loss)",
                    m.file, last.name, ir::name_of(last.kind)));
  const ir::Shape out = m.output();
  if (out.h != 1 || out.w != 1)
    throw InputError(
        fmt::format("{}: output {}x{}x{} (the trainer needs a flat output of class "
                    "probabilities, 1x1xC)",
                    m.file, out.h, out.w, out.c));
  const ir::Shape image{d.images.rows, d.images.cols, 1};
  if (!(m.input == image))
    throw InputError(fmt::format("{}: input {}x{}x{}, but the {} images are {}x{}x1", m.file,
                                 m.input.h, m.input.w, m.input.c, role, d.images.rows,
                                 d.images.cols));
  if (d.images.count == 0 || d.labels.size() != d.images.count ||
      d.images.pixels.size() != std::size_t{d.images.count} * d.images.rows * d.images.cols)
    throw InputError(
        fmt::format("{} set: {} images, {} labels, {} pixels (needs at least one "
                    "image, one label per image)",
                    role, d.images.count, d.labels.size(), d.images.pixels.size()));
  for (std::size_t i = 0; i < d.labels.size(); ++i)
    if (d.labels[i] >= out.c)
      throw InputError(fmt::format("{} set: label {} = {} (model {} has {} classes)", role, i,
                                   d.labels[i], m.name, out.c));
}

// The tutorial feeds the pixel values cast to float32; `scale` is TrainOptions::input_scale.
void load_image(const data::Dataset& d, std::size_t i, float scale, float* dst) {
  const std::size_t n = std::size_t{d.images.rows} * d.images.cols;
  const std::uint8_t* src = d.images.pixels.data() + i * n;
  for (std::size_t k = 0; k < n; ++k) dst[k] = static_cast<float>(src[k]) * scale;
}

// Where an input scale can be folded: the first weighted layer, reached only through layers
// that commute with a positive factor (pooling, Flatten, relu, linear).
std::size_t scale_target(const ir::Graph& m) {
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const Op& l = m.ops[i];
    if (l.has_weights()) return i;
    const bool homogeneous =
        l.kind != OpKind::Activation || l.activation == Act::Relu || l.activation == Act::Linear;
    if (!homogeneous)
      throw InputError(
          fmt::format("{}: layer {} ({} {}) before the first weighted layer does not "
                      "commute with an input scale (training option input_scale "
                      "must be 1 for this model)",
                      m.file, l.name, ir::name_of(l.kind), ir::name_of(l.activation)));
  }
  throw InputError(fmt::format("{}: no weighted layer to train", m.file));
}

Evaluation run_evaluation(Network& net, const data::Dataset& d, float scale) {
  double loss = 0.0;
  std::size_t correct = 0;
  for (std::size_t i = 0; i < d.images.count; ++i) {
    load_image(d, i, scale, net.input());
    net.forward();
    bool ok = false;
    loss += net.loss(d.labels[i], 0, ok);
    correct += ok ? 1 : 0;
  }
  const double n = static_cast<double>(d.images.count);
  return {loss / n, static_cast<double>(correct) / n};
}

}  // namespace

TrainResult train(const ir::Graph& m, const data::Dataset& data, const TrainOptions& opt,
                  const data::Dataset* validation, const ProgressFn& progress) {
  auto bad = [](const char* key, double v, const char* allowed) {
    return InputError(fmt::format("training option {} = {} ({})", key, v, allowed));
  };
  if (opt.epochs == 0) throw bad("epochs", opt.epochs, "must be >= 1");
  if (opt.batch == 0) throw bad("batch", opt.batch, "must be >= 1");
  if (!(opt.learning_rate > 0.0) || !std::isfinite(opt.learning_rate))
    throw bad("learning_rate", opt.learning_rate, "must be a finite number > 0");
  if (!(opt.beta1 >= 0.0 && opt.beta1 < 1.0)) throw bad("beta1", opt.beta1, "must be in [0, 1)");
  if (!(opt.beta2 >= 0.0 && opt.beta2 < 1.0)) throw bad("beta2", opt.beta2, "must be in [0, 1)");
  if (!(opt.epsilon > 0.0) || !std::isfinite(opt.epsilon))
    throw bad("epsilon", opt.epsilon, "must be a finite number > 0");
  if (!(opt.input_scale > 0.0f) || !std::isfinite(opt.input_scale))
    throw bad("input_scale", opt.input_scale, "must be a finite number > 0");
  check_trainable(m, data, "training");
  if (validation) check_trainable(m, *validation, "validation");
  const std::size_t fold_into = scale_target(m);
  const FlushDenormals ftz;

  Network net(m, nn::random_weights(m, opt.seed));
  std::mt19937_64 shuffle_rng(opt.seed ^ kShuffleStream);
  const std::size_t n = data.images.count;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  const std::uint64_t batches = (n + opt.batch - 1) / opt.batch;

  TrainResult result;
  std::uint64_t step = 0;
  for (std::uint32_t epoch = 1; epoch <= opt.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    data::shuffle(order, shuffle_rng);  // a new order every epoch, as Keras's fit(shuffle=True)
    double loss_sum = 0.0;
    std::size_t correct = 0, seen = 0;
    for (std::uint64_t b = 0; b < batches; ++b) {
      const std::size_t lo = static_cast<std::size_t>(b * opt.batch);
      const std::size_t hi = std::min(n, lo + opt.batch);
      net.zero_gradients();
      for (std::size_t k = lo; k < hi; ++k) {
        load_image(data, order[k], opt.input_scale, net.input());
        net.forward();
        bool ok = false;
        loss_sum += net.loss(data.labels[order[k]], static_cast<std::uint32_t>(hi - lo), ok);
        correct += ok ? 1 : 0;
        net.backward();
      }
      seen += hi - lo;
      net.adam_step(opt, ++step);
      if (progress && b + 1 < batches) {
        Progress p;
        p.epoch = epoch;
        p.epochs = opt.epochs;
        p.batch = b + 1;
        p.batches = batches;
        p.loss = loss_sum / static_cast<double>(seen);
        p.accuracy = static_cast<double>(correct) / static_cast<double>(seen);
        progress(p);
      }
    }
    EpochStats st;
    st.epoch = epoch;
    st.loss = loss_sum / static_cast<double>(n);
    st.accuracy = static_cast<double>(correct) / static_cast<double>(n);
    if (validation) {
      const Evaluation e = run_evaluation(net, *validation, opt.input_scale);
      st.val_loss = e.loss;
      st.val_accuracy = e.accuracy;
    }
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.epochs.push_back(st);
    if (progress) {
      Progress p;
      p.epoch = epoch;
      p.epochs = opt.epochs;
      p.batch = batches;
      p.batches = batches;
      p.loss = st.loss;
      p.accuracy = st.accuracy;
      p.epoch_done = st;
      progress(p);
    }
  }
  result.weights = net.weights();
  // conv(s x) = conv(x) with the kernel times s; the bias is added after the kernel.
  if (opt.input_scale != 1.0f)
    for (float& k : result.weights.layers[fold_into].kernel) k *= opt.input_scale;
  return result;
}

Evaluation evaluate(const ir::Graph& m, const nn::Weights& w, const data::Dataset& data) {
  check_trainable(m, data, "evaluation");
  const FlushDenormals ftz;
  Network net(m, w);
  return run_evaluation(net, data, 1.0f);
}

}  // namespace tpu::train
