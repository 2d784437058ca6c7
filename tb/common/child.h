// Runs a function in a forked child process and hands its result back through a pipe: SystemC
// elaborates once per process, so a test that simulates several configurations runs each in a
// child of its own.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <type_traits>

namespace tpu::test {

// `f()`'s value, or nullopt when the child threw, died or could not hand it back. T crosses the
// pipe as bytes, so it must be trivially copyable.
template <class F, class T = std::invoke_result_t<F>>
std::optional<T> in_child(F f) {
  static_assert(std::is_trivially_copyable_v<T>, "the result crosses a pipe as bytes");
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    close(fds[0]);
    try {
      const T value = f();
      _exit(write(fds[1], &value, sizeof value) == static_cast<ssize_t>(sizeof value) ? 0 : 1);
    } catch (...) {
      _exit(1);
    }
  }
  close(fds[1]);
  T value{};
  const bool read_all = read(fds[0], &value, sizeof value) == static_cast<ssize_t>(sizeof value);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!read_all || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return value;
}

}  // namespace tpu::test
