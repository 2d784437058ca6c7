#include "sw/nn/fast_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "numerics/activation.h"
#include "numerics/bf16.h"
#include "numerics/fixed_point.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#ifdef TPUSIM_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace tpu::nn::fast {

#ifdef TPUSIM_HAVE_DNNL
namespace {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

}  // namespace

bool onednn_int8() {
  // dnnl_cpu_isa_t is a set of feature bits: 0x40 is avx512_core_vnni's (also in avx512_core_bf16
  // and _amx), 0x400 avx2_vnni's.
  static const bool exact = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    return (isa & 0x40u) != 0 || (isa & 0x400u) != 0;
  }();
  return exact;
}

namespace {

// Whether every sum of the convolution is exact in fp32 whatever the order: each partial sum is
// at most sum_k |x_k| |w_kc| <= 128 sum_k |w_kc| (int8 inputs), and integers up to 2^24 are exact
// in fp32, so each product and each addition (fused or not) is.
bool exact_in_f32(const ConvShape& s, const std::int8_t* kernel) {
  const std::size_t K = std::size_t{s.kh} * s.kw * s.ic;
  std::vector<std::int64_t> column(s.oc, 0);
  for (std::size_t k = 0; k < K; ++k)
    for (std::uint32_t c = 0; c < s.oc; ++c) column[c] += std::abs(int{kernel[k * s.oc + c]});
  for (const std::int64_t a : column)
    if (128 * a >= (std::int64_t{1} << 24)) return false;
  return true;
}

}  // namespace

bool onednn_built() { return true; }

struct ConvS8::Impl {
  ConvShape shape;
  const std::int8_t* kernel = nullptr;
  // Without VNNI: the same convolution in fp32 on the int8 values, where exact_in_f32 holds.
  bool f32 = false;
  std::vector<float> kernel_f, src_f, dst_f;
  dnnl::stream stream;
  dnnl::memory weights[2];
  // Per batch size: its primitive (the full batch's, and a last shorter one's).
  std::size_t n[2] = {0, 0};
  dnnl::convolution_forward conv[2];
  dnnl::memory::desc src_md[2], dst_md[2];

  // The primitive for n images and the kernel in the layout it wants.
  void make(std::size_t slot, std::size_t images) {
    using dnnl::memory;
    using dt = memory::data_type;
    using tag = memory::format_tag;
    using dim = memory::dim;
    const ConvShape& s = shape;
    const dim pb = dim{s.oh - 1} * s.sh + dim{s.kh - 1} * s.dh + 1 - dim{s.ih} - dim{s.pt};
    const dim pr = dim{s.ow - 1} * s.sw + dim{s.kw - 1} * s.dw + 1 - dim{s.iw} - dim{s.pl};
    const auto b = static_cast<dim>(images);
    dnnl::engine& engine = cpu_engine();
    const dt in_type = f32 ? dt::f32 : dt::s8, out_type = f32 ? dt::f32 : dt::s32;
    src_md[slot] = memory::desc({b, s.ic, s.ih, s.iw}, in_type, tag::nhwc);
    dst_md[slot] = memory::desc({b, s.oc, s.oh, s.ow}, out_type, tag::nhwc);
    const memory::desc any_wei_md({s.oc, s.ic, s.kh, s.kw}, in_type, tag::any);
    // No bias, no scales: only the exact int32 sums come from oneDNN; the bias and the
    // requantization follow numerics/ (requantize_rows).
    const dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src_md[slot],
        any_wei_md, dst_md[slot], {s.sh, s.sw}, {dim{s.dh} - 1, dim{s.dw} - 1}, {s.pt, s.pl},
        {pb, pr});
    const dnnl::convolution_forward::primitive_desc pd(desc, engine);
    const memory::desc user_md({s.oc, s.ic, s.kh, s.kw}, in_type, tag::hwio);
    memory user(user_md, engine,
                f32 ? static_cast<void*>(kernel_f.data()) : const_cast<std::int8_t*>(kernel));
    weights[slot] = memory(pd.weights_desc(), engine);
    dnnl::reorder(user, weights[slot]).execute(stream, user, weights[slot]);
    stream.wait();
    conv[slot] = dnnl::convolution_forward(pd);
    n[slot] = images;
  }
};

ConvS8::ConvS8(const ConvShape& s, const std::int8_t* kernel, ConvRoute route) {
  if (route == ConvRoute::Best) route = onednn_int8() ? ConvRoute::S8 : ConvRoute::F32;
  if (route == ConvRoute::S8 && !onednn_int8()) return;
  const bool f32 = route == ConvRoute::F32;
  if (f32 && !exact_in_f32(s, kernel)) return;
  // Zeros below and right: as many as the last window reaches past the image; an output that
  // leaves input rows unread (negative padding) runs the plain loops.
  using dim = dnnl::memory::dim;
  if (dim{s.oh - 1} * s.sh + dim{s.kh - 1} * s.dh + 1 < dim{s.ih} + s.pt ||
      dim{s.ow - 1} * s.sw + dim{s.kw - 1} * s.dw + 1 < dim{s.iw} + s.pl)
    return;
  try {
    auto impl = std::make_unique<Impl>();
    impl->shape = s;
    impl->kernel = kernel;
    impl->f32 = f32;
    if (f32) impl->kernel_f.assign(kernel, kernel + std::size_t{s.kh} * s.kw * s.ic * s.oc);
    impl->stream = dnnl::stream(cpu_engine());
    impl->make(0, s.n);
    impl_ = impl.release();
  } catch (const dnnl::error&) {
    // A shape this oneDNN does not implement: the plain loops run.
  }
}

ConvS8::~ConvS8() { delete impl_; }

bool ConvS8::ok() const { return impl_ != nullptr; }

void ConvS8::run(const std::int8_t* in, std::size_t n, std::int32_t* acc) {
  Impl& m = *impl_;
  const std::size_t slot = n == m.n[0] ? 0 : 1;
  if (m.n[slot] != n) m.make(slot, n);
  dnnl::engine& engine = cpu_engine();
  const ConvShape& s = m.shape;
  const std::size_t in_size = n * s.ih * s.iw * s.ic, out_size = n * s.oh * s.ow * s.oc;
  if (m.f32) {
    m.src_f.assign(in, in + in_size);
    m.dst_f.resize(out_size);
  }
  dnnl::memory src(m.src_md[slot], engine,
                   m.f32 ? static_cast<void*>(m.src_f.data()) : const_cast<std::int8_t*>(in));
  dnnl::memory dst(m.dst_md[slot], engine,
                   m.f32 ? static_cast<void*>(m.dst_f.data()) : static_cast<void*>(acc));
  m.conv[slot].execute(
      m.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, m.weights[slot]}, {DNNL_ARG_DST, dst}});
  m.stream.wait();
  // Whole numbers below 2^24 (exact_in_f32): the conversion is exact.
  if (m.f32)
    for (std::size_t i = 0; i < out_size; ++i) acc[i] = static_cast<std::int32_t>(m.dst_f[i]);
}

SingleThread::SingleThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
SingleThread::~SingleThread() { omp_set_num_threads(saved_); }

#else

bool onednn_int8() { return false; }
bool onednn_built() { return false; }
struct ConvS8::Impl {};
ConvS8::ConvS8(const ConvShape&, const std::int8_t*, ConvRoute) {}
ConvS8::~ConvS8() = default;
bool ConvS8::ok() const { return false; }
void ConvS8::run(const std::int8_t*, std::size_t, std::int32_t*) {}
SingleThread::SingleThread() = default;
SingleThread::~SingleThread() = default;

#endif

void requantize_rows_scalar(const std::int32_t* acc, std::size_t pixels, std::size_t oc,
                            const std::int32_t* bias, const std::int32_t* multiplier,
                            const std::int32_t* shift, bool relu, std::int8_t* out) {
  for (std::size_t p = 0; p < pixels; ++p)
    for (std::size_t c = 0; c < oc; ++c) {
      std::int8_t v = numerics::requantize(numerics::add_bias(acc[p * oc + c], bias[c]),
                                           multiplier[c], shift[c]);
      if (relu) v = numerics::relu(v);
      out[p * oc + c] = v;
    }
}

namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// Eight lanes of numerics::requantize(numerics::add_bias(...)) in int64: every step of the
// scalar definitions, branches as masks, for both signs of the shift at once — a left shift of
// max(-shift, 0), the doubling high multiply, a rounding right shift of max(shift, 0) (each the
// identity at 0).
// GCC 12's avx512fintrin.h starts some results from _mm512_undefined_epi32(), which
// -Wmaybe-uninitialized reports where they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TPUSIM_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw")))

// Eight int32 values widened to the int64 lanes.
TPUSIM_AVX512 inline __m512i load(const std::int32_t* p) {
  return _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// (x * m + nudge) / 2^31, truncating toward zero, in int64 lanes: the doubling high multiply's
// last step for products ab = x * m.
TPUSIM_AVX512 inline __m512i high_half(__m512i ab) {
  const __m512i t = _mm512_add_epi64(
      ab, _mm512_mask_blend_epi64(_mm512_cmpge_epi64_mask(ab, _mm512_setzero_si512()),
                                  _mm512_set1_epi64(1 - (std::int64_t{1} << 30)),
                                  _mm512_set1_epi64(std::int64_t{1} << 30)));
  return _mm512_srai_epi64(
      _mm512_add_epi64(t, _mm512_and_si512(_mm512_srai_epi64(t, 63),
                                           _mm512_set1_epi64((std::int64_t{1} << 31) - 1))),
      31);
}

// Sixteen lanes in int32 for channels whose shifts are all right shifts (>= 0: no saturating
// left shift) and whose multipliers are not INT32_MIN (no doubling overflow): the common case,
// at twice the lanes. add_bias saturates where the int32 sum overflows (both operands' signs
// differ from the sum's); the products run as int64 on the even and the odd lanes; the rounding
// right shift and the int8 saturation stay in int32 lanes.
TPUSIM_AVX512 inline void requantize16(const std::int32_t* a, const std::int32_t* b,
                                       const std::int32_t* mp, const std::int32_t* sp, bool relu,
                                       std::int8_t* o) {
  const __m512i acc = _mm512_loadu_si512(a), bias = _mm512_loadu_si512(b);
  const __m512i m = _mm512_loadu_si512(mp), s = _mm512_loadu_si512(sp);
  const __m512i sum = _mm512_add_epi32(acc, bias);
  const __mmask16 overflow = _mm512_movepi32_mask(
      _mm512_and_si512(_mm512_xor_si512(acc, sum), _mm512_xor_si512(bias, sum)));
  const __m512i saturated = _mm512_mask_blend_epi32(
      _mm512_movepi32_mask(acc), _mm512_set1_epi32(std::numeric_limits<std::int32_t>::max()),
      _mm512_set1_epi32(std::numeric_limits<std::int32_t>::min()));
  const __m512i x = _mm512_mask_mov_epi32(sum, overflow, saturated);
  const __m512i even = high_half(_mm512_mul_epi32(x, m));
  const __m512i odd =
      high_half(_mm512_mul_epi32(_mm512_srli_epi64(x, 32), _mm512_srli_epi64(m, 32)));
  const __m512i h = _mm512_mask_blend_epi32(0xaaaa, even, _mm512_slli_epi64(odd, 32));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(one, s), one);
  const __m512i remainder = _mm512_and_si512(h, mask);
  const __m512i half = _mm512_srai_epi32(mask, 1);
  const __m512i threshold =
      _mm512_mask_add_epi32(half, _mm512_cmplt_epi32_mask(h, _mm512_setzero_si512()), half, one);
  __m512i r = _mm512_srav_epi32(h, s);
  r = _mm512_mask_add_epi32(r, _mm512_cmpgt_epi32_mask(remainder, threshold), r, one);
  if (relu) r = _mm512_max_epi32(r, _mm512_setzero_si512());
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm512_cvtsepi32_epi8(r));
}

TPUSIM_AVX512 void requantize_rows_avx512(const std::int32_t* acc, std::size_t pixels,
                                          std::size_t oc, const std::int32_t* bias,
                                          const std::int32_t* multiplier, const std::int32_t* shift,
                                          bool relu, std::int8_t* out) {
  const __m512i zero = _mm512_setzero_si512(), one = _mm512_set1_epi64(1);
  const __m512i min32 = _mm512_set1_epi64(std::numeric_limits<std::int32_t>::min());
  const __m512i max32 = _mm512_set1_epi64(std::numeric_limits<std::int32_t>::max());
  const __m512i nudge_pos = _mm512_set1_epi64(std::int64_t{1} << 30);
  const __m512i nudge_neg = _mm512_set1_epi64(1 - (std::int64_t{1} << 30));
  const __m512i low31 = _mm512_set1_epi64((std::int64_t{1} << 31) - 1);
  const __m512i min8 = _mm512_set1_epi64(-128), max8 = _mm512_set1_epi64(127);
  const __m512i low8 = relu ? zero : min8;
  const std::size_t vec = oc - oc % 8;
  // Per block of 16 channels: whether requantize16 may take it.
  std::vector<char> right_only(oc / 16);
  for (std::size_t k = 0; k < right_only.size(); ++k) {
    right_only[k] = 1;
    for (std::size_t c = 16 * k; c < 16 * k + 16; ++c)
      if (shift[c] < 0 || multiplier[c] == std::numeric_limits<std::int32_t>::min())
        right_only[k] = 0;
  }
  for (std::size_t p = 0; p < pixels; ++p) {
    const std::int32_t* a = acc + p * oc;
    std::int8_t* o = out + p * oc;
    for (std::size_t c = 0; c < vec; c += 8) {
      if (c % 16 == 0 && c / 16 < right_only.size() && right_only[c / 16]) {
        requantize16(a + c, bias + c, multiplier + c, shift + c, relu, o + c);
        c += 8;
        continue;
      }
      const __m512i m = load(multiplier + c), s = load(shift + c);
      // add_bias: saturate_int32(acc + bias).
      __m512i x = _mm512_add_epi64(load(a + c), load(bias + c));
      x = _mm512_min_epi64(_mm512_max_epi64(x, min32), max32);
      // saturating_shift_left(x, -shift) for a negative shift (|x| <= 2^31, at most 31 places:
      // no overflow in int64 before the saturation).
      const __m512i left = _mm512_max_epi64(_mm512_sub_epi64(zero, s), zero);
      x = _mm512_min_epi64(_mm512_max_epi64(_mm512_sllv_epi64(x, left), min32), max32);
      // saturating_rounding_doubling_high_mul(x, m): (x * m + nudge) / 2^31, truncating; the
      // product of two int32 values (the low halves of the lanes) is exact in int64.
      const __m512i ab = _mm512_mul_epi32(x, m);
      const __m512i t = _mm512_add_epi64(
          ab, _mm512_mask_blend_epi64(_mm512_cmpge_epi64_mask(ab, zero), nudge_neg, nudge_pos));
      __m512i h = _mm512_srai_epi64(
          _mm512_add_epi64(t, _mm512_and_si512(_mm512_srai_epi64(t, 63), low31)), 31);
      h = _mm512_mask_mov_epi64(
          h, _mm512_cmpeq_epi64_mask(x, min32) & _mm512_cmpeq_epi64_mask(m, min32), max32);
      // rounding_divide_by_pot(h, shift) for a positive shift.
      const __m512i right = _mm512_max_epi64(s, zero);
      const __m512i mask = _mm512_sub_epi64(_mm512_sllv_epi64(one, right), one);
      const __m512i remainder = _mm512_and_si512(h, mask);
      const __m512i half = _mm512_srai_epi64(mask, 1);
      const __m512i threshold =
          _mm512_mask_add_epi64(half, _mm512_cmplt_epi64_mask(h, zero), half, one);
      __m512i r = _mm512_srav_epi64(h, right);
      r = _mm512_mask_add_epi64(r, _mm512_cmpgt_epi64_mask(remainder, threshold), r, one);
      // saturate_int8, then the ReLU's max(q, 0).
      r = _mm512_min_epi64(_mm512_max_epi64(r, low8), max8);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(o + c), _mm512_cvtepi64_epi8(r));
    }
    requantize_rows_scalar(a + vec, 1, oc - vec, bias + vec, multiplier + vec, shift + vec, relu,
                           o + vec);
  }
}
#define TPUSIM_AVX2 __attribute__((target("avx2")))

// requantize16's steps on eight int32 lanes, for CPUs with AVX2 but not AVX-512 (channels whose
// shifts are all right shifts and whose multipliers are not INT32_MIN). AVX2 has no 64-bit
// arithmetic shift; the doubling high multiply's result fits int32, so its low 32 bits — all
// that is kept — are the same after a logical shift.
TPUSIM_AVX2 inline __m256i high_half_avx2(__m256i ab) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i t =
      _mm256_add_epi64(ab, _mm256_blendv_epi8(_mm256_set1_epi64x(std::int64_t{1} << 30),
                                              _mm256_set1_epi64x(1 - (std::int64_t{1} << 30)),
                                              _mm256_cmpgt_epi64(zero, ab)));
  return _mm256_srli_epi64(
      _mm256_add_epi64(t, _mm256_and_si256(_mm256_cmpgt_epi64(zero, t),
                                           _mm256_set1_epi64x((std::int64_t{1} << 31) - 1))),
      31);
}

TPUSIM_AVX2 inline void requantize8_avx2(const std::int32_t* a, const std::int32_t* b,
                                         const std::int32_t* mp, const std::int32_t* sp, bool relu,
                                         std::int8_t* o) {
  const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
  const __m256i acc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
  const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mp));
  const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp));
  // add_bias: where the int32 sum overflows (both operands' signs differ from the sum's), the
  // saturation toward the accumulator's sign.
  const __m256i sum = _mm256_add_epi32(acc, bias);
  const __m256i overflow = _mm256_srai_epi32(
      _mm256_and_si256(_mm256_xor_si256(acc, sum), _mm256_xor_si256(bias, sum)), 31);
  const __m256i saturated = _mm256_blendv_epi8(
      _mm256_set1_epi32(std::numeric_limits<std::int32_t>::max()),
      _mm256_set1_epi32(std::numeric_limits<std::int32_t>::min()), _mm256_srai_epi32(acc, 31));
  const __m256i x = _mm256_blendv_epi8(sum, saturated, overflow);
  const __m256i even = high_half_avx2(_mm256_mul_epi32(x, m));
  const __m256i odd =
      high_half_avx2(_mm256_mul_epi32(_mm256_srli_epi64(x, 32), _mm256_srli_epi64(m, 32)));
  const __m256i h = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa);
  // rounding_divide_by_pot(h, shift).
  const __m256i mask = _mm256_sub_epi32(_mm256_sllv_epi32(one, s), one);
  const __m256i remainder = _mm256_and_si256(h, mask);
  const __m256i threshold = _mm256_add_epi32(_mm256_srai_epi32(mask, 1),
                                             _mm256_and_si256(_mm256_cmpgt_epi32(zero, h), one));
  __m256i r = _mm256_srav_epi32(h, s);
  r = _mm256_add_epi32(r, _mm256_and_si256(_mm256_cmpgt_epi32(remainder, threshold), one));
  if (relu) r = _mm256_max_epi32(r, zero);
  // saturate_int8: two saturating packs (int32 -> int16 -> int8).
  const __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(o), _mm_packs_epi16(p16, p16));
}

TPUSIM_AVX2 void requantize_rows_avx2(const std::int32_t* acc, std::size_t pixels, std::size_t oc,
                                      const std::int32_t* bias, const std::int32_t* multiplier,
                                      const std::int32_t* shift, bool relu, std::int8_t* out) {
  // Per block of 8 channels: whether requantize8_avx2 may take it; the others run the scalar
  // definitions.
  std::vector<char> right_only(oc / 8);
  for (std::size_t k = 0; k < right_only.size(); ++k) {
    right_only[k] = 1;
    for (std::size_t c = 8 * k; c < 8 * k + 8; ++c)
      if (shift[c] < 0 || multiplier[c] == std::numeric_limits<std::int32_t>::min())
        right_only[k] = 0;
  }
  const std::size_t vec = oc - oc % 8;
  for (std::size_t p = 0; p < pixels; ++p) {
    const std::int32_t* a = acc + p * oc;
    std::int8_t* o = out + p * oc;
    for (std::size_t c = 0; c < vec; c += 8) {
      if (right_only[c / 8])
        requantize8_avx2(a + c, bias + c, multiplier + c, shift + c, relu, o + c);
      else
        requantize_rows_scalar(a + c, 1, 8, bias + c, multiplier + c, shift + c, relu, o + c);
    }
    requantize_rows_scalar(a + vec, 1, oc - vec, bias + vec, multiplier + vec, shift + vec, relu,
                           o + vec);
  }
}

// Four rows at a time, 16 columns a register: each weight row is loaded once for the four.
template <std::size_t R>
TPUSIM_AVX512 void bf16_block(const float* x, std::size_t K, const float* w, std::size_t N,
                              std::size_t tile, float* acc) {
  for (std::size_t c0 = 0; c0 < N; c0 += 16) {
    const auto m = static_cast<__mmask16>(N - c0 >= 16 ? 0xffffu : (1u << (N - c0)) - 1u);
    __m512 total[R], partial[R];
    for (std::size_t k0 = 0; k0 < K; k0 += tile) {
      for (std::size_t r = 0; r < R; ++r) partial[r] = _mm512_setzero_ps();
      const std::size_t k1 = std::min(K, k0 + tile);
      for (std::size_t k = k0; k < k1; ++k) {
        const __m512 wk = _mm512_maskz_loadu_ps(m, w + k * N + c0);
        for (std::size_t r = 0; r < R; ++r)
          partial[r] = _mm512_add_ps(partial[r], _mm512_mul_ps(_mm512_set1_ps(x[r * K + k]), wk));
      }
      for (std::size_t r = 0; r < R; ++r)
        total[r] = k0 == 0 ? partial[r] : _mm512_add_ps(total[r], partial[r]);
    }
    for (std::size_t r = 0; r < R; ++r)
      _mm512_mask_storeu_ps(acc + r * N + c0, m, K == 0 ? _mm512_setzero_ps() : total[r]);
  }
}

TPUSIM_AVX512 void bf16_sums_avx512(const float* x, std::size_t rows, std::size_t K, const float* w,
                                    std::size_t N, std::size_t tile, float* acc) {
  std::size_t r = 0;
  for (; r + 4 <= rows; r += 4) bf16_block<4>(x + r * K, K, w, N, tile, acc + r * N);
  for (; r < rows; ++r) bf16_block<1>(x + r * K, K, w, N, tile, acc + r * N);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

bool requantize_vectorised() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return avx512;
#else
  return false;
#endif
}

namespace {

template <bool kRelu>
inline void activate_bf16_loop(const float* __restrict acc, std::size_t rows, std::size_t N,
                               const float* __restrict bias, const float* __restrict scale,
                               std::uint16_t* __restrict out) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < N; ++c) {
      float v = numerics::scale_float(acc[r * N + c], bias[c], scale[c]);
      if (kRelu) v = numerics::relu(v);
      out[r * N + c] = to_bf16(v).bits;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void activate_bf16_avx512(
    const float* acc, std::size_t rows, std::size_t N, const float* bias, const float* scale,
    bool relu, std::uint16_t* out) {
  if (relu)
    activate_bf16_loop<true>(acc, rows, N, bias, scale, out);
  else
    activate_bf16_loop<false>(acc, rows, N, bias, scale, out);
}
#endif

}  // namespace

void activate_bf16_rows(const float* acc, std::size_t rows, std::size_t N, const float* bias,
                        const float* scale, bool relu, std::uint16_t* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (requantize_vectorised()) return activate_bf16_avx512(acc, rows, N, bias, scale, relu, out);
#endif
  if (relu)
    activate_bf16_loop<true>(acc, rows, N, bias, scale, out);
  else
    activate_bf16_loop<false>(acc, rows, N, bias, scale, out);
}

bool bf16_sums(const float* x, std::size_t rows, std::size_t K, const float* w, std::size_t N,
               std::size_t tile, float* acc) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (tile == 0 || !requantize_vectorised()) return false;
  bf16_sums_avx512(x, rows, K, w, N, tile, acc);
  return true;
#else
  return false;
#endif
}

bool cpu_has(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (isa == Isa::Avx2) return avx2;
  if (isa == Isa::Avx512) return requantize_vectorised();
  return true;
#else
  return isa == Isa::Scalar;
#endif
}

void requantize_rows_on(Isa isa, const std::int32_t* acc, std::size_t pixels, std::size_t oc,
                        const std::int32_t* bias, const std::int32_t* multiplier,
                        const std::int32_t* shift, bool relu, std::int8_t* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::Avx512)
    return requantize_rows_avx512(acc, pixels, oc, bias, multiplier, shift, relu, out);
  if (isa == Isa::Avx2)
    return requantize_rows_avx2(acc, pixels, oc, bias, multiplier, shift, relu, out);
#endif
  requantize_rows_scalar(acc, pixels, oc, bias, multiplier, shift, relu, out);
}

void requantize_rows(const std::int32_t* acc, std::size_t pixels, std::size_t oc,
                     const std::int32_t* bias, const std::int32_t* multiplier,
                     const std::int32_t* shift, bool relu, std::int8_t* out) {
  static const Isa best = cpu_has(Isa::Avx512) ? Isa::Avx512
                          : cpu_has(Isa::Avx2) ? Isa::Avx2
                                               : Isa::Scalar;
  requantize_rows_on(best, acc, pixels, oc, bias, multiplier, shift, relu, out);
}

}  // namespace tpu::nn::fast
