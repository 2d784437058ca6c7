#include "hw/isa/pooling.h"

#include <algorithm>

namespace tpu::isa {

std::uint32_t PoolAxis::outputs() const {
  if (out_field != 0) return out_field;
  if (kernel < 1 || stride < 1 || kernel > in) return 0;
  return (in - kernel) / stride + 1;
}

std::int64_t PoolAxis::first(std::uint32_t o) const {
  return std::max<std::int64_t>(std::int64_t{o} * stride - pad, 0);
}

std::int64_t PoolAxis::last(std::uint32_t o) const {
  return std::max(std::min<std::int64_t>(std::int64_t{o} * stride - pad + kernel, in), first(o));
}

std::uint64_t PoolAxis::inside_positions() const {
  std::uint64_t n = 0;
  for (std::uint32_t o = 0; o < outputs(); ++o) n += static_cast<std::uint64_t>(last(o) - first(o));
  return n;
}

PoolAxis pool_rows(const Pool& p) {
  return PoolAxis{p.in_h, p.kernel_h, p.stride_h, p.pad_top, p.out_h};
}

PoolAxis pool_cols(const Pool& p) {
  return PoolAxis{p.in_w, p.kernel_w, p.stride_w, p.pad_left, p.out_w};
}

PoolAxis pool_grad_rows(const SetWindow& g) {
  return PoolAxis{g.in_h, g.kernel_h, g.stride_h, g.pad_top, g.out_h};
}

PoolAxis pool_grad_cols(const SetWindow& g) {
  return PoolAxis{g.in_w, g.kernel_w, g.stride_w, g.pad_left, g.out_w};
}

}  // namespace tpu::isa
