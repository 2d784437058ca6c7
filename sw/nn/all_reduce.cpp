#include "sw/nn/all_reduce.h"

#include <algorithm>
#include <cstddef>
#include <stdexcept>

namespace tpu::nn {
namespace {

struct Span {
  std::uint64_t begin = 0, end = 0;
};

Span chunk(Span r, std::uint64_t j, std::uint64_t n) {
  const std::uint64_t len = r.end - r.begin;
  return {r.begin + j * len / n, r.begin + (j + 1) * len / n};
}

Span half(Span c, int which) {
  const std::uint64_t mid = c.begin + (c.end - c.begin) / 2;
  return which == 0 ? Span{c.begin, mid} : Span{mid, c.end};
}

// Row-major over dims, the first the slowest.
std::vector<std::uint32_t> coordinates(std::uint64_t chip, const std::vector<std::uint32_t>& dims) {
  std::vector<std::uint32_t> c(dims.size());
  for (std::size_t d = dims.size(); d-- > 0;) {
    c[d] = static_cast<std::uint32_t>(chip % dims[d]);
    chip /= dims[d];
  }
  return c;
}

std::uint64_t chip_at(const std::vector<std::uint32_t>& c, const std::vector<std::uint32_t>& dims) {
  std::uint64_t chip = 0;
  for (std::size_t d = 0; d < dims.size(); ++d) chip = chip * dims[d] + c[d];
  return chip;
}

}  // namespace

std::vector<float> all_reduce(const std::vector<std::vector<float>>& grads, std::uint32_t cores,
                              const std::vector<std::uint32_t>& dims) {
  std::uint64_t chips = 1;
  for (std::uint32_t d : dims) chips *= d;
  if (cores == 0 || grads.size() != chips * cores)
    throw std::invalid_argument("all_reduce: the replicas are not chips x cores");
  const std::uint64_t size = grads.empty() ? 0 : grads[0].size();
  // 1. Per chip, its cores in order.
  std::vector<std::vector<float>> h(chips);
  for (std::uint64_t c = 0; c < chips; ++c) {
    h[c] = grads[c * cores];
    for (std::uint32_t q = 1; q < cores; ++q) {
      const std::vector<float>& g = grads[c * cores + q];
      for (std::uint64_t e = 0; e < size; ++e) h[c][e] += g[e];
    }
  }
  // 2. Per part, the reduce-scatters along the dimensions in order; each chip's region shrinks to
  //    the chunk it ends up holding. The all-gathers add nothing: every chip receives the sums
  //    their owners hold.
  std::vector<float> out(size);
  const std::uint32_t parts = (cores + 1) / 2;
  for (std::uint32_t q = 0; q < parts; ++q) {
    const Span part = chunk({0, size}, q, parts);
    std::vector<Span> region(chips, part);
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const std::uint32_t n = dims[d];
      if (n == 1) continue;
      // Rings along d: the chips that differ only in coordinate d, which share their region.
      std::vector<std::vector<float>> next = h;
      for (std::uint64_t chip = 0; chip < chips; ++chip) {
        std::vector<std::uint32_t> at = coordinates(chip, dims);
        if (at[d] != 0) continue;  // one ring per first member
        std::vector<std::uint64_t> member(n);
        for (std::uint32_t m = 0; m < n; ++m) {
          at[d] = m;
          member[m] = chip_at(at, dims);
        }
        const Span r = region[chip];
        for (std::uint32_t j = 0; j < n; ++j)
          for (int which = 0; which < 2; ++which) {
            const Span s = half(chunk(r, j, n), which);
            const int step = which == 0 ? 1 : -1;  // + ring from j + 1, - ring from j - 1
            for (std::uint64_t e = s.begin; e < s.end; ++e) {
              std::uint32_t m = (j + n + static_cast<std::uint32_t>(step)) % n;
              float sum = h[member[m]][e];
              for (std::uint32_t k = 1; k < n; ++k) {
                m = (m + n + static_cast<std::uint32_t>(step)) % n;
                sum = sum + h[member[m]][e];
              }
              next[member[j]][e] = sum;
            }
          }
        for (std::uint32_t m = 0; m < n; ++m) region[member[m]] = chunk(r, m, n);
      }
      h = std::move(next);
    }
    for (std::uint64_t chip = 0; chip < chips; ++chip)
      for (std::uint64_t e = region[chip].begin; e < region[chip].end; ++e) out[e] = h[chip][e];
  }
  return out;
}

std::vector<float> all_reduce(const std::vector<std::vector<float>>& grads, std::uint32_t cores,
                              const std::vector<std::uint32_t>& dims,
                              const std::vector<std::uint64_t>& ends) {
  if (ends.empty()) return all_reduce(grads, cores, dims);
  const std::uint64_t size = grads.empty() ? 0 : grads[0].size();
  if (ends.back() != size)
    throw std::invalid_argument("all_reduce: the last bucket does not end at the vectors' end");
  std::vector<float> out(size);
  std::uint64_t begin = 0;
  for (std::uint64_t end : ends) {
    if (end <= begin) throw std::invalid_argument("all_reduce: buckets must be ascending");
    std::vector<std::vector<float>> bucket;
    for (const std::vector<float>& g : grads)
      bucket.emplace_back(g.begin() + std::ptrdiff_t(begin), g.begin() + std::ptrdiff_t(end));
    const std::vector<float> sum = all_reduce(bucket, cores, dims);
    std::copy(sum.begin(), sum.end(), out.begin() + std::ptrdiff_t(begin));
    begin = end;
  }
  return out;
}

}  // namespace tpu::nn
