// Lanes of fp32 values for the vector unit's host kernels (hw/vector_unit/vector_ops.cpp): GCC
// vector extensions `Bytes` wide, 16 in the portable build (every SIMD instruction set has them:
// SSE2, NEON) and 32 in the AVX2 build. Every operation is the scalar one on each lane — one
// IEEE-754 fp32 operation rounded to nearest even, never fused (-ffp-contract=off:
// numerics/activation.h) — so every width gives the bits of the numerics library's scalar
// definitions. The functions are always inlined, so that they compile for the instruction set of
// the kernel they sit in (a target("avx2") function gets AVX2 code).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#define TPUSIM_LANES_INLINE inline __attribute__((always_inline))

namespace tpu::lanes {

// The vector types of one width. Each width is spelled out: GCC drops vector_size from a
// typedef whose size depends on a template parameter.
template <std::size_t Bytes>
struct LaneTypes;
template <>
struct LaneTypes<16> {
  typedef float F __attribute__((vector_size(16)));
  typedef std::int32_t I __attribute__((vector_size(16)));  // a compare's mask: -1 or 0
  typedef std::uint32_t U __attribute__((vector_size(16)));
  typedef std::uint16_t H __attribute__((vector_size(8)));
};
template <>
struct LaneTypes<32> {
  typedef float F __attribute__((vector_size(32)));
  typedef std::int32_t I __attribute__((vector_size(32)));
  typedef std::uint32_t U __attribute__((vector_size(32)));
  typedef std::uint16_t H __attribute__((vector_size(16)));
};

// Passing and returning 32-byte vectors by value from functions without AVX changes the ABI
// (GCC's -Wpsabi warns); these and the kernels built on them are always inlined into a
// target("avx2") function, so no call ever crosses it, and a file using them turns the warning off.
template <std::size_t Bytes>
struct Lanes {
  static constexpr std::size_t n = Bytes / 4;
  using F = typename LaneTypes<Bytes>::F;
  using I = typename LaneTypes<Bytes>::I;
  using U = typename LaneTypes<Bytes>::U;
  using H = typename LaneTypes<Bytes>::H;

  // How many lanes a load or store moves: all n (Whole, a move of fixed size), or the first k < n
  // (the end of a row; lanes past k load +0 and are never stored).
  struct Whole {};
  static constexpr std::size_t bytes(Whole, std::size_t elem) { return n * elem; }
  static constexpr std::size_t bytes(std::size_t k, std::size_t elem) { return k * elem; }

  // fp32 elements (4 bytes; little-endian hosts, x86 and AArch64, so a vector's bytes are
  // load_u32's order) and bf16 elements (2 bytes, widened to the fp32 values they are: to_float).
  template <class K>
  static TPUSIM_LANES_INLINE F load(const std::uint8_t* p, K k) {
    F v{};
    std::memcpy(&v, p, bytes(k, 4));
    return v;
  }
  template <class K>
  static TPUSIM_LANES_INLINE void store(std::uint8_t* p, F v, K k) {
    std::memcpy(p, &v, bytes(k, 4));
  }
  template <class K>
  static TPUSIM_LANES_INLINE F load_bf16(const std::uint8_t* p, K k) {
    H h{};
    std::memcpy(&h, p, bytes(k, 2));
    const U u = __builtin_convertvector(h, U) << 16;
    F f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  // to_bf16 of each value: a NaN (magnitude above infinity's) keeps its top bits, quieted; others
  // round to nearest even by adding 0x7fff plus the kept lsb.
  template <class K>
  static TPUSIM_LANES_INLINE void store_bf16(std::uint8_t* p, F v, K k) {
    U u;
    std::memcpy(&u, &v, sizeof u);
    const U top = u >> 16;
    const I nan = (u & 0x7fffffffu) > 0x7f800000u;
    const U rounded = (u + (0x7fffu + (top & 1u))) >> 16;
    const U bits = nan ? (top | 0x0040u) : rounded;
    const H h = __builtin_convertvector(bits, H);
    std::memcpy(p, &h, bytes(k, 2));
  }
  // Calls f(i, Whole) for every whole vector of the `count` elements from 0 and f(i, k) for the
  // k < n left at the end.
  template <class Fn>
  static TPUSIM_LANES_INLINE void for_each(std::uint64_t count, Fn&& f) {
    std::uint64_t i = 0;
    for (; i + n <= count; i += n) f(i, Whole{});
    if (i < count) f(i, static_cast<std::size_t>(count - i));
  }
  static TPUSIM_LANES_INLINE F splat(float x) { return F{} + x; }

  static TPUSIM_LANES_INLINE I is_nan(F v) { return v != v; }
  // numerics::relu and relu6: NaN passes, -0 becomes +0.
  static TPUSIM_LANES_INLINE F relu(F x) { return (x > 0.0f) | is_nan(x) ? x : F{}; }
  static TPUSIM_LANES_INLINE F relu6(F x) {
    return is_nan(x) ? x : (x > 6.0f ? splat(6.0f) : (x > 0.0f ? x : F{}));
  }
  // numerics::max_float and min_float: the quiet NaN when either is NaN, else the second only
  // when it is strictly greater (smaller).
  static TPUSIM_LANES_INLINE F max_float(F a, F b) {
    return is_nan(a) | is_nan(b) ? splat(std::numeric_limits<float>::quiet_NaN()) : (b > a ? b : a);
  }
  static TPUSIM_LANES_INLINE F min_float(F a, F b) {
    return is_nan(a) | is_nan(b) ? splat(std::numeric_limits<float>::quiet_NaN()) : (b < a ? b : a);
  }
};

}  // namespace tpu::lanes
