// Child processes for the commands that run many simulations (`compare`, `sweep`): the SystemC
// kernel cannot be reset, so every simulation is its own `tpusim run` process. Up to `jobs` run
// at a time. A child's standard output and standard error come back to the parent through pipes,
// so what a child says (its report on stdout with `--json -`, its one-line error on stderr)
// reaches the parent even when no file can be written (a full disk, a read-only directory).
//
// Children die with the parent (Linux PR_SET_PDEATHSIG): a sweep killed with SIGKILL leaves no
// orphan that would finish a point behind the back of the rerun. Their standard input is
// /dev/null: the terminal's input stays the user's.
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
  std::string cwd;                // "" = the caller's
};

struct ProcessResult {
  int status = 0;        // as waitpid(2) reports it
  double seconds = 0;    // wall time from start to exit
  bool stopped = false;  // killed by the pool because `stop` asked for it
  std::string out;       // everything the child wrote to standard output
  std::string err;       // the last kErrTailBytes it wrote to standard error
  [[nodiscard]] bool ok() const;
  // "exit status 2", "killed by signal 11".
  [[nodiscard]] std::string describe() const;
  // The signal that ended the child, or 0.
  [[nodiscard]] int signal() const;
};

// Standard error kept per child: a failed tpusim's message is its last line.
inline constexpr std::size_t kErrTailBytes = 64 * 1024;
// Standard output kept per child (a report); a child that writes more is killed and fails.
inline constexpr std::size_t kMaxChildOutputBytes = std::size_t{1} << 30;

// Runs `jobs` in order, at most `parallel` at a time, and calls `on_done(index, result)` from the
// calling thread as each ends. `stop` is polled at least every 200 ms and after every signal
// (callers also refresh their progress display from it); when it returns true, no further job
// starts and the running ones are killed (their results have `stopped` set). Throws InputError
// when a process cannot be started (the running ones are killed first).
void run_processes(const std::vector<ProcessJob>& jobs, unsigned parallel,
                   const std::function<void(std::size_t, ProcessResult&)>& on_done,
                   const std::function<bool()>& stop = {});

// One per core.
unsigned default_parallelism();

// The absolute path of this tpusim binary, for scripts that start it elsewhere (Slurm tasks).
std::string self_executable();

// The last non-empty line of a text: a failed tpusim's one-line error.
std::string last_line(const std::string& text);

}  // namespace tpu::cli
