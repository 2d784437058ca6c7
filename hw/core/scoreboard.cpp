#include "hw/core/scoreboard.h"

#include <algorithm>

namespace tpu {

void InFlight::complete_at(const Clock& clock, Cycle c) {
  done_at = c;
  if (ledger) (*ledger)[index] = c;
  const Cycle begin = started_at == std::numeric_limits<Cycle>::max() ? issued_at : started_at;
  if (ledger_started) (*ledger_started)[index] = std::min(begin, c);
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

namespace {
bool any_overlap(const std::vector<Region>& a, const std::vector<Region>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (x.overlaps(y)) return true;
  return false;
}
}  // namespace

void Scoreboard::prune() {
  live_.erase(
      std::remove_if(live_.begin(), live_.end(), [&](const auto& f) { return f->is_done(clock_); }),
      live_.end());
}

void Scoreboard::issue(const std::shared_ptr<InFlight>& f) {
  prune();
  for (const auto& e : live_) {
    if (e->unit == f->unit) continue;  // in-order unit: issue order is completion order
    if (any_overlap(f->reads, e->writes) || any_overlap(f->writes, e->reads) ||
        any_overlap(f->writes, e->writes))
      f->deps.push_back(e);
  }
  live_.push_back(f);
}

void Scoreboard::drain() {
  prune();
  while (!live_.empty()) {
    auto last = live_.back();
    while (!last->is_done(clock_)) sc_core::wait(last->done);
    prune();
  }
}

}  // namespace tpu
