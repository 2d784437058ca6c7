// What tpusim does when it is asked to stop (docs/robustness.md, "Signals"): SIGINT, SIGTERM,
// SIGHUP and SIGPIPE remove the files it has half written (temporary files, directories it made
// for outputs and left empty) and then end the process by the same signal, as an uninterrupted
// program would, so a shell, `timeout` or a job scheduler sees what happened. A signal that was
// ignored when tpusim started (nohup) stays ignored.
//
// Commands that run children (compare, sweep) hold an InterruptScope while they do: a signal
// then only sets a flag, the command stops its children, records what finished, cleans up and
// calls end_if_interrupted().
//
// Only the main thread takes these signals: threads tpusim starts are created inside a
// SignalBlock, whose mask they inherit and keep, so the main thread can make a sequence of steps
// (creating a temporary file and registering it, renaming a set of outputs into place) indivisible
// by blocking them (SignalBlock).
#pragma once

#include <signal.h>

#include <string>

namespace tpu::io {

// Installs the handlers; called once at the start of main().
void install_signal_handlers();

// A path removed if the process is ended by one of the signals: a temporary file, or a
// directory made for outputs (removed only when empty). Registering never allocates in the
// handler's view: a fixed table of slots, each path copied into it.
class CleanupPath {
 public:
  enum class Kind { File, Directory };
  CleanupPath() = default;
  // Throws InputError when the path is longer than PATH_MAX or every slot is taken.
  CleanupPath(const std::string& path, Kind kind);
  CleanupPath(CleanupPath&& o) noexcept : slot_(o.slot_) { o.slot_ = -1; }
  CleanupPath& operator=(CleanupPath&& o) noexcept;
  CleanupPath(const CleanupPath&) = delete;
  CleanupPath& operator=(const CleanupPath&) = delete;
  // Forgets the path (does not remove it).
  ~CleanupPath() { release(); }
  void release();

 private:
  int slot_ = -1;
};

// Blocks the signals in the calling thread while it lives.
class SignalBlock {
 public:
  SignalBlock();
  ~SignalBlock();
  SignalBlock(const SignalBlock&) = delete;
  SignalBlock& operator=(const SignalBlock&) = delete;

 private:
  sigset_t old_{};
};

// While one lives, the signals set a flag (interrupted()) instead of ending the process.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// The signal received while an InterruptScope lived, or 0.
int interrupted();

// Ends the process by the signal interrupted() names, if any (after the caller has cleaned up
// and said what it kept); returns otherwise.
void end_if_interrupted();

// The set of signals above, for threads to block (std::async threads inherit the creating
// thread's mask: create them inside a SignalBlock).
const sigset_t& termination_signals();

}  // namespace tpu::io
