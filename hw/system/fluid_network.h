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
// Busy intervals (for traces): while recording is on, advance() also keeps, per link, the
// intervals during which some flow moved bytes over it, with the bytes each flow moved in each
// (named by the flow's id and the label its starter gave it). An interval that reaches the end of
// an advance and one that starts where it ended are one interval, so a link that stays busy across
// many starts and completions elsewhere has one. Recording costs one interval (about 50 bytes)
// per busy period of a link and 24 bytes per flow in it; it is off unless asked for.
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
  // `now`, after advancing to it; the rates are re-allocated from then. `label` is the caller's
  // name for the flow, kept only in busy intervals. Throws std::invalid_argument for a link out
  // of range or crossed twice.
  FlowId start(double now, double bytes, std::vector<Link> path, std::uint64_t label = 0);
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

  // [begin, end) in cycles, a flow moving bytes over the link throughout; `bytes` moved over it
  // meanwhile, and by whom: per flow, in the order the flows first moved bytes in the interval.
  // The durations of a link's intervals add up to its busy_time() over the time recorded.
  struct FlowBytes {
    FlowId flow = 0;
    std::uint64_t label = 0;
    double bytes = 0;
  };
  struct BusyInterval {
    double begin = 0, end = 0, bytes = 0;
    std::vector<FlowBytes> flows;
  };
  // Starts or stops recording busy intervals from the last advance on (advance first to the
  // instant recording should start or stop). Stopping keeps what was recorded.
  void record_busy(bool on) { recording_ = on; }
  [[nodiscard]] bool recording_busy() const { return recording_; }
  // The intervals recorded for the link, in time order.
  [[nodiscard]] const std::vector<BusyInterval>& busy_intervals(Link l) const {
    return links_.at(l).intervals;
  }

 private:
  struct Flow {
    std::vector<Link> path;
    double bytes = 0;         // as started
    std::uint64_t label = 0;  // the starter's
    double remaining = 0;     // bytes not yet moved
    mutable double rate = 0;  // bytes per cycle, from the last allocation (made on demand)
  };
  struct LinkState {
    double capacity = 0;
    double bytes_carried = 0;
    double busy_time = 0;
    std::vector<BusyInterval> intervals;  // while recording
  };

  void allocate() const;  // the progressive filling above, if a flow started or retired since
  // Adds [from, to) with what the flows moved over the link to its intervals, continuing the
  // last one if it ends at `from`.
  void record(LinkState& link, double from, double to, std::vector<FlowBytes> moved);

  std::vector<LinkState> links_;
  std::map<FlowId, Flow> flows_;  // ordered: deterministic iteration
  double last_ = 0;
  FlowId next_id_ = 0;
  mutable bool stale_ = false;  // the rates predate a start or a retirement
  bool recording_ = false;
};

}  // namespace tpu
