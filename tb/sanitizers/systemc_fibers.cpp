// Completes what Debian's SystemC 2.3.4 tells AddressSanitizer and LeakSanitizer about its
// coroutine stacks. Linked into every executable of a -DTPUSIM_SANITIZE=address build
// (CMakeLists.txt, docs/robustness.md).
//
// SystemC's QuickThreads coroutines (2.3.4 sc_cor_qt.cpp, as `objdump -d libsystemc.so` shows)
// announce a stack switch only in sc_cor_pkg_qt::yield, and there incompletely:
//   - a switch back to the main coroutine announces a stack at address 0 of size 0: 2.3.4 never
//     records the main stack;
//   - a thread that ends leaves through sc_cor_pkg_qt::abort, which announces nothing.
// ASan then believes the scheduler runs on no stack, or on the ended thread's stack, which
// SystemC unmaps when it deletes the process. The next exception thrown there (sc_start rethrowing
// a thread's error, a test's EXPECT_THROW) logs "ASan is ignoring requested
// __asan_handle_no_return ... False positive error reports may follow" and leaves the unwound
// frames' redzones poisoned, and LeakSanitizer scans the unmapped stack at exit and dies ("Tracer
// caught signal 11"). SystemC 3.0 records the main stack and announces aborts; until Debian ships
// it, this file does both from outside:
//   - __sanitizer_start_switch_fiber, which libsystemc reaches through a weak reference, is
//     wrapped: a switch to "address 0, size 0" is a switch to the main stack;
//   - sc_cor_qt_aborthelp, which QuickThreads calls on the new stack after an abort, is replaced
//     (libsystemc reaches it through its GOT, so the executable's definition wins) by one that
//     announces the stack it runs on.
//
// LeakSanitizer scans thread stacks but not coroutine stacks, which are plain mappings. A thread
// still waiting when the simulation stops (every other thread of a run that stopped on a program
// error) keeps what its frames own, reachable from its stack, which SystemC 2.3.4 keeps mapped and
// never unwinds; without its stack as a root that memory would be reported as leaked. Each
// coroutine stack is therefore a root region, as LeakSanitizer treats a thread's stack: from
// where the coroutine was last suspended to its top (a stack not yet left: all of it).
// LeakSanitizer scans only the parts still mapped, so a stack SystemC unmapped hides nothing.
#include <dlfcn.h>
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

namespace {

struct Stack {
  std::uintptr_t bottom = 0;
  std::size_t size = 0;

  [[nodiscard]] bool holds(std::uintptr_t p) const { return p >= bottom && p - bottom < size; }
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "systemc_fibers: %s\n", what);
  std::abort();
}

using StartSwitch = void (*)(void**, const void*, std::size_t);
using FinishSwitch = void (*)(void*, const void**, std::size_t*);

// The ASan runtime's own entry points, next after this executable in symbol lookup order.
template <typename Fn>
Fn next_definition(const char* name) {
  void* sym = dlsym(RTLD_NEXT, name);
  if (sym == nullptr) fail("the ASan runtime's fiber-switch functions are not linked");
  return reinterpret_cast<Fn>(sym);
}

StartSwitch real_start() {
  static const auto fn = next_definition<StartSwitch>("__sanitizer_start_switch_fiber");
  return fn;
}

FinishSwitch real_finish() {
  static const auto fn = next_definition<FinishSwitch>("__sanitizer_finish_switch_fiber");
  return fn;
}

Stack own_stack() {
  pthread_attr_t attr;
  void* addr = nullptr;
  std::size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) != 0 ||
      pthread_attr_getstack(&attr, &addr, &size) != 0)
    fail("cannot read the main thread's stack bounds");
  pthread_attr_destroy(&attr);
  return {reinterpret_cast<std::uintptr_t>(addr), size};
}

// Static initialisation runs on the main thread, whose stack the SystemC scheduler uses.
const Stack main_stack = own_stack();

// A coroutine stack and the part of it registered as a LeakSanitizer root, [root, top).
struct Coroutine {
  std::size_t size = 0;
  std::uintptr_t root = 0;
};

// Coroutine stacks seen so far, by bottom address. A stack SystemC unmapped and mapped again for
// another thread replaces the entries it overlaps.
std::map<std::uintptr_t, Coroutine>& coroutines() {
  static std::map<std::uintptr_t, Coroutine> stacks;
  return stacks;
}

void set_root(std::uintptr_t bottom, Coroutine& c, std::uintptr_t root) {
  const std::uintptr_t top = bottom + c.size;
  if (c.root != 0)
    __lsan_unregister_root_region(reinterpret_cast<const void*>(c.root), top - c.root);
  c.root = root;
  __lsan_register_root_region(reinterpret_cast<const void*>(root), top - root);
}

void remember(Stack s) {
  auto& stacks = coroutines();
  auto it = stacks.lower_bound(s.bottom);
  if (it != stacks.end() && it->first == s.bottom && it->second.size == s.size) return;
  if (it != stacks.begin() && std::prev(it)->first + std::prev(it)->second.size > s.bottom) --it;
  while (it != stacks.end() && it->first < s.bottom + s.size) {
    const std::uintptr_t top = it->first + it->second.size;
    __lsan_unregister_root_region(reinterpret_cast<const void*>(it->second.root),
                                  top - it->second.root);
    it = stacks.erase(it);
  }
  set_root(s.bottom, stacks.emplace(s.bottom, Coroutine{s.size, 0}).first->second, s.bottom);
}

// The mapping holding `p`, from /proc/self/maps: a coroutine's stack when SystemC entered it
// through an abort before any yield announced it (each stack is its own mapping, set apart from
// its neighbours by a PROT_NONE guard page).
Stack mapping_holding(std::uintptr_t p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const std::size_t dash = line.find('-');
    const std::size_t space = line.find(' ', dash);
    if (dash == std::string::npos || space == std::string::npos) continue;
    const std::uintptr_t lo = std::stoull(line.substr(0, dash), nullptr, 16);
    const std::uintptr_t hi = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
    if (p >= lo && p < hi) return {lo, hi - lo};
  }
  fail("the stack SystemC switched to is in no mapping");
}

Stack stack_holding(std::uintptr_t p) {
  if (main_stack.holds(p)) return main_stack;
  const auto& stacks = coroutines();
  auto it = stacks.upper_bound(p);
  if (it != stacks.begin()) {
    --it;
    const Stack s{it->first, it->second.size};
    if (s.holds(p)) return s;
  }
  const Stack s = mapping_holding(p);
  remember(s);
  return s;
}

// The coroutine running at `sp` is being suspended: its live frames, and the registers
// QuickThreads saves just below them, are what it keeps. Rounded down to a page, so a thread
// suspended at the same depth again re-registers nothing.
void suspend(std::uintptr_t sp) {
  constexpr std::uintptr_t kPage = 4096;
  const Stack s = stack_holding(sp);
  if (s.bottom == main_stack.bottom) return;
  Coroutine& c = coroutines().at(s.bottom);
  const std::uintptr_t root = sp - s.bottom > 2 * kPage ? (sp - kPage) & ~(kPage - 1) : s.bottom;
  if (root != c.root) set_root(s.bottom, c, root);
}

}  // namespace

// Runs on the old stack just before a switch (a yield); uninstrumented because ASan's idea of the
// current stack is what is being corrected.
extern "C" __attribute__((no_sanitize("address"))) void __sanitizer_start_switch_fiber(
    void** fake_stack_save, const void* bottom, std::size_t size) {
  suspend(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)));
  Stack to{reinterpret_cast<std::uintptr_t>(bottom), size};
  if (bottom == nullptr && size == 0)
    to = main_stack;
  else
    remember(to);
  real_start()(fake_stack_save, reinterpret_cast<const void*>(to.bottom), to.size);
}

// QuickThreads' abort helper (qt_helper_t: old stack pointer, two arguments): runs on the new
// stack right after the switch. The ended thread's fake stack, if any, dies with it (nullptr).
extern "C" __attribute__((no_sanitize("address"))) void* sc_cor_qt_aborthelp(void*, void*, void*) {
  const Stack here = stack_holding(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)));
  real_start()(nullptr, reinterpret_cast<const void*>(here.bottom), here.size);
  real_finish()(nullptr, nullptr, nullptr);
  return nullptr;
}
