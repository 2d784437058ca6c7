// The one way tpusim opens a file a user named for reading (chip configs and their includes,
// models, topologies, weights, Fashion-MNIST files, sweep specs, programs): every path error
// becomes one InputError naming the file and the reason, every read is bounded, and every file
// read is remembered so that no output of the same run can overwrite it (sw/io/output.h).
// docs/robustness.md, "Inputs".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpu {

// Size limits, each far above any real input of its kind and far below what would exhaust the
// host: a limit turns `/dev/zero` or a runaway generator into one message instead of an
// out-of-memory kill.
inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
// Chip configs and sweep specs are hand-written JSON: the shipped ones are under 8 KiB.
inline constexpr std::uint64_t kMaxConfigBytes = 16 * kMiB;
// Models: tpusim JSON, Keras to_json() and SCALE-Sim CSVs; Keras's ResNet-50 to_json() is
// about 100 KiB.
inline constexpr std::uint64_t kMaxModelBytes = 256 * kMiB;
// Assembly text and binary programs: 256 MiB is 8 Mi instructions of 32 bytes.
inline constexpr std::uint64_t kMaxProgramBytes = 256 * kMiB;
// Files tpusim wrote itself and reads back (a sweep's plan and point reports).
inline constexpr std::uint64_t kMaxReportBytes = 1024 * kMiB;

// An open input: a descriptor the caller reads and closes (InputFd closes it when destroyed).
class InputFd {
 public:
  InputFd() = default;
  InputFd(int fd, std::uint64_t size, bool regular) : fd_(fd), size_(size), regular_(regular) {}
  InputFd(InputFd&& o) noexcept;
  InputFd& operator=(InputFd&& o) noexcept;
  InputFd(const InputFd&) = delete;
  InputFd& operator=(const InputFd&) = delete;
  ~InputFd();

  [[nodiscard]] int fd() const { return fd_; }
  // The size of a regular file (0 for a pipe, whose size is not known in advance).
  [[nodiscard]] std::uint64_t size() const { return size_; }
  [[nodiscard]] bool regular() const { return regular_; }
  // Hands the descriptor over (to gzdopen, which closes it).
  int release();

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
  bool regular_ = false;
};

// Whether open_input remembers the file for the outputs' check: every file a user names is an
// input; a file tpusim wrote itself and reads back (a sweep's plan and point files) is not.
enum class Remember { Yes, No };

// Opens `path` for reading. `what` names the input in messages ("chip config"). Accepted: a
// regular file, and — so that `--chip <(jq ... v1.json)` works — a pipe or terminal the shell
// passed as one of this process's descriptors (/dev/stdin, /dev/fd/N, /proc/self/fd/N).
// Refused with the reason: a missing file, a directory, a named FIFO (opening one would wait
// for a writer forever), a device such as /dev/zero, a symlink loop, a name too long, no
// permission. Throws InputError "<path>: cannot read the <what> (<reason>)".
InputFd open_input(const std::string& path, std::string_view what,
                   Remember remember = Remember::Yes);

// Reads the whole input at `path` (as open_input accepts it), refusing more than `max_bytes`.
std::string read_input_file(const std::string& path, std::string_view what, std::uint64_t max_bytes,
                            Remember remember = Remember::Yes);

// The reason an operation on a path failed with `err` (an errno value), worded for a user:
// "no such file", "a symlink loop", "permission denied", ...
std::string path_error_reason(int err);

// "a directory", "a FIFO (named pipe), not a regular file: ...", "a character device, ...".
std::string file_kind(mode_t mode);

// "/dev/stdin", "/dev/fd/3", "/proc/self/fd/3", "/proc/123/fd/3": a descriptor of a process
// rather than a file of its own; `fd` receives N (0 for /dev/stdin) when it is this process's.
bool is_descriptor_path(const std::string& path, int* fd = nullptr);

// Every file this process opened through open_input (once each; device and inode identify it
// whatever path named it).
struct InputIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;
  std::string what;
};
std::vector<InputIdentity> inputs_read();

}  // namespace tpu
