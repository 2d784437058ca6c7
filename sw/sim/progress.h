// A progress line while a simulation runs: on a terminal, `tpusim run` and `tpusim fit` say how
// far they are instead of staying silent for the seconds a large model takes (docs/cli.md,
// "Progress").
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tpu::sim {

struct Progress {
  std::uint64_t done = 0;   // instructions the cores have issued
  std::uint64_t total = 0;  // instructions of the program, every core
  // Where a simulation of many programs is (fit: "epoch 2/5, step 13/60"), said instead of the
  // share of instructions when not empty.
  std::string at;
};

// Whether to show it: when standard error is a terminal; TPUSIM_PROGRESS=1 forces it on (the
// tests, a log file) and TPUSIM_PROGRESS=0 off.
[[nodiscard]] bool progress_wanted();

// Runs the elaborated simulation to its end, as sc_start() does. When progress_wanted(), it
// runs it in slices of simulated time instead and rewrites one line on standard error between
// them: "tpusim: <what>: 43% of 28,000 instructions issued, 1.234 ms simulated, 2.1 s" (or
// Progress::at in place of the share), at most four times a second, cleared at the end; a caller
// that logs lines meanwhile clears it first (clear_progress_line). A slice stops early when no
// event is left, so the simulation (every cycle and count) is the same either way.
void run_simulation(const std::string& what, double clock_hz,
                    const std::function<Progress()>& progress);

// Clears the progress line on standard error when progress_wanted() (before a log line).
void clear_progress_line();

}  // namespace tpu::sim
