#include "hw/memory/bandwidth.h"

#include <cmath>
#include <limits>

namespace tpu {

// A transfer with fewer bytes left than this is done (guards float round-off).
constexpr double kEpsilonBytes = 1e-6;

void FluidShare::advance(double now) {
  if (!remaining_.empty() && now > last_) {
    const double each = rate_ * (now - last_) / static_cast<double>(remaining_.size());
    for (auto& [id, left] : remaining_) left -= each;
  }
  last_ = std::max(last_, now);
}

FluidShare::Id FluidShare::start(double now, double bytes) {
  advance(now);
  remaining_[next_id_] = bytes;
  return next_id_++;
}

double FluidShare::next_completion() const {
  if (remaining_.empty()) return std::numeric_limits<double>::infinity();
  double least = std::numeric_limits<double>::infinity();
  for (const auto& [id, left] : remaining_) least = std::min(least, left);
  return last_ + std::max(0.0, least) * static_cast<double>(remaining_.size()) / rate_;
}

std::size_t FluidShare::retire_finished() {
  std::size_t n = 0;
  for (auto it = remaining_.begin(); it != remaining_.end();) {
    if (it->second <= kEpsilonBytes) {
      it = remaining_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

BandwidthResource::BandwidthResource(sc_core::sc_module_name name, const Clock& clock,
                                     double bytes_per_s, double latency_ns, LinkService service)
    : sc_core::sc_module(name),
      clock_(clock),
      latency_(clock.ns_to_cycles(latency_ns)),
      service_(service),
      share_(bytes_per_s / clock.hz()) {
  SC_HAS_PROCESS(BandwidthResource);
  SC_METHOD(reschedule);
  sensitive << wake_;
  dont_initialize();
}

Cycles BandwidthResource::uncontended_cycles(std::uint64_t bytes) const {
  return latency_ +
         clock_.transfer_cycles(static_cast<double>(bytes), share_.bytes_per_cycle() * clock_.hz());
}

void BandwidthResource::transfer_each(std::uint64_t count, std::uint64_t bytes) {
  if (service_ == LinkService::InOrder) return transfer_in_order(count, bytes);
  clock_.wait_for(latency_);
  if (bytes == 0 || count == 0) return;
  const Cycle now = clock_.now();
  if (share_.active_count() == 0) busy_since_ = now;
  // Consecutive ids: nothing else runs between the starts.
  const FluidShare::Id first = share_.start(static_cast<double>(now), static_cast<double>(bytes));
  for (std::uint64_t i = 1; i < count; ++i)
    share_.start(static_cast<double>(now), static_cast<double>(bytes));
  wake_.notify(sc_core::SC_ZERO_TIME);
  const auto moving = [&] {
    for (std::uint64_t i = 0; i < count; ++i)
      if (share_.active(first + i)) return true;
    return false;
  };
  while (moving()) sc_core::wait(changed_);
  bytes_moved_ += count * bytes;
}

Cycles BandwidthResource::busy_cycles() const {
  if (service_ == LinkService::InOrder)
    return Cycles(static_cast<std::uint64_t>(std::ceil(busy_moving_ - 1e-9)));
  return Cycles(busy_cycles_);
}

// The bytes start after the latency or when the transfers ahead of them have moved, whichever
// is later, and move at the full rate; the caller resumes on the whole cycle after its last byte.
void BandwidthResource::transfer_in_order(std::uint64_t count, std::uint64_t bytes) {
  const Cycle now = clock_.now();
  const double arrival = static_cast<double>(now + latency_.value());
  if (bytes == 0 || count == 0) return clock_.wait_for(latency_);
  const double moving = static_cast<double>(count * bytes) / share_.bytes_per_cycle();
  free_at_ = std::max(free_at_, arrival) + moving;
  busy_moving_ += moving;
  // Whole cycles, as a shared resource's completions (no transfer beats its bandwidth).
  clock_.wait_until(static_cast<Cycle>(std::ceil(free_at_ - 1e-9)));
  bytes_moved_ += count * bytes;
}

void BandwidthResource::reschedule() {
  const Cycle now = clock_.now();
  share_.advance(static_cast<double>(now));
  std::size_t finished = share_.retire_finished();
  // Transfers that complete within this very cycle (a link of many bytes per cycle) complete
  // now: arming a wake-up at the current time for them would never advance the clock.
  for (double next = share_.next_completion();
       std::isfinite(next) && std::ceil(next - 1e-9) <= static_cast<double>(now);
       next = share_.next_completion()) {
    share_.advance(next);
    const std::size_t n = share_.retire_finished();
    if (n == 0) break;  // round-off left a crumb: let the wake-up below take it
    finished += n;
  }
  if (finished > 0) {
    changed_.notify(sc_core::SC_ZERO_TIME);
    if (share_.active_count() == 0) busy_cycles_ += now - busy_since_;
  }
  const double next = share_.next_completion();
  if (std::isfinite(next)) {
    // Completions land on whole cycles: round up, so no transfer beats its bandwidth; and at
    // least one cycle on, so that time advances.
    const auto at = static_cast<Cycle>(std::ceil(next - 1e-9));
    wake_.cancel();
    wake_.notify(clock_.time_of(std::max(at, now + 1)) - sc_core::sc_time_stamp());
  }
}

}  // namespace tpu
