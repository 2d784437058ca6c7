// What a MatMul reads from the unified buffer: B rows of K elements, dense (row r at
// src + r*src_stride) or through the convolution window of SetWindow (docs/isa.md §4.7). The
// geometry lives here, with the instructions, so that the MXU that gathers the rows, the
// sequencer that checks and orders them and the compiler that plans them agree by construction.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "hw/isa/isa.h"

namespace tpu::isa {

// The input of one MatMul (the instruction's fields and the window registers at issue).
struct MatMulInput {
  bool window = false;
  std::uint64_t src = 0;         // UB byte address
  std::uint32_t rows = 0;        // B
  std::uint32_t src_stride = 0;  // dense: bytes between rows
  std::uint32_t first_pixel = 0;
  std::uint32_t k_first = 0;
  SetWindow geom;  // windowed only
  // Read transposed: row r, element j is element r of row j of the same input read without
  // transpose (transposed_view).
  bool transpose = false;
};

// For a transposed input of `rows` rows of k elements: the untransposed input it is read from,
// k rows of `rows` elements (fields unchanged but rows = k and transpose clear). Row r, element j
// of the transposed input is row j, element r of the view.
MatMulInput transposed_view(const MatMulInput& in, std::uint32_t k);

// One contiguous run of tile rows inside a window: tile rows [k, k + count) are channels
// [c, c + count) of window position (ky, kx), `offset` elements after channel 0 of window position
// (0, 0) of an image without input dilation. The same for every output pixel.
struct WindowSegment {
  std::uint32_t k = 0;
  std::uint32_t count = 0;
  std::uint32_t c = 0;
  std::uint32_t ky = 0;
  std::uint32_t kx = 0;
  std::uint64_t offset = 0;
};

// The segments of tile rows [k_first, k_first + k) of window `g` (g sane, k_first + k <=
// window_k_total(g)).
std::vector<WindowSegment> window_segments(const SetWindow& g, std::uint32_t k_first,
                                           std::uint32_t k);
// Every size and stride >= 1.
bool window_is_sane(const SetWindow& g);
// kernel_h * kernel_w * in_c: the rows of the flattened window.
std::uint64_t window_k_total(const SetWindow& g);
// Input row (column) that window position ky (kx) of output row oy (column ox) reads; may lie
// outside the image (padding, which reads zero).
std::int64_t window_input_y(const SetWindow& g, std::uint64_t oy, std::uint32_t ky);
std::int64_t window_input_x(const SetWindow& g, std::uint64_t ox, std::uint32_t kx);
// The dilation the window reads with: the field, except that 0 reads as 1 (isa.h).
std::uint32_t window_dilation_h(const SetWindow& g);
std::uint32_t window_dilation_w(const SetWindow& g);
// The input dilation of the image (zeros between its pixels): the field, 0 reads as 1 (isa.h).
std::uint32_t window_in_dilation_h(const SetWindow& g);
std::uint32_t window_in_dilation_w(const SetWindow& g);
// The stored pixel (y, x) of the image that window position (ky, kx) of output pixel (oy, ox)
// reads, or nullopt where it reads zero: padding, or a position of the dilated image between
// stored pixels. With the virtual position vy = window_input_y(g, oy, ky) (vx likewise), the pixel
// is (vy / in_dilation_h, vx / in_dilation_w) if vy >= 0, vy % in_dilation_h == 0 and
// vy / in_dilation_h < in_h (x likewise). The one definition the MXU's gather and the footprint
// use.
std::optional<std::pair<std::uint64_t, std::uint64_t>> window_pixel(
    const SetWindow& g, std::uint64_t oy, std::uint64_t ox, std::uint32_t ky, std::uint32_t kx);
// Input rows (columns) one window spans, first to last position: (kernel - 1) * dilation + 1.
std::uint64_t window_span_h(const SetWindow& g);
std::uint64_t window_span_w(const SetWindow& g);

// The half-open range [lo, hi) of UB bytes that reading `in` for a k-row tile of `elem_bytes`
// elements may touch: for windowed reads the bounding range of what the window reads (padding
// excluded); for a transposed input that of its transposed_view (k rows of in.rows elements). Empty
// ({src, src}) when nothing is read or the window is impossible. Address arithmetic saturates, so
// an absurd field cannot wrap around into range.
std::pair<std::uint64_t, std::uint64_t> matmul_input_extent(const MatMulInput& in, std::uint32_t k,
                                                            std::uint32_t elem_bytes);

// Saturating address arithmetic on program-supplied fields.
std::uint64_t sat_add(std::uint64_t a, std::uint64_t b);
std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b);

}  // namespace tpu::isa
