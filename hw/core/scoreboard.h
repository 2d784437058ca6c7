// The scoreboard over a core's storage: an instruction may not start until what it reads has
// been written (RAW), what it overwrites has been read (WAR) and earlier writes to the same place
// are done (WAW). Each in-flight instruction records the regions it reads and writes; a new one
// depends on every earlier, unfinished instruction whose regions conflict with its own, except
// instructions of the same in-order unit, whose order already guarantees it (the MXU streams
// its results into the accumulators in issue order, so K-split accumulation pipelines).
#pragma once

#include <memory>
#include <systemc>
#include <vector>

#include "hw/common/clock.h"
#include "hw/unit/issued.h"

namespace tpu {

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
