#include "sw/nn/training_reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include "numerics/activation.h"
#include "numerics/batch_norm.h"
#include "numerics/bf16.h"
#include "numerics/elementwise.h"
#include "numerics/loss.h"
#include "numerics/optimizer.h"
#include "sw/ir/ops.h"
#include "sw/nn/all_reduce.h"
#include "sw/nn/taps.h"

namespace tpu::nn {
namespace {

using ir::Act;
using ir::GradKind;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Role;
using ir::TensorId;
using Tensor = std::vector<float>;

// Functions (and the lambdas they call) always inlined into their caller, so that they compile
// for its instruction set: the loops of bf, mxu_accumulate and mxu_product run inside
// target("avx2") functions on CPUs with AVX2 (8 values per vector instruction instead of the
// baseline's 4). Every output is the same sequence of single operations at either width (no
// fused multiply-add: -ffp-contract=off contracts nothing), so the results are the same bits.
#define TPUSIM_REF_INLINE inline __attribute__((always_inline))
#define TPUSIM_REF_INLINE_LAMBDA __attribute__((always_inline))

bool host_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

TPUSIM_REF_INLINE void bf_all(const float* in, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = round_bf16(in[i]);
}
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) void bf_all_avx2(const float* in, std::size_t n, float* out) {
  bf_all(in, n, out);
}
#endif
Tensor bf(const Tensor& t) {
  Tensor r(t.size());
#if defined(__x86_64__) || defined(__i386__)
  if (host_has_avx2()) {
    bf_all_avx2(t.data(), t.size(), r.data());
    return r;
  }
#endif
  bf_all(t.data(), t.size(), r.data());
  return r;
}

// The MXU's order (docs/training.md): each output element sums its contraction k < K in chunks
// of R consecutive terms, each chunk from +0 in k order, each chunk's sum added to an accumulator
// that starts at +0. Products of two bf16 values are exact in fp32. Outputs are independent, so
// the loops below run over many outputs at once (vectorised) while each keeps that order.
//
// acc[o] for o < outputs, where term(k, psum) adds the products of term k into psum[0..outputs).
// With `start` false the chunks add into acc as it is: a contraction that runs over several
// weight tiles of a different shape (conv_input_grad's kernel positions).
template <class Term>
TPUSIM_REF_INLINE void mxu_chunks(std::size_t K, std::size_t R, std::size_t outputs, float* acc,
                                  float* psum, Term& term, bool start) {
  if (start) std::fill(acc, acc + outputs, 0.0f);
  for (std::size_t k0 = 0; k0 < K; k0 += R) {
    std::fill(psum, psum + outputs, 0.0f);
    for (std::size_t k = k0; k < std::min(K, k0 + R); ++k) term(k, psum);
    for (std::size_t o = 0; o < outputs; ++o) acc[o] += psum[o];
  }
}
#if defined(__x86_64__) || defined(__i386__)
template <class Term>
__attribute__((target("avx2"))) void mxu_chunks_avx2(std::size_t K, std::size_t R,
                                                     std::size_t outputs, float* acc, float* psum,
                                                     Term& term, bool start) {
  mxu_chunks(K, R, outputs, acc, psum, term, start);
}
#endif
template <class Term>
void mxu_accumulate(std::size_t K, std::size_t R, std::size_t outputs, float* acc, Term term,
                    bool start = true) {
  thread_local std::vector<float> psum;  // kept across calls: a step makes millions
  if (psum.size() < outputs) psum.resize(outputs);
#if defined(__x86_64__) || defined(__i386__)
  if (host_has_avx2()) return mxu_chunks_avx2(K, R, outputs, acc, psum.data(), term, start);
#endif
  mxu_chunks(K, R, outputs, acc, psum.data(), term, start);
}
// psum[o] += a * row[o] for o < n: one term of a contraction over many outputs.
TPUSIM_REF_INLINE void axpy(std::size_t n, float a, const float* __restrict row,
                            float* __restrict psum) {
  for (std::size_t o = 0; o < n; ++o) psum[o] += a * row[o];
}

// A matrix product in the MXU's order: acc[r * lda + o] for r < rows, o < n is the sum over
// k < K of x[r * x_row + k * x_k] * w[k * ldw + o], its terms in chunks of R consecutive k, each
// chunk from +0 in k order, each chunk's sum added to the accumulator, which starts at +0 (what
// mxu_accumulate computes for one output row). `x_row` and `x_k` let x be read as it is stored,
// by rows or by columns.
struct Product {
  std::size_t rows = 0, K = 0, n = 0;
  const float* x = nullptr;
  std::size_t x_row = 0, x_k = 0;
  const float* w = nullptr;
  std::size_t ldw = 0;
  float* acc = nullptr;
  std::size_t lda = 0;
};

// Output columns per block: two vectors (AVX2) or four (the baseline's 16-byte vectors). Weights
// are read a whole block wide, so a product whose n is not a multiple of it gets padded weights.
constexpr std::size_t kProductCols = 16;

// Rows [r0, r0 + RB) of p, every block of kProductCols columns, over one chunk [k0, k1): the
// chunk's sums in registers (a GCC vector extension, Bytes wide, one lane per output), then added
// to acc, or for the first chunk to +0 (acc is not read).
template <std::size_t Bytes, std::size_t RB>
TPUSIM_REF_INLINE void product_chunk(const Product& p, std::size_t k0, std::size_t k1,
                                     std::size_t r0) {
  const bool first = k0 == 0;
  typedef float V __attribute__((vector_size(Bytes)));
  constexpr std::size_t L = Bytes / sizeof(float), NV = kProductCols / L;
  for (std::size_t o0 = 0; o0 < p.n; o0 += kProductCols) {
    V sum[RB][NV] = {};
    for (std::size_t k = k0; k < k1; ++k) {
      V wk[NV];
      for (std::size_t v = 0; v < NV; ++v)
        std::memcpy(&wk[v], p.w + k * p.ldw + o0 + v * L, sizeof(V));
      for (std::size_t r = 0; r < RB; ++r) {
        const float xk = p.x[(r0 + r) * p.x_row + k * p.x_k];
        for (std::size_t v = 0; v < NV; ++v) sum[r][v] += xk * wk[v];
      }
    }
    const std::size_t cols = std::min(kProductCols, p.n - o0);
    for (std::size_t r = 0; r < RB; ++r) {
      float* a = p.acc + (r0 + r) * p.lda + o0;
      if (cols == kProductCols) {
        V old[NV] = {};
        if (!first) std::memcpy(old, a, sizeof old);
        for (std::size_t v = 0; v < NV; ++v) old[v] += sum[r][v];
        std::memcpy(a, old, sizeof old);
        continue;
      }
      float s[kProductCols];
      std::memcpy(s, sum[r], sizeof s);
      for (std::size_t o = 0; o < cols; ++o) a[o] = (first ? 0.0f : a[o]) + s[o];
    }
  }
}

// Chunk after chunk (a long contraction's chunk of weights stays in cache while every block of
// rows reads it), the accumulators from +0.
template <std::size_t Bytes>
TPUSIM_REF_INLINE void product_body(const Product& p, std::size_t R) {
  if (p.K == 0)
    for (std::size_t r = 0; r < p.rows; ++r) std::fill_n(p.acc + r * p.lda, p.n, 0.0f);
  for (std::size_t k0 = 0; k0 < p.K; k0 += R) {
    const std::size_t k1 = std::min(p.K, k0 + R);
    std::size_t r0 = 0;
    for (; r0 + 4 <= p.rows; r0 += 4) product_chunk<Bytes, 4>(p, k0, k1, r0);
    for (; r0 < p.rows; ++r0) product_chunk<Bytes, 1>(p, k0, k1, r0);
  }
}
void product_baseline(const Product& p, std::size_t R) { product_body<16>(p, R); }
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2"))) void product_avx2(const Product& p, std::size_t R) {
  product_body<32>(p, R);
}
#endif

void mxu_product(Product p, std::size_t R) {
  thread_local std::vector<float> padded;
  if (p.n % kProductCols != 0) {
    const std::size_t ldw = (p.n + kProductCols - 1) / kProductCols * kProductCols;
    padded.assign(p.K * ldw, 0.0f);
    for (std::size_t k = 0; k < p.K; ++k) std::copy_n(p.w + k * p.ldw, p.n, &padded[k * ldw]);
    p.w = padded.data(), p.ldw = ldw;
  }
#if defined(__x86_64__) || defined(__i386__)
  if (host_has_avx2()) return product_avx2(p, R);
#endif
  product_baseline(p, R);
}

// One tap of max pooling's gradient over c channels: where v[ch] > best[ch] (false for a NaN on
// either side), the tap's value and number k replace the best so far. Four channels per SSE
// vector (a GCC vector extension), each lane the scalar compare and selects.
void max_step(std::size_t c, const float* v, std::int32_t k, float* best, std::int32_t* tap) {
  typedef float F4 __attribute__((vector_size(16)));
  typedef std::int32_t I4 __attribute__((vector_size(16)));
  std::size_t ch = 0;
  for (; ch + 4 <= c; ch += 4) {
    F4 x, b;
    I4 t;
    std::memcpy(&x, v + ch, sizeof x);
    std::memcpy(&b, best + ch, sizeof b);
    std::memcpy(&t, tap + ch, sizeof t);
    const I4 more = x > b;
    b = more ? x : b;
    t = more ? I4{k, k, k, k} : t;
    std::memcpy(best + ch, &b, sizeof b);
    std::memcpy(tap + ch, &t, sizeof t);
  }
  for (; ch < c; ++ch)
    if (v[ch] > best[ch]) best[ch] = v[ch], tap[ch] = k;
}

// The window of every output pixel of n images, as the MXU's rows see it: K = kh·kw·ci values
// per pixel in (ky, kx, ci) order, +0 in the padding; the taps found once, copied for each image.
Tensor im2col(const Op& l, const float* images, std::size_t n) {
  const Taps tp = taps_of(l);
  const std::size_t ci = l.in.c, K = std::size_t{tp.kh} * tp.kw * ci;
  const std::size_t per_image = std::size_t{l.out.h} * l.out.w * K;
  std::vector<std::pair<std::size_t, std::size_t>> from_to;  // input element, column element
  for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t tap) {
    from_to.emplace_back(ip * ci, op * K + tap * ci);
  });
  Tensor cols(n * per_image, 0.0f);
  for (std::size_t b = 0; b < n; ++b) {
    const float* image = images + b * l.in.size();
    float* to = &cols[b * per_image];
    for (const auto& [i, o] : from_to) std::copy_n(image + i, ci, to + o);
  }
  return cols;
}

// [rows][cols] -> [cols][rows].
Tensor transposed(const Tensor& m, std::size_t rows, std::size_t cols) {
  Tensor t(m.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  return t;
}

// The activation on every element; the switch outside the loop.
void activate(Act a, Tensor& t) {
  const auto each = [&t](auto f) {
    for (float& v : t) v = f(v);
  };
  switch (a) {
    case Act::Linear: return;
    case Act::Relu: return each([](float x) { return numerics::relu(x); });
    case Act::Relu6: return each([](float x) { return numerics::relu6(x); });
    case Act::Sigmoid: return each([](float x) { return numerics::sigmoid(x); });
    case Act::Tanh: return each([](float x) { return numerics::tanh_act(x); });
    default: break;
  }
  throw std::logic_error("training reference: activation without a gradient rule");
}

// dy · f'(x) in place on every element, written with the activation's output y (the eltwise
// *_grad operations); the switch outside the loop.
void activation_grad(Act a, const Tensor& y, Tensor& dy) {
  const auto each = [&](auto f) {
    for (std::size_t e = 0; e < dy.size(); ++e) dy[e] = f(y[e], dy[e]);
  };
  switch (a) {
    case Act::Relu: return each([](float v, float d) { return v > 0.0f ? d : 0.0f; });
    case Act::Relu6: return each([](float v, float d) { return v > 0.0f && v < 6.0f ? d : 0.0f; });
    case Act::Sigmoid: return each([](float v, float d) { return d * (v * (1.0f - v)); });
    case Act::Tanh: return each([](float v, float d) { return d * (1.0f - v * v); });
    default: break;
  }
  throw std::logic_error("training reference: activation without a gradient rule");
}

bool is_max_pool(const Op& l) {
  return l.kind == OpKind::MaxPooling2D || l.kind == OpKind::GlobalMaxPooling2D;
}

// One forward and backward pass over `n` images of one replica.
struct Pass {
  const Graph& g;
  const TrainPlan& plan;
  const Weights& w;
  std::size_t n;
  bool training = true;  // BatchNormalization: the pass's statistics, else the moving ones
  // The replica's moving statistics: training updates them, evaluation reads them (none: the
  // weights').
  Moving* moving = nullptr;
  std::map<TensorId, Tensor> t;
  std::map<std::size_t, std::vector<numerics::BatchStats>> stats;  // per BatchNormalization
  // Distributed BatchNormalization (TrainPlan::bn_group): per layer, the group's sums, {Σx, Σx²}
  // for the forward and {Σdy, dot} for dx (each channel's, the first C values then the next C),
  // over `group` times this pass's rows. None: the pass's own.
  std::map<std::size_t, Tensor> group_sums, group_grad_sums;
  std::size_t group = 1;

  Tensor& value(std::size_t op) { return t[{Role::Value, op}]; }
  [[nodiscard]] const Op& op(std::size_t i) const { return g.ops[i]; }

  // Training: each channel's sums over the pass's rows (images and pixels) in order from +0,
  // its statistics, then y per element (numerics/batch_norm.h). Evaluation: the moving
  // statistics, y = x * s + (beta - mean * s) with s = gamma * rsqrt(moving_variance + epsilon)
  // (XLA's BatchNormInference).
  Tensor batch_norm(std::size_t i) {
    const Op& l = op(i);
    const Tensor& x = value(l.inputs[0]);
    const std::size_t c = l.out.c, rows = x.size() / c;
    // Ones without `scale`, zeros without `center` (nn::LayerWeights).
    const Tensor &gamma = w.layers[i].gamma, &beta = w.layers[i].beta;
    Tensor y(x.size());
    if (!training) {
      const Tensor& mean = moving ? moving->at(i).mean : w.layers[i].moving_mean;
      const Tensor& var = moving ? moving->at(i).variance : w.layers[i].moving_variance;
      Tensor scale(c), shift(c);
      for (std::size_t k = 0; k < c; ++k) {
        scale[k] = gamma[k] * numerics::rsqrt(var[k] + l.epsilon);
        shift[k] = beta[k] - mean[k] * scale[k];
      }
      for (std::size_t e = 0; e < x.size(); ++e) y[e] = x[e] * scale[e % c] + shift[e % c];
      return y;
    }
    const auto it = group_sums.find(i);
    const Tensor sums = it != group_sums.end() ? it->second : batch_norm_sums(i);
    const std::size_t count = it != group_sums.end() ? rows * group : rows;
    std::vector<numerics::BatchStats>& s = stats[i];
    s.resize(c);
    for (std::size_t k = 0; k < c; ++k)
      s[k] = numerics::batch_stats(sums[k], sums[c + k], static_cast<float>(count), l.epsilon);
    if (moving) {
      MovingStats& m = moving->at(i);
      const float rest = 1.0f - l.momentum;
      for (std::size_t k = 0; k < c; ++k) {
        m.mean[k] = numerics::moving_average(m.mean[k], s[k].mean, l.momentum, rest);
        m.variance[k] = numerics::moving_average(m.variance[k], s[k].variance, l.momentum, rest);
      }
    }
    for (std::size_t e = 0; e < x.size(); ++e)
      y[e] = numerics::batch_norm(x[e], s[e % c], gamma[e % c], beta[e % c]);
    return y;
  }

  // BatchNormalization i's sums over this pass's rows, each channel's in row order from +0:
  // {Σx (C values), Σx·x (C values)}.
  Tensor batch_norm_sums(std::size_t i) {
    const Tensor& x = value(op(i).inputs[0]);
    const std::size_t c = op(i).out.c, rows = x.size() / c;
    Tensor sums(2 * c, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t k = 0; k < c; ++k) {
        const float v = x[r * c + k];
        sums[k] += v;
        sums[c + k] += v * v;
      }
    return sums;
  }

  // Its backward's sums over this pass's rows, in row order from +0: {dbeta = Σdy, dot = Σdy·(x
  // − mean)}.
  Tensor batch_norm_grad_sums(std::size_t i, const Tensor& x, const Tensor& dy) const {
    const std::vector<numerics::BatchStats>& s = stats.at(i);
    const std::size_t c = op(i).out.c, rows = x.size() / c;
    Tensor sums(2 * c, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t k = 0; k < c; ++k) {
        sums[k] += dy[r * c + k];
        sums[c + k] += dy[r * c + k] * (x[r * c + k] - s[k].mean);
      }
    return sums;
  }

  // dgamma, or dx (numerics/batch_norm.h), from this pass's statistics and the channel sums
  // dbeta and dot: dgamma from the pass's own, dx from the group's when distributed.
  Tensor batch_norm_grad(std::size_t i, const Tensor& x, const Tensor& dy, bool input) const {
    const Op& l = op(i);
    const std::vector<numerics::BatchStats>& s = stats.at(i);
    const std::size_t c = l.out.c, rows = x.size() / c;
    if (!input) {
      const Tensor sums = batch_norm_grad_sums(i, x, dy);
      Tensor dgamma(c);
      for (std::size_t k = 0; k < c; ++k)
        dgamma[k] = numerics::batch_norm_gamma_grad(sums[c + k], s[k]);
      return dgamma;
    }
    const auto it = group_grad_sums.find(i);
    const Tensor sums = it != group_grad_sums.end() ? it->second : batch_norm_grad_sums(i, x, dy);
    const auto count = static_cast<float>(it != group_grad_sums.end() ? rows * group : rows);
    const Tensor& gamma = w.layers[i].gamma;
    Tensor scale(c), dx(x.size());
    for (std::size_t k = 0; k < c; ++k)
      scale[k] = numerics::batch_norm_input_scale(gamma[k], s[k], count);
    for (std::size_t e = 0; e < x.size(); ++e) {
      const std::size_t k = e % c;
      dx[e] =
          numerics::batch_norm_input_grad(x[e], dy[e], s[k], count, sums[k], sums[c + k], scale[k]);
    }
    return dx;
  }

  // Conv2D or Dense: the accumulators plus the bias (activate's (acc + bias) * 1).
  Tensor weighted(std::size_t i) {
    const Op& l = op(i);
    const Tensor xb = bf(value(l.inputs[0]));
    const Tensor wb = bf(w.layers[i].kernel);
    const Tensor& bias = w.layers[i].bias;
    const std::size_t out = l.out.size(), co = l.out.c;
    const std::size_t K = wb.size() / co;  // rows of the kernel: the contraction
    Tensor z(n * out);
    // The MXU's input rows: one per image (Dense) or per output pixel of every image.
    const Tensor cols = l.kind == OpKind::Dense ? Tensor() : im2col(l, xb.data(), n);
    const float* rows = l.kind == OpKind::Dense ? xb.data() : cols.data();
    const std::size_t n_rows = n * out / co;
    mxu_product({n_rows, K, co, rows, K, 1, wb.data(), co, z.data(), co}, plan.tile_rows);
    for (std::size_t r = 0; r < n_rows; ++r)
      for (std::size_t c = 0; c < co; ++c) z[r * co + c] += bias[c];
    return z;
  }

  Tensor pool(const Op& l, const Tensor& x) {
    const std::size_t in = l.in.size(), out = l.out.size(), c = l.in.c;
    const bool max = is_max_pool(l);
    Tensor y(n * out, 0.0f);
    std::vector<char> seen(out / c);  // per output pixel: a tap has been taken (all channels)
    std::vector<float> count(out / c, 0.0f);
    for_taps(l, [&](std::size_t, std::size_t op, std::size_t) { count[op] += 1.0f; });
    for (std::size_t b = 0; b < n; ++b) {
      std::fill(seen.begin(), seen.end(), 0);
      for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t) {
        float* o = &y[b * out + op * c];
        const float* v = &x[b * in + ip * c];
        if (!max)
          for (std::size_t ch = 0; ch < c; ++ch) o[ch] += v[ch];
        else if (seen[op])
          for (std::size_t ch = 0; ch < c; ++ch) o[ch] = numerics::max_float(o[ch], v[ch]);
        else
          std::copy_n(v, c, o);
        seen[op] = 1;
      });
      if (!max)
        for (std::size_t o = 0; o < out; ++o) y[b * out + o] /= count[o / c];
    }
    return y;
  }

  // Each tensor is dropped once its last reader has run (forward operation i reads at position
  // i, backward operation j at ops + j): a ResNet-50 pass would otherwise hold every value and
  // gradient of its images at once.
  std::map<std::size_t, std::vector<TensorId>> drops;
  void plan_drops(const ir::TrainingGraph& tg) {
    std::map<TensorId, std::size_t> last;
    for (std::size_t i = 0; i < g.ops.size(); ++i)
      for (std::size_t x : g.ops[i].inputs) last[{Role::Value, x}] = i;
    for (std::size_t j = 0; j < tg.ops.size(); ++j)
      for (const TensorId& id : tg.ops[j].inputs)
        if (id.role != Role::Parameter) last[id] = g.ops.size() + j;
    for (const auto& [id, pos] : last) drops[pos].push_back(id);
  }
  void drop(std::size_t pos) {
    if (const auto it = drops.find(pos); it != drops.end())
      for (const TensorId& id : it->second) t.erase(id);
  }

  void forward(std::size_t loss_op) {
    for (std::size_t i = 0; i < g.ops.size(); ++i) {
      forward_op(i, loss_op);
      drop(i);
    }
  }

  void forward_op(std::size_t i, std::size_t loss_op) {
    {
      const Op& l = op(i);
      Tensor out;
      switch (l.kind) {
        case OpKind::Conv2D:
        case OpKind::Dense: {
          Tensor z = weighted(i);
          if (i == loss_op && l.activation == Act::Softmax) {
            t[{Role::PreActivation, i}] = std::move(z);
            return;  // the loss reads the logits; nothing reads the softmax
          }
          out = std::move(z);
          activate(l.activation, out);
          break;
        }
        case OpKind::Activation:
          if (i == loss_op) return;
          out = value(l.inputs[0]);
          activate(l.activation, out);
          break;
        case OpKind::Flatten:
        case OpKind::Reshape: out = value(l.inputs[0]); break;
        case OpKind::BatchNormalization: out = batch_norm(i); break;
        case OpKind::Add:
          out = value(l.inputs[0]);
          for (std::size_t k = 1; k < l.inputs.size(); ++k) {
            const Tensor& b = value(l.inputs[k]);
            for (std::size_t e = 0; e < out.size(); ++e) out[e] += b[e];
          }
          break;
        case OpKind::MaxPooling2D:
        case OpKind::AveragePooling2D:
        case OpKind::GlobalAveragePooling2D:
        case OpKind::GlobalMaxPooling2D: out = pool(l, value(l.inputs[0])); break;
        case OpKind::ZeroPadding2D: {
          const Tensor& x = value(l.inputs[0]);
          out.assign(n * l.out.size(), 0.0f);
          for_padded_pixels(
              l, n, [&](std::size_t a, std::size_t b) { std::copy_n(&x[a], l.in.c, &out[b]); });
          break;
        }
        default:
          throw std::logic_error("training reference: " + std::string(ir::name_of(l.kind)) +
                                 " has no gradient rule");
      }
      value(i) = std::move(out);
    }
  }

  // SparseSoftmaxCrossEntropyWithLogits on each row (numerics::softmax_xent_row, the xent
  // instruction's definition), the gradient scaled by `scale`, the targets smoothed by the plan's
  // label smoothing.
  Tensor xent(const Tensor& z, std::size_t k, const std::int32_t* labels, float scale, float* loss,
              float* correct) const {
    Tensor d(z.size());
    for (std::size_t r = 0; r < n; ++r) {
      const numerics::XentRow row =
          numerics::softmax_xent_row(&z[r * k], &d[r * k], k, static_cast<std::size_t>(labels[r]),
                                     scale, plan.label_smoothing);
      loss[r] = row.loss;
      correct[r] = row.correct;
    }
    return d;
  }

  Tensor pool_grad(const Op& l, const Tensor& x, const Tensor& dy) const {
    const std::size_t in = l.in.size(), out = l.out.size(), c = l.in.c;
    Tensor dx(n * in, 0.0f);
    std::vector<float> count(out / c, 0.0f);
    for_taps(l, [&](std::size_t, std::size_t op, std::size_t) { count[op] += 1.0f; });
    // Per output pixel, its taps in order; the first maximum (or each tap) takes dy.
    std::vector<std::vector<std::size_t>> window(out / c);
    for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t) { window[op].push_back(ip); });
    // Each output pixel's channels side by side (every channel's adds keep their order: a
    // window's taps are distinct pixels); max keeps per channel the best tap so far and its value.
    std::vector<float> best(c);
    std::vector<std::int32_t> best_tap(c);
    for (std::size_t b = 0; b < n; ++b)
      for (std::size_t op = 0; op < out / c; ++op) {
        const float* d = &dy[b * out + op * c];
        const std::vector<std::size_t>& taps = window[op];
        if (!is_max_pool(l)) {
          for (std::size_t ip : taps) {
            float* to = &dx[b * in + ip * c];
            for (std::size_t ch = 0; ch < c; ++ch) to[ch] += d[ch] / count[op];
          }
          continue;
        }
        std::copy_n(&x[b * in + taps[0] * c], c, best.data());
        std::fill(best_tap.begin(), best_tap.end(), 0);
        for (std::size_t k = 1; k < taps.size(); ++k)
          max_step(c, &x[b * in + taps[k] * c], static_cast<std::int32_t>(k), best.data(),
                   best_tap.data());
        for (std::size_t ch = 0; ch < c; ++ch) dx[b * in + taps[best_tap[ch]] * c + ch] += d[ch];
      }
    return dx;
  }

  // dx[b][k] = sum over the output features c of dz[b][c] * W[k][c].
  Tensor dense_input_grad(const Op& l, const Tensor& dz, const Tensor& kernel) const {
    const Tensor dzb = bf(dz), wt = transposed(bf(kernel), l.in.size(), l.out.c);
    const std::size_t in = l.in.size(), co = l.out.c;
    Tensor dx(n * in);
    mxu_product({n, co, in, dzb.data(), co, 1, wt.data(), in, dx.data(), in}, plan.tile_rows);
    return dx;
  }

  // dW[k][c] = sum over images b0 .. b0+m-1 of x[b][k] * dz[b][c].
  Tensor dense_kernel_grad(const Op& l, const Tensor& x, const Tensor& dz, std::size_t b0,
                           std::size_t m) const {
    const std::size_t in = l.in.size(), co = l.out.c;
    // Summed as dW^T[c][k] (the product dz * x is x * dz, exactly), so that each term runs along
    // the long axis of the input's elements, then transposed.
    const Tensor xb = bf(Tensor(&x[b0 * in], &x[(b0 + m) * in]));
    const Tensor dzb = bf(Tensor(&dz[b0 * co], &dz[(b0 + m) * co]));
    Tensor dwt(co * in);
    mxu_product({co, m, in, dzb.data(), 1, co, xb.data(), in, dwt.data(), in}, plan.tile_rows);
    return transposed(dwt, co, in);
  }

  // The contraction runs over the output pixels of images b0 .. b0+m-1, image after image.
  Tensor conv_kernel_grad(const Op& l, const Tensor& x, const Tensor& dz, std::size_t b0,
                          std::size_t m) const {
    const std::size_t in = l.in.size(), co = l.out.c, pixels = std::size_t{l.out.h} * l.out.w;
    const std::size_t K = std::size_t{l.kernel_h} * l.kernel_w * l.in.c;
    const Tensor xb = bf(Tensor(&x[b0 * in], &x[(b0 + m) * in]));
    const Tensor dzb = bf(Tensor(&dz[b0 * pixels * co], &dz[(b0 + m) * pixels * co]));
    const Tensor cols = im2col(l, xb.data(), m);
    Tensor dw(K * co);
    mxu_product({K, m * pixels, co, cols.data(), 1, K, dzb.data(), co, dw.data(), co},
                plan.tile_rows);
    return dw;
  }

  // A kernel's gradient: a sum per chunk of the plan's images (the whole pass by default), each
  // added to the running sum in `acc`.
  void kernel_grad(const ir::GradOp& o, const Tensor& x, const Tensor& dz, Tensor& acc) const {
    const Op& l = op(o.op);
    const std::size_t chunk = o.op < plan.kernel_chunk.size() && plan.kernel_chunk[o.op] != 0
                                  ? std::size_t{plan.kernel_chunk[o.op]}
                                  : n;
    for (std::size_t b0 = 0; b0 < n; b0 += chunk) {
      const std::size_t m = std::min(chunk, n - b0);
      const Tensor r = o.kind == GradKind::ConvKernel ? conv_kernel_grad(l, x, dz, b0, m)
                                                      : dense_kernel_grad(l, x, dz, b0, m);
      for (std::size_t e = 0; e < r.size(); ++e) acc[e] += r[e];
    }
  }

  // For each input pixel and channel: the flipped kernel's positions in order, each position's
  // output channels in chunks of tile_rows (one weight tile per position and chunk).
  Tensor conv_input_grad(const Op& l, const Tensor& dz, const Tensor& kernel) const {
    const Tensor dzb = bf(dz), wb = bf(kernel);
    const Taps tp = taps_of(l);
    const std::size_t in = l.in.size(), ci = l.in.c, co = l.out.c, out = l.out.size();
    // Per kernel position, its [ci][co] block transposed to [co][ci].
    std::vector<Tensor> wt;
    for (std::size_t pos = 0; pos < std::size_t{tp.kh} * tp.kw; ++pos)
      wt.push_back(transposed(Tensor(&wb[pos * ci * co], &wb[(pos + 1) * ci * co]), ci, co));
    const Tensor zeros(co, 0.0f);
    Tensor dx(n * in), acc(ci);
    for (std::size_t b = 0; b < n; ++b)
      for (std::uint32_t iy = 0; iy < l.in.h; ++iy)
        for (std::uint32_t ix = 0; ix < l.in.w; ++ix) {
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (std::uint32_t fy = 0; fy < tp.kh; ++fy)
            for (std::uint32_t fx = 0; fx < tp.kw; ++fx) {
              const std::uint32_t ky = tp.kh - 1 - fy, kx = tp.kw - 1 - fx;
              // The output pixel whose tap (ky, kx) reads (iy, ix), if one does.
              const std::int64_t ny = std::int64_t{iy} + tp.top - std::int64_t{ky} * tp.dh;
              const std::int64_t nx = std::int64_t{ix} + tp.left - std::int64_t{kx} * tp.dw;
              const bool hit = ny >= 0 && nx >= 0 && ny % tp.sh == 0 && nx % tp.sw == 0 &&
                               ny / tp.sh < l.out.h && nx / tp.sw < l.out.w;
              const float* grad =
                  hit ? &dzb[b * out +
                             static_cast<std::size_t>((ny / tp.sh) * l.out.w + nx / tp.sw) * co]
                      : zeros.data();
              const Tensor& wpos = wt[std::size_t{ky} * tp.kw + kx];
              mxu_accumulate(
                  co, plan.tile_rows, ci, acc.data(),
                  [&](std::size_t d, float* psum)
                      TPUSIM_REF_INLINE_LAMBDA { axpy(ci, grad[d], &wpos[d * ci], psum); },
                  false);
            }
          std::copy(acc.begin(), acc.end(), &dx[b * in + (std::size_t{iy} * l.in.w + ix) * ci]);
        }
    return dx;
  }

  // Runs the backward pass; parameter gradients are added into `grads` (kernel: this pass's
  // sum, then one add; bias: row after row, continuing the sum).
  void backward(const ir::TrainingGraph& tg, const std::int32_t* labels, float scale,
                std::map<TensorId, Tensor>& grads, float* loss, float* correct) {
    for (std::size_t j = 0; j < tg.ops.size(); ++j) {
      backward_op(tg.ops[j], labels, scale, grads, loss, correct);
      drop(g.ops.size() + j);
    }
  }

  void backward_op(const ir::GradOp& o, const std::int32_t* labels, float scale,
                   std::map<TensorId, Tensor>& grads, float* loss, float* correct) {
    {
      const Op& l = op(o.op);
      const auto in = [&](std::size_t k) -> const Tensor& { return t.at(o.inputs[k]); };
      Tensor r;
      switch (o.kind) {
        case GradKind::SoftmaxCrossEntropy:
          r = xent(in(0), g.output().size(), labels, scale, loss, correct);
          break;
        case GradKind::Activation:
          r = in(1);
          activation_grad(o.act, in(0), r);
          break;
        case GradKind::Pass: r = in(0); break;
        case GradKind::Pool: r = pool_grad(l, in(0), in(1)); break;
        case GradKind::DenseInput: r = dense_input_grad(l, in(0), in(1)); break;
        case GradKind::ConvInput: r = conv_input_grad(l, in(0), in(1)); break;
        case GradKind::DenseKernel:
        case GradKind::ConvKernel: kernel_grad(o, in(0), in(1), grads.at(o.output)); return;
        case GradKind::BatchNormGamma: r = batch_norm_grad(o.op, in(0), in(1), false); break;
        case GradKind::BatchNormInput: r = batch_norm_grad(o.op, in(0), in(1), true); break;
        case GradKind::Crop:
          r.resize(n * l.in.size());
          for_padded_pixels(
              l, n, [&](std::size_t a, std::size_t b) { std::copy_n(&in(0)[b], l.in.c, &r[a]); });
          break;
        case GradKind::Bias: {
          Tensor& acc = grads.at(o.output);
          const Tensor& dz = in(0);
          // Row after row; each channel's sum in row order.
          const std::size_t co = l.out.c;
          for (std::size_t row = 0; row < dz.size() / co; ++row)
            for (std::size_t c = 0; c < co; ++c) acc[c] += dz[row * co + c];
          return;
        }
      }
      if (o.output.role == Role::ParameterGradient) {
        Tensor& acc = grads.at(o.output);
        for (std::size_t e = 0; e < r.size(); ++e) acc[e] += r[e];
      } else if (o.accumulate) {
        Tensor& dst = t.at(o.output);
        for (std::size_t e = 0; e < r.size(); ++e) dst[e] += r[e];
      } else {
        t[o.output] = std::move(r);
      }
    }
  }
};

// The parameters' tensors a pass's backward reads.
void add_parameters(Pass& p) {
  for (std::size_t i = 0; i < p.g.ops.size(); ++i)
    for (const ir::ParamSpec& s : ir::op_info(p.g.ops[i].kind).params(p.g.ops[i]))
      p.t[{Role::Parameter, i, s.param}] = tensor_of(p.w.layers[i], s.param);
}

bool has_batch_norm(const Graph& g) {
  return std::any_of(g.ops.begin(), g.ops.end(),
                     [](const Op& l) { return l.kind == OpKind::BatchNormalization; });
}

// A pass over `n` images; `forward`: its forward pass run, and the parameters in place for the
// backward (else the caller runs the forward and then gives the parameters, add_parameters).
Pass make_pass(const Graph& g, const ir::TrainingGraph& tg, const TrainPlan& plan, const Weights& w,
               const float* images, std::size_t n, Moving* moving, bool training = true,
               bool forward = true) {
  Pass p{g, plan, w, n, training, moving, {}, {}, {}, {}, 1, {}};
  p.plan_drops(tg);
  // The chip receives the images as bf16.
  Tensor x(images, images + n * g.input.size());
  p.value(kGraphInput) = bf(x);
  if (!forward) return p;
  p.forward(tg.loss_op);
  add_parameters(p);
  return p;
}

// A distributed BatchNormalization group's passes (TrainPlan::bn_group), one per replica, taken
// through the step together: at each BatchNormalization the group's sums replace each pass's own
// (all_reduce.h, over the group's box of chips), forward and backward.
void group_step(std::vector<Pass>& group, const ir::TrainingGraph& tg, std::uint32_t cores,
                const std::vector<std::uint32_t>& dims, const std::int32_t* labels, float scale,
                std::vector<std::map<TensorId, Tensor>>& grads, float* loss, float* correct) {
  const Graph& g = group.front().g;
  const auto all_reduced = [&](const std::function<Tensor(Pass&)>& sums) {
    std::vector<Tensor> each;
    for (Pass& p : group) each.push_back(sums(p));
    return all_reduce(each, cores, dims);
  };
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].kind == OpKind::BatchNormalization) {
      const Tensor total = all_reduced([&](Pass& p) { return p.batch_norm_sums(i); });
      for (Pass& p : group) p.group_sums[i] = total;
    }
    for (Pass& p : group) {
      p.forward_op(i, tg.loss_op);
      p.drop(i);
    }
  }
  for (Pass& p : group) add_parameters(p);
  for (std::size_t j = 0; j < tg.ops.size(); ++j) {
    const ir::GradOp& o = tg.ops[j];
    if (o.kind == GradKind::BatchNormInput) {
      const Tensor total = all_reduced([&](Pass& p) {
        return p.batch_norm_grad_sums(o.op, p.t.at(o.inputs[0]), p.t.at(o.inputs[1]));
      });
      for (Pass& p : group) p.group_grad_sums[o.op] = total;
    }
    for (std::size_t k = 0; k < group.size(); ++k) {
      const std::size_t at = k * group[k].n;
      group[k].backward_op(o, labels + at, scale, grads[k], loss + at, correct + at);
      group[k].drop(g.ops.size() + j);
    }
  }
}

std::size_t micro_batch_of(const TrainPlan& plan, std::size_t share) {
  return plan.micro_batch == 0 ? share : std::min<std::size_t>(plan.micro_batch, share);
}

// The optimizer's step on every element of parameter `param` (numerics/optimizer.h, the update
// instruction's definitions); Adam's powers for step t as the host computes them; LARS's norms
// from the whole tensor, in the documented order of sums, or plain momentum on the tensors it
// does not scale.
void update(const Optimizer& opt, ir::Param param, std::uint64_t t, Tensor& w, const Tensor& g,
            Tensor& m, Tensor& v) {
  const float lr = numerics::warmup_learning_rate(opt.learning_rate, t, opt.warmup_steps);
  switch (opt.kind) {
    case OptimizerKind::Sgd:
      for (std::size_t e = 0; e < w.size(); ++e) w[e] = numerics::sgd_step(w[e], g[e], lr);
      return;
    case OptimizerKind::Lars:
      if (lars_scales(param)) {
        const float scaled_lr = numerics::lars_scaled_lr(
            lr, opt.lars_eta, opt.weight_decay, numerics::lars_sum_squares(w.data(), w.size()),
            numerics::lars_sum_squares(g.data(), g.size()));
        for (std::size_t e = 0; e < w.size(); ++e)
          numerics::lars_step(w[e], m[e], g[e], scaled_lr, opt.momentum, opt.weight_decay);
        return;
      }
      [[fallthrough]];
    case OptimizerKind::Momentum:
      for (std::size_t e = 0; e < w.size(); ++e)
        numerics::momentum_step(w[e], m[e], g[e], lr, opt.momentum);
      return;
    case OptimizerKind::Adam: {
      const numerics::AdamPowers p = numerics::adam_powers(opt.beta1, opt.beta2, t);
      const float alpha = numerics::adam_alpha(lr, p.beta1_power, p.beta2_power);
      for (std::size_t e = 0; e < w.size(); ++e)
        numerics::adam_step(w[e], m[e], v[e], g[e], alpha, opt.beta1, opt.beta2, opt.epsilon);
      return;
    }
  }
}

}  // namespace

TrainState initial_state(const Graph&, const ir::TrainingGraph& t, Weights w,
                         const Optimizer& opt) {
  TrainState s;
  for (const TensorId& p : t.parameters) {
    const std::size_t size = tensor_of(w.layers[p.op], p.param).size();
    s.m.emplace_back(opt.kind == OptimizerKind::Sgd ? 0 : size, 0.0f);
    s.v.emplace_back(opt.kind == OptimizerKind::Adam ? size : 0, 0.0f);
  }
  s.weights = std::move(w);
  return s;
}

Weights weights_with_moving(const TrainState& s, std::size_t r) {
  Weights w = s.weights;
  if (r < s.moving.size())
    for (const auto& [i, m] : s.moving[r]) {
      w.layers[i].moving_mean = m.mean;
      w.layers[i].moving_variance = m.variance;
    }
  return w;
}

StepRecords reference_step(const Graph& g, const ir::TrainingGraph& t, const TrainPlan& plan,
                           const Optimizer& opt, TrainState& s, const float* images,
                           const std::int32_t* labels, std::size_t global_batch,
                           std::vector<std::vector<float>>* gradients) {
  if (plan.replicas == 0 || plan.tile_rows == 0 || global_batch % plan.replicas != 0)
    throw std::invalid_argument(
        fmt::format("training reference: a global batch of {} does not split over {} replicas",
                    global_batch, plan.replicas));
  const std::size_t share = global_batch / plan.replicas, size = g.input.size();
  const std::size_t micro = micro_batch_of(plan, share);
  const float scale = 1.0f / static_cast<float>(global_batch);
  StepRecords rec;
  rec.loss.resize(global_batch);
  rec.correct.resize(global_batch);
  std::vector<std::map<TensorId, Tensor>> replica(plan.replicas);
  if (s.moving.size() != plan.replicas) {
    s.moving.assign(plan.replicas, {});
    for (Moving& m : s.moving)
      for (std::size_t i = 0; i < g.ops.size(); ++i)
        if (g.ops[i].kind == ir::OpKind::BatchNormalization)
          m[i] = {s.weights.layers[i].moving_mean, s.weights.layers[i].moving_variance};
  }
  std::uint32_t chips = 1;
  for (std::uint32_t d : plan.chip_dims) chips *= d;
  if (plan.replicas % chips != 0)
    throw std::invalid_argument(fmt::format(
        "training reference: {} replicas do not split over {} chips", plan.replicas, chips));
  for (std::uint32_t r = 0; r < plan.replicas; ++r)
    for (const TensorId& p : t.parameters)
      replica[r][{Role::ParameterGradient, p.op, p.param}] =
          Tensor(tensor_of(s.weights.layers[p.op], p.param).size(), 0.0f);
  const std::uint32_t G = plan.bn_group;
  if (G > 1 && has_batch_norm(g)) {  // distributed BatchNormalization: the groups in lockstep
    if (plan.replicas % G != 0 || micro != share)
      throw std::invalid_argument(fmt::format(
          "training reference: BatchNormalization groups of {} need the {} replicas to split "
          "into them and one pass a step",
          G, plan.replicas));
    for (std::uint32_t r0 = 0; r0 < plan.replicas; r0 += G) {
      std::vector<Pass> group;
      for (std::uint32_t r = r0; r < r0 + G; ++r) {
        group.push_back(make_pass(g, t, plan, s.weights, images + r * share * size, share,
                                  &s.moving[r], true, false));
        group.back().group = G;
      }
      std::vector<std::map<TensorId, Tensor>> grads(replica.begin() + r0, replica.begin() + r0 + G);
      group_step(group, t, plan.bn_dims.empty() ? G : plan.replicas / chips, plan.bn_dims,
                 labels + r0 * share, scale, grads, rec.loss.data() + r0 * share,
                 rec.correct.data() + r0 * share);
      std::move(grads.begin(), grads.end(), replica.begin() + r0);
    }
  } else {
    for (std::uint32_t r = 0; r < plan.replicas; ++r)
      for (std::size_t first = r * share; first < (r + 1) * share; first += micro) {
        const std::size_t n = std::min(micro, (r + 1) * share - first);
        Pass pass = make_pass(g, t, plan, s.weights, images + first * size, n, &s.moving[r]);
        pass.backward(t, labels + first, scale, replica[r], rec.loss.data() + first,
                      rec.correct.data() + first);
      }
  }
  // The replicas' gradients summed as the system sums them (all_reduce.h: each chip's cores in
  // order, then the chips over the torus), the parameters one after the other; every replica
  // applies the same update.
  std::vector<Tensor> flat(plan.replicas);
  for (std::uint32_t r = 0; r < plan.replicas; ++r)
    for (const TensorId& p : t.parameters) {
      const Tensor& grad = replica[r].at({Role::ParameterGradient, p.op, p.param});
      flat[r].insert(flat[r].end(), grad.begin(), grad.end());
    }
  const Tensor total = all_reduce(flat, plan.replicas / chips, plan.chip_dims, plan.buckets);
  ++s.iterations;
  std::size_t at = 0;
  for (std::size_t k = 0; k < t.parameters.size(); ++k) {
    const TensorId id{Role::ParameterGradient, t.parameters[k].op, t.parameters[k].param};
    Tensor& w = tensor_of(s.weights.layers[id.op], id.param);
    Tensor sum(total.begin() + std::ptrdiff_t(at), total.begin() + std::ptrdiff_t(at + w.size()));
    at += w.size();
    update(opt, id.param, s.iterations, w, sum, s.m[k], s.v[k]);
    if (gradients) gradients->push_back(std::move(sum));
  }
  return rec;
}

namespace {

// Validation's forward of images [first, first + n) with one replica's moving statistics.
void evaluate(const Graph& g, const ir::TrainingGraph& t, const TrainPlan& plan, const Weights& w,
              const Moving* moving, const float* images, const std::int32_t* labels,
              std::size_t first, std::size_t n, StepRecords& rec) {
  const std::size_t micro = micro_batch_of(plan, n), size = g.input.size();
  Moving copy = moving ? *moving : Moving{};
  for (std::size_t at = first; at < first + n; at += micro) {
    const std::size_t m = std::min(micro, first + n - at);
    Pass pass = make_pass(g, t, plan, w, images + at * size, m, moving ? &copy : nullptr, false);
    const ir::GradOp& loss = t.ops.front();
    (void)pass.xent(pass.t.at(loss.inputs[0]), g.output().size(), labels + at, 1.0f,
                    rec.loss.data() + at, rec.correct.data() + at);
  }
}

}  // namespace

StepRecords reference_evaluate(const Graph& g, const ir::TrainingGraph& t, const TrainPlan& plan,
                               const Weights& w, const float* images, const std::int32_t* labels,
                               std::size_t n) {
  StepRecords rec;
  rec.loss.resize(n);
  rec.correct.resize(n);
  evaluate(g, t, plan, w, nullptr, images, labels, 0, n, rec);
  return rec;
}

StepRecords reference_evaluate(const Graph& g, const ir::TrainingGraph& t, const TrainPlan& plan,
                               const TrainState& s, const float* images, const std::int32_t* labels,
                               std::size_t n, std::size_t global_batch) {
  if (plan.replicas == 0 || global_batch % plan.replicas != 0 || n > global_batch)
    throw std::invalid_argument(
        fmt::format("training reference: {} of a global batch of {} images do not split over {} "
                    "replicas",
                    n, global_batch, plan.replicas));
  StepRecords rec;
  rec.loss.resize(n);
  rec.correct.resize(n);
  const std::size_t share = global_batch / plan.replicas;
  for (std::size_t r = 0; r * share < n; ++r)
    evaluate(g, t, plan, s.weights, s.moving.empty() ? nullptr : &s.moving[r], images, labels,
             r * share, std::min(share, n - r * share), rec);
  return rec;
}

}  // namespace tpu::nn
