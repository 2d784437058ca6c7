#include "sw/io/signals.h"

#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "hw/common/error.h"

namespace tpu::io {

namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

// The cleanup table. A slot goes kFree -> kFilling (being written by the main thread) -> kReady
// (the handler may remove its path) -> kFree. Slots are claimed in order, so removing ready
// slots from the highest down removes a directory's files before the directory.
constexpr int kSlots = 256;
constexpr int kFree = 0, kFilling = 1, kReady = 2;
struct Slot {
  std::atomic<int> state{kFree};
  bool directory = false;
  char path[PATH_MAX] = {};
};
Slot g_slots[kSlots];

std::atomic<int> g_defer{0};
volatile sig_atomic_t g_pending = 0;

sigset_t make_set() {
  sigset_t s;
  sigemptyset(&s);
  for (int sig : kSignals) sigaddset(&s, sig);
  return s;
}
const sigset_t g_set = make_set();

// Async-signal-safe: unlink, rmdir, sigaction, sigprocmask, raise, _exit only.
void remove_registered() {
  for (int i = kSlots; i-- > 0;) {
    Slot& s = g_slots[i];
    if (s.state.load() != kReady) continue;
    if (s.directory)
      ::rmdir(s.path);
    else
      ::unlink(s.path);
  }
}

[[noreturn]] void die_by(int sig) {
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);
}

extern "C" void on_signal(int sig) {
  if (g_defer.load() > 0) {
    if (g_pending == 0) g_pending = sig;
    return;
  }
  remove_registered();
  die_by(sig);
}

}  // namespace

void install_signal_handlers() {
  for (int sig : kSignals) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigfillset(&sa.sa_mask);  // one handler at a time; it ends the process or sets a flag
    // No SA_RESTART: a wait in the process pool returns at once so the flag is seen.
    ::sigaction(sig, &sa, nullptr);
  }
}

const sigset_t& termination_signals() { return g_set; }

CleanupPath::CleanupPath(const std::string& path, Kind kind) {
  if (path.size() >= PATH_MAX)
    throw InputError(fmt::format("{}: path longer than {} bytes", path, PATH_MAX - 1));
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    Slot& s = g_slots[i];
    s.directory = kind == Kind::Directory;
    std::memcpy(s.path, path.c_str(), path.size() + 1);
    s.state.store(kReady);
    slot_ = i;
    return;
  }
  throw InputError(fmt::format("{}: more than {} files being written at once", path, kSlots));
}

CleanupPath& CleanupPath::operator=(CleanupPath&& o) noexcept {
  if (this != &o) {
    release();
    slot_ = o.slot_;
    o.slot_ = -1;
  }
  return *this;
}

void CleanupPath::release() {
  if (slot_ < 0) return;
  g_slots[slot_].state.store(kFree);
  slot_ = -1;
}

SignalBlock::SignalBlock() { ::pthread_sigmask(SIG_BLOCK, &g_set, &old_); }
SignalBlock::~SignalBlock() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

InterruptScope::InterruptScope() { g_defer.fetch_add(1); }
InterruptScope::~InterruptScope() { g_defer.fetch_sub(1); }

int interrupted() { return g_pending; }

void end_if_interrupted() {
  const int sig = g_pending;
  if (sig == 0) return;
  remove_registered();
  die_by(sig);
}

}  // namespace tpu::io
