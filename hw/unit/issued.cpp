#include "hw/unit/issued.h"

#include <algorithm>

namespace tpu {

void InFlight::complete_at(const Clock& clock, Cycle c) {
  done_at = c;
  if (ledger) (*ledger)[ledger_slot] = c;
  const Cycle begin = started_at == std::numeric_limits<Cycle>::max() ? issued_at : started_at;
  if (ledger_started) (*ledger_started)[ledger_slot] = std::min(begin, c);
  if (trace) {
    const Cycle end = std::min(busy_until, c);
    trace->add(
        {core, track_of(inst), index, isa::opcode_of(inst), layer, std::min(begin, end), end});
  }
  done.notify(clock.time_of(c) - sc_core::sc_time_stamp());
}

void InFlight::wait_deps(const Clock& clock) const {
  for (const auto& d : deps)
    while (!d->is_done(clock)) sc_core::wait(d->done);
}

}  // namespace tpu
