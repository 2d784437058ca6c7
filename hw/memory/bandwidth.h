// A shared bandwidth resource (an off-chip memory, the host link). LinkService::Shared:
// concurrent transfers share its rate equally (processor sharing), so two overlapping transfers
// each see half of it. LinkService::InOrder: transfers move one after another in the order they
// arrive at the full rate, each waiting out its latency while the ones ahead of it move, so a
// queue of requests keeps the link busy (a USB bulk endpoint).
//
// Contract: transfer() is called from an SC_THREAD and returns when the caller's bytes have
// moved. The resource is event driven: it wakes once per arrival and once per completion, never
// per cycle, and every completion lands on a whole cycle of the chip clock.
#pragma once

#include <cstdint>
#include <map>
#include <systemc>

#include "hw/common/clock.h"
#include "hw/common/types.h"

namespace tpu {

// The fluid model without the kernel: times are absolute cycles (fractional internally).
class FluidShare {
 public:
  using Id = std::uint64_t;
  explicit FluidShare(double bytes_per_cycle) : rate_(bytes_per_cycle) {}

  // Progresses every active transfer to `now` at the rate each has had since the last event.
  void advance(double now);
  Id start(double now, double bytes);
  // The earliest completion time if nothing else arrives (+inf when idle).
  [[nodiscard]] double next_completion() const;
  // Removes transfers with no bytes left (after advance()); returns how many finished.
  std::size_t retire_finished();
  [[nodiscard]] bool active(Id id) const { return remaining_.count(id) != 0; }
  [[nodiscard]] std::size_t active_count() const { return remaining_.size(); }
  [[nodiscard]] double bytes_per_cycle() const { return rate_; }

 private:
  double rate_;
  double last_ = 0;
  Id next_id_ = 0;
  std::map<Id, double> remaining_;  // ordered: deterministic iteration
};

class BandwidthResource : public sc_core::sc_module {
 public:
  BandwidthResource(sc_core::sc_module_name name, const Clock& clock, double bytes_per_s,
                    double latency_ns, LinkService service = LinkService::Shared);

  // Moves `bytes`: waits the access latency, then the bytes at the shared rate.
  void transfer(std::uint64_t bytes) { transfer_each(1, bytes); }
  // `count` transfers of `bytes` each, requested at once (a strided tile's rows): exactly as
  // `count` processes calling transfer(bytes) in the same cycle, from one process. Returns when
  // every one has moved.
  void transfer_each(std::uint64_t count, std::uint64_t bytes);
  // Cycles the transfer would take with the resource to itself.
  [[nodiscard]] Cycles uncontended_cycles(std::uint64_t bytes) const;

  [[nodiscard]] std::uint64_t bytes_moved() const { return bytes_moved_; }
  // Cycles with bytes moving (Shared: at least one transfer past its latency).
  [[nodiscard]] Cycles busy_cycles() const;

 private:
  void reschedule();  // SC_METHOD: retire finished transfers, arm the next completion
  // LinkService::InOrder: no process, no event; the link's queue is one number, when it is free.
  void transfer_in_order(std::uint64_t count, std::uint64_t bytes);

  const Clock& clock_;
  Cycles latency_;
  LinkService service_;
  double free_at_ = 0;      // InOrder: the (fractional) cycle the last queued byte has moved
  double busy_moving_ = 0;  // InOrder: cycles spent moving bytes (the queue never overlaps)
  FluidShare share_;
  sc_core::sc_event wake_;     // fires at the next completion or when a transfer arrives
  sc_core::sc_event changed_;  // tells waiting transfers that some finished
  std::uint64_t bytes_moved_ = 0;
  std::uint64_t busy_cycles_ = 0;  // cycles with at least one transfer in flight
  Cycle busy_since_ = 0;
};

}  // namespace tpu
