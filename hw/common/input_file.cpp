#include "hw/common/input_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "hw/common/error.h"

namespace tpu {

namespace {

std::mutex g_inputs_mutex;
// Keyed by device and inode: a file opened again (an include shared by two configs, a fuzzer's
// input rewritten in place) is remembered once.
std::map<std::pair<dev_t, ino_t>, InputIdentity> g_inputs;

std::string readable_size(std::uint64_t bytes) {
  if (bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
  return fmt::format("{} bytes", bytes);
}

}  // namespace

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe), not a regular file: opening one waits for a writer";
  if (S_ISCHR(mode)) return "a character device, not a regular file";
  if (S_ISBLK(mode)) return "a block device, not a regular file";
  if (S_ISSOCK(mode)) return "a socket, not a regular file";
  return "not a regular file";
}

namespace {

[[noreturn]] void fail(const std::string& path, std::string_view what, const std::string& why) {
  throw InputError(fmt::format("{}: cannot read the {} ({})", path, what, why));
}

}  // namespace

InputFd::InputFd(InputFd&& o) noexcept : fd_(o.fd_), size_(o.size_), regular_(o.regular_) {
  o.fd_ = -1;
}

InputFd& InputFd::operator=(InputFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    regular_ = o.regular_;
    o.fd_ = -1;
  }
  return *this;
}

InputFd::~InputFd() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFd::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string path_error_reason(int err) {
  switch (err) {
    case ENOENT: return "no such file or directory";
    case ENOTDIR: return "a component of the path is not a directory";
    case EACCES:
    case EPERM: return "permission denied";
    case ELOOP: return "too many levels of symbolic links: a symlink loop";
    case ENAMETOOLONG: return "file name too long: at most 255 bytes per name and 4095 per path";
    case EISDIR: return "is a directory";
    case ENXIO: return "no such device or address (a socket or a device without its driver)";
    case ENOSPC: return "no space left on the device";
    case EDQUOT: return "disk quota exceeded";
    case EROFS: return "read-only file system";
    case EMFILE:
    case ENFILE: return "too many open files";
    default: return std::strerror(err);
  }
}

bool is_descriptor_path(const std::string& path, int* fd) {
  auto number = [&](const std::string& digits, bool own) {
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return false;
    if (fd) *fd = own ? std::stoi(digits) : -1;
    return true;
  };
  if (path == "/dev/stdin") {
    if (fd) *fd = 0;
    return true;
  }
  if (path == "/dev/stdout" || path == "/dev/stderr") {
    if (fd) *fd = path == "/dev/stdout" ? 1 : 2;
    return true;
  }
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"})
    if (path.rfind(prefix, 0) == 0) return number(path.substr(std::strlen(prefix)), true);
  if (path.rfind("/proc/", 0) == 0) {
    const auto slash = path.find('/', 6);
    if (slash == std::string::npos) return false;
    const std::string pid = path.substr(6, slash - 6);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return false;
    if (path.compare(slash, 4, "/fd/") != 0) return false;
    const bool own = std::stol(pid) == static_cast<long>(::getpid());
    return number(path.substr(slash + 4), own);
  }
  return false;
}

InputFd open_input(const std::string& path, std::string_view what, Remember remember) {
  if (path.empty()) fail("\"\"", what, "an empty file name");
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever; it is cleared
  // again below for the pipes that are accepted.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) fail(path, what, path_error_reason(errno));
  InputFd in(fd, 0, false);
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, what, path_error_reason(errno));
  if (S_ISDIR(st.st_mode)) fail(path, what, "is a directory");
  const bool regular = S_ISREG(st.st_mode);
  if (!regular) {
    // A pipe or terminal handed over by the shell (`--chip <(...)`, `/dev/stdin`) is read like a
    // file; the same kinds under any other name are refused.
    const bool passed = is_descriptor_path(path) && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode));
    if (!passed || (S_ISCHR(st.st_mode) && !::isatty(fd)))
      fail(path, what, "is " + file_kind(st.st_mode));
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
      fail(path, what, path_error_reason(errno));
  }
  if (remember == Remember::Yes) {
    const std::lock_guard<std::mutex> lock(g_inputs_mutex);
    g_inputs.emplace(std::pair{st.st_dev, st.st_ino},
                     InputIdentity{st.st_dev, st.st_ino, path, std::string(what)});
  }
  return InputFd(in.release(), regular ? static_cast<std::uint64_t>(st.st_size) : 0, regular);
}

std::string read_input_file(const std::string& path, std::string_view what, std::uint64_t max_bytes,
                            Remember remember) {
  InputFd in = open_input(path, what, remember);
  auto too_large = [&] {
    throw InputError(
        fmt::format("{}: larger than the {} a {} may have", path, readable_size(max_bytes), what));
  };
  if (in.regular() && in.size() > max_bytes) too_large();
  std::string text;
  if (in.regular()) text.reserve(static_cast<std::size_t>(in.size()));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(in.fd(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, what, fmt::format("read error: {}", path_error_reason(errno)));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) too_large();
  }
  return text;
}

std::vector<InputIdentity> inputs_read() {
  const std::lock_guard<std::mutex> lock(g_inputs_mutex);
  std::vector<InputIdentity> v;
  v.reserve(g_inputs.size());
  for (const auto& [id, input] : g_inputs) v.push_back(input);
  return v;
}

}  // namespace tpu
