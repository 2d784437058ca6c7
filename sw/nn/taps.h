// The taps of a windowed operation (Conv2D, pooling) on its input, shared by the training
// references (float64_training.cpp, training_reference.cpp): for every output pixel of one image,
// its window's positions that lie inside the input, in (ky, kx) order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sw/ir/graph.h"
#include "sw/ir/ops.h"

namespace tpu::nn {

struct Taps {
  std::uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t top = 0, left = 0;
};

// A global pooling's window is the whole image.
inline Taps taps_of(const ir::Op& l) {
  if (l.kind == ir::OpKind::GlobalAveragePooling2D || l.kind == ir::OpKind::GlobalMaxPooling2D)
    return {l.in.h, l.in.w, 1, 1, 1, 1, 0, 0};
  const ir::Pads p = ir::window_pads(l);
  return {l.kernel_h,   l.kernel_w,   l.stride_h, l.stride_w,
          l.dilation_h, l.dilation_w, p.top,      p.left};
}

// The input pixel (y·in.w + x) of output pixel (oy, ox) at tap (ky, kx), or -1 in the padding.
inline std::int64_t tap_pixel(const ir::Op& l, const Taps& t, std::uint32_t oy, std::uint32_t ox,
                              std::uint32_t ky, std::uint32_t kx) {
  const std::int64_t y = std::int64_t{oy} * t.sh + std::int64_t{ky} * t.dh - t.top;
  const std::int64_t x = std::int64_t{ox} * t.sw + std::int64_t{kx} * t.dw - t.left;
  if (y < 0 || x < 0 || y >= l.in.h || x >= l.in.w) return -1;
  return y * l.in.w + x;
}

// Calls f(input pixel, output pixel, tap) for every tap inside the input of every output pixel
// of one image; output pixels in row-major order, taps in (ky, kx) order.
template <class F>
void for_taps(const ir::Op& l, F f) {
  const Taps t = taps_of(l);
  for (std::uint32_t oy = 0; oy < l.out.h; ++oy)
    for (std::uint32_t ox = 0; ox < l.out.w; ++ox)
      for (std::uint32_t ky = 0; ky < t.kh; ++ky)
        for (std::uint32_t kx = 0; kx < t.kw; ++kx) {
          const std::int64_t p = tap_pixel(l, t, oy, ox, ky, kx);
          if (p >= 0)
            f(static_cast<std::size_t>(p), std::size_t{oy} * l.out.w + ox,
              std::size_t{ky} * t.kw + kx);
        }
}

// ZeroPadding2D: f(input element, output element) at the first channel of every input pixel of
// `images` images, the output being each image inside its border of zeros.
template <class F>
void for_padded_pixels(const ir::Op& l, std::size_t images, F f) {
  for (std::size_t img = 0; img < images; ++img)
    for (std::uint32_t y = 0; y < l.in.h; ++y)
      for (std::uint32_t x = 0; x < l.in.w; ++x)
        f(img * l.in.size() + (std::size_t{y} * l.in.w + x) * l.in.c,
          img * l.out.size() + ((std::size_t{y} + l.pad_top) * l.out.w + x + l.pad_left) * l.in.c);
}

}  // namespace tpu::nn
