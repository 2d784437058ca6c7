// The one place where simulated time is made from cycles (STYLE: no time literals in hw/).
// Every event lands on an absolute cycle boundary computed from cycle counts, so rounding to the
// kernel's 1 ps resolution never accumulates: cycle -> sc_time -> cycle is exact for clocks up to
// 4 GHz.
#pragma once

#include <cmath>
#include <string>
#include <systemc>

#include "hw/common/types.h"

namespace tpu {

class Clock {
 public:
  explicit Clock(double clock_hz) : hz_(clock_hz), period_ps_(1e12 / clock_hz) {}

  [[nodiscard]] double hz() const { return hz_; }
  [[nodiscard]] sc_core::sc_time time_of(Cycle c) const {
    const double ps = static_cast<double>(c) * period_ps_;
    // The kernel counts time in 64-bit picoseconds (about 213 days); past that it would wrap.
    if (!(ps < 0x1p64))
      SC_REPORT_ERROR("tpusim/clock",
                      ("the run would pass the simulator's time limit of 2^64 ps (213 days of "
                       "simulated time) at cycle " +
                       std::to_string(c))
                          .c_str());
    return sc_core::sc_time(ps, sc_core::SC_PS);
  }
  [[nodiscard]] Cycle cycle_of(const sc_core::sc_time& t) const {
    return static_cast<Cycle>(std::llround(t.to_seconds() * 1e12 / period_ps_));
  }
  // Units ask many times per simulated instant; the conversion is done once per instant.
  [[nodiscard]] Cycle now() const {
    const sc_core::sc_time& t = sc_core::sc_time_stamp();
    if (t.value() != now_ps_) {
      now_cycle_ = cycle_of(t);
      now_ps_ = t.value();
    }
    return now_cycle_;
  }
  [[nodiscard]] double seconds(Cycles c) const { return static_cast<double>(c.value()) / hz_; }

  // Suspends the calling thread until absolute cycle `c` (returns at once if it has passed).
  void wait_until(Cycle c) const {
    const sc_core::sc_time t = time_of(c);
    if (t > sc_core::sc_time_stamp()) sc_core::wait(t - sc_core::sc_time_stamp());
  }
  void wait_for(Cycles c) const { wait_until(now() + c.value()); }

  // Cycles needed to move `bytes` at `bytes_per_s`, rounded up to whole cycles.
  [[nodiscard]] Cycles transfer_cycles(double bytes, double bytes_per_s) const {
    return Cycles(static_cast<std::uint64_t>(std::ceil(bytes * hz_ / bytes_per_s - 1e-9)));
  }
  [[nodiscard]] Cycles ns_to_cycles(double ns) const {
    return Cycles(static_cast<std::uint64_t>(std::ceil(ns * 1e-9 * hz_ - 1e-9)));
  }

 private:
  double hz_;
  double period_ps_;
  // The last instant now() converted (sc_time's picoseconds; none yet: the 2^64 ps that
  // time_of refuses) and its cycle.
  mutable sc_dt::uint64 now_ps_ = ~sc_dt::uint64{0};
  mutable Cycle now_cycle_ = 0;
};

}  // namespace tpu
