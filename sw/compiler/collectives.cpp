#include "sw/compiler/collectives.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace tpu::compiler {
namespace {

constexpr std::uint64_t kF = 4;  // bytes per fp32 value

using Code = std::vector<isa::Instruction>;

UbAddr ub(std::uint64_t a) { return UbAddr(static_cast<std::uint32_t>(a)); }

// Elements [begin, end) of the vector. The cuts (docs/systems.md, "All-reduce") are written
// again, on purpose, in the reference (sw/nn/all_reduce.cpp): the reference the chip is checked
// against shares no code with the compiler, so a wrong cut here shows as a mismatch.
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
    // This chip's coordinates in the system's torus, then in its box and the box's corner.
    const std::vector<std::uint32_t>& torus = l_.torus.empty() ? l_.dims : l_.torus;
    at_.resize(l_.dims.size());
    corner_.resize(l_.dims.size());
    for (std::size_t d = l_.dims.size(), c = chip; d-- > 0;) {
      const auto x = static_cast<std::uint32_t>(c % torus[d]);
      at_[d] = x % l_.dims[d];
      corner_[d] = x - at_[d];
      c /= torus[d];
    }
    for (std::uint32_t d : l_.dims) dims_used_ += d > 1 ? 1 : 0;
  }

  void run() {
    // Queued: every core's slot written before any core reads it (each core's barrier on slot r
    // waits for its own writes there, the barrier for every core's).
    if (l_.queued && l_.cores > 1)
      for (std::uint64_t s : l_.slots) region_sync(s);
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
    if (l_.cores == 1) return;
    if (l_.queued)
      region_sync(l_.area);
    else
      out_.push_back(isa::Sync{true});
  }
  // A barrier of the chip's cores' ICI engines over the vector at `base`.
  void region_sync(std::uint64_t base) {
    isa::Sync s;
    s.all_cores = true;
    s.dst = MemAddr(base);
    s.bytes = static_cast<std::uint32_t>(l_.elements * kF);
    out_.push_back(s);
  }
  // One arrival on `sem`, of the k values at `base` + e0 (queued: what reads them waits for it).
  void wait(std::uint8_t sem, std::uint64_t base, std::uint64_t e0, std::uint64_t k) {
    isa::IciWait w;
    w.sem = sem;
    w.count = 1;
    if (l_.queued) {
      w.dst = MemAddr(base + e0 * kF);
      w.bytes = static_cast<std::uint32_t>(k * kF);
    }
    out_.push_back(w);
  }
  // Queued, the memory traffic runs on the ICI engine with the waits it follows, so that it
  // never holds the DMA's queue, which the backward pass uses, while it waits for an arrival.
  void read_mem(std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    out_.push_back(
        isa::ReadMem{MemAddr(src), ub(dst), static_cast<std::uint32_t>(bytes), l_.queued});
  }
  void write_mem(std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    out_.push_back(
        isa::WriteMem{ub(src), MemAddr(dst), static_cast<std::uint32_t>(bytes), l_.queued});
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
    return static_cast<std::uint8_t>(l_.first_semaphore + (core_ * dims_used_ + stage) * 4 +
                                     phase * 2 + dir);
  }
  // The chip at coordinate `c` of the box along dimension d, the others this chip's (its id in
  // the system).
  std::uint32_t chip_along(std::size_t d, std::uint32_t c) const {
    const std::vector<std::uint32_t>& torus = l_.torus.empty() ? l_.dims : l_.torus;
    std::uint32_t chip = 0;
    for (std::size_t k = 0; k < l_.dims.size(); ++k)
      chip = chip * torus[k] + corner_[k] + (k == d ? c : at_[k]);
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
      const bool last = s + 2 == n;
      pieces_of(half(chunk(region, j, n), dir), [&](std::uint64_t e0, std::uint64_t k) {
        // The last step sends nothing: it works in the two buffers no send reads from (the
        // received pieces'), so that it need not wait for the previous step's sends to leave.
        const auto [a, b] = last ? std::pair{l_.stage[0], l_.stage[2]} : buffers();
        read_mem(l_.area + e0 * kF, b, k * kF);
        wait(sem(st, 0, dir), l_.landing[d], e0, k);
        read_mem(l_.landing[d] + e0 * kF, a, k * kF);
        add(a, b, b, k);
        if (last)
          write_mem(b, l_.area + e0 * kF, k * kF);
        else
          send(b, e0, k, to, l_.landing[d], sem(st, 0, dir));
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
        wait(sem(st, 1, dir), l_.area, e0, k);
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
  std::vector<std::uint32_t> at_;      // this chip's coordinates in its box
  std::vector<std::uint32_t> corner_;  // the box's first chip's coordinates in the torus
  std::size_t dims_used_ = 0;
  std::uint32_t turn_ = 0;
};

// ---- the cost ------------------------------------------------------------------------------

// The timing model's formulas (docs/timing-model.md) for one piece of k fp32 values.
class PieceCosts {
 public:
  // `memory_sharers`: transfers on the off-chip memory at once (the chip's cores); `link_share`:
  // flows on every link the ring uses at once.
  PieceCosts(const SystemConfig& sys, double memory_sharers, double link_share)
      : f_(sys.chip.clock_hz()),
        port_(sys.chip.unified_buffer.bytes_per_cycle),
        mem_bytes_per_cycle_(sys.chip.off_chip_bytes_per_s() / f_ / memory_sharers),
        mem_latency_(cycles_of_ns(sys.chip.off_chip_memory.latency_ns)),
        lanes_(double(sys.chip.vector_unit.lanes) * sys.chip.vector_unit.sublanes),
        vector_port_(sys.chip.vector_unit.bytes_per_cycle),
        vector_latency_(sys.chip.vector_unit.latency_cycles),
        link_bytes_per_cycle_(sys.link_bytes_per_s() / f_ / link_share),
        hop_(cycles_of_ns(sys.ici.latency_ns)) {}

  // read_mem or write_mem: max(far side, ⌈N / P⌉).
  [[nodiscard]] double memory(std::uint64_t k) const {
    const double n = double(k * kF);
    return std::max(mem_latency_ + up(n / mem_bytes_per_cycle_), up(n / port_));
  }
  // An fp32 eltwise add: latency + max(⌈k / V⌉, ⌈12k / Q⌉).
  [[nodiscard]] double add(std::uint64_t k) const {
    return vector_latency_ + std::max(up(double(k) / lanes_), up(12.0 * double(k) / vector_port_));
  }
  // An ici_write's streaming: max(⌈N / r'⌉, ⌈N / P⌉), r' the link's share.
  [[nodiscard]] double send(std::uint64_t k) const {
    const double n = double(k * kF);
    return std::max(up(n / link_bytes_per_cycle_), up(n / port_));
  }
  [[nodiscard]] double hops(std::uint32_t h) const { return h * hop_; }

 private:
  static double up(double x) { return std::ceil(x - 1e-9); }
  [[nodiscard]] double cycles_of_ns(double ns) const { return up(ns * 1e-9 * f_); }

  double f_, port_, mem_bytes_per_cycle_, mem_latency_, lanes_, vector_port_, vector_latency_;
  double link_bytes_per_cycle_, hop_;
};

std::vector<std::uint64_t> pieces(std::uint64_t elements, std::uint64_t stage) {
  std::vector<std::uint64_t> k;
  for (std::uint64_t e = 0; e < elements; e += stage) k.push_back(std::min(stage, elements - e));
  return k;
}

// One core's engines while it drives a ring: when its DMA, vector unit and ICI engine are next
// free. Sends are numbered in the order the core issues them within the stage.
struct Engines {
  double dma = 0, vector = 0;
  std::vector<double> sent;  // when each send's last byte left
  [[nodiscard]] double last_sent() const { return sent.empty() ? 0 : sent.back(); }
  // The buffer a send reads from is next written two sends later (two pairs in turn).
  [[nodiscard]] double buffer_free(std::size_t i) const { return i >= 2 ? sent[i - 2] : 0; }
};

// A ring stage of one direction on a core, every member alike: member m's piece p of step s
// arrives `latency` after its predecessor (doing the same) sent its piece p of step s - 1.
// Returns when the core's last work of it ends.
double ring_stage(const PieceCosts& c, Engines& e, std::uint32_t n,
                  const std::vector<std::uint64_t>& ks, double latency, bool reduce) {
  const std::size_t first = e.sent.size(), P = ks.size();
  const auto arrival = [&](std::uint32_t step, std::size_t p) {
    return e.sent[first + (step - 1) * P + p] + latency;
  };
  double end = 0;
  // Step 0: this member's own value of the chunk it starts (its own finished chunk).
  for (std::size_t p = 0; p < P; ++p) {
    e.dma = std::max(e.dma, e.buffer_free(e.sent.size())) + c.memory(ks[p]);
    e.sent.push_back(std::max(e.last_sent(), e.dma) + c.send(ks[p]));
  }
  for (std::uint32_t s = 1; s < n; ++s) {
    const bool last = s + 1 == n;
    for (std::size_t p = 0; p < P; ++p) {
      const double a = arrival(s, p);
      if (!reduce) {  // the all-gather: wait, forward from the area; the last step only waits
        if (last) {
          end = std::max(end, a);
          continue;
        }
        e.dma = std::max({e.dma, e.buffer_free(e.sent.size()), a}) + c.memory(ks[p]);
        e.sent.push_back(std::max(e.last_sent(), e.dma) + c.send(ks[p]));
        continue;
      }
      // Own value (its buffer: the send two before; the last step's are no send's), the
      // arrival, the add; then the sum sent on, or stored.
      e.dma = (last ? e.dma : std::max(e.dma, e.buffer_free(e.sent.size()))) + c.memory(ks[p]);
      e.dma = std::max(e.dma, a) + c.memory(ks[p]);
      e.vector = std::max(e.dma, e.vector) + c.add(ks[p]);
      if (last) {
        e.dma = std::max(e.dma, e.vector) + c.memory(ks[p]);
        end = std::max(end, e.dma);
      } else {
        e.sent.push_back(std::max(e.last_sent(), e.vector) + c.send(ks[p]));
      }
    }
  }
  return std::max(end, e.last_sent());
}

}  // namespace

double AllReduceCost::total() const {
  double t = chip_sum;
  for (double x : reduce_scatter) t += x;
  for (double x : all_gather) t += x;
  return t;
}

AllReduceCost all_reduce_cost(const SystemConfig& sys, const AllReduceLayout& l) {
  AllReduceCost cost;
  const std::uint32_t cores = l.cores, parts = (cores + 1) / 2;
  const double barrier = cores > 1 ? 1 : 0;  // the cycle a core leaves its sync all_cores in
  // The chip's sum: per piece of a core's share, its cores' values read and added in order and
  // written, the chip's cores at once on the off-chip memory.
  {
    const PieceCosts c(sys, cores, 1);
    const Span part = chunk({0, l.elements}, 0, parts);
    const Span mine = cores == 1 ? part : half(part, 1);
    double dma = 0, vector = 0;
    for (std::uint64_t k : pieces(mine.end - mine.begin, l.stage_elements)) {
      dma += c.memory(k);
      for (std::uint32_t r = 1; r < cores; ++r) {
        dma = std::max(dma, vector) + c.memory(k);
        vector = dma + c.add(k);
      }
      dma = std::max(dma, vector) + c.memory(k);
    }
    cost.chip_sum = dma + barrier;
  }
  // The rings: a region of the part per dimension, each chunk's halves on the two directions
  // (a pair's cores at once, a core alone one after the other).
  Span region = chunk({0, l.elements}, 0, parts);
  struct Used {
    std::uint32_t n;
    Span region;
  };
  std::vector<Used> used;
  for (std::size_t d = 0; d < l.dims.size(); ++d) {
    const std::uint32_t n = l.dims[d];
    if (n == 1) continue;
    used.push_back({n, region});
    region = chunk(region, 0, n);
  }
  for (int phase = 0; phase < 2; ++phase) {
    for (std::size_t u = 0; u < used.size(); ++u) {
      const std::uint32_t n = used[u].n;
      const std::size_t d = [&] {  // the dimension's index
        std::size_t k = 0, seen = 0;
        for (; k < l.dims.size(); ++k)
          if (l.dims[k] > 1 && seen++ == u) break;
        return k;
      }();
      const bool wraps = sys.ici.wraparound[d];
      // Flows on a link at once: on a mesh axis the ring's closing edge runs back along the
      // line over the other direction's links, and on an axis of two both directions take the
      // same link (the route's tie rule); pairs of cores share every link.
      const double share = (cores > 1 && (!wraps || n == 2) ? 2 : 1) * parts;
      const std::uint32_t hops = wraps ? 1 : n - 1;  // the ring's longest edge
      const PieceCosts c(sys, cores, share);
      const Span ch = chunk(used[u].region, 0, n);
      const std::vector<std::uint64_t> ks =
          pieces(half(ch, 1).end - half(ch, 1).begin, l.stage_elements);
      Engines e;
      double t = 0;
      for (int dir = 0; dir < (cores > 1 ? 1 : 2); ++dir)
        t = ring_stage(c, e, n, ks, c.hops(hops), phase == 0);
      (phase == 0 ? cost.reduce_scatter : cost.all_gather).push_back(t + barrier);
    }
  }
  return cost;
}

std::vector<std::uint32_t> group_box(const std::vector<std::uint32_t>& torus, std::uint32_t chips) {
  std::vector<std::uint32_t> box(torus.size(), 1);
  std::uint32_t left = chips;
  for (std::size_t d = torus.size(); d-- > 0 && left > 1;) {
    if (left >= torus[d]) {
      if (left % torus[d] != 0) return {};
      box[d] = torus[d];
      left /= torus[d];
    } else {
      if (torus[d] % left != 0) return {};
      box[d] = left;
      left = 1;
    }
  }
  if (left != 1) return {};
  return box;
}

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
