#include "hw/core/scoreboard.h"

#include <algorithm>

namespace tpu {

namespace {
bool any_overlap(const std::vector<isa::Access>& a, const std::vector<isa::Access>& b) {
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
