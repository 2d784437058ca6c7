#include "sw/compiler/collectives.h"

#include <algorithm>
#include <utility>

namespace tpu::compiler {
namespace {

constexpr std::uint64_t kF = 4;  // bytes per fp32 value

using Code = std::vector<isa::Instruction>;

UbAddr ub(std::uint64_t a) { return UbAddr(static_cast<std::uint32_t>(a)); }

// Elements [begin, end) of the vector.
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
std::uint32_t ring(std::int64_t j, std::uint32_t n) {
  return static_cast<std::uint32_t>(((j % n) + n) % n);
}

class AllReduceEmitter {
 public:
  AllReduceEmitter(const AllReduceLayout& l, std::uint32_t chip, std::uint32_t core, Code& out)
      : l_(l), chip_(chip), core_(core), out_(out) {
    at_.resize(l_.dims.size());
    for (std::size_t d = l_.dims.size(), c = chip; d-- > 0;) {
      at_[d] = static_cast<std::uint32_t>(c % l_.dims[d]);
      c /= l_.dims[d];
    }
    for (std::uint32_t d : l_.dims) dims_used_ += d > 1 ? 1 : 0;
  }

  void run() {
    const std::uint32_t parts = (l_.cores + 1) / 2, pair = core_ / 2;
    const bool alone = 2 * pair + 1 == l_.cores;  // no partner: both directions
    const Span part = chunk({0, l_.elements}, pair, parts);
    std::vector<int> dirs = alone ? std::vector<int>{0, 1} : std::vector<int>{int(core_ % 2)};
    chip_sum(alone ? part : half(part, static_cast<int>(core_ % 2)));
    // Reduce-scatters along the dimensions in order, then all-gathers in reverse.
    struct Stage {
      std::size_t d;
      Span region;
    };
    std::vector<Stage> stages;
    Span region = part;
    for (std::size_t d = 0; d < l_.dims.size(); ++d) {
      if (l_.dims[d] == 1) continue;
      for (int dir : dirs) reduce_scatter(d, stages.size(), region, dir);
      barrier();
      stages.push_back({d, region});
      region = chunk(region, at_[d], l_.dims[d]);
    }
    for (std::size_t k = stages.size(); k-- > 0;) {
      for (int dir : dirs) all_gather(stages[k].d, k, stages[k].region, dir);
      barrier();
    }
  }

 private:
  void barrier() {
    if (l_.cores > 1) out_.push_back(isa::Sync{true});
  }
  void read_mem(std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    out_.push_back(isa::ReadMem{MemAddr(src), ub(dst), static_cast<std::uint32_t>(bytes)});
  }
  void write_mem(std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    out_.push_back(isa::WriteMem{ub(src), MemAddr(dst), static_cast<std::uint32_t>(bytes)});
  }
  void add(std::uint64_t a, std::uint64_t b, std::uint64_t dst, std::uint64_t count) {
    isa::Eltwise e;
    e.a = ub(a), e.b = ub(b), e.dst = ub(dst);
    e.count = static_cast<std::uint32_t>(count);
    e.op = isa::EltOp::Add;
    e.type = DType::Fp32;
    out_.push_back(e);
  }
  void send(std::uint64_t from, std::uint64_t e0, std::uint64_t n, std::uint32_t chip,
            std::uint64_t base, std::uint8_t sem) {
    out_.push_back(isa::IciWrite{ub(from), MemAddr(base + e0 * kF),
                                 static_cast<std::uint32_t>(n * kF), chip, sem});
  }
  template <typename F>
  void pieces_of(const Span& sp, const F& f) {
    for (std::uint64_t e0 = sp.begin; e0 < sp.end; e0 += l_.stage_elements)
      f(e0, std::min(l_.stage_elements, sp.end - e0));
  }
  // Two pairs of staging buffers, used in turn: a piece's sum leaves through one while the next
  // piece arrives in the other.
  std::pair<std::uint64_t, std::uint64_t> buffers() {
    turn_ ^= 1;
    return {l_.stage[2 * turn_], l_.stage[2 * turn_ + 1]};
  }
  // Per core, stage, phase (0 reduce-scatter, 1 all-gather) and direction.
  std::uint8_t sem(std::size_t stage, int phase, int dir) const {
    return static_cast<std::uint8_t>((core_ * dims_used_ + stage) * 4 + phase * 2 + dir);
  }
  // The chip at coordinate `c` along dimension d, the others this chip's.
  std::uint32_t chip_along(std::size_t d, std::uint32_t c) const {
    std::uint32_t chip = 0;
    for (std::size_t k = 0; k < l_.dims.size(); ++k)
      chip = chip * l_.dims[k] + (k == d ? c : at_[k]);
    return chip;
  }
  std::uint32_t next(std::size_t d, int dir) const {
    return chip_along(d, ring(std::int64_t{at_[d]} + (dir == 0 ? 1 : -1), l_.dims[d]));
  }

  // The chip's cores' vectors over `mine`, added in core order, into the area.
  void chip_sum(const Span& mine) {
    const std::uint64_t s0 = l_.stage[0], s1 = l_.stage[1];
    pieces_of(mine, [&](std::uint64_t e0, std::uint64_t k) {
      read_mem(l_.slots[0] + e0 * kF, s0, k * kF);
      for (std::uint32_t r = 1; r < l_.cores; ++r) {
        read_mem(l_.slots[r] + e0 * kF, s1, k * kF);
        add(s0, s1, s0, k);
      }
      write_mem(s0, l_.area + e0 * kF, k * kF);
    });
    barrier();
  }

  // Along dimension d (stage `st`), the + ring (dir 0: sends to m + 1, every chunk's first
  // half) or the - ring: this member's own value of the chunk it starts; then for every piece
  // that arrives, its own value added (received + own) and the sum sent on, until the chunk it
  // owns, whose sum it stores. The own value is read before the wait for the arrival.
  void reduce_scatter(std::size_t d, std::size_t st, const Span& region, int dir) {
    const std::uint32_t n = l_.dims[d], m = at_[d], to = next(d, dir);
    const std::int64_t step = dir == 0 ? 1 : -1;
    pieces_of(half(chunk(region, ring(std::int64_t{m} - step, n), n), dir),
              [&](std::uint64_t e0, std::uint64_t k) {
                const std::uint64_t b = buffers().second;
                read_mem(l_.area + e0 * kF, b, k * kF);
                send(b, e0, k, to, l_.landing[d], sem(st, 0, dir));
              });
    for (std::uint32_t s = 0; s + 1 < n; ++s) {
      const std::uint32_t j = ring(std::int64_t{m} - step * (std::int64_t{s} + 2), n);
      pieces_of(half(chunk(region, j, n), dir), [&](std::uint64_t e0, std::uint64_t k) {
        const auto [a, b] = buffers();
        read_mem(l_.area + e0 * kF, b, k * kF);
        out_.push_back(isa::IciWait{sem(st, 0, dir), 1});
        read_mem(l_.landing[d] + e0 * kF, a, k * kF);
        add(a, b, b, k);
        if (s + 2 < n)
          send(b, e0, k, to, l_.landing[d], sem(st, 0, dir));
        else
          write_mem(b, l_.area + e0 * kF, k * kF);
      });
    }
  }

  // This member's finished chunk around the same ring into the members' areas, then every chunk
  // that arrives but the last forwarded; nothing is added.
  void all_gather(std::size_t d, std::size_t st, const Span& region, int dir) {
    const std::uint32_t n = l_.dims[d], m = at_[d], to = next(d, dir);
    const std::int64_t step = dir == 0 ? 1 : -1;
    pieces_of(half(chunk(region, m, n), dir), [&](std::uint64_t e0, std::uint64_t k) {
      const std::uint64_t b = buffers().second;
      read_mem(l_.area + e0 * kF, b, k * kF);
      send(b, e0, k, to, l_.area, sem(st, 1, dir));
    });
    for (std::uint32_t s = 0; s + 1 < n; ++s) {
      const std::uint32_t j = ring(std::int64_t{m} - step * (std::int64_t{s} + 1), n);
      pieces_of(half(chunk(region, j, n), dir), [&](std::uint64_t e0, std::uint64_t k) {
        out_.push_back(isa::IciWait{sem(st, 1, dir), 1});
        if (s + 2 < n) {
          const std::uint64_t b = buffers().second;
          read_mem(l_.area + e0 * kF, b, k * kF);
          send(b, e0, k, to, l_.area, sem(st, 1, dir));
        }
      });
    }
  }

  const AllReduceLayout& l_;
  const std::uint32_t chip_, core_;
  Code& out_;
  std::vector<std::uint32_t> at_;  // this chip's coordinates
  std::size_t dims_used_ = 0;
  std::uint32_t turn_ = 0;
};

}  // namespace

std::uint64_t all_reduce_semaphores(const AllReduceLayout& l) {
  std::uint64_t used = 0;
  for (std::uint32_t d : l.dims) used += d > 1 ? 1 : 0;
  return std::uint64_t{l.cores} * 4 * used;
}

void emit_all_reduce(const AllReduceLayout& l, std::uint32_t chip, std::uint32_t core,
                     std::vector<isa::Instruction>& out) {
  AllReduceEmitter(l, chip, core, out).run();
}

}  // namespace tpu::compiler
