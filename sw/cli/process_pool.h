// Child processes for the commands that run many simulations (`compare`, `sweep`): the SystemC
// kernel cannot be reset, so every simulation is its own `tpusim run` process. Up to `jobs` run
// at a time; each one's stdout and stderr go to its log file.
//
// Children die with the parent (Linux PR_SET_PDEATHSIG): a sweep killed with SIGKILL leaves no
// orphan that would finish a point behind the back of the rerun.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace tpu::cli {

struct ProcessJob {
  std::string program;  // "" = this tpusim binary (/proc/self/exe); else looked up in PATH
  std::vector<std::string> argv;  // argv[0] included
  std::string log;                // stdout and stderr, truncated first
  std::string cwd;                // "" = the caller's; `log` is opened before changing to it
};

struct ProcessResult {
  int status = 0;        // as waitpid(2) reports it
  double seconds = 0;    // wall time from start to exit
  bool stopped = false;  // killed by the pool because `stop` asked for it
  [[nodiscard]] bool ok() const;
  // "exit status 2", "killed by signal 11".
  [[nodiscard]] std::string describe() const;
};

// Runs `jobs` in order, at most `parallel` at a time, and calls `on_done(index, result)` from the
// calling thread as each ends. `stop` is polled at least every 200 ms (callers also refresh their
// progress display from it); when it returns true, no further job starts and the running ones
// are killed (their results have `stopped` set). Throws InputError when a process cannot be
// started.
void run_processes(const std::vector<ProcessJob>& jobs, unsigned parallel,
                   const std::function<void(std::size_t, const ProcessResult&)>& on_done,
                   const std::function<bool()>& stop = {});

// One per core.
unsigned default_parallelism();

// The absolute path of this tpusim binary, for scripts that start it elsewhere (Slurm tasks).
std::string self_executable();

// The last non-empty line of a log: a failed tpusim's one-line error. "" when unreadable.
std::string last_line(const std::string& file);

}  // namespace tpu::cli
