// The scoreboard over a core's storage: an instruction may not start until what it reads has
// been written (RAW), what it overwrites has been read (WAR) and earlier writes to the same place
// are done (WAW). Each in-flight instruction records the regions it reads and writes; a new one
// depends on every earlier, unfinished instruction whose regions conflict with its own, except
// instructions of the same in-order unit, whose order already guarantees it (the MXU streams
// its results into the accumulators in issue order, so K-split accumulation pipelines).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <systemc>
#include <vector>

#include "hw/common/clock.h"
#include "hw/common/trace.h"
#include "hw/isa/isa.h"

namespace tpu {

enum class Space : std::uint8_t { UnifiedBuffer, Accumulators, OffChip };

struct Region {
  Space space;
  std::uint64_t lo;  // [lo, hi)
  std::uint64_t hi;
  [[nodiscard]] bool overlaps(const Region& o) const {
    return space == o.space && lo < o.hi && o.lo < hi;
  }
};

// One issued instruction: what it touches, which unit runs it, and when it is done.
struct InFlight {
  std::uint64_t index = 0;  // position in the core's instruction stream
  isa::Instruction inst;
  std::uint32_t layer = 0;
  int unit = -1;  // unit queue id: instructions of one unit complete in issue order
  std::vector<Region> reads, writes;
  std::vector<std::shared_ptr<InFlight>> deps;
  isa::SetWindow window;  // the window registers at issue, for windowed MatMuls

  Cycle issued_at = 0;
  // When its unit began the work itself (after hazards, FIFO space, weights); units set it.
  Cycle started_at = std::numeric_limits<Cycle>::max();
  // When its unit could take the next one, if earlier than done_at (an MXU's feed ends; the
  // results drain through the array after it). Traces show the unit busy until then.
  Cycle busy_until = std::numeric_limits<Cycle>::max();
  Cycle done_at = std::numeric_limits<Cycle>::max();
  sc_core::sc_event done;
  // Where the core's retirement ledger records done_at, and when the unit started it (see
  // Sequencer::finish).
  std::vector<Cycle>* ledger = nullptr;
  std::vector<Cycle>* ledger_started = nullptr;
  // When tracing: where the slice goes, and the core it ran on.
  Trace* trace = nullptr;
  std::uint32_t core = 0;

  [[nodiscard]] bool is_done(const Clock& clock) const { return clock.now() >= done_at; }
  // Completes at absolute cycle `c` (>= now): dependants wake then.
  void complete_at(const Clock& clock, Cycle c);
  // Waits until every dependency is done.
  void wait_deps(const Clock& clock) const;
};

class Scoreboard {
 public:
  explicit Scoreboard(const Clock& clock) : clock_(clock) {}
  // Records `f`'s dependencies on earlier unfinished instructions and tracks it.
  void issue(const std::shared_ptr<InFlight>& f);
  // Waits until every tracked instruction is done (Sync, Halt).
  void drain();
  [[nodiscard]] std::size_t in_flight() const { return live_.size(); }

 private:
  void prune();
  const Clock& clock_;
  std::vector<std::shared_ptr<InFlight>> live_;
};

}  // namespace tpu
