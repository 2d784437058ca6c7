// What tb/sanitizers/systemc_fibers.cpp restores in an ASan build: the main stack after SystemC
// threads end, and LeakSanitizer's view of coroutine stacks. Each TEST elaborates modules, so it
// runs in its own process. Outside a -DTPUSIM_SANITIZE=address build there is nothing to check.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <systemc>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace tpu {
namespace {

#if defined(__SANITIZE_ADDRESS__)

// Three threads: one that ends at once, one that throws at 1 ns when asked to, and one that owns
// a buffer and then waits for an event nobody notifies, as every other thread of a run that
// stopped on a program error does.
class Threads : public sc_core::sc_module {
 public:
  Threads(sc_core::sc_module_name name, bool throw_at_1ns)
      : sc_core::sc_module(name), throw_(throw_at_1ns) {
    SC_HAS_PROCESS(Threads);
    SC_THREAD(ends);
    SC_THREAD(fails);
    SC_THREAD(waits_forever);
  }
  std::function<void()> before_waiting;

 private:
  void ends() {}
  void fails() {
    sc_core::wait(1, sc_core::SC_NS);
    if (throw_) throw std::runtime_error("thread failed");
  }
  void waits_forever() {
    const std::vector<std::uint8_t> owned(4096, 1);
    if (before_waiting) before_waiting();
    sc_core::wait(never_);
  }
  bool throw_;
  sc_core::sc_event never_;
};

// What ASan prints on stderr while `body` runs (it writes to file descriptor 2 directly).
template <typename Body>
std::string asan_output_of(Body body) {
  char path[] = "/tmp/systemc_fibers_test.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  return out;
}

// ASan's warning when it does not know the stack an exception unwinds, and so leaves the
// unwound frames' redzones poisoned.
constexpr const char* kUnknownStack = "__asan_handle_no_return";

TEST(SystemcUnderAsan, AnExceptionAfterThreadsEndedUnwindsAKnownStack) {
  Threads t("t", false);
  sc_core::sc_start();
  const std::string out = asan_output_of([] {
    try {
      throw std::runtime_error("after the simulation");
    } catch (const std::runtime_error&) {
    }
  });
  EXPECT_EQ(out.find(kUnknownStack), std::string::npos) << out;
}

TEST(SystemcUnderAsan, AThreadsErrorRethrownBySimulationUnwindsAKnownStack) {
  Threads t("t", true);
  bool rethrown = false;
  const std::string out = asan_output_of([&] {
    try {
      sc_core::sc_start();
    } catch (const std::exception&) {
      rethrown = true;
    }
  });
  EXPECT_TRUE(rethrown);
  EXPECT_EQ(out.find(kUnknownStack), std::string::npos) << out;
}

TEST(SystemcUnderAsan, WhatAWaitingThreadOwnsIsNotALeak) {
  Threads t("t", false);
  sc_core::sc_start();
  EXPECT_EQ(__lsan_do_recoverable_leak_check(), 0);
}

// The address of a buffer the thread dropped, kept where LeakSanitizer cannot read it as a
// pointer, so the test can free it once the leak has been seen.
std::uintptr_t hidden_leak = 0;
constexpr std::uintptr_t kHide = 0x5a5a5a5a5a5a5a5aULL;

__attribute__((noinline)) void drop_a_buffer() {
  auto* lost = new std::uint8_t[333];
  std::memset(lost, 1, 333);
  hidden_leak = reinterpret_cast<std::uintptr_t>(lost) ^ kHide;
}

// Overwrites the dead frames drop_a_buffer left below the thread's live ones, so no stale copy of
// the address remains for LeakSanitizer's scan of the stack to find.
__attribute__((noinline)) void scrub_dead_frames() {
  volatile std::uint8_t frames[16384];
  for (auto& b : frames) b = 0;
}

TEST(SystemcUnderAsan, MemoryAWaitingThreadDroppedIsStillALeak) {
  Threads t("t", false);
  t.before_waiting = [] {
    drop_a_buffer();
    scrub_dead_frames();
  };
  sc_core::sc_start();
  EXPECT_NE(__lsan_do_recoverable_leak_check(), 0);
  delete[] reinterpret_cast<std::uint8_t*>(hidden_leak ^ kHide);
}

#else

TEST(SystemcUnderAsan, NeedsAnAddressSanitizerBuild) {
  GTEST_SKIP() << "built without -DTPUSIM_SANITIZE=address";
}

#endif

}  // namespace
}  // namespace tpu
