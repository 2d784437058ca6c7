#include "sw/sim/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <systemc>

#include "sw/report/formats.h"

namespace tpu::sim {

namespace {

double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool progress_wanted() {
  if (const char* e = std::getenv("TPUSIM_PROGRESS"); e && *e) return std::strcmp(e, "0") != 0;
  return ::isatty(STDERR_FILENO) == 1;
}

void run_simulation(const std::string& what, double clock_hz,
                    const std::function<Progress()>& progress) {
  if (!progress_wanted()) {
    sc_core::sc_start();
    return;
  }
  const double t0 = wall_s();
  double shown_at = -1;  // the first slice's line at once, then at most four a second
  bool shown = false;
  // The slice adapts to the model's speed: about a tenth of a second of host time each.
  double slice_s = 1000 / clock_hz;
  bool started = false;
  for (;;) {
    const double before = wall_s();
    // After the first (which initialises the kernel), at least to the next event: a slice that
    // ends before it would run nothing, and SystemC warns of an sc_start without activity (W571).
    sc_core::sc_time slice(slice_s, sc_core::SC_SEC);
    if (started) slice = std::max(slice, sc_core::sc_time_to_pending_activity());
    started = true;
    sc_core::sc_start(slice, sc_core::SC_EXIT_ON_STARVATION);
    if (!sc_core::sc_pending_activity()) break;
    const double now = wall_s(), took = now - before;
    if (took < 0.05)
      slice_s *= 2;
    else if (took > 0.1)
      slice_s = std::max(slice_s / 2, 1 / clock_hz);
    if (shown && now - shown_at < 0.25) continue;
    const Progress p = progress();
    const double pct =
        p.total ? 100.0 * static_cast<double>(p.done) / static_cast<double>(p.total) : 0;
    const std::string at = p.at.empty()
                               ? fmt::format("{:.0f}% of {} instructions issued", pct,
                                             report::thousands(static_cast<double>(p.total)))
                               : p.at;
    std::fprintf(stderr, "\rtpusim: %s: %s, %.3f ms simulated, %.1f s\033[K", what.c_str(),
                 at.c_str(), 1e3 * sc_core::sc_time_stamp().to_seconds(), now - t0);
    std::fflush(stderr);
    shown_at = now;
    shown = true;
  }
  if (shown) clear_progress_line();
}

void clear_progress_line() {
  if (!progress_wanted()) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
}

}  // namespace tpu::sim
