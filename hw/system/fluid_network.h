// A fluid network of directed links: concurrent flows, each over a path of links, share the links'
// bandwidth max-min fairly. The plain C++ core of the ICI fabric (hw/system/ici_fabric.h); no
// SystemC. Times are absolute cycles (fractional), capacities bytes per cycle.
//
// Allocation rule (max-min fairness by progressive filling, "water-filling"), recomputed whenever
// a flow starts or is retired:
//   1. Every flow with bytes left starts at rate 0 and is unfrozen; every link offers its capacity.
//   2. All unfrozen flows rise together: the step is the least, over links crossed by unfrozen
//      flows, of (capacity not yet taken) / (number of unfrozen flows crossing it).
//   3. Every link takes step × its unfrozen flows; a link with nothing left is saturated, and the
//      flows crossing it freeze at the level reached.
//   4. Repeat from 2 until every flow is frozen.
// So no flow can go faster without slowing one that is no faster than it; a flow's rate is the
// fair share of its bottleneck link, and flows bottlenecked elsewhere leave their unused share of
// a link to the others (not an equal split of every link). The allocation is unique, so the order
// in which flows started does not change it.
//
// The allocation is made lazily, once for all the flows that start or retire at one time, before
// the rates are next needed. Between two allocations the rates are constant; advance() moves every
// flow on at its rate and stops it at its last byte. The share of a flow whose bytes are all moved
// goes to the others only once retire_finished() removes it (the caller decides when completions
// take effect: the ICI fabric does it on whole cycles, as FluidShare's users do). A flow with an
// empty path (source and destination the same) or no bytes needs no link: it is finished from its
// start.
//
// Deterministic: flows live in an ordered map keyed by a counter; nothing iterates an unordered
// container.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace tpu {

class FluidNetwork {
 public:
  using FlowId = std::uint64_t;
  using Link = std::size_t;  // index into the capacities the network was built with

  // One directed link per entry, each with its capacity in bytes per cycle (> 0).
  explicit FluidNetwork(std::vector<double> link_bytes_per_cycle);

  // Moves every flow on to `now` at its current rate (no-op for times already passed).
  void advance(double now);
  // Starts a flow of `bytes` over `path` (links in order of crossing, each at most once) at
  // `now`, after advancing to it; the rates are re-allocated from then. Throws
  // std::invalid_argument for a link out of range or crossed twice.
  FlowId start(double now, double bytes, std::vector<Link> path);
  // The earliest time a flow moves its last byte if nothing starts or retires (+inf when no
  // flow is active; the time of the last advance when a flow has already finished).
  [[nodiscard]] double next_completion() const;
  // Removes the flows with no bytes left, in id order; if any left, the rates are re-allocated.
  std::vector<FlowId> retire_finished();

  [[nodiscard]] bool active(FlowId id) const { return flows_.count(id) != 0; }
  [[nodiscard]] std::size_t active_count() const { return flows_.size(); }
  // The flow's current max-min fair rate in bytes per cycle (+inf for an empty path, 0 for a
  // flow with no bytes left); throws std::out_of_range for a flow not active.
  [[nodiscard]] double rate(FlowId id) const;
  [[nodiscard]] double bytes_left(FlowId id) const;

  [[nodiscard]] std::size_t link_count() const { return links_.size(); }
  [[nodiscard]] double capacity(Link l) const { return links_.at(l).capacity; }
  // Bytes that flows have moved over the link up to the last advance.
  [[nodiscard]] double bytes_carried(Link l) const { return links_.at(l).bytes_carried; }
  // Time, up to the last advance, during which at least one flow moved bytes over the link.
  [[nodiscard]] double busy_time(Link l) const { return links_.at(l).busy_time; }

 private:
  struct Flow {
    std::vector<Link> path;
    double bytes = 0;         // as started
    double remaining = 0;     // bytes not yet moved
    mutable double rate = 0;  // bytes per cycle, from the last allocation (made on demand)
  };
  struct LinkState {
    double capacity = 0;
    double bytes_carried = 0;
    double busy_time = 0;
  };

  void allocate() const;  // the progressive filling above, if a flow started or retired since

  std::vector<LinkState> links_;
  std::map<FlowId, Flow> flows_;  // ordered: deterministic iteration
  double last_ = 0;
  FlowId next_id_ = 0;
  mutable bool stale_ = false;  // the rates predate a start or a retirement
};

}  // namespace tpu
