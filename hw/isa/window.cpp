#include "hw/isa/window.h"

#include <algorithm>
#include <limits>

namespace tpu::isa {

namespace {
constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();
}  // namespace

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return a > kU64Max - b ? kU64Max : a + b;
}
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b) {
  return b != 0 && a > kU64Max / b ? kU64Max : a * b;
}

std::vector<WindowSegment> window_segments(const SetWindow& g, std::uint32_t k_first,
                                           std::uint32_t k) {
  std::vector<WindowSegment> segs;
  std::uint32_t done = 0;
  while (done < k) {
    const std::uint32_t kk = k_first + done;
    const std::uint32_t pos = kk / g.in_c;
    WindowSegment s;
    s.k = done;
    s.c = kk % g.in_c;
    s.count = std::min<std::uint32_t>(g.in_c - s.c, k - done);
    s.ky = pos / g.kernel_w;
    s.kx = pos % g.kernel_w;
    s.offset = (std::uint64_t{s.ky} * window_dilation_h(g) * g.in_w +
                std::uint64_t{s.kx} * window_dilation_w(g)) *
                   g.in_c +
               s.c;
    segs.push_back(s);
    done += s.count;
  }
  return segs;
}

bool window_is_sane(const SetWindow& g) {
  return g.in_h >= 1 && g.in_w >= 1 && g.in_c >= 1 && g.kernel_h >= 1 && g.kernel_w >= 1 &&
         g.stride_h >= 1 && g.stride_w >= 1 && g.out_h >= 1 && g.out_w >= 1;
}

std::uint64_t window_k_total(const SetWindow& g) {
  return std::uint64_t{g.kernel_h} * g.kernel_w * g.in_c;
}

// Input pixel (y, x) that window position (ky, kx) of output pixel (oy, ox) reads; may lie
// outside the image (padding).
std::int64_t window_input_y(const SetWindow& g, std::uint64_t oy, std::uint32_t ky) {
  return static_cast<std::int64_t>(oy * g.stride_h + std::uint64_t{ky} * window_dilation_h(g)) -
         g.pad_top;
}
std::int64_t window_input_x(const SetWindow& g, std::uint64_t ox, std::uint32_t kx) {
  return static_cast<std::int64_t>(ox * g.stride_w + std::uint64_t{kx} * window_dilation_w(g)) -
         g.pad_left;
}

std::uint32_t window_dilation_h(const SetWindow& g) {
  return std::max<std::uint32_t>(g.dilation_h, 1);
}
std::uint32_t window_dilation_w(const SetWindow& g) {
  return std::max<std::uint32_t>(g.dilation_w, 1);
}

std::uint32_t window_in_dilation_h(const SetWindow& g) {
  return std::max<std::uint32_t>(g.in_dilation_h, 1);
}
std::uint32_t window_in_dilation_w(const SetWindow& g) {
  return std::max<std::uint32_t>(g.in_dilation_w, 1);
}

std::optional<std::pair<std::uint64_t, std::uint64_t>> window_pixel(
    const SetWindow& g, std::uint64_t oy, std::uint64_t ox, std::uint32_t ky, std::uint32_t kx) {
  const std::int64_t vy = window_input_y(g, oy, ky), vx = window_input_x(g, ox, kx);
  const std::uint32_t dy = window_in_dilation_h(g), dx = window_in_dilation_w(g);
  if (vy < 0 || vx < 0 || vy % dy != 0 || vx % dx != 0) return std::nullopt;
  const auto y = static_cast<std::uint64_t>(vy) / dy, x = static_cast<std::uint64_t>(vx) / dx;
  if (y >= g.in_h || x >= g.in_w) return std::nullopt;
  return std::make_pair(y, x);
}

MatMulInput transposed_view(const MatMulInput& in, std::uint32_t k) {
  MatMulInput v = in;
  v.rows = k;
  v.transpose = false;
  return v;
}

std::uint64_t window_span_h(const SetWindow& g) {
  return std::uint64_t{g.kernel_h - 1u} * window_dilation_h(g) + 1;
}
std::uint64_t window_span_w(const SetWindow& g) {
  return std::uint64_t{g.kernel_w - 1u} * window_dilation_w(g) + 1;
}

namespace {

// The smallest and largest element index, relative to the image's first element, that output
// pixels [p_begin, p_end) of one image read; nullopt if all their reads are padding. For one
// segment, the pixel a window position reads moves strictly forward in row-major order as the
// output pixel does (strides are >= 1), so its smallest element is read by the first output
// pixel whose read is not padding and its largest by the last: each segment scans inwards from
// both ends of the range, which stops at once unless the range begins or ends in padding.
std::optional<std::pair<std::uint64_t, std::uint64_t>> touched_in_image(
    const SetWindow& g, const std::vector<WindowSegment>& segs, std::uint64_t p_begin,
    std::uint64_t p_end) {
  std::optional<std::pair<std::uint64_t, std::uint64_t>> r;
  const auto element = [&](std::uint64_t p, const WindowSegment& s) {
    const auto px = window_pixel(g, p / g.out_w, p % g.out_w, s.ky, s.kx);
    return px ? std::optional<std::uint64_t>((px->first * g.in_w + px->second) * g.in_c + s.c)
              : std::nullopt;
  };
  for (const WindowSegment& s : segs) {
    std::optional<std::uint64_t> first, last;
    std::uint64_t p = p_begin;
    for (; p < p_end && !first; ++p) first = element(p, s);
    if (!first) continue;
    for (std::uint64_t q = p_end; q-- > p - 1 && !last;) last = element(q, s);
    const std::uint64_t hi = *last + s.count - 1;
    if (!r) r.emplace(*first, hi);
    r->first = std::min(r->first, *first);
    r->second = std::max(r->second, hi);
  }
  return r;
}

// Every complete image of a batch reads the same relative elements, and a partial image reads a
// subset of them; so the lowest element read is in the first image that reads anything, which is
// the first or the second image of the range (or none reads anything), and likewise for the
// highest. Element indices are absolute (image * image elements + relative index), saturating.
std::optional<std::pair<std::uint64_t, std::uint64_t>> window_touched(
    const MatMulInput& in, const std::vector<WindowSegment>& segs) {
  const SetWindow& g = in.geom;
  const std::uint64_t per_image = std::uint64_t{g.out_h} * g.out_w;
  const std::uint64_t image_elems = std::uint64_t{g.in_h} * g.in_w * g.in_c;
  const std::uint64_t p_first = in.first_pixel;
  const std::uint64_t p_end = p_first + in.rows;
  const std::uint64_t b_first = p_first / per_image, b_last = (p_end - 1) / per_image;
  auto scan = [&](std::uint64_t b) {
    return touched_in_image(g, segs, std::max(p_first, b * per_image) - b * per_image,
                            std::min(p_end, (b + 1) * per_image) - b * per_image);
  };
  const auto first = scan(b_first);
  const auto last = b_last == b_first ? first : scan(b_last);
  std::optional<std::uint64_t> lo, hi;
  if (first) {
    lo = sat_add(sat_mul(b_first, image_elems), first->first);
  } else if (b_last > b_first) {
    const auto t = b_first + 1 == b_last ? last : scan(b_first + 1);
    if (t) lo = sat_add(sat_mul(b_first + 1, image_elems), t->first);
  }
  if (last) {
    hi = sat_add(sat_mul(b_last, image_elems), last->second);
  } else if (b_last > b_first) {
    const auto t = b_last - 1 == b_first ? first : scan(b_last - 1);
    if (t) hi = sat_add(sat_mul(b_last - 1, image_elems), t->second);
  }
  if (!lo || !hi) return std::nullopt;
  return std::make_pair(*lo, *hi);
}

}  // namespace

std::pair<std::uint64_t, std::uint64_t> matmul_input_extent(const MatMulInput& in, std::uint32_t k,
                                                            std::uint32_t elem_bytes) {
  const std::uint64_t elem = elem_bytes;
  if (in.transpose) return matmul_input_extent(transposed_view(in, k), in.rows, elem_bytes);
  const std::pair<std::uint64_t, std::uint64_t> nothing{in.src, in.src};
  if (in.rows == 0 || k == 0) return nothing;
  if (!in.window) {
    const std::uint64_t last_row = sat_mul(in.rows - 1, in.src_stride);
    return {in.src, sat_add(sat_add(in.src, last_row), sat_mul(k, elem))};
  }
  // An impossible window reads nothing; the MXU rejects it with the reason.
  if (!window_is_sane(in.geom) || std::uint64_t{in.k_first} + k > window_k_total(in.geom))
    return nothing;
  const auto t = window_touched(in, window_segments(in.geom, in.k_first, k));
  if (!t) return nothing;
  return {sat_add(in.src, sat_mul(t->first, elem)),
          sat_add(in.src, sat_mul(sat_add(t->second, 1), elem))};
}

}  // namespace tpu::isa
