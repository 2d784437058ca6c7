#include "sw/cli/process_pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "hw/common/error.h"
#include "sw/report/files.h"

namespace tpu::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Running {
  std::size_t job = 0;
  Clock::time_point start;
};

// Starts one job. fork + exec rather than posix_spawn because the child must ask for
// PR_SET_PDEATHSIG before it execs; everything between fork and exec is async-signal-safe.
// An exec failure travels back through a close-on-exec pipe so it is reported like
// posix_spawn's.
pid_t start(const ProcessJob& job, const sigset_t& child_mask) {
  std::vector<char*> argv;
  std::vector<std::string> args = job.argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string program = job.program.empty() ? "/proc/self/exe" : job.program;

  int pipe_fd[2];
  if (::pipe2(pipe_fd, O_CLOEXEC) != 0)
    throw InputError(fmt::format("cannot start {}: pipe ({})", program, std::strerror(errno)));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(pipe_fd[0]);
    ::close(pipe_fd[1]);
    throw InputError(fmt::format("cannot start {}: fork ({})", program, std::strerror(err)));
  }
  if (pid == 0) {
    ::close(pipe_fd[0]);
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died before the request took effect.
    if (::getppid() != parent) ::_exit(127);
    const int fd = ::open(job.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      if (fd > STDERR_FILENO) ::close(fd);
    }
    if (!job.cwd.empty() && ::chdir(job.cwd.c_str()) != 0) {
      const int err = errno;
      [[maybe_unused]] const ssize_t w = ::write(pipe_fd[1], &err, sizeof err);
      ::_exit(127);
    }
    if (job.program.empty())
      ::execv(program.c_str(), argv.data());
    else
      ::execvp(program.c_str(), argv.data());
    const int err = errno;
    [[maybe_unused]] const ssize_t w = ::write(pipe_fd[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(pipe_fd[1]);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(pipe_fd[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fd[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {
    ::waitpid(pid, nullptr, 0);
    throw InputError(fmt::format("cannot start {} ({})", program, std::strerror(err)));
  }
  return pid;
}

}  // namespace

bool ProcessResult::ok() const { return !stopped && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string ProcessResult::describe() const {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "stopped";
}

void run_processes(const std::vector<ProcessJob>& jobs, unsigned parallel,
                   const std::function<void(std::size_t, const ProcessResult&)>& on_done,
                   const std::function<bool()>& stop) {
  if (parallel == 0) parallel = 1;
  // SIGCHLD is blocked and waited for with a timeout: the pool wakes the moment a child ends
  // (no polling delay per point), and a signal handled by the caller (SIGINT) interrupts the
  // wait so `stop` is seen at once.
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, &old);
  std::map<pid_t, Running> running;
  std::size_t next = 0;
  bool stopping = false;
  // Returns how many children it reaped.
  auto reap = [&](int flags) {
    for (std::size_t reaped = 0;; ++reaped) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, flags);
      if (pid <= 0) return reaped;
      const auto it = running.find(pid);
      if (it == running.end()) continue;
      ProcessResult r;
      r.status = status;
      r.seconds = std::chrono::duration<double>(Clock::now() - it->second.start).count();
      r.stopped = stopping;
      const std::size_t job = it->second.job;
      running.erase(it);
      on_done(job, r);
    }
  };
  try {
    for (;;) {
      if (!stopping && stop && stop()) {
        stopping = true;
        for (const auto& [pid, r] : running) ::kill(pid, SIGKILL);
      }
      while (!stopping && next < jobs.size() && running.size() < parallel) {
        const pid_t pid = start(jobs[next], old);
        running.emplace(pid, Running{next, Clock::now()});
        ++next;
      }
      if (running.empty()) break;
      // A freed slot is refilled before waiting again: the SIGCHLD that announced this child
      // may already have been taken by the previous wait.
      if (reap(WNOHANG) > 0) continue;
      const timespec wait_for{0, 200'000'000};
      ::sigtimedwait(&chld, nullptr, &wait_for);
    }
  } catch (...) {
    for (const auto& [pid, r] : running) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
}

unsigned default_parallelism() { return std::max(1u, std::thread::hardware_concurrency()); }

std::string self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw InputError(fmt::format("/proc/self/exe: cannot resolve ({})", ec.message()));
  return p.string();
}

std::string last_line(const std::string& file) {
  std::string text;
  try {
    text = report::read_text_file(file);
  } catch (const InputError&) {
    return "";
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

}  // namespace tpu::cli
