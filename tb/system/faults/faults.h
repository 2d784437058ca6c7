// The fault-injection suite (docs/robustness.md, "Faults"): tpusim run, compare, sweep and train
// as an unlucky user meets them — signals at random moments, two sweeps on one directory, a
// full disk, devices, FIFOs and symlinks as outputs — each checked for what it leaves behind.
// Header-only helpers for the *_test.cpp files beside it.
//
// Random moments come from a seeded generator: TPUSIM_FAULT_SEED picks the seed (default 1, so a
// failure reproduces), TPUSIM_FAULT_TRIALS scales the number of trials of every random test
// (default: each test's own; the numbers quoted in docs/robustness.md were run with more).
#pragma once

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"

namespace tpu::test::faults {

namespace fs = std::filesystem;
using nlohmann::json;

inline std::string source(const std::string& relative) {
  return std::string(TPUSIM_SOURCE_DIR) + "/" + relative;
}
inline std::string tpusim() { return std::string(TPUSIM_BINARY_DIR) + "/tpusim"; }

inline bool is_root() { return ::geteuid() == 0; }

inline std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}
// Trials of a random test: its own default, or TPUSIM_FAULT_TRIALS.
inline int trials(int fallback) {
  return static_cast<int>(env_number("TPUSIM_FAULT_TRIALS", static_cast<std::uint64_t>(fallback)));
}
inline std::mt19937_64 rng(const std::string& test) {
  // Each test its own stream, so adding a test does not move another's moments.
  std::seed_seq seq(test.begin(), test.end());
  std::mt19937_64 g(seq);
  g.discard(env_number("TPUSIM_FAULT_SEED", 1));
  return g;
}
inline double uniform(std::mt19937_64& g, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(g() >> 11) * 0x1.0p-53;
}

// A scratch directory, removed with its content (made accessible first) when the test ends.
struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& name) {
    path = fs::temp_directory_path() / ("tpusim-faults-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  [[nodiscard]] std::string operator/(const std::string& name) const {
    return (path / name).string();
  }
};

// A small tmpfs (root only): the full disk of the tests, never the machine's.
class TmpFs {
 public:
  TmpFs(const fs::path& at, std::uint64_t bytes) : at_(at) {
    fs::create_directories(at);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    mounted_ = ::mount("tpusim-faults", at.c_str(), "tmpfs", 0, opts.c_str()) == 0;
    if (!mounted_) why_ = std::strerror(errno);
  }
  TmpFs(const TmpFs&) = delete;
  TmpFs& operator=(const TmpFs&) = delete;
  ~TmpFs() {
    if (mounted_) ::umount2(at_.c_str(), MNT_DETACH);
  }
  [[nodiscard]] bool mounted() const { return mounted_; }
  [[nodiscard]] const std::string& why() const { return why_; }
  // Grows (or shrinks) it in place, files kept.
  bool resize(std::uint64_t bytes) {
    const std::string opts = "size=" + std::to_string(bytes);
    return ::mount("tpusim-faults", at_.c_str(), "tmpfs", MS_REMOUNT, opts.c_str()) == 0;
  }

 private:
  fs::path at_;
  bool mounted_ = false;
  std::string why_;
};

// How a child ended, and what it printed.
struct Ended {
  int status = -1;  // exit status, or -1 when a signal ended it
  int signal = 0;
  std::string out, err;
  [[nodiscard]] std::string describe() const {
    return signal ? "killed by signal " + std::to_string(signal)
                  : "exit status " + std::to_string(status);
  }
};

struct Options {
  std::string cwd;                                       // "" = the test's
  std::vector<std::pair<std::string, std::string>> env;  // added to the environment
  std::vector<std::pair<int, std::uint64_t>> limits;     // setrlimit before exec
  bool unprivileged = false;                             // as nobody when root
  int stdout_fd = -1;                                    // instead of the capture file
};

// A tpusim process in a process group of its own (so a signal can go to it and its children,
// as a terminal's Ctrl-C does), signals reset to their defaults whatever the test runner set.
class Child {
 public:
  Child(const std::vector<std::string>& args, const Options& o = {}) {
    capture_ = fs::temp_directory_path() / ("tpusim-faults-capture-" + std::to_string(::getpid()) +
                                            "-" + std::to_string(counter()++));
    fs::create_directories(capture_);
    std::vector<std::string> argv = {tpusim()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const std::string out = (capture_ / "out").string(), err = (capture_ / "err").string();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      const int fo =
          o.stdout_fd >= 0 ? o.stdout_fd : ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int fe = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fo < 0 || fe < 0) ::_exit(125);
      ::dup2(fo, 1);
      ::dup2(fe, 2);
      for (const auto& [resource, v] : o.limits) {
        const rlimit rl{static_cast<rlim_t>(v), static_cast<rlim_t>(v)};
        if (::setrlimit(resource, &rl) != 0) ::_exit(124);
      }
      if (o.unprivileged && ::geteuid() == 0) {
        if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)
          ::_exit(124);
      }
      for (const auto& [k, v] : o.env) ::setenv(k.c_str(), v.c_str(), 1);
      if (!o.cwd.empty() && ::chdir(o.cwd.c_str()) != 0) ::_exit(126);
      ::execv(cargv[0], cargv.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // either side may win the race; both ask for the same
    start_ = std::chrono::steady_clock::now();
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() {
    if (!reaped_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(capture_, ec);
  }

  [[nodiscard]] pid_t pid() const { return pid_; }
  void signal(int sig, bool group) const { ::kill(group ? -pid_ : pid_, sig); }
  [[nodiscard]] double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  // True once it has ended (without reaping it).
  [[nodiscard]] bool ended() const {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           info.si_pid == pid_;
  }
  // Waits for it (SIGKILL to its group after `limit_s`, which fails the test).
  Ended wait(double limit_s = 300) {
    const auto deadline = start_ + std::chrono::duration<double>(limit_s);
    int st = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "tpusim did not end within " << limit_s << " s (a hang)";
        ::kill(-pid_, SIGKILL);
        ::waitpid(pid_, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    reaped_ = true;
    Ended e;
    e.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    e.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    // A signal sent right after fork can end the child before it opened either capture file.
    std::error_code ec;
    if (fs::exists(capture_ / "out", ec)) e.out = read_file(capture_ / "out");
    if (fs::exists(capture_ / "err", ec)) e.err = read_file(capture_ / "err");
    return e;
  }
  // After wait(): true when no process of its group is left (children die with their parent).
  [[nodiscard]] bool group_gone(double grace_s = 5) const {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    while (std::chrono::steady_clock::now() < until) {
      if (::kill(-pid_, 0) != 0 && errno == ESRCH) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  pid_t pid_ = -1;
  bool reaped_ = false;
  fs::path capture_;
  std::chrono::steady_clock::time_point start_;
};

inline Ended run(const std::vector<std::string>& args, const Options& o = {}) {
  Child c(args, o);
  return c.wait();
}

// tpusim's temporary files (sw/io/output.h: ".<name>.<pid>-<n>.tpusim-tmp") anywhere under
// `dir`, and anything else that looks like an abandoned temporary.
inline std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.find(".tpusim-tmp") != std::string::npos || n.find(".tmp.") != std::string::npos ||
        n.rfind("tpusim-compare-", 0) == 0)
      found.push_back(it->path().string());
  }
  return found;
}

// Every regular file under `dir` (relative path -> content).
inline std::map<std::string, std::string> files(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec))
      out[fs::relative(it->path(), dir).string()] = read_file(it->path());
  return out;
}

// True for the statuses a fault case may end with: success, a clear refusal (2), a partial
// result (1, compare and sweep), or the signal the test sent. Never 3 (a bug), never a crash.
inline bool acceptable(const Ended& e, int sent_signal = 0) {
  if (e.signal != 0) return e.signal == sent_signal;
  return e.status == 0 || e.status == 1 || e.status == 2;
}

}  // namespace tpu::test::faults
