#include "sw/cli/process_pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "sw/io/signals.h"

namespace tpu::cli {

namespace {

using Clock = std::chrono::steady_clock;

// How long the pool sleeps at most between looks at `stop`.
constexpr int kPollMs = 200;

struct Pipe {
  int fd = -1;
  std::string data;
  std::size_t keep = 0;  // bytes kept: the first (stdout) or the last (stderr)
  bool tail = false;
  bool overflow = false;
};

struct Running {
  std::size_t job = 0;
  Clock::time_point start;
  Pipe out, err;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Reads what is there without waiting. Returns false at end of file (the fd is then closed).
bool drain(Pipe& p) {
  char buf[1 << 16];
  while (p.fd >= 0) {
    const ssize_t n = ::read(p.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    if (n == 0) {
      close_fd(p.fd);
      return false;
    }
    p.data.append(buf, static_cast<std::size_t>(n));
    if (p.data.size() > p.keep) {
      if (p.tail)
        p.data.erase(0, p.data.size() - p.keep);
      else
        p.overflow = true;
    }
  }
  return false;
}

// Starts one job. fork + exec rather than posix_spawn because the child must ask for
// PR_SET_PDEATHSIG before it execs; everything between fork and exec is async-signal-safe.
// An exec failure travels back through a close-on-exec pipe so it is reported like
// posix_spawn's.
pid_t start(const ProcessJob& job, const sigset_t& child_mask, Running& r) {
  std::vector<char*> argv;
  std::vector<std::string> args = job.argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string program = job.program.empty() ? "/proc/self/exe" : job.program;

  int status_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0)
    throw InputError(fmt::format("cannot start {}: pipe ({})", program, std::strerror(errno)));
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(status_pipe[0]);
    ::close(status_pipe[1]);
    throw InputError(fmt::format("cannot start {}: pipe ({})", program, std::strerror(err)));
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    for (int fd : {status_pipe[0], status_pipe[1], out_pipe[0], out_pipe[1]}) ::close(fd);
    throw InputError(fmt::format("cannot start {}: pipe ({})", program, std::strerror(err)));
  }
  const pid_t parent = ::getpid();
  // The termination signals are held back across the fork: the child must not run tpusim's
  // handler (which, while the pool runs, only sets a flag) before it execs — a SIGTERM meant for
  // the simulation would be lost.
  sigset_t held;
  ::pthread_sigmask(SIG_BLOCK, &io::termination_signals(), &held);
  const pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &held, nullptr);
  if (pid < 0) {
    const int err = errno;
    for (int fd :
         {status_pipe[0], status_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      ::close(fd);
    throw InputError(
        fmt::format("cannot start {}: fork ({}{})", program, std::strerror(err),
                    err == EAGAIN ? "; the process limit, ulimit -u, may be too low" : ""));
  }
  if (pid == 0) {
    for (int sig = 1; sig < NSIG; ++sig) {
      if (!sigismember(&io::termination_signals(), sig)) continue;
      struct sigaction sa {};
      ::sigaction(sig, nullptr, &sa);
      if (sa.sa_handler == SIG_IGN) continue;
      sa.sa_handler = SIG_DFL;
      ::sigaction(sig, &sa, nullptr);
    }
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died before the request took effect.
    if (::getppid() != parent) ::_exit(127);
    const int in = ::open("/dev/null", O_RDONLY);
    if (in >= 0 && in != STDIN_FILENO) {
      ::dup2(in, STDIN_FILENO);
      ::close(in);
    }
    // dup2 clears close-on-exec on the copies.
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    int err = 0;
    if (!job.cwd.empty() && ::chdir(job.cwd.c_str()) != 0) err = errno;
    if (err == 0) {
      if (job.program.empty())
        ::execv(program.c_str(), argv.data());
      else
        ::execvp(program.c_str(), argv.data());
      err = errno;
    }
    [[maybe_unused]] const ssize_t w = ::write(status_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(status_pipe[1]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  int err = 0;
  ssize_t n;
  do {
    n = ::read(status_pipe[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    ::waitpid(pid, nullptr, 0);
    throw InputError(fmt::format("cannot start {}{} ({})", program,
                                 job.cwd.empty() ? "" : " in " + job.cwd, std::strerror(err)));
  }
  for (int fd : {out_pipe[0], err_pipe[0]}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  r.out.fd = out_pipe[0];
  r.out.keep = kMaxChildOutputBytes;
  r.err.fd = err_pipe[0];
  r.err.keep = kErrTailBytes;
  r.err.tail = true;
  return pid;
}

}  // namespace

bool ProcessResult::ok() const { return !stopped && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

int ProcessResult::signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }

std::string ProcessResult::describe() const {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "stopped";
}

void run_processes(const std::vector<ProcessJob>& jobs, unsigned parallel,
                   const std::function<void(std::size_t, ProcessResult&)>& on_done,
                   const std::function<bool()>& stop) {
  if (parallel == 0) parallel = 1;
  // SIGCHLD is blocked and read from a signalfd polled with the children's pipes: the pool wakes
  // the moment a child ends or writes, and a signal handled by the caller (SIGINT) interrupts
  // the poll so `stop` is seen at once.
  sigset_t chld, old;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, &old);
  const int sfd = ::signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) {
    const int err = errno;
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    throw InputError(
        fmt::format("cannot watch child processes: signalfd ({})", std::strerror(err)));
  }
  std::map<pid_t, Running> running;
  std::size_t next = 0;
  bool stopping = false;
  auto kill_all = [&] {
    for (auto& [pid, r] : running) ::kill(pid, SIGKILL);
  };
  // Returns how many children it reaped.
  auto reap = [&]() -> std::size_t {
    for (std::size_t reaped = 0;; ++reaped) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return reaped;
      const auto it = running.find(pid);
      if (it == running.end()) continue;
      Running& r = it->second;
      // The child has ended: what it wrote is in the pipes (a descendant that kept them open is
      // not waited for).
      drain(r.out);
      drain(r.err);
      close_fd(r.out.fd);
      close_fd(r.err.fd);
      ProcessResult res;
      res.status = status;
      res.seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
      res.stopped = stopping;
      res.out = std::move(r.out.data);
      res.err = std::move(r.err.data);
      if (r.out.overflow) {
        res.out.clear();
        res.err += fmt::format("\ntpusim: its standard output passed {} bytes and it was stopped\n",
                               kMaxChildOutputBytes);
      }
      const std::size_t job = r.job;
      running.erase(it);
      on_done(job, res);
    }
  };
  auto cleanup = [&] {
    for (auto& [pid, r] : running) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      close_fd(r.out.fd);
      close_fd(r.err.fd);
    }
    running.clear();
    ::close(sfd);
    // A SIGCHLD still pending would otherwise be delivered (and ignored) or stay for the next
    // pool; consume it.
    const timespec none{0, 0};
    while (::sigtimedwait(&chld, nullptr, &none) > 0) {
    }
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
  };
  try {
    for (;;) {
      if (!stopping && stop && stop()) {
        stopping = true;
        kill_all();
      }
      while (!stopping && next < jobs.size() && running.size() < parallel) {
        Running r;
        r.job = next;
        r.start = Clock::now();
        const pid_t pid = start(jobs[next], old, r);
        running.emplace(pid, std::move(r));
        ++next;
      }
      if (running.empty()) break;
      // A freed slot is refilled before waiting again: the SIGCHLD that announced this child
      // may already have been consumed.
      if (reap() > 0) continue;
      std::vector<pollfd> fds;
      std::vector<Pipe*> pipes;
      fds.push_back(pollfd{sfd, POLLIN, 0});
      for (auto& [pid, r] : running)
        for (Pipe* p : {&r.out, &r.err})
          if (p->fd >= 0) {
            fds.push_back(pollfd{p->fd, POLLIN, 0});
            pipes.push_back(p);
          }
      const int n = ::poll(fds.data(), fds.size(), kPollMs);
      if (n < 0 && errno != EINTR)
        throw InputError(
            fmt::format("cannot watch child processes: poll ({})", std::strerror(errno)));
      if (n <= 0) continue;
      if (fds[0].revents != 0) {
        signalfd_siginfo info;
        while (::read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        }
      }
      for (std::size_t i = 1; i < fds.size(); ++i)
        if (fds[i].revents != 0) drain(*pipes[i - 1]);
      for (auto& [pid, r] : running)
        if (r.out.overflow) ::kill(pid, SIGKILL);
    }
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

unsigned default_parallelism() { return std::max(1u, std::thread::hardware_concurrency()); }

std::string self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw InputError(fmt::format("/proc/self/exe: cannot resolve ({})", ec.message()));
  return p.string();
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace tpu::cli
