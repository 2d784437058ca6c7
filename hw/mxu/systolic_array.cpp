#include "hw/mxu/systolic_array.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include "hw/common/error.h"

namespace tpu {

namespace {

using isa::sat_add;
using isa::sat_mul;
using isa::window_input_x;
using isa::window_input_y;
using isa::window_is_sane;
using isa::window_k_total;
using isa::window_segments;
using isa::window_span_h;
using isa::window_span_w;
using isa::WindowSegment;

// Rows gathered and multiplied together: the weight tile is read once per block instead of once
// per row, and the block's column sums stay in registers across k.
constexpr std::uint32_t kRowBlock = 4;
// Columns per register block of the AVX2 kernel (two 32-byte vectors of 32-bit lanes) and of the
// AVX-512 one (two 64-byte vectors); the weight scratch is padded to a multiple of the block with
// zero columns, whose sums are discarded. The AVX-512 kernel takes tiles wider than kColPad only:
// a narrower one would be mostly padding.
constexpr std::uint32_t kColPad = 16;
constexpr std::uint32_t kWideColPad = 32;

// Scratch reused across calls, so a multiply allocates nothing in the steady state. Per thread,
// so arrays in different threads (parallel sweeps) never share it.
struct Scratch {
  std::vector<std::uint32_t> w_int;  // K x padded N, int8 weights sign-extended
  std::vector<float> w_float;        // K x padded N, bf16 weights widened
  std::vector<std::uint32_t> x_int;  // kRowBlock x K
  std::vector<float> x_float;
};
thread_local Scratch scratch;

// The MXU's two input types, widened to the type the kernel multiplies in. int8 products and
// sums are done in uint32: sign-extended operands multiply to the int32 product modulo 2^32, and
// the column sum then wraps like the hardware's two's-complement adder without undefined
// behaviour.
struct Int8Type {
  using Wide = std::uint32_t;
  static constexpr std::uint32_t bytes = 1;
  static Wide load(const std::uint8_t* p) {
    return static_cast<std::uint32_t>(static_cast<std::int32_t>(static_cast<std::int8_t>(*p)));
  }
  static std::vector<Wide>& w(Scratch& s) { return s.w_int; }
  static std::vector<Wide>& x(Scratch& s) { return s.x_int; }
  static void widen(const std::uint8_t* p, std::uint32_t count, Wide* out) {
    for (std::uint32_t i = 0; i < count; ++i) out[i] = load(p + i);
  }
};

struct Bf16Type {
  using Wide = float;
  static constexpr std::uint32_t bytes = 2;
  static Wide load(const std::uint8_t* p) {
    const std::uint32_t u = (std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static std::vector<Wide>& w(Scratch& s) { return s.w_float; }
  static std::vector<Wide>& x(Scratch& s) { return s.x_float; }
  // load() of count elements, in a loop the compiler vectorises.
  static void widen(const std::uint8_t* p, std::uint32_t count, Wide* out) {
    for (std::uint32_t i = 0; i < count; ++i) {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * std::size_t{i}, sizeof h);
      const std::uint32_t u = std::uint32_t{h} << 16;
      std::memcpy(&out[i], &u, sizeof u);
    }
  }
};

// Multiplies a block of Rows (<= kRowBlock) gathered input rows x (kRowBlock x k) by the
// widened weights w (k x np, np >= n rounded up to Cols) and writes or adds columns 0..n-1 of each
// result row into out (row r at out + r * out_stride). Each column sum starts at zero and adds its
// products in k order. The sums of a block live in registers as whole vectors (GCC vector
// extensions), one lane per column, so nothing reorders the adds within a column; the product and
// the add are separate operations, never a fused multiply-add, which would skip the product's
// rounding when it underflows.
//
// x holds row r's element kk at x[r * k + kk], or with a transposed layout (kColumns) at
// x[kk * x_pitch + r]: the rows gathered as the columns of the untransposed input they are read
// from.
template <class T, std::size_t VectorBytes, std::uint32_t Cols, bool kColumns, std::uint32_t Rows>
inline __attribute__((always_inline)) void kernel_rows(const T* __restrict x, std::uint32_t x_pitch,
                                                       const T* __restrict w, std::uint32_t k,
                                                       std::uint32_t np, std::uint32_t n,
                                                       std::uint32_t* __restrict out,
                                                       std::uint32_t out_stride, bool accumulate) {
  typedef T V __attribute__((vector_size(VectorBytes)));
  constexpr std::uint32_t lanes = VectorBytes / sizeof(T);
  constexpr std::uint32_t vecs = Cols / lanes;
  static_assert(vecs * lanes == Cols && sizeof(T) == sizeof(std::uint32_t));
  for (std::uint32_t n0 = 0; n0 < n; n0 += Cols) {
    V a[Rows][vecs] = {};
    for (std::uint32_t kk = 0; kk < k; ++kk) {
      const T* wk = w + std::size_t{kk} * np + n0;
      V wv[vecs];
#pragma GCC unroll 8
      for (std::uint32_t v = 0; v < vecs; ++v) std::memcpy(&wv[v], wk + v * lanes, sizeof(V));
#pragma GCC unroll 8
      for (std::uint32_t r = 0; r < Rows; ++r) {
        const T xs = kColumns ? x[std::size_t{kk} * x_pitch + r] : x[std::size_t{r} * k + kk];
#pragma GCC unroll 8
        for (std::uint32_t v = 0; v < vecs; ++v) {
          const V p = xs * wv[v];
          a[r][v] += p;
        }
      }
    }
    // Accumulator words are int32 or fp32 bits; memcpy reinterprets them without aliasing issues.
    const std::uint32_t cols = std::min(Cols, n - std::min(n, n0));
    if (cols == Cols) {
#pragma GCC unroll 8
      for (std::uint32_t r = 0; r < Rows; ++r) {
#pragma GCC unroll 8
        for (std::uint32_t v = 0; v < vecs; ++v) {
          std::uint32_t* o = out + std::size_t{r} * out_stride + n0 + v * lanes;
          V res = a[r][v];
          if (accumulate) {
            V old;
            std::memcpy(&old, o, sizeof(V));
            res = old + res;
          }
          std::memcpy(o, &res, sizeof(V));
        }
      }
      continue;
    }
    // The last columns: spilled so that the loops below, whose shape depends on n, do not force
    // the sums out of registers inside the k loop.
    T sums[Rows][Cols];
#pragma GCC unroll 8
    for (std::uint32_t r = 0; r < Rows; ++r)
#pragma GCC unroll 8
      for (std::uint32_t v = 0; v < vecs; ++v)
        std::memcpy(&sums[r][v * lanes], &a[r][v], sizeof(V));
    for (std::uint32_t r = 0; r < Rows; ++r) {
      std::uint32_t* o = out + std::size_t{r} * out_stride + n0;
      for (std::uint32_t j = 0; j < cols; ++j) {
        T old;
        std::memcpy(&old, o + j, sizeof(T));
        const T res = accumulate ? old + sums[r][j] : sums[r][j];
        std::memcpy(o + j, &res, sizeof(T));
      }
    }
  }
}

// kernel_rows for a block of 1..kRowBlock rows: a short last block computes only its own rows.
template <class T, std::size_t VectorBytes, std::uint32_t Cols, bool kColumns>
inline __attribute__((always_inline)) void kernel_body(const T* x, std::uint32_t x_pitch,
                                                       const T* w, std::uint32_t k,
                                                       std::uint32_t np, std::uint32_t n,
                                                       std::uint32_t rows, std::uint32_t* out,
                                                       std::uint32_t out_stride, bool accumulate) {
  static_assert(kRowBlock == 4);
  switch (rows) {
    case 4:
      return kernel_rows<T, VectorBytes, Cols, kColumns, 4>(x, x_pitch, w, k, np, n, out,
                                                            out_stride, accumulate);
    case 3:
      return kernel_rows<T, VectorBytes, Cols, kColumns, 3>(x, x_pitch, w, k, np, n, out,
                                                            out_stride, accumulate);
    case 2:
      return kernel_rows<T, VectorBytes, Cols, kColumns, 2>(x, x_pitch, w, k, np, n, out,
                                                            out_stride, accumulate);
    default:
      return kernel_rows<T, VectorBytes, Cols, kColumns, 1>(x, x_pitch, w, k, np, n, out,
                                                            out_stride, accumulate);
  }
}

// The kernel for the host: AVX-512 (for tiles wider than kColPad) or AVX2 where the CPU has it,
// else 16-byte vectors, which every SIMD instruction set has (SSE2, NEON). All give the same bits:
// integer sums are exact modulo 2^32, and every column's fp32 sum is the same sequence of rounded
// adds whatever the vector width (-ffp-contract=off fuses no multiply-add, AVX-512's included).
template <class T, bool kColumns>
void kernel_portable(const T* x, std::uint32_t x_pitch, const T* w, std::uint32_t k,
                     std::uint32_t np, std::uint32_t n, std::uint32_t rows, std::uint32_t* out,
                     std::uint32_t out_stride, bool accumulate) {
  kernel_body<T, 16, 8, kColumns>(x, x_pitch, w, k, np, n, rows, out, out_stride, accumulate);
}

#if defined(__x86_64__) || defined(__i386__)
template <class T, bool kColumns>
__attribute__((target("avx2"))) void kernel_avx2(const T* x, std::uint32_t x_pitch, const T* w,
                                                 std::uint32_t k, std::uint32_t np, std::uint32_t n,
                                                 std::uint32_t rows, std::uint32_t* out,
                                                 std::uint32_t out_stride, bool accumulate) {
  kernel_body<T, 32, kColPad, kColumns>(x, x_pitch, w, k, np, n, rows, out, out_stride, accumulate);
}

template <class T, bool kColumns>
__attribute__((target("avx512f"))) void kernel_avx512(const T* x, std::uint32_t x_pitch, const T* w,
                                                      std::uint32_t k, std::uint32_t np,
                                                      std::uint32_t n, std::uint32_t rows,
                                                      std::uint32_t* out, std::uint32_t out_stride,
                                                      bool accumulate) {
  kernel_body<T, 64, kWideColPad, kColumns>(x, x_pitch, w, k, np, n, rows, out, out_stride,
                                            accumulate);
}

bool host_has_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
bool host_has_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512;
}
#endif

// Whether a tile of n columns runs on the AVX-512 kernel, whose weights are padded to kWideColPad.
bool wide_kernel(std::uint32_t n) {
#if defined(__x86_64__) || defined(__i386__)
  return n > kColPad && host_has_avx512();
#else
  (void)n;
  return false;
#endif
}

template <bool kColumns, class T>
void kernel(const T* x, std::uint32_t x_pitch, const T* w, std::uint32_t k, std::uint32_t np,
            std::uint32_t n, std::uint32_t rows, std::uint32_t* out, std::uint32_t out_stride,
            bool accumulate) {
#if defined(__x86_64__) || defined(__i386__)
  if (wide_kernel(n))
    return kernel_avx512<T, kColumns>(x, x_pitch, w, k, np, n, rows, out, out_stride, accumulate);
  if (host_has_avx2())
    return kernel_avx2<T, kColumns>(x, x_pitch, w, k, np, n, rows, out, out_stride, accumulate);
#endif
  kernel_portable<T, kColumns>(x, x_pitch, w, k, np, n, rows, out, out_stride, accumulate);
}

// The rows of one MatMul input without input dilation, one after another, widened: dense rows
// at src + r * src_stride, or windowed rows (one output pixel each, stepped rather than divided
// out per row) whose positions in the padding read zero.
template <class E>
class RowReader {
 public:
  using W = typename E::Wide;

  RowReader(const InputSpec& in, std::uint32_t k, const std::uint8_t* ub)
      : in_(in), g_(in_.geom), k_(k), ub_(ub) {
    if (!in.window) return;
    segs_ = window_segments(g_, in.k_first, k);
    // A window inside the image reads adjacent segments that are adjacent in memory (the
    // channels of neighbouring positions along a row) as one run.
    for (const WindowSegment& sg : segs_)
      if (!runs_.empty() && runs_.back().k + runs_.back().count == sg.k &&
          runs_.back().offset + runs_.back().count == sg.offset)
        runs_.back().count += sg.count;
      else
        runs_.push_back(sg);
    image_elems_ = std::uint64_t{g_.in_h} * g_.in_w * g_.in_c;
    span_h_ = window_span_h(g_), span_w_ = window_span_w(g_);
    const std::uint64_t per_image = std::uint64_t{g_.out_h} * g_.out_w;
    b_ = in.first_pixel / per_image;
    oy_ = in.first_pixel % per_image / g_.out_w;
    ox_ = in.first_pixel % g_.out_w;
  }

  // Row `r` (rows are read in order, each once) into out[0..k).
  void read(std::uint32_t r, W* out) {
    if (!in_.window) return E::widen(ub_ + in_.src + std::uint64_t{r} * in_.src_stride, k_, out);
    // Element index of channel 0 at window position (0, 0). When that position lies in the
    // padding the index wraps modulo 2^64, and adding an in-image segment's offset wraps back.
    const std::int64_t y0 = window_input_y(g_, oy_, 0), x0 = window_input_x(g_, ox_, 0);
    const std::uint64_t corner =
        b_ * image_elems_ + static_cast<std::uint64_t>(y0 * g_.in_w + x0) * g_.in_c;
    const bool inside = y0 >= 0 && x0 >= 0 && static_cast<std::uint64_t>(y0) + span_h_ <= g_.in_h &&
                        static_cast<std::uint64_t>(x0) + span_w_ <= g_.in_w;
    for (const WindowSegment& sg : inside ? runs_ : segs_) {
      if (!inside) {
        const std::int64_t y = window_input_y(g_, oy_, sg.ky), xx = window_input_x(g_, ox_, sg.kx);
        if (y < 0 || y >= g_.in_h || xx < 0 || xx >= g_.in_w) {
          std::fill_n(out + sg.k, sg.count, W{});
          continue;
        }
      }
      E::widen(ub_ + in_.src + (corner + sg.offset) * E::bytes, sg.count, out + sg.k);
    }
    if (++ox_ == g_.out_w) {
      ox_ = 0;
      if (++oy_ == g_.out_h) oy_ = 0, ++b_;
    }
  }

 private:
  const InputSpec in_;
  const isa::SetWindow& g_;
  std::uint32_t k_;
  const std::uint8_t* ub_;
  std::vector<WindowSegment> segs_, runs_;
  std::uint64_t image_elems_ = 0, span_h_ = 0, span_w_ = 0;
  std::uint64_t b_ = 0, oy_ = 0, ox_ = 0;
};

template <class E>
void run(const WeightTile& tile, const InputSpec& in, const std::uint8_t* ub, std::uint32_t* acc,
         std::uint32_t acc_stride, bool accumulate) {
  using W = typename E::Wide;
  const std::uint32_t k = tile.rows, n = tile.cols;
  const std::uint32_t pad = wide_kernel(n) ? kWideColPad : kColPad;
  const std::uint32_t np = (n + pad - 1) / pad * pad;
  Scratch& sc = scratch;

  // 1. Widen the weight tile once per call; padding columns are zero. (Scratch is only grown:
  // every element a call reads it writes first.)
  std::vector<W>& w = E::w(sc);
  if (w.size() < std::size_t{k} * np) w.resize(std::size_t{k} * np);
  for (std::uint32_t kk = 0; kk < k; ++kk) {
    W* row = &w[std::size_t{kk} * np];
    E::widen(&tile.bytes[std::size_t{kk} * n * E::bytes], n, row);
    std::fill(row + n, row + np, W{});
  }
  std::vector<W>& x = E::x(sc);

  if (in.transpose) {
    // 2t. A transposed input is its untransposed view's k rows of B elements: read them once,
    // row j into column j of x (x[j * pitch + r] is row r's element j), the pitch a whole number
    // of row blocks (the rows past B read zeros; their sums are not written) and some more: a
    // pitch of a multiple of 4 KiB would put the k elements a row reads in one L1 cache set.
    const std::uint32_t pitch = (in.rows + kRowBlock - 1) / kRowBlock * kRowBlock + kColPad;
    if (x.size() < std::size_t{k} * pitch) x.resize(std::size_t{k} * pitch);
    RowReader<E> view(isa::transposed_view(in, k), in.rows, ub);
    for (std::uint32_t j = 0; j < k; ++j) {
      W* row = &x[std::size_t{j} * pitch];
      view.read(j, row);
      std::fill(row + in.rows, row + pitch, W{});
    }
    for (std::uint32_t r0 = 0; r0 < in.rows; r0 += kRowBlock)
      kernel<true>(x.data() + r0, pitch, w.data(), k, np, n, std::min(kRowBlock, in.rows - r0),
                   acc + std::uint64_t{r0} * acc_stride, acc_stride, accumulate);
    return;
  }
  if (x.size() < std::size_t{kRowBlock} * k) x.resize(std::size_t{kRowBlock} * k);
  RowReader<E> rows(in, k, ub);
  for (std::uint32_t r0 = 0; r0 < in.rows; r0 += kRowBlock) {
    const std::uint32_t block = std::min(kRowBlock, in.rows - r0);
    // 2. Gather the block's input rows into contiguous, widened vectors (rows past the end of the
    // matmul keep stale values; their sums are not written).
    for (std::uint32_t r = 0; r < block; ++r) rows.read(r0 + r, &x[std::size_t{r} * k]);
    // 3. Multiply, and write or accumulate columns 0..n-1; the rest of each entry is untouched.
    kernel<false>(x.data(), k, w.data(), k, np, n, block, acc + std::uint64_t{r0} * acc_stride,
                  acc_stride, accumulate);
  }
}

}  // namespace

SystolicArray::SystolicArray(const MxuConfig& cfg) : cfg_(cfg) {
  const bool int8 = cfg.input_type == DType::Int8 && cfg.acc_type == DType::Int32;
  const bool bf16 = cfg.input_type == DType::Bf16 && cfg.acc_type == DType::Fp32;
  if (!int8 && !bf16)
    throw ConfigError(
        fmt::format("mxu: input_type {} with acc_type {} (allowed: int8 with int32, "
                    "bf16 with fp32)",
                    name_of(cfg.input_type), name_of(cfg.acc_type)));
  if (cfg.rows == 0 || cfg.cols == 0)
    throw ConfigError(
        fmt::format("mxu: rows {} x cols {} (both must be >= 1)", cfg.rows, cfg.cols));
}

std::pair<std::uint64_t, std::uint64_t> SystolicArray::input_extent(const InputSpec& in,
                                                                    std::uint32_t k) const {
  return isa::matmul_input_extent(in, k, size_of(cfg_.input_type));
}

void SystolicArray::check_input(const InputSpec& in, std::uint32_t k,
                                std::uint64_t ub_bytes) const {
  const std::uint32_t elem = size_of(cfg_.input_type);
  if (in.transpose) {
    // What the transposed rows read is the untransposed view's k rows of B elements.
    const InputSpec v = isa::transposed_view(in, k);
    if (in.window && window_is_sane(in.geom) &&
        std::uint64_t{in.k_first} + in.rows > window_k_total(in.geom))
      throw ProgramError(
          fmt::format("matmul window transpose: k_first {} + rows {} exceeds the window's "
                      "kernel_h*kernel_w*in_c = {} (transposed rows are window elements)",
                      in.k_first, in.rows, window_k_total(in.geom)));
    const auto [lo, hi] = input_extent(in, k);
    if (!in.window && lo != hi && hi > ub_bytes)
      throw ProgramError(
          fmt::format("matmul transpose: src {:#x} + (tile rows {} - 1) * stride {} + rows {} x "
                      "{} bytes ends at {:#x}, outside the {}-byte unified buffer",
                      in.src, k, in.src_stride, in.rows, elem, hi, ub_bytes));
    check_input(v, in.rows, ub_bytes);
    return;
  }
  if (in.window) {
    const isa::SetWindow& g = in.geom;
    if (!window_is_sane(g))
      throw ProgramError(fmt::format(
          "matmul window: in {}x{}x{}, kernel {}x{}, stride {}x{}, out {}x{} (every size and "
          "stride must be >= 1; set_window must precede a windowed matmul)",
          g.in_h, g.in_w, g.in_c, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.out_h,
          g.out_w));
    if (std::uint64_t{in.k_first} + k > window_k_total(g))
      throw ProgramError(
          fmt::format("matmul window: k_first {} + tile rows {} exceeds the "
                      "window's kernel_h*kernel_w*in_c = {}",
                      in.k_first, k, window_k_total(g)));
  }
  const auto [lo, hi] = input_extent(in, k);
  if (lo != hi && hi > ub_bytes) {
    if (in.window)
      throw ProgramError(fmt::format(
          "matmul window: src {:#x}, first_pixel {}, rows {}, k_first {} reads bytes [{:#x}, "
          "{:#x}), outside the {}-byte unified buffer",
          in.src, in.first_pixel, in.rows, in.k_first, lo, hi, ub_bytes));
    throw ProgramError(
        fmt::format("matmul: src {:#x} + (rows {} - 1) * stride {} + {} bytes "
                    "ends at {:#x}, outside the {}-byte unified buffer",
                    in.src, in.rows, in.src_stride, std::uint64_t{k} * elem, hi, ub_bytes));
  }
}

void SystolicArray::check_gather(const InputSpec& in, std::uint32_t k,
                                 std::uint64_t ub_bytes) const {
  if (k == 0 || k > cfg_.rows)
    throw ProgramError(
        fmt::format("matmul: {} input elements per row (1..{} fit the array)", k, cfg_.rows));
  check_input(in, k, ub_bytes);
}

std::vector<std::uint8_t> SystolicArray::gather(const InputSpec& in, std::uint32_t k,
                                                const std::uint8_t* ub,
                                                std::uint64_t ub_bytes) const {
  check_gather(in, k, ub_bytes);
  if (!in.transpose) return gather_rows(in, k, ub);
  // Transposed: the untransposed view's k rows of B elements, turned into B rows of k.
  const std::uint32_t elem = size_of(cfg_.input_type);
  const std::vector<std::uint8_t> v = gather_rows(isa::transposed_view(in, k), in.rows, ub);
  std::vector<std::uint8_t> rows(v.size());
  for (std::uint32_t j = 0; j < k; ++j)
    for (std::uint32_t r = 0; r < in.rows; ++r)
      std::memcpy(&rows[(std::size_t{r} * k + j) * elem], &v[(std::size_t{j} * in.rows + r) * elem],
                  elem);
  return rows;
}

std::vector<std::uint8_t> SystolicArray::gather_rows(const InputSpec& in, std::uint32_t k,
                                                     const std::uint8_t* ub) const {
  const std::uint32_t elem = size_of(cfg_.input_type);
  const std::size_t row_bytes = std::size_t{k} * elem;
  std::vector<std::uint8_t> rows(std::size_t{in.rows} * row_bytes, 0);
  if (!in.window) {
    for (std::uint32_t r = 0; r < in.rows; ++r)
      std::memcpy(&rows[r * row_bytes], ub + in.src + std::uint64_t{r} * in.src_stride, row_bytes);
    return rows;
  }
  // The same walk over output pixels as the multiply's (run() above); padding stays zero.
  const isa::SetWindow& g = in.geom;
  const std::vector<WindowSegment> segs = window_segments(g, in.k_first, k);
  const std::uint64_t image_elems = std::uint64_t{g.in_h} * g.in_w * g.in_c;
  const std::uint64_t per_image = std::uint64_t{g.out_h} * g.out_w;
  std::uint64_t b = in.first_pixel / per_image;
  std::uint64_t oy = in.first_pixel % per_image / g.out_w;
  std::uint64_t ox = in.first_pixel % g.out_w;
  for (std::uint32_t r = 0; r < in.rows; ++r) {
    for (const WindowSegment& sg : segs) {
      const auto px = isa::window_pixel(g, oy, ox, sg.ky, sg.kx);
      if (!px) continue;
      const std::uint64_t first =
          b * image_elems + (px->first * g.in_w + px->second) * g.in_c + sg.c;
      std::memcpy(&rows[r * row_bytes + std::size_t{sg.k} * elem], ub + in.src + first * elem,
                  std::size_t{sg.count} * elem);
    }
    if (++ox == g.out_w) {
      ox = 0;
      if (++oy == g.out_h) oy = 0, ++b;
    }
  }
  return rows;
}

void SystolicArray::check_tile(const WeightTile& tile) const {
  if (tile.rows == 0 || tile.cols == 0 || tile.rows > cfg_.rows || tile.cols > cfg_.cols)
    throw ProgramError(
        fmt::format("matmul: weight tile of {} x {} does not fit the {} x {} array "
                    "(rows 1..{}, cols 1..{})",
                    tile.rows, tile.cols, cfg_.rows, cfg_.cols, cfg_.rows, cfg_.cols));
}

void SystolicArray::check_multiply(const WeightTile& tile, const InputSpec& in,
                                   std::uint64_t ub_bytes) const {
  check_tile(tile);
  check_input(in, tile.rows, ub_bytes);
}

void SystolicArray::multiply(const WeightTile& tile, const InputSpec& in, const std::uint8_t* ub,
                             std::uint64_t ub_bytes, std::uint32_t* acc, std::uint32_t acc_stride,
                             bool accumulate) const {
  const std::uint32_t elem = size_of(cfg_.input_type);
  check_tile(tile);
  if (tile.bytes.size() != std::uint64_t{tile.rows} * tile.cols * elem)
    throw std::invalid_argument(fmt::format("WeightTile of {} x {} holds {} bytes, not {}",
                                            tile.rows, tile.cols, tile.bytes.size(),
                                            std::uint64_t{tile.rows} * tile.cols * elem));
  check_input(in, tile.rows, ub_bytes);
  // Input-dilated rows are gathered first (gather(), as the RTL MXU's are), then multiplied as
  // dense rows; the other forms are read inside run(): block by block, or a transposed input's
  // view at once.
  const bool dilated = in.window && (isa::window_in_dilation_h(in.geom) > 1 ||
                                     isa::window_in_dilation_w(in.geom) > 1);
  std::vector<std::uint8_t> gathered;
  InputSpec dense = in;
  if (dilated) {
    gathered = gather(in, tile.rows, ub, ub_bytes);
    dense = InputSpec{};
    dense.rows = in.rows;
    dense.src_stride = tile.rows * elem;
    ub = gathered.data();
  }
  if (cfg_.input_type == DType::Int8)
    run<Int8Type>(tile, dense, ub, acc, acc_stride, accumulate);
  else
    run<Bf16Type>(tile, dense, ub, acc, acc_stride, accumulate);
}

}  // namespace tpu
