// IciFabric: the inter-chip interconnect of a TPU system — the directed links of a 1D/2D/3D torus
// or mesh of chips (hw/system/ici_topology.h: numbering, links, dimension-order routing), each a
// shared-bandwidth resource, with a latency per hop. docs/systems.md, "The ICI fabric".
//
// Contract: transfer() is called from an SC_THREAD and returns when the last byte has arrived:
//
//   hops × ⌈hop_latency_ns · f⌉  +  the bytes at the flow's max-min fair rate
//
// Cut-through: the hops' latencies add once (the head of the message crossing each router), then
// the bytes stream over every link of the path at once, at the max-min fair share of the links
// (hw/system/fluid_network.h) among all transfers streaming at the same time, recomputed when a
// transfer starts or finishes. Completions land on whole cycles of the chip clock (rounded up).
// The fabric is event driven: it wakes once per transfer start and once per completion, never
// per cycle. A transfer to the same chip crosses no link and takes no time; a transfer of no
// bytes takes the hops' latency.
#pragma once

#include <cstdint>
#include <string>
#include <systemc>
#include <vector>

#include "hw/common/clock.h"
#include "hw/system/fluid_network.h"
#include "hw/system/ici_topology.h"

namespace tpu {

class IciFabric : public sc_core::sc_module {
 public:
  using Link = IciTopology::Link;

  // `link_bytes_per_s` is per link and per direction; `hop_latency_ns` per link crossed.
  // Throws std::invalid_argument for a bad shape (IciTopology), a bandwidth that is not > 0 or a
  // latency < 0.
  IciFabric(sc_core::sc_module_name name, const Clock& clock, std::vector<std::uint32_t> dims,
            std::vector<bool> wraparound, double link_bytes_per_s, double hop_latency_ns);

  // Moves `bytes` from chip `from` to chip `to` (see the contract above). A chip outside the
  // system is an SC_REPORT_ERROR.
  void transfer(std::uint32_t from, std::uint32_t to, std::uint64_t bytes);
  // The same transfer as the sender sees it when it does not wait for the arrival (a posted
  // write): returns when the last byte has left, the bytes having streamed over the path at the
  // max-min fair rate; the last byte arrives latency(from, to) later. stream() then that wait
  // take what transfer() takes when nothing else changes the rates.
  void stream(std::uint32_t from, std::uint32_t to, std::uint64_t bytes);
  // hops × hop latency of the route from `from` to `to`.
  [[nodiscard]] Cycles latency(std::uint32_t from, std::uint32_t to) const;
  // The cycles transfer() takes with the fabric to itself: hops × hop latency + ⌈bytes / r⌉
  // (r = link bytes per cycle), or 0 from a chip to itself.
  [[nodiscard]] Cycles uncontended_cycles(std::uint32_t from, std::uint32_t to,
                                          std::uint64_t bytes) const;

  [[nodiscard]] const IciTopology& topology() const { return topology_; }
  [[nodiscard]] std::uint32_t chip_count() const { return topology_.chip_count(); }
  [[nodiscard]] std::vector<std::uint32_t> coordinates(std::uint32_t chip) const {
    return topology_.coordinates(chip);
  }
  [[nodiscard]] std::uint32_t chip_at(const std::vector<std::uint32_t>& coords) const {
    return topology_.chip_at(coords);
  }
  [[nodiscard]] std::vector<Link> route(std::uint32_t from, std::uint32_t to) const {
    return topology_.route(from, to);
  }
  [[nodiscard]] Link link_of(std::uint32_t chip, std::uint32_t dim, Direction dir) const {
    return topology_.link_of(chip, dim, dir);
  }
  [[nodiscard]] std::size_t link_count() const { return topology_.link_count(); }
  [[nodiscard]] const std::string& link_name(Link l) const { return topology_.link_name(l); }

  [[nodiscard]] const Clock& clock() const { return clock_; }
  [[nodiscard]] Cycles hop_latency() const { return hop_latency_; }
  [[nodiscard]] double link_bytes_per_cycle() const { return link_bytes_per_s_ / clock_.hz(); }

  // Per directed link, for reports: bytes carried so far, and cycles during which at least one
  // transfer was streaming bytes over it (rounded up to a whole cycle; the latency phase of a
  // transfer occupies no link). Both are as of the fabric's last event; after the run, exact.
  [[nodiscard]] std::uint64_t bytes_carried(Link l) const;
  [[nodiscard]] Cycles busy_cycles(Link l) const;

  // For a trace (docs/trace.md): per directed link, the intervals (in cycles, fractional: a
  // transfer's last byte leaves within a cycle) during which it streamed bytes, with the bytes
  // each transfer moved over it in the interval, recorded from the current instant while `on`.
  // The durations add up to busy_cycles over that time before its rounding up, the bytes to
  // bytes_carried. Stopping keeps what was recorded, so recording may cover several windows.
  struct TransferBytes {
    std::uint32_t from = 0, to = 0;  // chips
    double bytes = 0;                // moved over the link within the interval
  };
  struct BusyInterval {
    double begin = 0, end = 0, bytes = 0;
    std::vector<TransferBytes> transfers;  // in the order they started moving bytes in it
  };
  void record_busy(bool on);
  [[nodiscard]] std::vector<BusyInterval> busy_intervals(Link l) const;

 private:
  void reschedule();  // SC_METHOD: retire finished transfers, arm the next completion
  bool in_system(std::uint32_t from, std::uint32_t to) const;  // else an SC_REPORT_ERROR
  void stream_path(std::uint32_t from, std::uint32_t to, std::vector<Link> path,
                   std::uint64_t bytes);

  const Clock& clock_;
  IciTopology topology_;
  double link_bytes_per_s_;
  Cycles hop_latency_;
  FluidNetwork network_;
  sc_core::sc_event wake_;     // fires at the next completion or when a transfer starts
  sc_core::sc_event changed_;  // tells waiting transfers that some finished
};

}  // namespace tpu
