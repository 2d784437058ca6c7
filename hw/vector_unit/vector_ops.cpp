// Timing model of one vector instruction (docs/timing-model.md):
//
//   cycles = vector_unit.latency_cycles
//          + max(ceil(element_ops / (vector_unit.lanes * vector_unit.sublanes)),
//                ceil((ub_bytes_read + ub_bytes_written) / vector_unit.bytes_per_cycle))
//
// The lanes run one element operation each per cycle, pipelined behind a fill latency; the unit
// has its own unified-buffer port (vector_unit.bytes_per_cycle, shared by its reads and writes),
// and whichever of the two is slower sets the pace. Accumulator reads are counted for energy but do
// not limit the pace: an accumulator entry (mxu.cols words) is read per cycle, as J17 §2's
// Activate pipeline drains one MXU result row per cycle.
//
// What counts as one element operation:
//   activate  one per output element (bias, scale or requantize, and the function are one lane
//             pipeline pass); softmax 3 per output element (a pass for the row maximum, one for
//             exp and the sum, one for the divide).
//   pool      one per input element read per window position (a compare for max, an add for
//             avg): images*channels*(sum over oy of the window's rows inside the image)*(sum over
//             ox of its columns inside), = images*out_h*out_w*channels*kernel_h*kernel_w when
//             nothing is padded.
//   eltwise   one per output element: count; div kDivElementOps per element (a division holds a
//             lane for as long as that many multiply-add passes: docs/timing-model.md).
//   copy      none: the bytes only pass through the unit's port.
//   map       one per element: count (conversion in, x*a+b, the function and conversion out are
//             one lane pipeline pass, as activate's).
//   xent      4 per value (softmax's 3, and the one-hot subtraction and scale as one pass) and 1
//             per row (the loss): 4*rows*cols + rows.
//   update    per element one per fp32 operation, a multiply and the add of its product counting
//             once: sgd 1, momentum 3, adam 9 (cost(isa::Update) lists them).
//   reduce    one per input value (an add or a compare): rows*cols.
//   pool_grad one per window position inside the image, as pool (max: a compare; avg: an add of
//             the share), plus one per dy element (max: the add into the chosen position; avg:
//             the division by the window size).
// Bytes:
//   activate  acc read rows*cols*size(acc_type); UB read 12*cols (the parameter records);
//             UB written rows*cols*size(out).
//   pool      UB read images*in_h*in_w*channels*size(type) (every input element once: line
//             buffers hold the kernel_h rows a window revisits); UB written
//             images*out_h*out_w*channels*size(type).
//   eltwise   UB read count*size(type) for a, plus count*size(type) for b, or b_period*size(type)
//             when b is broadcast (b_period > 0: its b_period elements are read once into the
//             lanes and reused); UB written count*size(type).
//   copy      UB read rows*row_bytes (a repeated row, src_stride 0, is read again each time); UB
//             written rows*row_bytes.
//   map       UB read count*size(in) + 12*channels (the records); UB written count*size(out).
//   xent      UB read 4*rows*cols + 4*rows (logits, labels); UB written 4*rows*cols + 8*rows
//             (gradient, {loss, correct} records).
//   update    UB read 4*count per array the kind uses (w, g, m, v) + 4 per record value; UB
//             written 4*count per array it steps (w, m, v).
//   reduce    UB read 4*rows*cols (+ 4*cols with acc: dst's running values); UB written 4*cols.
//   pool_grad UB read dy (4 bytes per element) and, for max, x once (line buffers, as pool);
//             UB written dX once (4*images*in_h*in_w*in_c: the zeroing and the adds happen in the
//             line buffers a window revisits, as pool's reads do).
//
// Overlap rules (checked before anything is written, so a rejected instruction changes nothing):
//   activate  dst's extent [dst, dst + (rows-1)*stride + cols*size(out)) must not overlap the
//             parameter records.
//   pool      src and dst extents must not overlap (a window reads inputs after earlier outputs
//             are written).
//   eltwise   dst must either not overlap a (or b) or start at the same address (in place:
//             element i depends only on element i); a and b may overlap freely. A broadcast b
//             shorter than count (0 < b_period < count) must not overlap dst at all: element
//             b_period reads b[0] again after element 0 has written it.
//   copy      src and dst extents must not overlap (a row written could be one still to read),
//             and dst_stride >= row_bytes (written rows must not overlap each other).
//   map       dst must not overlap the records, and either not overlap src or start at src with
//             in and out of one size (in place: element i depends only on element i).
//   xent      dst equals src (in place: row r's gradient depends only on row r, read first) or
//             does not overlap it; out overlaps neither. Labels are all read first, so writes
//             may overlap them.
//   update    the arrays the kind uses pairwise apart; the record is read before any write.
//   reduce    dst must not overlap src's extent (a column's result could be a value still to
//             read).
//   pool_grad dst must not overlap dy, nor x for max (dst is zeroed first, before either is
//             read); x and dy may overlap each other (both are only read).
// The lane kernels below pass 32-byte vectors between always-inlined functions (lanes.h).
#pragma GCC diagnostic ignored "-Wpsabi"

#include "hw/vector_unit/vector_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "hw/common/error.h"
#include "hw/isa/fields.h"
#include "hw/isa/pooling.h"
#include "hw/isa/window.h"
#include "hw/vector_unit/functions.h"
#include "hw/vector_unit/lanes.h"
#include "numerics/activation.h"
#include "numerics/bf16.h"
#include "numerics/elementwise.h"
#include "numerics/fixed_point.h"
#include "numerics/gradient.h"
#include "numerics/loss.h"
#include "numerics/optimizer.h"
#include "numerics/quantize.h"

namespace tpu {
namespace {

constexpr std::uint64_t kParamRecordBytes = 12;  // {bias, scale, shift}, 32-bit little-endian
constexpr std::uint64_t kXentRecordBytes = 8;    // xent's {loss, correct}, two fp32
// Element operations of one eltwise fp32 division: a reciprocal issues at a quarter of the rate of
// an fp32 add or multiply-add (NVIDIA's CUDA C Programming Guide, "Throughput of Native Arithmetic
// Instructions": 16 against 64 results per clock per multiprocessor on compute capability 7.x,
// 32 against 128 on 5.x), and a correctly rounded quotient is that reciprocal refined by
// multiply-adds on the same lane (docs/timing-model.md, docs/energy-model.md).
constexpr std::uint64_t kDivElementOps = 4;

std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? ~std::uint64_t{0} : r;
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// [addr, addr + len) must lie inside the unified buffer.
void check_ub(std::string_view op, std::string_view field, std::uint64_t addr, std::uint64_t len,
              std::string_view what, const UbView& ub) {
  if (addr > ub.bytes || len > ub.bytes - addr)
    throw ProgramError(fmt::format(
        "{}: {} = {:#x} + {} bytes ({}) reaches past the end of the {}-byte unified buffer", op,
        field, addr, len, what, ub.bytes));
}

bool overlaps(std::uint64_t a, std::uint64_t a_len, std::uint64_t b, std::uint64_t b_len) {
  return a < b + b_len && b < a + a_len;
}

// rows >= 1 rows of row_bytes bytes, stride apart from addr, must lie inside the unified buffer;
// returns the length of their extent.
std::uint64_t check_rows(std::string_view op, std::string_view field, std::uint64_t addr,
                         std::uint32_t rows, std::uint64_t stride, std::uint64_t row_bytes,
                         const UbView& ub) {
  const std::uint64_t len = std::uint64_t{rows - 1} * stride + row_bytes;
  check_ub(op, field, addr, len,
           fmt::format("rows {} at stride {}, {} bytes each", rows, stride, row_bytes), ub);
  return len;
}

void check_at_least_1(std::string_view op, std::string_view field, std::uint64_t v) {
  if (v < 1) throw ProgramError(fmt::format("{}: {} = 0 (must be >= 1)", op, field));
}

std::uint32_t load_u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}
void store_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
Bf16 load_bf16(const std::uint8_t* p) { return Bf16{static_cast<std::uint16_t>(p[0] | p[1] << 8)}; }
void store_bf16(std::uint8_t* p, Bf16 v) {
  p[0] = static_cast<std::uint8_t>(v.bits);
  p[1] = static_cast<std::uint8_t>(v.bits >> 8);
}
float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t float_to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
std::int8_t load_i8(const std::uint8_t* p) { return static_cast<std::int8_t>(*p); }
void store_i8(std::uint8_t* p, std::int8_t v) { *p = static_cast<std::uint8_t>(v); }

bool known(isa::ActFunc f) { return f <= isa::ActFunc::Softmax; }
bool known(isa::PoolKind k) { return k <= isa::PoolKind::Avg; }
bool known(isa::EltOp o) { return o <= isa::EltOp::Div; }
bool known(isa::ReduceOp o) { return o <= isa::ReduceOp::SumSquares; }
// The eltwise ops that compute on fp32 only: the gradient ops and div.
bool fp32_only(isa::EltOp o) { return o >= isa::EltOp::ReluGrad && o <= isa::EltOp::Div; }
bool known(isa::MapFunc f) { return f <= isa::MapFunc::Rsqrt; }
bool known(DType t) { return t <= DType::Fp32; }

// The element types the vector unit's elementwise instructions compute on.
void check_element_type(std::string_view op, std::string_view field, DType t) {
  if (t != DType::Int8 && t != DType::Bf16 && t != DType::Fp32)
    throw ProgramError(fmt::format("{}: {} = {} (allowed: int8, bf16, fp32)", op, field,
                                   known(t) ? name_of(t) : std::string_view("?")));
}

// The training instructions (reduce, pool_grad) compute on fp32 only.
void check_fp32(std::string_view op, DType t) {
  if (t != DType::Fp32)
    throw ProgramError(fmt::format("{}: type = {} (allowed: fp32)", op,
                                   known(t) ? name_of(t) : std::string_view("?")));
}

struct ParamRecord {
  std::uint32_t bias = 0;   // int32, or fp32 bits
  std::uint32_t scale = 0;  // Q31 multiplier (int8 out of an integer acc), else fp32 bits
  std::int32_t shift = 0;
};

struct PoolShape {
  isa::PoolAxis rows, cols;
  std::uint64_t out_h = 0, out_w = 0;
  std::uint64_t in_elems = 0, out_elems = 0;
};

// Output size (hw/isa/pooling.h); zero when the geometry has none.
PoolShape pool_shape(const isa::Pool& p) {
  PoolShape s{isa::pool_rows(p), isa::pool_cols(p)};
  s.out_h = s.rows.outputs();
  s.out_w = s.cols.outputs();
  const std::uint64_t pixels_per_channel = std::uint64_t{p.images} * p.channels;
  s.in_elems = mul_sat(mul_sat(pixels_per_channel, p.in_h), p.in_w);
  s.out_elems = mul_sat(mul_sat(pixels_per_channel, s.out_h), s.out_w);
  return s;
}

// One axis of a pool (rows: names "kernel_h", "stride_h", "pad_top", "out_h", "in_h"): every
// window must hold at least one input position, or max and avg would have nothing to reduce.
void check_pool_axis(std::string_view op, const isa::PoolAxis& a, std::string_view kernel,
                     std::string_view stride, std::string_view pad, std::string_view out,
                     std::string_view in) {
  check_at_least_1(op, stride, a.stride);
  if (a.out_field == 0) {
    if (a.kernel < 1 || a.kernel > a.in)
      throw ProgramError(fmt::format("{}: {} = {} (must be 1..{} = {} when {} = 0: valid pooling)",
                                     op, kernel, a.kernel, in, a.in, out));
    if (a.pad != 0)
      throw ProgramError(
          fmt::format("{}: {} = {} with {} = 0 (valid pooling has no padding; give {})", op, pad,
                      a.pad, out, out));
    return;
  }
  if (a.pad >= a.kernel)
    throw ProgramError(
        fmt::format("{}: {} = {} (must be below {} = {}: the first window would hold no input)", op,
                    pad, a.pad, kernel, a.kernel));
  const std::uint64_t last_start = std::uint64_t{a.out_field - 1} * a.stride;
  if (last_start >= std::uint64_t{a.in} + a.pad)
    throw ProgramError(fmt::format(
        "{}: {} = {}: its last window starts at {} = {} - {} x {}, past the {} {} inputs (must "
        "start inside)",
        op, out, a.out_field, in, static_cast<std::int64_t>(last_start) - a.pad, a.out_field - 1,
        stride, a.in, in));
}

// ---- kernels ----
//
// Each instruction is validated and its per-column parameters decoded once; the loops below
// then run without a branch on types or functions per element. Two builds of the hot loops: AVX2
// intrinsics where the CPU has AVX2, and portable scalar C++ elsewhere. Both give the bits of the
// numerics library's scalar definitions (numerics/; tb/unit/vector_unit/vector_ops_test.cpp
// checks both paths against them): integer steps are exact, and every fp32 step is the same
// single IEEE-754 operation.

// The requantization parameters of each column, structure of arrays so that eight columns load as
// one vector.
struct RequantCols {
  std::vector<std::int32_t> bias;
  std::vector<std::int32_t> mult;   // Q31, >= 0 (validated); one 0 more for avx2::requant8
  std::vector<std::int32_t> left;   // max(-shift, 0)
  std::vector<std::int32_t> right;  // max(shift, 0)
  std::vector<std::int32_t> mask;   // 2^right - 1
  std::vector<std::int32_t> half;   // mask >> 1
  std::int32_t lo = -128;           // 0 with relu: relu(saturate_int8(v)) = clamp(v, 0, 127)
  bool any_left = false;            // some column shifts left: its scale is >= 1
};

// numerics::requantize(numerics::add_bias(x, bias), mult, shift), clamped below at lo, with the
// library's steps and no branch on the sign of the shift:
//   1. add_bias.
//   2. saturating_shift_left by `left` (0 when shift >= 0).
//   3. saturating_rounding_doubling_high_mul.
//   4. rounding_divide_by_pot by `right` (0 when shift <= 0: the identity).
//   5. saturate_int8, and relu through lo.
// kLeft = false skips step 2, the identity when no column shifts left.
template <bool kLeft = true>
inline std::uint8_t requant_lane(std::int32_t x, const RequantCols& p, std::size_t c) {
  const std::int32_t s = numerics::add_bias(x, p.bias[c]);
  const std::int32_t l = kLeft ? numerics::saturating_shift_left(s, p.left[c]) : s;
  const std::int32_t q = numerics::rounding_divide_by_pot(
      numerics::saturating_rounding_doubling_high_mul(l, p.mult[c]), p.right[c]);
  return static_cast<std::uint8_t>(std::clamp(q, p.lo, std::int32_t{127}));
}

// Bias and scale of the float paths, per column.
struct FloatCols {
  std::vector<std::uint32_t> bias;  // int32 (integer accumulators) or fp32 bits
  std::vector<float> scale;
  bool int_acc = true;
  isa::ActFunc func = isa::ActFunc::None;
  DType out_type = DType::Fp32;
};

inline float pre_activation(std::uint32_t acc, const FloatCols& p, std::size_t c) {
  if (p.int_acc)
    return numerics::scale_int(static_cast<std::int32_t>(acc), static_cast<std::int32_t>(p.bias[c]),
                               p.scale[c]);
  return numerics::scale_float(bits_to_float(acc), bits_to_float(p.bias[c]), p.scale[c]);
}

// The activation function on a row of n fp32 values.
void activate_row(isa::ActFunc f, float* x, std::size_t n) {
  if (f == isa::ActFunc::Softmax) return numerics::softmax_row(x, x, n);
  for (std::size_t c = 0; c < n; ++c) x[c] = activate_float(f, x[c]);
}

// A window's input runs: one pointer per window element, in window order (ky, then kx), each to
// that pixel's `channels` contiguous values (NHWC).
using Runs = const std::uint8_t* const*;

// int8 average pooling: exact int32 sums per channel, then avg_int8.
void pool_avg_i8(Runs runs, std::size_t n_runs, std::size_t ch, std::int32_t* sum,
                 std::uint8_t* out) {
  std::fill(sum, sum + ch, 0);
  for (std::size_t k = 0; k < n_runs; ++k)
    for (std::size_t c = 0; c < ch; ++c) sum[c] += load_i8(runs[k] + c);
  const auto n = static_cast<std::int32_t>(n_runs);
  for (std::size_t c = 0; c < ch; ++c) store_i8(out + c, numerics::avg_int8(sum[c], n));
}

// bf16 average pooling: per channel, fp32 sums in window order starting from +0, then avg_bf16.
void pool_avg_bf16(Runs runs, std::size_t n_runs, std::size_t ch, float* sum, std::uint8_t* out) {
  std::fill(sum, sum + ch, 0.0f);
  for (std::size_t k = 0; k < n_runs; ++k)
    for (std::size_t c = 0; c < ch; ++c) sum[c] += to_float(load_bf16(runs[k] + 2 * c));
  const auto n = static_cast<std::int32_t>(n_runs);
  for (std::size_t c = 0; c < ch; ++c) store_bf16(out + 2 * c, numerics::avg_bf16(sum[c], n));
}

// The bf16 max pooling result of a window holding a NaN: numerics::max_float's quiet NaN, as
// to_bf16 rounds it.
Bf16 max_pool_nan() { return to_bf16(std::numeric_limits<float>::quiet_NaN()); }

// bf16 max of channel c over the window, numerics::max_float in window order then to_bf16, with
// the NaN test out of the compare: (v > m ? v : m) is max_float(m, v) while neither is NaN, and
// once one is, the result is max_pool_nan() whatever m holds.
Bf16 max_bf16_lane(Runs runs, std::size_t n_runs, std::size_t c) {
  float m = to_float(load_bf16(runs[0] + 2 * c));
  bool nan = std::isnan(m);
  for (std::size_t k = 1; k < n_runs; ++k) {
    const float v = to_float(load_bf16(runs[k] + 2 * c));
    nan = nan || std::isnan(v);
    m = v > m ? v : m;
  }
  return nan ? max_pool_nan() : to_bf16(m);
}

// fp32 average pooling: per channel, fp32 sums in window order starting from +0, then avg_float.
void pool_avg_f32(Runs runs, std::size_t n_runs, std::size_t ch, float* sum, std::uint8_t* out) {
  std::fill(sum, sum + ch, 0.0f);
  for (std::size_t k = 0; k < n_runs; ++k)
    for (std::size_t c = 0; c < ch; ++c) sum[c] += bits_to_float(load_u32(runs[k] + 4 * c));
  const auto n = static_cast<std::int32_t>(n_runs);
  for (std::size_t c = 0; c < ch; ++c)
    store_u32(out + 4 * c, float_to_bits(numerics::avg_float(sum[c], n)));
}

namespace portable {

// Each row into a local buffer first: stores through the uint8_t output pointer could alias the
// parameters' vectors as far as the compiler knows, and would make it reload them per element.
template <bool kLeft>
void requant_rows(const RequantCols& p, const std::uint32_t* in, std::size_t in_stride,
                  std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride) {
  const std::size_t cols = p.bias.size();
  std::vector<std::uint8_t> row(cols);
  for (std::uint32_t r = 0; r < rows; ++r, in += in_stride, out += out_stride) {
    for (std::size_t c = 0; c < cols; ++c)
      row[c] = requant_lane<kLeft>(static_cast<std::int32_t>(in[c]), p, c);
    std::memcpy(out, row.data(), cols);
  }
}

void requant(const RequantCols& p, const std::uint32_t* in, std::size_t in_stride,
             std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride) {
  if (p.any_left) return requant_rows<true>(p, in, in_stride, rows, out, out_stride);
  requant_rows<false>(p, in, in_stride, rows, out, out_stride);
}

// One pass per row for the elementwise functions none, relu and relu6, fixed at compile time.
template <isa::ActFunc kFunc, DType kOut>
void float_rows(const FloatCols& p, const std::uint32_t* in, std::size_t in_stride,
                std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride) {
  const std::size_t cols = p.scale.size();
  for (std::uint32_t r = 0; r < rows; ++r, in += in_stride, out += out_stride)
    for (std::size_t c = 0; c < cols; ++c) {
      const float x = activate_float(kFunc, pre_activation(in[c], p, c));
      if constexpr (kOut == DType::Fp32)
        store_u32(out + 4 * c, float_to_bits(x));
      else
        store_bf16(out + 2 * c, to_bf16(x));
    }
}

template <isa::ActFunc kFunc>
void float_rows_for(const FloatCols& p, const std::uint32_t* in, std::size_t in_stride,
                    std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride) {
  if (p.out_type == DType::Fp32)
    return float_rows<kFunc, DType::Fp32>(p, in, in_stride, rows, out, out_stride);
  float_rows<kFunc, DType::Bf16>(p, in, in_stride, rows, out, out_stride);
}

// sigmoid and tanh (libm) and softmax (a row function) go through a row of fp32 values `x`.
void float_act(const FloatCols& p, const std::uint32_t* in, std::size_t in_stride,
               std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride, float* x) {
  switch (p.func) {
    case isa::ActFunc::None:
      return float_rows_for<isa::ActFunc::None>(p, in, in_stride, rows, out, out_stride);
    case isa::ActFunc::Relu:
      return float_rows_for<isa::ActFunc::Relu>(p, in, in_stride, rows, out, out_stride);
    case isa::ActFunc::Relu6:
      return float_rows_for<isa::ActFunc::Relu6>(p, in, in_stride, rows, out, out_stride);
    default: break;
  }
  const std::size_t cols = p.scale.size();
  for (std::uint32_t r = 0; r < rows; ++r, in += in_stride, out += out_stride) {
    for (std::size_t c = 0; c < cols; ++c) x[c] = pre_activation(in[c], p, c);
    activate_row(p.func, x, cols);
    if (p.out_type == DType::Fp32)
      for (std::size_t c = 0; c < cols; ++c) store_u32(out + 4 * c, float_to_bits(x[c]));
    else
      for (std::size_t c = 0; c < cols; ++c) store_bf16(out + 2 * c, to_bf16(x[c]));
  }
}

// Run by run rather than channel by channel, so that the compiler can vectorise the channel loop.
void max_i8(Runs runs, std::size_t n_runs, std::size_t ch, std::uint8_t* out) {
  std::memcpy(out, runs[0], ch);
  for (std::size_t k = 1; k < n_runs; ++k)
    for (std::size_t c = 0; c < ch; ++c)
      store_i8(out + c, std::max(load_i8(out + c), load_i8(runs[k] + c)));
}

// max_bf16_lane run by run, so that the compiler can vectorise the channel loops; m and nan are
// scratch rows of ch values.
void max_bf16(Runs runs, std::size_t n_runs, std::size_t ch, float* m, std::uint8_t* nan,
              std::uint8_t* out) {
  for (std::size_t c = 0; c < ch; ++c) {
    m[c] = to_float(load_bf16(runs[0] + 2 * c));
    nan[c] = std::isnan(m[c]) ? 1 : 0;
  }
  for (std::size_t k = 1; k < n_runs; ++k)
    for (std::size_t c = 0; c < ch; ++c) {
      const float v = to_float(load_bf16(runs[k] + 2 * c));
      nan[c] = static_cast<std::uint8_t>(nan[c] | (std::isnan(v) ? 1 : 0));
      m[c] = v > m[c] ? v : m[c];
    }
  const Bf16 qnan = max_pool_nan();
  for (std::size_t c = 0; c < ch; ++c) store_bf16(out + 2 * c, nan[c] != 0 ? qnan : to_bf16(m[c]));
}

}  // namespace portable

#if defined(__x86_64__) || defined(__i386__)
namespace avx2 {

// x86 is little-endian: a vector load or store has the byte order of load_u32/store_u32.

// Saturating int32 a + b: a wrapped sum overflowed when a and b share a sign the sum lacks, and
// then saturates toward a's sign.
__attribute__((target("avx2"))) inline __m256i add_sat(__m256i a, __m256i b) {
  const __m256i s = _mm256_add_epi32(a, b);
  const __m256i ovf = _mm256_and_si256(_mm256_xor_si256(a, s), _mm256_xor_si256(b, s));
  const __m256i sat = _mm256_xor_si256(_mm256_srai_epi32(a, 31), _mm256_set1_epi32(INT32_MAX));
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(s), _mm256_castsi256_ps(sat), _mm256_castsi256_ps(ovf)));
}

__attribute__((target("avx2"))) inline __m256i load8(const std::int32_t* v) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
}

// Eight bf16 values widened to the fp32 values they are.
__attribute__((target("avx2"))) inline __m256 load_bf16x8(const std::uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Steps 1-4 of requant_lane for columns [c, c + 8) of one row: eight int32 results before the
// int8 saturation. kLeft = false skips step 2, the identity when no column shifts left.
template <bool kLeft>
__attribute__((target("avx2"))) inline __m256i requant8(const std::uint32_t* in,
                                                        const RequantCols& p, std::size_t c) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + c));
  // 1. Bias.
  const __m256i s = add_sat(x, load8(p.bias.data() + c));
  // 2. Left shift: it overflowed when shifting back does not restore s.
  __m256i l = s;
  if constexpr (kLeft) {
    const __m256i left = load8(p.left.data() + c);
    const __m256i shifted = _mm256_sllv_epi32(s, left);
    const __m256i fits = _mm256_cmpeq_epi32(_mm256_srav_epi32(shifted, left), s);
    const __m256i sat = _mm256_xor_si256(_mm256_srai_epi32(s, 31), _mm256_set1_epi32(INT32_MAX));
    l = _mm256_blendv_epi8(sat, shifted, fits);
  }
  // 3. The doubling high multiply as floor((l * mult + 2^30) / 2^31): gemmlowp's nudge (2^30, or
  // 1 - 2^30 for a negative product) followed by division truncating toward zero equals it for
  // either sign of the product, and its one saturating case needs mult = INT32_MIN (mult >= 0).
  // The 64-bit products of the even lanes, and of the odd lanes (mult loaded one column on, so
  // that its odd columns sit in the even lanes); bits 31..62 of each are the result, moved to the
  // low (even) or high (odd) half of the 64 bits.
  const __m256i nudge = _mm256_set1_epi64x(std::int64_t{1} << 30);
  const __m256i even = _mm256_mul_epi32(l, load8(p.mult.data() + c));
  const __m256i odd = _mm256_mul_epi32(_mm256_srli_epi64(l, 32), load8(p.mult.data() + c + 1));
  const __m256i hi = _mm256_blend_epi32(_mm256_srli_epi64(_mm256_add_epi64(even, nudge), 31),
                                        _mm256_slli_epi64(_mm256_add_epi64(odd, nudge), 1), 0xaa);
  // 4. Rounding divide by 2^right as gemmlowp's RoundingDivideByPOT computes it: threshold =
  // half + (hi < 0), and a true compare is -1.
  const __m256i threshold = _mm256_sub_epi32(load8(p.half.data() + c), _mm256_srai_epi32(hi, 31));
  const __m256i round_up =
      _mm256_cmpgt_epi32(_mm256_and_si256(hi, load8(p.mask.data() + c)), threshold);
  return _mm256_sub_epi32(_mm256_srav_epi32(hi, load8(p.right.data() + c)), round_up);
}

// Rows ahead of the one being computed whose accumulator words are prefetched: entries sit
// mxu.cols words apart, a stride the hardware prefetchers follow poorly.
constexpr std::size_t kPrefetchRows = 4;

__attribute__((target("avx2"))) inline void prefetch_row(const std::uint32_t* row,
                                                         std::size_t words) {
  for (std::size_t c = 0; c < words; c += 16)
    _mm_prefetch(reinterpret_cast<const char*>(row + c), _MM_HINT_T0);
}

// Step 5: the saturating packs clamp to int8 (32 or 8 columns at a time); lo applies relu.
template <bool kLeft>
__attribute__((target("avx2"))) void requant_rows(const RequantCols& p, const std::uint32_t* in,
                                                  std::size_t in_stride, std::uint32_t rows,
                                                  std::uint8_t* out, std::uint64_t out_stride) {
  const std::size_t cols = p.bias.size(), cols32 = cols / 32 * 32, cols8 = cols / 8 * 8;
  const __m256i lo = _mm256_set1_epi8(static_cast<char>(p.lo));
  // packs work within 128-bit halves; this puts the four vectors' dwords back in column order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (std::uint32_t r = 0; r < rows; ++r, in += in_stride, out += out_stride) {
    if (r + kPrefetchRows < rows) prefetch_row(in + kPrefetchRows * in_stride, cols);
    std::size_t c = 0;
    for (; c < cols32; c += 32) {
      const __m256i q01 =
          _mm256_packs_epi32(requant8<kLeft>(in, p, c), requant8<kLeft>(in, p, c + 8));
      const __m256i q23 =
          _mm256_packs_epi32(requant8<kLeft>(in, p, c + 16), requant8<kLeft>(in, p, c + 24));
      const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q01, q23), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), _mm256_max_epi8(q, lo));
    }
    for (; c < cols8; c += 8) {
      const __m256i q = requant8<kLeft>(in, p, c);
      const __m128i q16 =
          _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const __m128i q8 = _mm_max_epi8(_mm_packs_epi16(q16, q16), _mm256_castsi256_si128(lo));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), q8);
    }
    for (; c < cols; ++c) out[c] = requant_lane(static_cast<std::int32_t>(in[c]), p, c);
  }
}

void requant(const RequantCols& p, const std::uint32_t* in, std::size_t in_stride,
             std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride) {
  if (p.any_left) return requant_rows<true>(p, in, in_stride, rows, out, out_stride);
  requant_rows<false>(p, in, in_stride, rows, out, out_stride);
}

// to_bf16 of eight fp32 values: NaN (magnitude bits above infinity's) becomes quiet, others
// round to nearest even by adding 0x7fff plus the kept lsb.
__attribute__((target("avx2"))) inline __m128i to_bf16x8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i top = _mm256_srli_epi32(u, 16);
  const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_set1_epi32(0x7f800000));
  const __m256i bias =
      _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(top, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i bits =
      _mm256_blendv_epi8(rounded, _mm256_or_si256(top, _mm256_set1_epi32(0x0040)), is_nan);
  // Every lane is in 0..0xffff, so the unsigned saturating pack is exact.
  return _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
}

// Bias and scale of columns [c, c + 8): one rounded fp32 add (or an exact saturating int32 add
// and the int32 -> fp32 conversion, which rounds to nearest even as static_cast does) and one
// multiply.
template <bool kIntAcc>
__attribute__((target("avx2"))) inline __m256 pre8(const std::uint32_t* in, const FloatCols& p,
                                                   std::size_t c) {
  const __m256i acc = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + c));
  const __m256i bias = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.bias.data() + c));
  __m256 pre;
  if constexpr (kIntAcc)
    pre = _mm256_cvtepi32_ps(add_sat(acc, bias));
  else
    pre = _mm256_add_ps(_mm256_castsi256_ps(acc), _mm256_castsi256_ps(bias));
  return _mm256_mul_ps(pre, _mm256_loadu_ps(p.scale.data() + c));
}

// relu keeps v where v > 0 or v is NaN (not-less-or-equal is true unordered) and gives +0
// elsewhere; relu6 then takes 6 where v > 6 (ordered: NaN stays).
template <isa::ActFunc kFunc>
__attribute__((target("avx2"))) inline __m256 func8(__m256 v) {
  if constexpr (kFunc == isa::ActFunc::None) return v;
  const __m256 y = _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NLE_UQ), v);
  if constexpr (kFunc == isa::ActFunc::Relu) return y;
  const __m256 six = _mm256_set1_ps(6.0f);
  return _mm256_blendv_ps(y, six, _mm256_cmp_ps(v, six, _CMP_GT_OQ));
}

template <DType kOut>
__attribute__((target("avx2"))) inline void store8(std::uint8_t* out, std::size_t c, __m256 v) {
  if constexpr (kOut == DType::Fp32)
    _mm256_storeu_ps(reinterpret_cast<float*>(out + 4 * c), v);
  else
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * c), to_bf16x8(v));
}

// One pass per row for the elementwise functions none, relu and relu6.
template <bool kIntAcc, isa::ActFunc kFunc, DType kOut>
__attribute__((target("avx2"))) void float_rows(const FloatCols& p, const std::uint32_t* in,
                                                std::size_t in_stride, std::uint32_t rows,
                                                std::uint8_t* out, std::uint64_t out_stride) {
  const std::size_t cols = p.scale.size(), cols8 = cols / 8 * 8;
  for (std::uint32_t r = 0; r < rows; ++r, in += in_stride, out += out_stride) {
    if (r + kPrefetchRows < rows) prefetch_row(in + kPrefetchRows * in_stride, cols);
    for (std::size_t c = 0; c < cols8; c += 8)
      store8<kOut>(out, c, func8<kFunc>(pre8<kIntAcc>(in, p, c)));
    for (std::size_t c = cols8; c < cols; ++c) {
      const float x = activate_float(kFunc, pre_activation(in[c], p, c));
      if constexpr (kOut == DType::Fp32)
        store_u32(out + 4 * c, float_to_bits(x));
      else
        store_bf16(out + 2 * c, to_bf16(x));
    }
  }
}

template <bool kIntAcc, isa::ActFunc kFunc>
void float_rows_for(const FloatCols& p, const std::uint32_t* in, std::size_t in_stride,
                    std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride) {
  if (p.out_type == DType::Fp32)
    return float_rows<kIntAcc, kFunc, DType::Fp32>(p, in, in_stride, rows, out, out_stride);
  float_rows<kIntAcc, kFunc, DType::Bf16>(p, in, in_stride, rows, out, out_stride);
}

template <bool kIntAcc>
void float_rows_for(const FloatCols& p, const std::uint32_t* in, std::size_t in_stride,
                    std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride) {
  switch (p.func) {
    case isa::ActFunc::None:
      return float_rows_for<kIntAcc, isa::ActFunc::None>(p, in, in_stride, rows, out, out_stride);
    case isa::ActFunc::Relu:
      return float_rows_for<kIntAcc, isa::ActFunc::Relu>(p, in, in_stride, rows, out, out_stride);
    default:
      return float_rows_for<kIntAcc, isa::ActFunc::Relu6>(p, in, in_stride, rows, out, out_stride);
  }
}

// sigmoid and tanh (libm, one value at a time) and softmax (a row function) go through a row of
// fp32 values `x`.
template <bool kIntAcc>
__attribute__((target("avx2"))) void float_rows_libm(const FloatCols& p, const std::uint32_t* in,
                                                     std::size_t in_stride, std::uint32_t rows,
                                                     std::uint8_t* out, std::uint64_t out_stride,
                                                     float* x) {
  const std::size_t cols = p.scale.size(), cols8 = cols / 8 * 8;
  for (std::uint32_t r = 0; r < rows; ++r, in += in_stride, out += out_stride) {
    for (std::size_t c = 0; c < cols8; c += 8) _mm256_storeu_ps(x + c, pre8<kIntAcc>(in, p, c));
    for (std::size_t c = cols8; c < cols; ++c) x[c] = pre_activation(in[c], p, c);
    activate_row(p.func, x, cols);
    if (p.out_type == DType::Fp32) {
      std::memcpy(out, x, 4 * cols);
      continue;
    }
    for (std::size_t c = 0; c < cols8; c += 8) store8<DType::Bf16>(out, c, _mm256_loadu_ps(x + c));
    for (std::size_t c = cols8; c < cols; ++c) store_bf16(out + 2 * c, to_bf16(x[c]));
  }
}

void float_act(const FloatCols& p, const std::uint32_t* in, std::size_t in_stride,
               std::uint32_t rows, std::uint8_t* out, std::uint64_t out_stride, float* x) {
  const bool elementwise =
      p.func == isa::ActFunc::None || p.func == isa::ActFunc::Relu || p.func == isa::ActFunc::Relu6;
  if (elementwise && p.int_acc)
    return float_rows_for<true>(p, in, in_stride, rows, out, out_stride);
  if (elementwise) return float_rows_for<false>(p, in, in_stride, rows, out, out_stride);
  if (p.int_acc) return float_rows_libm<true>(p, in, in_stride, rows, out, out_stride, x);
  float_rows_libm<false>(p, in, in_stride, rows, out, out_stride, x);
}

__attribute__((target("avx2"))) void max_i8(Runs runs, std::size_t n_runs, std::size_t ch,
                                            std::uint8_t* out) {
  const std::size_t vec_ch = ch / 32 * 32;
  for (std::size_t c = 0; c < vec_ch; c += 32) {
    __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(runs[0] + c));
    for (std::size_t k = 1; k < n_runs; ++k)
      m = _mm256_max_epi8(m, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(runs[k] + c)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), m);
  }
  for (std::size_t c = vec_ch; c < ch; ++c) {
    std::int8_t m = load_i8(runs[0] + c);
    for (std::size_t k = 1; k < n_runs; ++k) m = std::max(m, load_i8(runs[k] + c));
    store_i8(out + c, m);
  }
}

// max_float in window order without a branch: MAXPS(v, m) is (v > m ? v : m) (Intel SDM: with a
// NaN or two zeros it returns the second operand), which is max_float(m, v) when neither is NaN;
// a NaN anywhere in the window gives max_pool_nan().
__attribute__((target("avx2"))) void max_bf16(Runs runs, std::size_t n_runs, std::size_t ch,
                                              std::uint8_t* out) {
  const std::size_t vec_ch = ch / 8 * 8;
  const __m256i qnan = _mm256_set1_epi32(max_pool_nan().bits);
  for (std::size_t c = 0; c < vec_ch; c += 8) {
    __m256 m = load_bf16x8(runs[0] + 2 * c);
    __m256 nan = _mm256_cmp_ps(m, m, _CMP_UNORD_Q);
    for (std::size_t k = 1; k < n_runs; ++k) {
      const __m256 v = load_bf16x8(runs[k] + 2 * c);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm256_max_ps(v, m);
    }
    const __m256i bits = _mm256_blendv_epi8(_mm256_srli_epi32(_mm256_castps_si256(m), 16), qnan,
                                            _mm256_castps_si256(nan));
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out + 2 * c),
        _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1)));
  }
  for (std::size_t c = vec_ch; c < ch; ++c) store_bf16(out + 2 * c, max_bf16_lane(runs, n_runs, c));
}

}  // namespace avx2

bool host_has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#else
bool host_has_avx2() { return false; }
#endif

// Which build of the kernels runs: the best the CPU has, unless the environment variable
// TPUSIM_SIMD names one ("portable", or "avx2" to insist on it; "auto" or unset for the default).
// Read on every instruction, so that a test can run both builds in one process.
bool use_avx2() {
  const char* env = std::getenv("TPUSIM_SIMD");
  const std::string_view want = env != nullptr ? env : "";
  if (want.empty() || want == "auto") return host_has_avx2();
  if (want == "portable") return false;
  if (want == "avx2") {
    if (!host_has_avx2())
      throw InputError(
          "environment TPUSIM_SIMD = avx2, but this CPU has no AVX2 (allowed here: "
          "auto, portable)");
    return true;
  }
  throw InputError(
      fmt::format("environment TPUSIM_SIMD = {} (allowed: auto, portable, avx2)", want));
}

// ---- lane kernels ----
//
// The loops of pool_grad, map, fp32 eltwise, fp32 max pooling and reduce, written once over
// lanes::Lanes<Bytes> (hw/vector_unit/lanes.h) and built twice: 16-byte lanes in the portable
// build, 32-byte lanes inside target("avx2") functions. A kernel is a struct whose static
// template run<Bytes> is always inlined into the build that calls it; elements left over after
// the last whole vector run the scalar definitions.
template <std::size_t Bytes>
using L = lanes::Lanes<Bytes>;

template <class Kernel, class... Args>
void run_portable(Args... args) {
  Kernel::template run<16>(args...);
}
#if defined(__x86_64__) || defined(__i386__)
template <class Kernel, class... Args>
__attribute__((target("avx2"))) void run_avx2(Args... args) {
  Kernel::template run<32>(args...);
}
#endif
// The build of Kernel for this CPU (use_avx2()), to call many times.
template <class Kernel, class... Args>
auto lanes_kernel(bool avx2) -> void (*)(Args...) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx2) return &run_avx2<Kernel, Args...>;
#endif
  return &run_portable<Kernel, Args...>;
}
template <class Kernel, class... Args>
void run_lanes(Args... args) {
  lanes_kernel<Kernel, Args...>(use_avx2())(args...);
}

// Each axis's window positions inside the image, [first, last) per output, looked up once.
struct AxisTable {
  std::vector<std::int64_t> first, last;
  AxisTable(const isa::PoolAxis& a, std::uint32_t outputs) : first(outputs), last(outputs) {
    for (std::uint32_t o = 0; o < outputs; ++o) first[o] = a.first(o), last[o] = a.last(o);
  }
};

// Byte offsets of the pixels of output (img, oy, ox)'s window that lie inside the image, in
// window order (ky, then kx), into pos; returns how many.
inline std::size_t window_positions(const AxisTable& rows, const AxisTable& cols, std::uint64_t img,
                                    std::uint32_t oy, std::uint32_t ox, std::uint32_t in_h,
                                    std::uint32_t in_w, std::uint64_t pixel_bytes,
                                    std::uint64_t* pos) {
  std::size_t n = 0;
  for (std::int64_t y = rows.first[oy]; y < rows.last[oy]; ++y) {
    const std::uint64_t row = (img * in_h + static_cast<std::uint64_t>(y)) * in_w;
    for (std::int64_t x = cols.first[ox]; x < cols.last[ox]; ++x)
      pos[n++] = (row + static_cast<std::uint64_t>(x)) * pixel_bytes;
  }
  return n;
}

// pool_grad after dX is zeroed: output pixels in NHWC order (b, oy, ox), each pixel's channels
// side by side in lanes (each channel's adds keep their order: a pixel's window positions are
// distinct). max: dy into the first maximum of x over the window positions inside the image, or
// into its first NaN (numerics::max_pool_grad_position); avg: dy / n into each of the n positions
// (numerics::avg_pool_grad_share).
struct PoolGradKernel {
  template <std::size_t B>
  static TPUSIM_LANES_INLINE void run(const isa::SetWindow* w, const isa::PoolAxis* row_axis,
                                      const isa::PoolAxis* col_axis, std::uint64_t images,
                                      bool is_max, const std::uint8_t* x, const std::uint8_t* dy,
                                      std::uint8_t* dx) {
    using V = L<B>;
    using F = typename V::F;
    using I = typename V::I;
    const std::uint64_t pixel_bytes = 4 * std::uint64_t{w->in_c};
    const AxisTable rows(*row_axis, w->out_h), cols(*col_axis, w->out_w);
    std::vector<std::uint64_t> pos(std::uint64_t{std::min(w->kernel_h, w->in_h)} *
                                   std::min(w->kernel_w, w->in_w));
    const std::uint8_t* grad = dy;
    for (std::uint64_t img = 0; img < images; ++img)
      for (std::uint32_t oy = 0; oy < w->out_h; ++oy)
        for (std::uint32_t ox = 0; ox < w->out_w; ++ox, grad += pixel_bytes) {
          const std::size_t n =
              window_positions(rows, cols, img, oy, ox, w->in_h, w->in_w, pixel_bytes, pos.data());
          V::for_each(
              w->in_c, [&](std::uint64_t c, auto k) __attribute__((always_inline)) {
                const F d = V::load(grad + 4 * c, k);
                if (!is_max) {
                  const F share = d / static_cast<float>(n);
                  for (std::size_t p = 0; p < n; ++p) {
                    std::uint8_t* at = dx + pos[p] + 4 * c;
                    V::store(at, V::load(at, k) + share, k);
                  }
                  return;
                }
                // The position taken so far, its value, and whether it was a NaN (then it stays).
                F best = V::load(x + pos[0] + 4 * c, k);
                I nan = V::is_nan(best), at = I{};
                for (std::size_t p = 1; p < n; ++p) {
                  const F val = V::load(x + pos[p] + 4 * c, k);
                  const I val_nan = V::is_nan(val);
                  const I take = ~nan & (val_nan | (val > best));
                  best = take ? val : best;
                  at = take ? I{} + static_cast<std::int32_t>(p) : at;
                  nan |= val_nan;
                }
                for (std::size_t p = 0; p < n; ++p) {
                  std::uint8_t* to = dx + pos[p] + 4 * c;
                  const F old = V::load(to, k);
                  V::store(to, at == static_cast<std::int32_t>(p) ? old + d : old, k);
                }
              });
        }
  }
};

// fp32 max pooling of one window (numerics::max_float in window order): the running maximum
// (v > m ? v : m) and, apart, whether any value was NaN, which makes the result the quiet NaN.
struct MaxF32Kernel {
  template <std::size_t B>
  static TPUSIM_LANES_INLINE void run(Runs runs, std::size_t n_runs, std::size_t ch,
                                      std::uint8_t* out) {
    using V = L<B>;
    V::for_each(
        ch, [&](std::uint64_t c, auto k) __attribute__((always_inline)) {
          typename V::F m = V::load(runs[0] + 4 * c, k);
          typename V::I nan = V::is_nan(m);
          for (std::size_t r = 1; r < n_runs; ++r) {
            const typename V::F val = V::load(runs[r] + 4 * c, k);
            nan |= V::is_nan(val);
            m = val > m ? val : m;
          }
          V::store(out + 4 * c, nan ? V::splat(std::numeric_limits<float>::quiet_NaN()) : m, k);
        });
  }
};

// eltwise on fp32 with op Op, per lane the scalar step: one IEEE operation, or numerics'
// max_float, min_float and the *_grad definitions (numerics/gradient.h) in their written order.
// b repeats every `period` elements.
template <isa::EltOp Op>
struct EltF32Kernel {
  template <class V>
  static TPUSIM_LANES_INLINE typename V::F step(typename V::F x, typename V::F y) {
    using E = isa::EltOp;
    if constexpr (Op == E::Add) return x + y;
    if constexpr (Op == E::Sub) return x - y;
    if constexpr (Op == E::Mul) return x * y;
    if constexpr (Op == E::Div) return x / y;
    if constexpr (Op == E::Max) return V::max_float(x, y);
    if constexpr (Op == E::Min) return V::min_float(x, y);
    if constexpr (Op == E::ReluGrad) return x > 0.0f ? y : typename V::F{};
    if constexpr (Op == E::Relu6Grad) return (x > 0.0f) & (x < 6.0f) ? y : typename V::F{};
    if constexpr (Op == E::SigmoidGrad) return y * (x * (1.0f - x));
    if constexpr (Op == E::TanhGrad) return y * (1.0f - x * x);
  }
  template <std::size_t B>
  static TPUSIM_LANES_INLINE void run(std::uint64_t count, const std::uint8_t* a,
                                      const std::uint8_t* b, std::uint8_t* dst,
                                      std::uint64_t period) {
    using V = L<B>;
    for (std::uint64_t i0 = 0; i0 < count; i0 += period) {
      const std::uint8_t *ai = a + 4 * i0, *bi = b;
      std::uint8_t* di = dst + 4 * i0;
      V::for_each(
          std::min(period, count - i0), [&](std::uint64_t j,
                                            auto k) __attribute__((always_inline)) {
            const std::uint64_t at = 4 * j;
            V::store(di + at, step<V>(V::load(ai + at, k), V::load(bi + at, k)), k);
          });
    }
  }
};

// reduce: each column from its start value (s, cols values), the rows in order: one fp32 add (of
// the value, or of its square rounded first), or max_float, per value; the columns side by side
// in lanes, row after row.
struct ReduceKernel {
  template <std::size_t B>
  static TPUSIM_LANES_INLINE void run(isa::ReduceOp op, const std::uint8_t* in, std::uint64_t rows,
                                      std::uint64_t stride, std::uint64_t cols, float* s) {
    using V = L<B>;
    auto* out = reinterpret_cast<std::uint8_t*>(s);
    for (std::uint64_t r = 0; r < rows; ++r, in += stride)
      V::for_each(
          cols, [&](std::uint64_t c, auto k) __attribute__((always_inline)) {
            const typename V::F acc = V::load(out + 4 * c, k), v = V::load(in + 4 * c, k);
            V::store(out + 4 * c,
                     op == isa::ReduceOp::Sum   ? acc + v
                     : op == isa::ReduceOp::Max ? V::max_float(acc, v)
                                                : acc + v * v,
                     k);
          });
  }
};

// map for inputs and outputs of bf16 or fp32 and the functions identity, relu and relu6:
// numerics::affine(x, a, b) and the function per lane (lanes.h). The records a and b repeat every
// `period` elements: a whole number of channels, at least a few vectors long.
template <DType In, DType Out, isa::MapFunc Func>
struct MapKernel {
  template <std::size_t B>
  static TPUSIM_LANES_INLINE void run(std::uint64_t count, const std::uint8_t* in,
                                      std::uint8_t* out, const float* a, const float* b,
                                      std::uint64_t period) {
    using V = L<B>;
    const auto* ra = reinterpret_cast<const std::uint8_t*>(a);
    const auto* rb = reinterpret_cast<const std::uint8_t*>(b);
    for (std::uint64_t i0 = 0; i0 < count; i0 += period) {
      V::for_each(
          std::min(period, count - i0), [&](std::uint64_t j,
                                            auto k) __attribute__((always_inline)) {
            const std::uint64_t i = i0 + j;
            const typename V::F x =
                In == DType::Bf16 ? V::load_bf16(in + 2 * i, k) : V::load(in + 4 * i, k);
            typename V::F y = x * V::load(ra + 4 * j, k) + V::load(rb + 4 * j, k);
            if constexpr (Func == isa::MapFunc::Relu) y = V::relu(y);
            if constexpr (Func == isa::MapFunc::Relu6) y = V::relu6(y);
            if constexpr (Out == DType::Bf16)
              V::store_bf16(out + 2 * i, y, k);
            else
              V::store(out + 4 * i, y, k);
          });
    }
  }
};

}  // namespace

VectorOps::VectorOps(const ChipConfig& cfg, SimOptions options)
    : cfg_(cfg), timing_only_(options.timing_only) {
  const std::string& origin = cfg.file.empty() ? cfg.name : cfg.file;
  if (cfg.vector_unit.lanes < 1)
    throw ConfigError(fmt::format("{}: /vector_unit/lanes = 0 (must be >= 1)", origin));
  if (cfg.vector_unit.sublanes < 1)
    throw ConfigError(fmt::format("{}: /vector_unit/sublanes = 0 (must be >= 1)", origin));
  if (cfg.vector_unit.bytes_per_cycle < 1)
    throw ConfigError(fmt::format("{}: /vector_unit/bytes_per_cycle = 0 (must be >= 1)", origin));
}

void VectorOps::activate(const isa::Activate& a, const AccView& acc, UbView ub) const {
  constexpr std::string_view op = "activate";
  if (acc.type != DType::Int32 && acc.type != DType::Fp32)
    throw ConfigError(
        fmt::format("{}: accumulator type {} (must be int32 or fp32)", op, name_of(acc.type)));
  const bool int_acc = acc.type == DType::Int32;
  check_at_least_1(op, "rows", a.rows);
  if (a.cols < 1 || a.cols > acc.words_per_entry)
    throw ProgramError(
        fmt::format("{}: cols = {} (must be 1..{}, the values in an accumulator entry)", op, a.cols,
                    acc.words_per_entry));
  if (std::uint64_t{a.src.value()} + a.rows > acc.entries)
    throw ProgramError(fmt::format(
        "{}: src = accumulator entry {} + rows {} reaches past the {} accumulator entries", op,
        a.src.value(), a.rows, acc.entries));
  if (!known(a.func))
    throw ProgramError(fmt::format("{}: func = {} is not an activation function", op,
                                   static_cast<unsigned>(a.func)));
  if (!known(a.out_type))
    throw ProgramError(
        fmt::format("{}: out = {} is not a data type", op, static_cast<unsigned>(a.out_type)));
  const bool float_out = is_float(a.out_type);
  if (!int_acc && !float_out)
    throw ProgramError(fmt::format("{}: out = {} from fp32 accumulators (allowed: bf16, fp32)", op,
                                   name_of(a.out_type)));
  if (!float_out && a.func != isa::ActFunc::None && a.func != isa::ActFunc::Relu)
    throw ProgramError(
        fmt::format("{}: func = {} with out = {} (integer outputs allow func none or relu; relu6, "
                    "sigmoid, tanh and softmax need out bf16 or fp32)",
                    op, isa::name_of(a.func), name_of(a.out_type)));

  const std::uint64_t params = a.params.value();
  const std::uint64_t params_len = kParamRecordBytes * a.cols;
  check_ub(op, "params", params, params_len, fmt::format("12 bytes x cols {}", a.cols), ub);
  const std::uint64_t esize = size_of(a.out_type);
  const std::uint64_t row_bytes = esize * a.cols;
  if (a.dst_stride < row_bytes)
    throw ProgramError(
        fmt::format("{}: stride = {} bytes (must be >= cols {} x {} bytes of out {} = {})", op,
                    a.dst_stride, a.cols, esize, name_of(a.out_type), row_bytes));
  const std::uint64_t dst = a.dst.value();
  const std::uint64_t dst_len = std::uint64_t{a.rows - 1} * a.dst_stride + row_bytes;
  check_ub(op, "dst", dst, dst_len,
           fmt::format("rows {} at stride {}, {} bytes each", a.rows, a.dst_stride, row_bytes), ub);
  if (overlaps(dst, dst_len, params, params_len))
    throw ProgramError(fmt::format("{}: dst = {:#x} + {} bytes overlaps params = {:#x} + {} bytes",
                                   op, dst, dst_len, params, params_len));

  // Timing only: the records are values, so their requantization ranges go unchecked.
  if (timing_only_) return;  // the instruction checked; no value read
  const bool requant = int_acc && a.out_type == DType::Int8;
  std::vector<ParamRecord> rec(a.cols);
  for (std::uint32_t c = 0; c < a.cols; ++c) {
    const std::uint64_t at = params + kParamRecordBytes * c;
    const std::uint8_t* p = ub.data + at;
    rec[c] = {load_u32(p), load_u32(p + 4), static_cast<std::int32_t>(load_u32(p + 8))};
    if (!requant) continue;
    if (static_cast<std::int32_t>(rec[c].scale) < 0)
      throw ProgramError(fmt::format(
          "{}: params of column {} at {:#x}: scale = {} (a Q31 multiplier must be >= 0)", op, c, at,
          static_cast<std::int32_t>(rec[c].scale)));
    if (rec[c].shift < numerics::kMinRequantShift || rec[c].shift > numerics::kMaxRequantShift)
      throw ProgramError(fmt::format(
          "{}: params of column {} at {:#x}: shift = {} (must be {}..{})", op, c, at + 8,
          rec[c].shift, numerics::kMinRequantShift, numerics::kMaxRequantShift));
  }
  [[maybe_unused]] const bool avx2 = use_avx2();

  const bool apply_relu = a.func == isa::ActFunc::Relu;
  const std::uint32_t* in = acc.data + std::size_t{a.src.value()} * acc.words_per_entry;
  std::uint8_t* out = ub.data + dst;
  if (requant) {
    RequantCols p;
    p.lo = apply_relu ? 0 : -128;
    for (const ParamRecord& pr : rec) {
      const std::int32_t right = std::max(pr.shift, 0);
      p.bias.push_back(static_cast<std::int32_t>(pr.bias));
      p.mult.push_back(static_cast<std::int32_t>(pr.scale));
      p.left.push_back(std::max(-pr.shift, 0));
      p.any_left = p.any_left || pr.shift < 0;
      p.right.push_back(right);
      p.mask.push_back(static_cast<std::int32_t>((std::int64_t{1} << right) - 1));
      p.half.push_back(p.mask.back() >> 1);
    }
    p.mult.push_back(0);
#if defined(__x86_64__) || defined(__i386__)
    if (avx2) return avx2::requant(p, in, acc.words_per_entry, a.rows, out, a.dst_stride);
#endif
    return portable::requant(p, in, acc.words_per_entry, a.rows, out, a.dst_stride);
  }
  if (!float_out) {
    for (std::uint32_t r = 0; r < a.rows; ++r, in += acc.words_per_entry, out += a.dst_stride)
      for (std::uint32_t c = 0; c < a.cols; ++c) {
        const std::int32_t s = numerics::add_bias(static_cast<std::int32_t>(in[c]),
                                                  static_cast<std::int32_t>(rec[c].bias));
        store_u32(out + 4 * c, static_cast<std::uint32_t>(apply_relu ? numerics::relu(s) : s));
      }
    return;
  }
  FloatCols p;
  p.int_acc = int_acc;
  p.func = a.func;
  p.out_type = a.out_type;
  for (const ParamRecord& pr : rec) {
    p.bias.push_back(pr.bias);
    p.scale.push_back(bits_to_float(pr.scale));
  }
  std::vector<float> x(a.cols);
#if defined(__x86_64__) || defined(__i386__)
  if (avx2) return avx2::float_act(p, in, acc.words_per_entry, a.rows, out, a.dst_stride, x.data());
#endif
  portable::float_act(p, in, acc.words_per_entry, a.rows, out, a.dst_stride, x.data());
}

void VectorOps::pool(const isa::Pool& p, UbView ub) const {
  constexpr std::string_view op = "pool";
  if (!known(p.kind))
    throw ProgramError(
        fmt::format("{}: kind = {} is not a pooling kind", op, static_cast<unsigned>(p.kind)));
  check_element_type(op, "type", p.type);
  check_at_least_1(op, "images", p.images);
  check_at_least_1(op, "in_h", p.in_h);
  check_at_least_1(op, "in_w", p.in_w);
  check_at_least_1(op, "channels", p.channels);
  check_at_least_1(op, "kernel_h", p.kernel_h);
  check_at_least_1(op, "kernel_w", p.kernel_w);
  const PoolShape s = pool_shape(p);
  check_pool_axis(op, s.rows, "kernel_h", "stride_h", "pad_top", "out_h", "in_h");
  check_pool_axis(op, s.cols, "kernel_w", "stride_w", "pad_left", "out_w", "in_w");
  const std::uint64_t window = std::uint64_t{p.kernel_h} * p.kernel_w;
  if (p.kind == isa::PoolKind::Avg && window > std::uint64_t{numerics::kMaxAvgPoolWindow})
    throw ProgramError(
        fmt::format("{}: kernel_h {} x kernel_w {} = {} elements (avg allows at most {}: the int32 "
                    "sum and the fp32 divisor must be exact)",
                    op, p.kernel_h, p.kernel_w, window, numerics::kMaxAvgPoolWindow));

  const std::uint64_t esize = size_of(p.type);
  const std::uint64_t src = p.src.value(), dst = p.dst.value();
  const std::uint64_t src_len = mul_sat(s.in_elems, esize);
  const std::uint64_t dst_len = mul_sat(s.out_elems, esize);
  check_ub(op, "src", src, src_len,
           fmt::format("{} images of {}x{}x{} {}", p.images, p.in_h, p.in_w, p.channels,
                       name_of(p.type)),
           ub);
  check_ub(op, "dst", dst, dst_len,
           fmt::format("{} images of {}x{}x{} {}", p.images, s.out_h, s.out_w, p.channels,
                       name_of(p.type)),
           ub);
  if (overlaps(src, src_len, dst, dst_len))
    throw ProgramError(fmt::format("{}: dst = {:#x} + {} bytes overlaps src = {:#x} + {} bytes", op,
                                   dst, dst_len, src, src_len));
  if (timing_only_) return;  // the instruction checked; no value read

  [[maybe_unused]] const bool avx2 = use_avx2();
  const auto max_f32 =
      lanes_kernel<MaxF32Kernel, Runs, std::size_t, std::size_t, std::uint8_t*>(avx2);
  const std::uint8_t* in = ub.data + src;
  std::uint8_t* out = ub.data + dst;
  const std::uint64_t ch = p.channels;
  const std::uint64_t pixel_bytes = ch * esize;
  const bool is_max = p.kind == isa::PoolKind::Max;
  const bool int8 = p.type == DType::Int8;
  const bool fp32 = p.type == DType::Fp32;
  std::vector<const std::uint8_t*> runs(window);
  std::vector<std::int32_t> sum_i(is_max || !int8 ? 0 : ch);
  std::vector<float> sum_f(int8 ? 0 : ch);  // avg's sums, or the portable max's row
  std::vector<std::uint8_t> nan(is_max && !int8 ? ch : 0);
  // Output pixels in NHWC order; each window's runs in window order (ky, then kx), the positions
  // inside the image only: k of them, what avg divides by.
  for (std::uint64_t img = 0; img < p.images; ++img)
    for (std::uint32_t oy = 0; oy < s.out_h; ++oy)
      for (std::uint32_t ox = 0; ox < s.out_w; ++ox, out += pixel_bytes) {
        std::size_t k = 0;
        for (std::int64_t y = s.rows.first(oy); y < s.rows.last(oy); ++y) {
          const std::uint64_t row = (img * p.in_h + static_cast<std::uint64_t>(y)) * p.in_w;
          for (std::int64_t x = s.cols.first(ox); x < s.cols.last(ox); ++x)
            runs[k++] = in + (row + static_cast<std::uint64_t>(x)) * pixel_bytes;
        }
        if (fp32) {
          if (is_max)
            max_f32(runs.data(), k, ch, out);
          else
            pool_avg_f32(runs.data(), k, ch, sum_f.data(), out);
          continue;
        }
        if (!is_max) {
          if (int8)
            pool_avg_i8(runs.data(), k, ch, sum_i.data(), out);
          else
            pool_avg_bf16(runs.data(), k, ch, sum_f.data(), out);
          continue;
        }
#if defined(__x86_64__) || defined(__i386__)
        if (avx2) {
          if (int8)
            avx2::max_i8(runs.data(), k, ch, out);
          else
            avx2::max_bf16(runs.data(), k, ch, out);
          continue;
        }
#endif
        if (int8)
          portable::max_i8(runs.data(), k, ch, out);
        else
          portable::max_bf16(runs.data(), k, ch, sum_f.data(), nan.data(), out);
      }
}

namespace {

void eltwise_f32(isa::EltOp op, std::uint64_t count, const std::uint8_t* a, const std::uint8_t* b,
                 std::uint8_t* dst, std::uint64_t period) {
  using E = isa::EltOp;
  switch (op) {
    case E::Add: return run_lanes<EltF32Kernel<E::Add>>(count, a, b, dst, period);
    case E::Sub: return run_lanes<EltF32Kernel<E::Sub>>(count, a, b, dst, period);
    case E::Mul: return run_lanes<EltF32Kernel<E::Mul>>(count, a, b, dst, period);
    case E::Max: return run_lanes<EltF32Kernel<E::Max>>(count, a, b, dst, period);
    case E::Min: return run_lanes<EltF32Kernel<E::Min>>(count, a, b, dst, period);
    case E::ReluGrad: return run_lanes<EltF32Kernel<E::ReluGrad>>(count, a, b, dst, period);
    case E::Relu6Grad: return run_lanes<EltF32Kernel<E::Relu6Grad>>(count, a, b, dst, period);
    case E::SigmoidGrad: return run_lanes<EltF32Kernel<E::SigmoidGrad>>(count, a, b, dst, period);
    case E::TanhGrad: return run_lanes<EltF32Kernel<E::TanhGrad>>(count, a, b, dst, period);
    case E::Div: return run_lanes<EltF32Kernel<E::Div>>(count, a, b, dst, period);
  }
}

}  // namespace

void VectorOps::eltwise(const isa::Eltwise& e, UbView ub) const {
  constexpr std::string_view op = "eltwise";
  if (!known(e.op))
    throw ProgramError(fmt::format("{}: op = {} is not an elementwise operation", op,
                                   static_cast<unsigned>(e.op)));
  check_element_type(op, "type", e.type);
  if (fp32_only(e.op) && e.type != DType::Fp32)
    throw ProgramError(
        fmt::format("{}: op {} with type = {} (the gradient ops and div take fp32 only)", op,
                    isa::name_of(e.op), name_of(e.type)));
  check_at_least_1(op, "count", e.count);
  if (e.b_period > e.count)
    throw ProgramError(
        fmt::format("{}: b_period = {} (must be 0, no broadcast, or 1..count = {}: b's elements)",
                    op, e.b_period, e.count));
  const bool int8_mul = e.type == DType::Int8 && e.op == isa::EltOp::Mul;
  if (!int8_mul && (e.shift != 0 || e.multiplier != 0))
    throw ProgramError(fmt::format(
        "{}: shift = {}, multiplier = {} with op {} on {} (only int8 mul takes them; both must be "
        "0)",
        op, e.shift, e.multiplier, isa::name_of(e.op), name_of(e.type)));
  if (e.multiplier < 0)
    throw ProgramError(
        fmt::format("{}: multiplier = {} (a Q31 multiplier must be >= 0)", op, e.multiplier));
  // Without a multiplier the shift only divides; with one it is requantize's signed shift.
  const std::int32_t min_shift = e.multiplier != 0 ? numerics::kMinRequantShift : 0;
  if (e.shift < min_shift || e.shift > numerics::kMaxRequantShift)
    throw ProgramError(fmt::format("{}: shift = {} (int8 mul {} allows {}..{})", op, e.shift,
                                   e.multiplier != 0 ? "with a multiplier" : "without a multiplier",
                                   min_shift, numerics::kMaxRequantShift));

  const std::uint64_t len = std::uint64_t{e.count} * size_of(e.type);
  const std::uint64_t a = e.a.value(), b = e.b.value(), dst = e.dst.value();
  const std::string what = fmt::format("count {} x {}", e.count, name_of(e.type));
  // b holds `period` elements; element i reads b[i mod period] (period = count: b[i]).
  const std::uint32_t period = e.b_period != 0 ? e.b_period : e.count;
  const std::uint64_t b_len = std::uint64_t{period} * size_of(e.type);
  check_ub(op, "a", a, len, what, ub);
  check_ub(op, "b", b, b_len,
           e.b_period != 0 ? fmt::format("b_period {} x {}", e.b_period, name_of(e.type)) : what,
           ub);
  check_ub(op, "dst", dst, len, what, ub);
  if (dst != a && overlaps(dst, len, a, len))
    throw ProgramError(
        fmt::format("{}: dst = {:#x} overlaps a = {:#x} ({} bytes each; dst must equal a or "
                    "not overlap it)",
                    op, dst, a, len));
  if (period < e.count && overlaps(dst, len, b, b_len))
    throw ProgramError(fmt::format(
        "{}: dst = {:#x} + {} bytes overlaps b = {:#x} + {} bytes (a broadcast b, b_period = {} < "
        "count = {}, must not overlap dst: later elements read it again)",
        op, dst, len, b, b_len, e.b_period, e.count));
  if (period == e.count && dst != b && overlaps(dst, len, b, b_len))
    throw ProgramError(
        fmt::format("{}: dst = {:#x} overlaps b = {:#x} ({} bytes each; dst must equal b or "
                    "not overlap it)",
                    op, dst, b, len));

  if (timing_only_) return;  // the instruction checked; no value read

  // fp32 add, subtract, multiply and divide are single IEEE-754 operations (round to nearest
  // even; x / 0 is a signed infinity, 0 / 0 NaN): EltF32Kernel. int8 and bf16 element by element.
  std::uint8_t* const base = ub.data;
  if (e.type == DType::Fp32)
    return eltwise_f32(e.op, e.count, base + a, base + b, base + dst, period);
  std::uint64_t j = 0;  // i mod period, b's element
  for (std::uint64_t i = 0; i < e.count; ++i, j = j + 1 == period ? 0 : j + 1) {
    if (e.type == DType::Int8) {
      const std::int8_t x = load_i8(base + a + i), y = load_i8(base + b + j);
      std::int8_t r = 0;
      switch (e.op) {
        case isa::EltOp::Add: r = numerics::add_int8(x, y); break;
        case isa::EltOp::Sub: r = numerics::sub_int8(x, y); break;
        case isa::EltOp::Mul:
          r = e.multiplier != 0 ? numerics::mul_int8_requant(x, y, e.multiplier, e.shift)
                                : numerics::mul_int8(x, y, e.shift);
          break;
        case isa::EltOp::Max: r = std::max(x, y); break;
        case isa::EltOp::Min: r = std::min(x, y); break;
        default: break;  // the gradient ops and div: fp32 only, refused above
      }
      store_i8(base + dst + i, r);
    } else {
      const Bf16 x = load_bf16(base + a + 2 * i), y = load_bf16(base + b + 2 * j);
      Bf16 r;
      switch (e.op) {
        case isa::EltOp::Add: r = numerics::add_bf16(x, y); break;
        case isa::EltOp::Sub: r = numerics::sub_bf16(x, y); break;
        case isa::EltOp::Mul: r = numerics::mul_bf16(x, y); break;
        case isa::EltOp::Max: r = numerics::max_bf16(x, y); break;
        case isa::EltOp::Min: r = numerics::min_bf16(x, y); break;
        default: break;  // the gradient ops and div: fp32 only, refused above
      }
      store_bf16(base + dst + 2 * i, r);
    }
  }
}

void VectorOps::softmax(const isa::Softmax& s, UbView ub) const {
  constexpr std::string_view op = "softmax";
  check_at_least_1(op, "rows", s.rows);
  check_at_least_1(op, "cols", s.cols);
  const std::uint64_t row_bytes = std::uint64_t{s.cols} * 4;
  for (const auto& [name, stride] :
       {std::pair{"src_stride", s.src_stride}, std::pair{"dst_stride", s.dst_stride}})
    if (stride < row_bytes)
      throw ProgramError(
          fmt::format("{}: {} = {} bytes (must be >= cols {} x 4 bytes of fp32 = {})", op, name,
                      stride, s.cols, row_bytes));
  const std::uint64_t src = s.src.value(), dst = s.dst.value();
  const std::uint64_t src_len = check_rows(op, "src", src, s.rows, s.src_stride, row_bytes, ub);
  const std::uint64_t dst_len = check_rows(op, "dst", dst, s.rows, s.dst_stride, row_bytes, ub);
  const bool in_place = dst == src && s.dst_stride == s.src_stride;
  if (!in_place && overlaps(dst, dst_len, src, src_len))
    throw ProgramError(fmt::format(
        "{}: dst = {:#x} + {} bytes overlaps src = {:#x} + {} bytes (in place needs dst = src "
        "and dst_stride = src_stride)",
        op, dst, dst_len, src, src_len));
  if (timing_only_) return;  // the instruction checked; no value read

  std::vector<float> row(s.cols);
  for (std::uint64_t r = 0; r < s.rows; ++r) {
    const std::uint8_t* in = ub.data + src + r * s.src_stride;
    for (std::uint32_t c = 0; c < s.cols; ++c) row[c] = bits_to_float(load_u32(in + 4 * c));
    numerics::softmax_row(row.data(), row.data(), s.cols);
    std::uint8_t* out = ub.data + dst + r * s.dst_stride;
    for (std::uint32_t c = 0; c < s.cols; ++c) store_u32(out + 4 * c, float_to_bits(row[c]));
  }
}

void VectorOps::copy(const isa::Copy& c, UbView ub) const {
  constexpr std::string_view op = "copy";
  check_at_least_1(op, "rows", c.rows);
  check_at_least_1(op, "row_bytes", c.row_bytes);
  if (c.dst_stride < c.row_bytes)
    throw ProgramError(fmt::format(
        "{}: dst_stride = {} bytes (must be >= row_bytes = {}: written rows must not overlap)", op,
        c.dst_stride, c.row_bytes));
  const std::uint64_t src = c.src.value(), dst = c.dst.value();
  const std::uint64_t src_len = check_rows(op, "src", src, c.rows, c.src_stride, c.row_bytes, ub);
  const std::uint64_t dst_len = check_rows(op, "dst", dst, c.rows, c.dst_stride, c.row_bytes, ub);
  if (overlaps(dst, dst_len, src, src_len))
    throw ProgramError(fmt::format("{}: dst = {:#x} + {} bytes overlaps src = {:#x} + {} bytes", op,
                                   dst, dst_len, src, src_len));
  if (timing_only_) return;  // the instruction checked; no value read
  for (std::uint64_t r = 0; r < c.rows; ++r)
    std::memcpy(ub.data + dst + r * c.dst_stride, ub.data + src + r * c.src_stride, c.row_bytes);
}

namespace {

// A map's scale: finite and > 0 for an int8 side, 0 for a float side (only int8 is scaled).
void check_map_scale(std::string_view op, std::string_view field, float scale,
                     std::string_view side, DType type) {
  if (type == DType::Int8 && !(std::isfinite(scale) && scale > 0.0f))
    throw ProgramError(fmt::format("{}: {} = {} (must be a finite number > 0 for {} int8)", op,
                                   field, scale, side));
  if (type != DType::Int8 && scale != 0.0f)
    throw ProgramError(fmt::format("{}: {} = {} with {} {} (only int8 is scaled; must be 0)", op,
                                   field, scale, side, name_of(type)));
}

// Element i of a map's input as fp32 (numerics/quantize.h for int8), and y stored as the output
// type (int8 by numerics::quantize_int8, bf16 rounded to nearest even).
template <DType In>
float map_load(const std::uint8_t* base, std::uint64_t i, float scale) {
  if constexpr (In == DType::Int8) {
    return numerics::dequantize_int8(load_i8(base + i), scale);
  } else if constexpr (In == DType::Bf16) {
    return to_float(load_bf16(base + 2 * i));
  } else {
    return bits_to_float(load_u32(base + 4 * i));
  }
}
template <DType Out>
void map_store(std::uint8_t* base, std::uint64_t i, float scale, float y) {
  if constexpr (Out == DType::Int8) {
    store_i8(base + i, numerics::quantize_int8(y, scale));
  } else if constexpr (Out == DType::Bf16) {
    store_bf16(base + 2 * i, to_bf16(y));
  } else {
    store_u32(base + 4 * i, float_to_bits(y));
  }
}

// map through MapKernel when its types and function have lanes; false when they do not. The
// records repeat in a buffer of whole channels at least kMapPeriod elements long, so that a
// channel count of 1 or 3 still fills vectors.
constexpr std::uint64_t kMapPeriod = 64;

template <DType In, DType Out>
bool map_lanes(const isa::Map& m, const std::uint8_t* in, std::uint8_t* out, const float* a,
               const float* b) {
  using F = isa::MapFunc;
  if (m.func != F::Identity && m.func != F::Relu && m.func != F::Relu6) return false;
  const std::uint64_t copies = (kMapPeriod + m.channels - 1) / m.channels;
  const std::uint64_t period = copies * m.channels;
  std::vector<float> ra(period), rb(period);
  for (std::uint64_t j = 0; j < period; ++j) ra[j] = a[j % m.channels], rb[j] = b[j % m.channels];
  const std::uint64_t count = m.count;
  switch (m.func) {
    case F::Identity:
      run_lanes<MapKernel<In, Out, F::Identity>>(count, in, out, ra.data(), rb.data(), period);
      break;
    case F::Relu:
      run_lanes<MapKernel<In, Out, F::Relu>>(count, in, out, ra.data(), rb.data(), period);
      break;
    default:
      run_lanes<MapKernel<In, Out, F::Relu6>>(count, in, out, ra.data(), rb.data(), period);
      break;
  }
  return true;
}

template <DType In>
bool map_lanes(const isa::Map& m, const std::uint8_t* in, std::uint8_t* out, const float* a,
               const float* b) {
  if (m.out_type == DType::Bf16) return map_lanes<In, DType::Bf16>(m, in, out, a, b);
  if (m.out_type == DType::Fp32) return map_lanes<In, DType::Fp32>(m, in, out, a, b);
  return false;
}

// The elements of a map: x * a + b, the function, and the output conversion. The types and the
// function are template arguments so that the per-element loop has no dispatch left in it.
template <DType In, DType Out, isa::MapFunc F>
void map_elements(const isa::Map& m, const std::uint8_t* in, std::uint8_t* out, const float* a,
                  const float* b, const float* alpha) {
  std::uint32_t c = 0;
  for (std::uint64_t i = 0; i < m.count; ++i) {
    const float x = map_load<In>(in, i, m.in_scale);
    map_store<Out>(out, i, m.out_scale, map_float(F, numerics::affine(x, a[c], b[c]), alpha[c]));
    c = c + 1 == m.channels ? 0 : c + 1;
  }
}

template <DType In, DType Out>
void map_elements(const isa::Map& m, const std::uint8_t* in, std::uint8_t* out, const float* a,
                  const float* b, const float* alpha) {
  using F = isa::MapFunc;
  switch (m.func) {
    case F::Identity: return map_elements<In, Out, F::Identity>(m, in, out, a, b, alpha);
    case F::Relu: return map_elements<In, Out, F::Relu>(m, in, out, a, b, alpha);
    case F::Relu6: return map_elements<In, Out, F::Relu6>(m, in, out, a, b, alpha);
    case F::LeakyRelu: return map_elements<In, Out, F::LeakyRelu>(m, in, out, a, b, alpha);
    case F::Elu: return map_elements<In, Out, F::Elu>(m, in, out, a, b, alpha);
    case F::Sigmoid: return map_elements<In, Out, F::Sigmoid>(m, in, out, a, b, alpha);
    case F::Tanh: return map_elements<In, Out, F::Tanh>(m, in, out, a, b, alpha);
    case F::Prelu: return map_elements<In, Out, F::Prelu>(m, in, out, a, b, alpha);
    case F::Rsqrt: return map_elements<In, Out, F::Rsqrt>(m, in, out, a, b, alpha);
  }
}

template <DType In>
void map_elements(const isa::Map& m, const std::uint8_t* in, std::uint8_t* out, const float* a,
                  const float* b, const float* alpha) {
  switch (m.out_type) {
    case DType::Int8: return map_elements<In, DType::Int8>(m, in, out, a, b, alpha);
    case DType::Bf16: return map_elements<In, DType::Bf16>(m, in, out, a, b, alpha);
    default: return map_elements<In, DType::Fp32>(m, in, out, a, b, alpha);
  }
}

}  // namespace

void VectorOps::map(const isa::Map& m, UbView ub) const {
  constexpr std::string_view op = "map";
  if (!known(m.func))
    throw ProgramError(
        fmt::format("{}: func = {} is not a map function", op, static_cast<unsigned>(m.func)));
  check_element_type(op, "in", m.in_type);
  check_element_type(op, "out", m.out_type);
  if (m.func == isa::MapFunc::Rsqrt)
    for (const auto& [name, type] : {std::pair{"in", m.in_type}, std::pair{"out", m.out_type}})
      if (type != DType::Fp32)
        throw ProgramError(
            fmt::format("{}: func rsqrt with {} = {} (rsqrt takes fp32 in and out only)", op, name,
                        name_of(type)));
  check_at_least_1(op, "count", m.count);
  check_at_least_1(op, "channels", m.channels);
  check_map_scale(op, "in_scale", m.in_scale, "in", m.in_type);
  check_map_scale(op, "out_scale", m.out_scale, "out", m.out_type);

  const std::uint64_t src = m.src.value(), dst = m.dst.value(), params = m.params.value();
  const std::uint64_t in_len = std::uint64_t{m.count} * size_of(m.in_type);
  const std::uint64_t out_len = std::uint64_t{m.count} * size_of(m.out_type);
  const std::uint64_t params_len = kParamRecordBytes * m.channels;
  check_ub(op, "src", src, in_len, fmt::format("count {} x {}", m.count, name_of(m.in_type)), ub);
  check_ub(op, "dst", dst, out_len, fmt::format("count {} x {}", m.count, name_of(m.out_type)), ub);
  check_ub(op, "params", params, params_len, fmt::format("12 bytes x channels {}", m.channels), ub);
  // In place, element i is read before it is written and no later element is touched, when both
  // types have one size.
  const bool in_place = dst == src && size_of(m.in_type) == size_of(m.out_type);
  if (!in_place && overlaps(dst, out_len, src, in_len))
    throw ProgramError(fmt::format(
        "{}: dst = {:#x} + {} bytes overlaps src = {:#x} + {} bytes (in place needs dst = src and "
        "in and out of one size)",
        op, dst, out_len, src, in_len));
  if (overlaps(dst, out_len, params, params_len))
    throw ProgramError(fmt::format("{}: dst = {:#x} + {} bytes overlaps params = {:#x} + {} bytes",
                                   op, dst, out_len, params, params_len));

  if (timing_only_) return;  // the instruction checked; no value read

  // The records {a, b, alpha} of every channel, then the elements: x * a + b, the function, and
  // the output conversion, each the numerics library's definition.
  std::vector<float> a(m.channels), b(m.channels), alpha(m.channels);
  for (std::uint32_t c = 0; c < m.channels; ++c) {
    const std::uint8_t* r = ub.data + params + kParamRecordBytes * c;
    a[c] = bits_to_float(load_u32(r));
    b[c] = bits_to_float(load_u32(r + 4));
    alpha[c] = bits_to_float(load_u32(r + 8));
  }
  const std::uint8_t* in = ub.data + src;
  std::uint8_t* out = ub.data + dst;
  if (m.in_type == DType::Bf16 && map_lanes<DType::Bf16>(m, in, out, a.data(), b.data())) return;
  if (m.in_type == DType::Fp32 && map_lanes<DType::Fp32>(m, in, out, a.data(), b.data())) return;
  switch (m.in_type) {
    case DType::Int8:
      return map_elements<DType::Int8>(m, in, out, a.data(), b.data(), alpha.data());
    case DType::Bf16:
      return map_elements<DType::Bf16>(m, in, out, a.data(), b.data(), alpha.data());
    default: return map_elements<DType::Fp32>(m, in, out, a.data(), b.data(), alpha.data());
  }
}

void VectorOps::xent(const isa::Xent& x, UbView ub) const {
  constexpr std::string_view op = "xent";
  check_at_least_1(op, "rows", x.rows);
  check_at_least_1(op, "cols", x.cols);
  if (!std::isfinite(x.scale))
    throw ProgramError(fmt::format("{}: scale = {} (must be finite)", op, x.scale));
  if (!numerics::valid_label_smoothing(x.smoothing))
    throw ProgramError(fmt::format("{}: smoothing = {} (must be in [0, 1))", op, x.smoothing));
  const std::uint64_t src = x.src.value(), labels = x.labels.value(), dst = x.dst.value();
  const std::uint64_t out = x.out.value();
  const std::uint64_t row_bytes = 4ull * x.cols, logits = row_bytes * x.rows;
  const std::uint64_t labels_len = 4ull * x.rows, out_len = kXentRecordBytes * x.rows;
  const std::string rows_what = fmt::format("rows {} x cols {} x fp32", x.rows, x.cols);
  check_ub(op, "src", src, logits, rows_what, ub);
  check_ub(op, "labels", labels, labels_len, fmt::format("rows {} x int32", x.rows), ub);
  check_ub(op, "dst", dst, logits, rows_what, ub);
  check_ub(op, "out", out, out_len, fmt::format("rows {} x 8-byte records", x.rows), ub);
  // In place, row r's gradient replaces only row r's logits, read first. Every label is read
  // before anything is written, so dst and out may overlap the labels.
  if (dst != src && overlaps(dst, logits, src, logits))
    throw ProgramError(fmt::format(
        "{}: dst = {:#x} + {} bytes overlaps src = {:#x} (dst must equal src or not overlap it)",
        op, dst, logits, src));
  for (const auto& [name, at] : {std::pair{"src", src}, std::pair{"dst", dst}})
    if (overlaps(out, out_len, at, logits))
      throw ProgramError(fmt::format("{}: out = {:#x} + {} bytes overlaps {} = {:#x} + {} bytes",
                                     op, out, out_len, name, at, logits));
  // Timing only: the labels are values, so their range goes unchecked.
  if (timing_only_) return;  // the instruction checked; no value read
  std::vector<std::uint32_t> label(x.rows);
  for (std::uint32_t r = 0; r < x.rows; ++r) {
    const auto l = static_cast<std::int32_t>(load_u32(ub.data + labels + 4ull * r));
    if (l < 0 || l >= x.cols)
      throw ProgramError(
          fmt::format("{}: labels[{}] = {} at {:#x} (row {}'s label must be in [0, cols = {}))", op,
                      r, l, labels + 4ull * r, r, x.cols));
    label[r] = static_cast<std::uint32_t>(l);
  }

  std::vector<float> row(x.cols);
  for (std::uint64_t r = 0; r < x.rows; ++r) {
    const std::uint8_t* in = ub.data + src + r * row_bytes;
    for (std::uint32_t c = 0; c < x.cols; ++c) row[c] = bits_to_float(load_u32(in + 4 * c));
    const numerics::XentRow rec =
        numerics::softmax_xent_row(row.data(), row.data(), x.cols, label[r], x.scale, x.smoothing);
    std::uint8_t* g = ub.data + dst + r * row_bytes;
    for (std::uint32_t c = 0; c < x.cols; ++c) store_u32(g + 4 * c, float_to_bits(row[c]));
    std::uint8_t* o = ub.data + out + kXentRecordBytes * r;
    store_u32(o, float_to_bits(rec.loss));
    store_u32(o + 4, float_to_bits(rec.correct));
  }
}

namespace {

// An update hyperparameter: finite and `ok`, else a message saying what is `allowed`.
void check_update_param(std::string_view field, float v, bool ok, std::string_view allowed) {
  if (!std::isfinite(v) || !ok)
    throw ProgramError(fmt::format("update: {} = {} (must be {})", field, v, allowed));
}

}  // namespace

void VectorOps::update(const isa::Update& u, UbView ub) const {
  constexpr std::string_view op = "update";
  const std::uint32_t n_params = isa::update_params(u.kind);
  if (n_params == 0)
    throw ProgramError(
        fmt::format("{}: kind = {} is not an optimizer (allowed: sgd, momentum, adam, lars)", op,
                    static_cast<unsigned>(u.kind)));
  check_at_least_1(op, "count", u.count);
  const bool slot_m = u.kind != isa::UpdateKind::Sgd, slot_v = u.kind == isa::UpdateKind::Adam;
  for (const auto& [name, used, at] :
       {std::tuple{"m", slot_m, u.m.value()}, std::tuple{"v", slot_v, u.v.value()}})
    if (!used && at != 0)
      throw ProgramError(fmt::format("{}: {} = {:#x} with kind {} ({} uses no {}; must be 0)", op,
                                     name, at, isa::name_of(u.kind), isa::name_of(u.kind), name));

  // 1. Every array and the record inside the unified buffer, the arrays apart.
  const std::uint64_t len = 4ull * u.count, params = u.params.value();
  std::vector<std::pair<const char*, std::uint64_t>> arrays = {{"w", u.w.value()},
                                                               {"g", u.g.value()}};
  if (slot_m) arrays.emplace_back("m", u.m.value());
  if (slot_v) arrays.emplace_back("v", u.v.value());
  const std::string what = fmt::format("count {} x fp32", u.count);
  for (const auto& [name, at] : arrays) check_ub(op, name, at, len, what, ub);
  check_ub(op, "params", params, 4ull * n_params,
           fmt::format("{} fp32 values of {}", n_params, isa::name_of(u.kind)), ub);
  for (std::size_t a = 0; a < arrays.size(); ++a)
    for (std::size_t b = a + 1; b < arrays.size(); ++b)
      if (overlaps(arrays[a].second, len, arrays[b].second, len))
        throw ProgramError(fmt::format("{}: {} = {:#x} overlaps {} = {:#x} ({} bytes each)", op,
                                       arrays[b].first, arrays[b].second, arrays[a].first,
                                       arrays[a].second, len));

  // Timing only: the record's values, and so their ranges, are not read.
  if (timing_only_) return;  // the instruction checked; no value read

  // 2. The record, read once before any element is written, and its values' ranges.
  float p[6] = {};
  for (std::uint32_t k = 0; k < n_params; ++k)
    p[k] = bits_to_float(load_u32(ub.data + params + 4 * k));
  const float lr = p[0];
  check_update_param("lr", lr, lr >= 0.0f, "finite and >= 0");
  if (u.kind == isa::UpdateKind::Momentum || u.kind == isa::UpdateKind::Lars)
    check_update_param("momentum", p[1], p[1] >= 0.0f && p[1] <= 1.0f, "in [0, 1], as Keras's SGD");
  if (u.kind == isa::UpdateKind::Lars) {
    // The sums of squares are the chip's own (reduce sum_squares), not checked: a diverged
    // tensor's inf or NaN gives the trust ratio TF's formula gives it.
    check_update_param("weight_decay", p[2], p[2] >= 0.0f, "finite and >= 0");
    check_update_param("eta", p[3], p[3] > 0.0f, "finite and > 0");
  }
  if (u.kind == isa::UpdateKind::Adam) {
    const char* names[] = {"beta1", "beta2", "epsilon", "beta1_power", "beta2_power"};
    for (int k = 1; k < 6; ++k) {
      const float v = p[k];
      if (k == 3)
        check_update_param(names[k - 1], v, v > 0.0f, "finite and > 0");
      else
        check_update_param(names[k - 1], v, v >= 0.0f && v < 1.0f, "in [0, 1)");
    }
  }

  // 3. The step, element by element (numerics/optimizer.h).
  std::uint8_t* const w = ub.data + u.w.value();
  const std::uint8_t* const g = ub.data + u.g.value();
  std::uint8_t* const m = ub.data + u.m.value();
  std::uint8_t* const v = ub.data + u.v.value();
  const float alpha = u.kind == isa::UpdateKind::Adam ? numerics::adam_alpha(lr, p[4], p[5]) : 0.0f;
  const float scaled_lr =
      u.kind == isa::UpdateKind::Lars ? numerics::lars_scaled_lr(lr, p[3], p[2], p[4], p[5]) : 0.0f;
  for (std::uint64_t i = 0; i < 4ull * u.count; i += 4) {
    float wi = bits_to_float(load_u32(w + i));
    const float gi = bits_to_float(load_u32(g + i));
    switch (u.kind) {
      case isa::UpdateKind::Sgd: wi = numerics::sgd_step(wi, gi, lr); break;
      case isa::UpdateKind::Momentum: {
        float mi = bits_to_float(load_u32(m + i));
        numerics::momentum_step(wi, mi, gi, lr, p[1]);
        store_u32(m + i, float_to_bits(mi));
        break;
      }
      case isa::UpdateKind::Adam: {
        float mi = bits_to_float(load_u32(m + i)), vi = bits_to_float(load_u32(v + i));
        numerics::adam_step(wi, mi, vi, gi, alpha, p[1], p[2], p[3]);
        store_u32(m + i, float_to_bits(mi));
        store_u32(v + i, float_to_bits(vi));
        break;
      }
      case isa::UpdateKind::Lars: {
        float mi = bits_to_float(load_u32(m + i));
        numerics::lars_step(wi, mi, gi, scaled_lr, p[1], p[2]);
        store_u32(m + i, float_to_bits(mi));
        break;
      }
    }
    store_u32(w + i, float_to_bits(wi));
  }
}

void VectorOps::reduce(const isa::Reduce& r, UbView ub) const {
  constexpr std::string_view op = "reduce";
  if (!known(r.op))
    throw ProgramError(
        fmt::format("{}: op = {} is not a reduction", op, static_cast<unsigned>(r.op)));
  check_fp32(op, r.type);
  check_at_least_1(op, "rows", r.rows);
  check_at_least_1(op, "cols", r.cols);
  const std::uint64_t row_bytes = std::uint64_t{r.cols} * 4;
  if (r.stride < row_bytes)
    throw ProgramError(
        fmt::format("{}: stride = {} bytes (must be >= cols {} x 4 bytes of fp32 = {})", op,
                    r.stride, r.cols, row_bytes));
  const std::uint64_t src = r.src.value(), dst = r.dst.value();
  const std::uint64_t src_len = check_rows(op, "src", src, r.rows, r.stride, row_bytes, ub);
  check_ub(op, "dst", dst, row_bytes, fmt::format("cols {} x fp32", r.cols), ub);
  if (overlaps(dst, row_bytes, src, src_len))
    throw ProgramError(fmt::format("{}: dst = {:#x} + {} bytes overlaps src = {:#x} + {} bytes", op,
                                   dst, row_bytes, src, src_len));

  if (timing_only_) return;  // the instruction checked; no value read

  // Each column from its start value, the rows in order: one fp32 add (of the value or its
  // square), or max_float (NaN propagates), per value.
  const bool max = r.op == isa::ReduceOp::Max;
  std::vector<float> s(r.cols);
  for (std::uint32_t c = 0; c < r.cols; ++c)
    s[c] = r.accumulate ? bits_to_float(load_u32(ub.data + dst + 4 * c))
                        : (max ? -std::numeric_limits<float>::infinity() : 0.0f);
  run_lanes<ReduceKernel>(r.op, static_cast<const std::uint8_t*>(ub.data + src),
                          std::uint64_t{r.rows}, std::uint64_t{r.stride}, std::uint64_t{r.cols},
                          s.data());
  for (std::uint32_t c = 0; c < r.cols; ++c) store_u32(ub.data + dst + 4 * c, float_to_bits(s[c]));
}

void VectorOps::pool_grad(const isa::PoolGrad& g, const isa::SetWindow& w, UbView ub) const {
  constexpr std::string_view op = "pool_grad";
  if (!known(g.kind))
    throw ProgramError(
        fmt::format("{}: kind = {} is not a pooling kind", op, static_cast<unsigned>(g.kind)));
  check_fp32(op, g.type);
  check_at_least_1(op, "images", g.images);
  if (w.in_h == 0 || w.in_w == 0 || w.in_c == 0 || w.kernel_h == 0 || w.kernel_w == 0 ||
      w.stride_h == 0 || w.stride_w == 0 || w.out_h == 0 || w.out_w == 0)
    throw ProgramError(fmt::format(
        "{}: window in {}x{}x{}, kernel {}x{}, stride {}x{}, out {}x{} (every size and stride must "
        "be >= 1; set_window must precede a pool_grad)",
        op, w.in_h, w.in_w, w.in_c, w.kernel_h, w.kernel_w, w.stride_h, w.stride_w, w.out_h,
        w.out_w));
  if (isa::window_dilation_h(w) != 1 || isa::window_dilation_w(w) != 1)
    throw ProgramError(
        fmt::format("{}: window dilation {}x{} (pooling windows are dense: dilations must be 1)",
                    op, w.dilation_h, w.dilation_w));
  if (isa::window_in_dilation_h(w) != 1 || isa::window_in_dilation_w(w) != 1)
    throw ProgramError(fmt::format(
        "{}: window input dilation {}x{} (pooling reads its input as stored: must be 1)", op,
        w.in_dilation_h, w.in_dilation_w));
  const isa::PoolAxis rows = isa::pool_grad_rows(w), cols = isa::pool_grad_cols(w);
  check_pool_axis(op, rows, "kernel_h", "stride_h", "pad_top", "out_h", "in_h");
  check_pool_axis(op, cols, "kernel_w", "stride_w", "pad_left", "out_w", "in_w");
  const bool is_max = g.kind == isa::PoolKind::Max;
  const std::uint64_t window = std::uint64_t{w.kernel_h} * w.kernel_w;
  if (!is_max && window > std::uint64_t{numerics::kMaxAvgPoolWindow})
    throw ProgramError(
        fmt::format("{}: kernel_h {} x kernel_w {} = {} elements (avg allows at most {}: the "
                    "divisor must be exact in fp32)",
                    op, w.kernel_h, w.kernel_w, window, numerics::kMaxAvgPoolWindow));

  const std::uint64_t ch = w.in_c;
  const std::uint64_t x_len =
      mul_sat(mul_sat(mul_sat(std::uint64_t{g.images} * ch, w.in_h), w.in_w), 4);
  const std::uint64_t dy_len =
      mul_sat(mul_sat(mul_sat(std::uint64_t{g.images} * ch, w.out_h), w.out_w), 4);
  const std::uint64_t x = g.x.value(), dy = g.dy.value(), dst = g.dst.value();
  const auto shape = [&](std::uint32_t h, std::uint32_t wd) {
    return fmt::format("{} images of {}x{}x{} fp32", g.images, h, wd, ch);
  };
  if (is_max) check_ub(op, "x", x, x_len, shape(w.in_h, w.in_w), ub);
  check_ub(op, "dy", dy, dy_len, shape(w.out_h, w.out_w), ub);
  check_ub(op, "dst", dst, x_len, shape(w.in_h, w.in_w), ub);
  if (is_max && overlaps(dst, x_len, x, x_len))
    throw ProgramError(fmt::format("{}: dst = {:#x} + {} bytes overlaps x = {:#x} + {} bytes", op,
                                   dst, x_len, x, x_len));
  if (overlaps(dst, x_len, dy, dy_len))
    throw ProgramError(fmt::format("{}: dst = {:#x} + {} bytes overlaps dy = {:#x} + {} bytes", op,
                                   dst, x_len, dy, dy_len));

  if (timing_only_) return;  // the instruction checked; no value read

  // 1. dX = +0 everywhere. 2. Output elements in NHWC order (b, oy, ox, then c); each window's
  // positions in window order (ky, then kx), those inside the image only. 3. max: dy into the
  // first maximum of x; avg: dy / n into every position, in order.
  std::memset(ub.data + dst, 0, x_len);
  run_lanes<PoolGradKernel>(&w, &rows, &cols, std::uint64_t{g.images}, is_max,
                            static_cast<const std::uint8_t*>(ub.data + x),
                            static_cast<const std::uint8_t*>(ub.data + dy), ub.data + dst);
}

namespace {

void finish(VectorCost& c, const ChipConfig& cfg) {
  const std::uint64_t lanes = std::uint64_t{cfg.vector_unit.lanes} * cfg.vector_unit.sublanes;
  const std::uint64_t compute = ceil_div(c.element_ops, lanes);
  const std::uint64_t port =
      ceil_div(c.ub_bytes_read + c.ub_bytes_written, cfg.vector_unit.bytes_per_cycle);
  c.cycles = cfg.vector_unit.latency_cycles + std::max(compute, port);
}

}  // namespace

VectorCost VectorOps::cost(const isa::Activate& a) const {
  VectorCost c;
  const std::uint64_t elems = std::uint64_t{a.rows} * a.cols;
  c.element_ops = elems * (a.func == isa::ActFunc::Softmax ? 3 : 1);
  c.acc_bytes_read = elems * size_of(cfg_.mxu.acc_type);
  c.ub_bytes_read = kParamRecordBytes * a.cols;
  c.ub_bytes_written = elems * size_of(a.out_type);
  finish(c, cfg_);
  return c;
}

VectorCost VectorOps::cost(const isa::Pool& p) const {
  VectorCost c;
  const PoolShape s = pool_shape(p);
  const std::uint64_t esize = size_of(p.type);
  // The window positions inside the image, rows times columns: the window is a rectangle.
  c.element_ops = mul_sat(mul_sat(std::uint64_t{p.images} * p.channels, s.rows.inside_positions()),
                          s.cols.inside_positions());
  c.ub_bytes_read = mul_sat(s.in_elems, esize);
  c.ub_bytes_written = mul_sat(s.out_elems, esize);
  finish(c, cfg_);
  return c;
}

// As Activate's softmax: 3 element operations per value (the row maximum, the exponentials and
// their sum, the division).
VectorCost VectorOps::cost(const isa::Softmax& s) const {
  VectorCost c;
  const std::uint64_t elems = std::uint64_t{s.rows} * s.cols;
  c.element_ops = 3 * elems;
  c.ub_bytes_read = 4 * elems;
  c.ub_bytes_written = 4 * elems;
  finish(c, cfg_);
  return c;
}

// One lane pass per element (conversion in, x * a + b, the function, conversion out), and the
// channel records read once, as activate reads its column records.
VectorCost VectorOps::cost(const isa::Map& m) const {
  VectorCost c;
  c.element_ops = m.count;
  c.ub_bytes_read = std::uint64_t{m.count} * size_of(m.in_type) + kParamRecordBytes * m.channels;
  c.ub_bytes_written = std::uint64_t{m.count} * size_of(m.out_type);
  finish(c, cfg_);
  return c;
}

// No lane operation: the bytes stream through the unit's port, read once and written once.
VectorCost VectorOps::cost(const isa::Copy& c) const {
  VectorCost v;
  v.ub_bytes_read = std::uint64_t{c.rows} * c.row_bytes;
  v.ub_bytes_written = v.ub_bytes_read;
  finish(v, cfg_);
  return v;
}

// One add or compare per input value (sum_squares's multiply and add counting once, the
// multiply-add vector_op_pj is taken to be); dst's running values read too with acc.
VectorCost VectorOps::cost(const isa::Reduce& r) const {
  VectorCost c;
  const std::uint64_t elems = std::uint64_t{r.rows} * r.cols;
  c.element_ops = elems;
  c.ub_bytes_read = 4 * elems + (r.accumulate ? 4ull * r.cols : 0);
  c.ub_bytes_written = 4ull * r.cols;
  finish(c, cfg_);
  return c;
}

// pool's count of window positions inside the image (max: a compare; avg: an add of the share),
// plus one operation per dy element (max: the add into the chosen position; avg: the division).
// dy is read once, x once for max (line buffers, as pool), and dX written once.
VectorCost VectorOps::cost(const isa::PoolGrad& g, const isa::SetWindow& w) const {
  VectorCost c;
  const isa::PoolAxis rows = isa::pool_grad_rows(w), cols = isa::pool_grad_cols(w);
  const std::uint64_t per_channel = std::uint64_t{g.images} * w.in_c;
  const std::uint64_t dy_elems = mul_sat(mul_sat(per_channel, w.out_h), w.out_w);
  const std::uint64_t x_elems = mul_sat(mul_sat(per_channel, w.in_h), w.in_w);
  c.element_ops =
      mul_sat(mul_sat(per_channel, rows.inside_positions()), cols.inside_positions()) + dy_elems;
  c.ub_bytes_read = mul_sat(dy_elems, 4) + (g.kind == isa::PoolKind::Max ? mul_sat(x_elems, 4) : 0);
  c.ub_bytes_written = mul_sat(x_elems, 4);
  finish(c, cfg_);
  return c;
}

// One lane pass per element, kDivElementOps for a division; a read, b read (its b_period elements
// once when broadcast), dst written.
VectorCost VectorOps::cost(const isa::Eltwise& e) const {
  VectorCost c;
  const std::uint64_t len = std::uint64_t{e.count} * size_of(e.type);
  const std::uint64_t b_elems = e.b_period != 0 ? e.b_period : e.count;
  c.element_ops = std::uint64_t{e.count} * (e.op == isa::EltOp::Div ? kDivElementOps : 1);
  c.ub_bytes_read = len + b_elems * size_of(e.type);
  c.ub_bytes_written = len;
  finish(c, cfg_);
  return c;
}

// Softmax's 3 element operations per value (the row maximum, the exponentials and their sum, the
// division), one more for subtracting the one-hot label and scaling (one lane pass, as
// activate's bias and scale are), and one per row for the loss log(s) - q; the correct flag is
// the maximum pass's index and costs nothing. With smoothing, one more per value: the target's
// product with z_c - m added into q (a multiply-add, counted once as map's).
VectorCost VectorOps::cost(const isa::Xent& x) const {
  VectorCost c;
  const std::uint64_t elems = std::uint64_t{x.rows} * x.cols;
  c.element_ops = (x.smoothing != 0.0f ? 5 : 4) * elems + x.rows;
  c.ub_bytes_read = 4 * elems + 4ull * x.rows;
  c.ub_bytes_written = 4 * elems + kXentRecordBytes * x.rows;
  finish(c, cfg_);
  return c;
}

// One element operation per fp32 operation of the step, a multiply and the add or subtract of its
// product counting once (the multiply-add vector_op_pj is taken to be, as map's x * a + b):
//   sgd       w - lr*g                                                    1
//   momentum  lr*g; momentum*m - that; w + m                              3
//   adam      g - m; m + d*(1-beta1); g*g - v; v + e*(1-beta2); sqrt;
//             + epsilon; m*alpha; the division; w - q                     9
//   lars      g + weight_decay*w; then momentum's three                   4
// (1 - beta1), (1 - beta2), alpha and lars's scaled_lr are computed once per instruction (the
// tensor's norms come from reduce sum_squares before). Each array the kind uses is read once and
// each it changes written once; the record is read once.
VectorCost VectorOps::cost(const isa::Update& u) const {
  VectorCost c;
  const bool lars = u.kind == isa::UpdateKind::Lars;
  const std::uint64_t slots = u.kind == isa::UpdateKind::Adam               ? 2
                              : u.kind == isa::UpdateKind::Momentum || lars ? 1
                                                                            : 0;
  const std::uint64_t ops_per_element[] = {1, 3, 9};
  const std::uint64_t n = u.count;
  c.element_ops = n * (ops_per_element[slots] + (lars ? 1 : 0));
  c.ub_bytes_read = 4 * n * (2 + slots) + 4ull * isa::update_params(u.kind);
  c.ub_bytes_written = 4 * n * (1 + slots);
  finish(c, cfg_);
  return c;
}

}  // namespace tpu
