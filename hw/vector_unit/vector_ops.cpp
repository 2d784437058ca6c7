// Timing model of one vector instruction (docs/timing-model.md):
//
//   cycles = vector_unit.latency_cycles
//          + max(ceil(element_ops / (vector_unit.lanes * vector_unit.sublanes)),
//                ceil((ub_bytes_read + ub_bytes_written) / vector_unit.bytes_per_cycle))
//
// The lanes run one element operation each per cycle, pipelined behind a fill latency; the unit
// has its own unified-buffer port (vector_unit.bytes_per_cycle, shared by its reads and writes), and
// whichever of the two is slower sets the pace. Accumulator reads are counted for energy but do
// not limit the pace: an accumulator entry (mxu.cols words) is read per cycle, as J17 §2's
// Activate pipeline drains one MXU result row per cycle.
//
// What counts as one element operation:
//   activate  one per output element (bias, scale or requantize, and the function are one lane
//             pipeline pass); softmax 3 per output element (a pass for the row maximum, one for
//             exp and the sum, one for the divide).
//   pool      one per input element read per window position: images*out_h*out_w*channels*
//             kernel_h*kernel_w (a compare for max, an add for avg).
//   eltwise   one per output element: count.
// Bytes:
//   activate  acc read rows*cols*size(acc_type); UB read 12*cols (the parameter records);
//             UB written rows*cols*size(out).
//   pool      UB read images*in_h*in_w*channels*size(type) (every input element once: line
//             buffers hold the kernel_h rows a window revisits); UB written
//             images*out_h*out_w*channels*size(type).
//   eltwise   UB read 2*count*size(type); UB written count*size(type).
//
// Overlap rules (checked before anything is written, so a rejected instruction changes nothing):
//   activate  dst's extent [dst, dst + (rows-1)*stride + cols*size(out)) must not overlap the
//             parameter records.
//   pool      src and dst extents must not overlap (a window reads inputs after earlier outputs
//             are written).
//   eltwise   dst must either not overlap a (or b) or start at the same address (in place:
//             element i depends only on element i); a and b may overlap freely.
#include "hw/vector_unit/vector_ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hw/common/error.h"
#include "hw/isa/fields.h"
#include "hw/vector_unit/functions.h"

namespace tpu {
namespace {

constexpr std::uint64_t kParamRecordBytes = 12;  // {bias, scale, shift}, 32-bit little-endian

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
bool known(isa::EltOp o) { return o <= isa::EltOp::Min; }
bool known(DType t) { return t <= DType::Fp32; }

struct ParamRecord {
  std::uint32_t bias = 0;   // int32, or fp32 bits
  std::uint32_t scale = 0;  // Q31 multiplier (int8 out of an integer acc), else fp32 bits
  std::int32_t shift = 0;
};

struct PoolShape {
  std::uint64_t out_h = 0, out_w = 0;
  std::uint64_t in_elems = 0, out_elems = 0;
};

// Output size of valid pooling; zero when the geometry is not valid.
PoolShape pool_shape(const isa::Pool& p) {
  PoolShape s;
  if (p.kernel_h < 1 || p.kernel_w < 1 || p.stride_h < 1 || p.stride_w < 1 || p.kernel_h > p.in_h ||
      p.kernel_w > p.in_w)
    return s;
  s.out_h = (p.in_h - p.kernel_h) / p.stride_h + 1u;
  s.out_w = (p.in_w - p.kernel_w) / p.stride_w + 1u;
  const std::uint64_t pixels_per_channel = std::uint64_t{p.images} * p.channels;
  s.in_elems = mul_sat(mul_sat(pixels_per_channel, p.in_h), p.in_w);
  s.out_elems = mul_sat(mul_sat(pixels_per_channel, s.out_h), s.out_w);
  return s;
}

}  // namespace

VectorOps::VectorOps(const ChipConfig& cfg) : cfg_(cfg) {
  const std::string& origin = cfg.file.empty() ? cfg.name : cfg.file;
  if (cfg.vector_unit.lanes < 1)
    throw ConfigError(fmt::format("{}: /vector_unit/lanes = 0 (must be >= 1)", origin));
  if (cfg.vector_unit.sublanes < 1)
    throw ConfigError(fmt::format("{}: /vector_unit/sublanes = 0 (must be >= 1)", origin));
  if (cfg.vector_unit.bytes_per_cycle < 1)
    throw ConfigError(
        fmt::format("{}: /vector_unit/bytes_per_cycle = 0 (must be >= 1)", origin));
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
    if (rec[c].shift < kMinRequantShift || rec[c].shift > kMaxRequantShift)
      throw ProgramError(
          fmt::format("{}: params of column {} at {:#x}: shift = {} (must be {}..{})", op, c,
                      at + 8, rec[c].shift, kMinRequantShift, kMaxRequantShift));
  }

  const bool apply_relu = a.func == isa::ActFunc::Relu;
  std::vector<float> x(a.cols);
  for (std::uint64_t r = 0; r < a.rows; ++r) {
    const std::uint32_t* in = acc.data + (a.src.value() + r) * acc.words_per_entry;
    std::uint8_t* out = ub.data + dst + r * a.dst_stride;
    // 1. Bias and scale (or requantize) each column.
    for (std::uint32_t c = 0; c < a.cols; ++c) {
      const ParamRecord& pr = rec[c];
      if (!int_acc) {
        x[c] = scale_float(bits_to_float(in[c]), bits_to_float(pr.bias), bits_to_float(pr.scale));
        continue;
      }
      const auto v = static_cast<std::int32_t>(in[c]);
      const auto bias = static_cast<std::int32_t>(pr.bias);
      if (a.out_type == DType::Int8) {
        const std::int8_t q =
            requantize(add_bias(v, bias), static_cast<std::int32_t>(pr.scale), pr.shift);
        store_i8(out + c, apply_relu ? relu(q) : q);
      } else if (a.out_type == DType::Int32) {
        const std::int32_t s = add_bias(v, bias);
        store_u32(out + 4 * c, static_cast<std::uint32_t>(apply_relu ? relu(s) : s));
      } else {
        x[c] = scale_int(v, bias, bits_to_float(pr.scale));
      }
    }
    if (!float_out) continue;
    // 2. The function, in fp32, then rounding to the output type.
    if (a.func == isa::ActFunc::Softmax) {
      softmax_row(x.data(), x.data(), a.cols);
    } else {
      for (float& v : x) v = activate_float(a.func, v);
    }
    for (std::uint32_t c = 0; c < a.cols; ++c) {
      if (a.out_type == DType::Fp32)
        store_u32(out + 4 * c, float_to_bits(x[c]));
      else
        store_bf16(out + 2 * c, to_bf16(x[c]));
    }
  }
}

void VectorOps::pool(const isa::Pool& p, UbView ub) const {
  constexpr std::string_view op = "pool";
  if (!known(p.kind))
    throw ProgramError(
        fmt::format("{}: kind = {} is not a pooling kind", op, static_cast<unsigned>(p.kind)));
  if (p.type != DType::Int8 && p.type != DType::Bf16)
    throw ProgramError(fmt::format("{}: type = {} (allowed: int8, bf16)", op,
                                   known(p.type) ? name_of(p.type) : std::string_view("?")));
  check_at_least_1(op, "images", p.images);
  check_at_least_1(op, "in_h", p.in_h);
  check_at_least_1(op, "in_w", p.in_w);
  check_at_least_1(op, "channels", p.channels);
  if (p.kernel_h < 1 || p.kernel_h > p.in_h)
    throw ProgramError(
        fmt::format("{}: kernel_h = {} (must be 1..in_h = {})", op, p.kernel_h, p.in_h));
  if (p.kernel_w < 1 || p.kernel_w > p.in_w)
    throw ProgramError(
        fmt::format("{}: kernel_w = {} (must be 1..in_w = {})", op, p.kernel_w, p.in_w));
  check_at_least_1(op, "stride_h", p.stride_h);
  check_at_least_1(op, "stride_w", p.stride_w);
  const std::uint64_t window = std::uint64_t{p.kernel_h} * p.kernel_w;
  if (p.kind == isa::PoolKind::Avg && window > std::uint64_t{kMaxAvgPoolWindow})
    throw ProgramError(
        fmt::format("{}: kernel_h {} x kernel_w {} = {} elements (avg allows at most {}: the int32 "
                    "sum and the fp32 divisor must be exact)",
                    op, p.kernel_h, p.kernel_w, window, kMaxAvgPoolWindow));

  const PoolShape s = pool_shape(p);
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

  const std::uint8_t* in = ub.data + src;
  std::uint8_t* out = ub.data + dst;
  const std::uint64_t ch = p.channels;
  const bool is_max = p.kind == isa::PoolKind::Max;
  const auto n = static_cast<std::int32_t>(window);
  std::uint64_t o = 0;  // output element index, NHWC order
  for (std::uint64_t img = 0; img < p.images; ++img)
    for (std::uint64_t oy = 0; oy < s.out_h; ++oy)
      for (std::uint64_t ox = 0; ox < s.out_w; ++ox)
        for (std::uint64_t c = 0; c < ch; ++c, ++o) {
          const auto at = [&](std::uint64_t ky, std::uint64_t kx) {
            const std::uint64_t y = oy * p.stride_h + ky, xx = ox * p.stride_w + kx;
            return ((img * p.in_h + y) * p.in_w + xx) * ch + c;
          };
          // Window order: ky, then kx.
          if (p.type == DType::Int8) {
            std::int32_t acc = is_max ? load_i8(in + at(0, 0)) : 0;
            for (std::uint64_t ky = 0; ky < p.kernel_h; ++ky)
              for (std::uint64_t kx = 0; kx < p.kernel_w; ++kx) {
                const std::int32_t v = load_i8(in + at(ky, kx));
                acc = is_max ? std::max(acc, v) : acc + v;
              }
            store_i8(out + o, is_max ? static_cast<std::int8_t>(acc) : avg_int8(acc, n));
          } else {
            float acc = is_max ? to_float(load_bf16(in + 2 * at(0, 0))) : 0.0f;
            for (std::uint64_t ky = 0; ky < p.kernel_h; ++ky)
              for (std::uint64_t kx = 0; kx < p.kernel_w; ++kx) {
                const float v = to_float(load_bf16(in + 2 * at(ky, kx)));
                acc = is_max ? max_float(acc, v) : acc + v;
              }
            store_bf16(out + 2 * o, is_max ? to_bf16(acc) : avg_bf16(acc, n));
          }
        }
}

void VectorOps::eltwise(const isa::Eltwise& e, UbView ub) const {
  constexpr std::string_view op = "eltwise";
  if (!known(e.op))
    throw ProgramError(fmt::format("{}: op = {} is not an elementwise operation", op,
                                   static_cast<unsigned>(e.op)));
  if (e.type != DType::Int8 && e.type != DType::Bf16)
    throw ProgramError(fmt::format("{}: type = {} (allowed: int8, bf16)", op,
                                   known(e.type) ? name_of(e.type) : std::string_view("?")));
  check_at_least_1(op, "count", e.count);
  const bool int8_mul = e.type == DType::Int8 && e.op == isa::EltOp::Mul;
  if (int8_mul && e.shift > kMaxRequantShift)
    throw ProgramError(
        fmt::format("{}: shift = {} (int8 mul allows 0..{})", op, e.shift, kMaxRequantShift));
  if (!int8_mul && e.shift != 0)
    throw ProgramError(
        fmt::format("{}: shift = {} with op {} on {} (only int8 mul shifts; must be 0)", op,
                    e.shift, isa::name_of(e.op), name_of(e.type)));

  const std::uint64_t len = std::uint64_t{e.count} * size_of(e.type);
  const std::uint64_t a = e.a.value(), b = e.b.value(), dst = e.dst.value();
  const std::string what = fmt::format("count {} x {}", e.count, name_of(e.type));
  check_ub(op, "a", a, len, what, ub);
  check_ub(op, "b", b, len, what, ub);
  check_ub(op, "dst", dst, len, what, ub);
  for (const auto& [name, src] : {std::pair{"a", a}, std::pair{"b", b}})
    if (dst != src && overlaps(dst, len, src, len))
      throw ProgramError(
          fmt::format("{}: dst = {:#x} overlaps {} = {:#x} ({} bytes each; dst must equal {} or "
                      "not overlap it)",
                      op, dst, name, src, len, name));

  std::uint8_t* const base = ub.data;
  for (std::uint64_t i = 0; i < e.count; ++i) {
    if (e.type == DType::Int8) {
      const std::int8_t x = load_i8(base + a + i), y = load_i8(base + b + i);
      std::int8_t r = 0;
      switch (e.op) {
        case isa::EltOp::Add: r = add_int8(x, y); break;
        case isa::EltOp::Mul: r = mul_int8(x, y, e.shift); break;
        case isa::EltOp::Max: r = std::max(x, y); break;
        case isa::EltOp::Min: r = std::min(x, y); break;
      }
      store_i8(base + dst + i, r);
    } else {
      const Bf16 x = load_bf16(base + a + 2 * i), y = load_bf16(base + b + 2 * i);
      Bf16 r;
      switch (e.op) {
        case isa::EltOp::Add: r = add_bf16(x, y); break;
        case isa::EltOp::Mul: r = mul_bf16(x, y); break;
        case isa::EltOp::Max: r = max_bf16(x, y); break;
        case isa::EltOp::Min: r = min_bf16(x, y); break;
      }
      store_bf16(base + dst + 2 * i, r);
    }
  }
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
  c.element_ops = mul_sat(s.out_elems, std::uint64_t{p.kernel_h} * p.kernel_w);
  c.ub_bytes_read = mul_sat(s.in_elems, esize);
  c.ub_bytes_written = mul_sat(s.out_elems, esize);
  finish(c, cfg_);
  return c;
}

VectorCost VectorOps::cost(const isa::Eltwise& e) const {
  VectorCost c;
  const std::uint64_t len = std::uint64_t{e.count} * size_of(e.type);
  c.element_ops = e.count;
  c.ub_bytes_read = 2 * len;
  c.ub_bytes_written = len;
  finish(c, cfg_);
  return c;
}

}  // namespace tpu
