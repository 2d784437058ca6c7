#include "sw/sim/host_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "sw/ir/ops.h"
#include "sw/nn/quantized.h"

namespace tpu::sim {
namespace {

constexpr const char* kLimitVariable = "TPUSIM_HOST_MEMORY_LIMIT";

// Host copies of each parameter: fp32 as loaded, the float reference's packed copy, the
// quantized copy with its fp32 staging, and the compiler's memory image.
constexpr double kBytesPerWeight = 16;
// Per input element: fp32 pixels, the chip's encoding, the reference's copy and the compiler's
// memory image (each encoding at most 2 bytes: int8 or bf16).
constexpr double kBytesPerInput = 4 + 2 + 2 + 2;
// Per element of the largest layer output: the quantized reference holds whole-batch tensors, at
// least its input and its output, at most 4 bytes each.
constexpr double kBytesPerActivation = 2 * 4;
// Per output element: the chip's, the quantized and the float reference's, in fp32.
constexpr double kBytesPerOutput = 3 * 4;

// "1.5 GiB": the largest binary unit that leaves at least 1.
std::string readable(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t u = 0;
  while (bytes >= 1024 && u + 1 < std::size(units)) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} bytes", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::uint64_t physical_limit() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(pages) / 4 * 3 * static_cast<std::uint64_t>(page);
}

// A field of /proc/self/status in bytes ("VmSize:   123456 kB"), 0 if unreadable.
std::uint64_t status_bytes(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (!f) return 0;
  char line[256];
  std::uint64_t kib = 0;
  const std::size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  std::fclose(f);
  return kib * 1024;
}

// What a process limit leaves for the run: the limit less what the process already uses of it
// and a margin for what the estimate does not count (the reference's thread stack, the
// allocator's arenas, SystemC's coroutine stacks).
constexpr std::uint64_t kLimitMargin = 64 * kMiB;
std::uint64_t left_under(int resource, const char* used_field) {
  struct rlimit rl {};
  if (::getrlimit(resource, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
    return std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t used = status_bytes(used_field) + kLimitMargin;
  const auto cur = static_cast<std::uint64_t>(rl.rlim_cur);
  return cur > used ? cur - used : 0;
}

std::string limits_in_force() {
  std::string s =
      fmt::format("physical memory {}", readable(static_cast<double>(physical_limit()) / 3 * 4));
  for (const auto& [resource, name] : {std::pair{RLIMIT_AS, "address space (ulimit -v)"},
                                       std::pair{RLIMIT_DATA, "data (ulimit -d)"}}) {
    struct rlimit rl {};
    if (::getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      s += fmt::format(", {} limit {}", name, readable(static_cast<double>(rl.rlim_cur)));
  }
  if (const char* v = std::getenv(kLimitVariable); v && *v)
    s += fmt::format(", {}={}", kLimitVariable, v);
  return s;
}

}  // namespace

HostMemory host_memory_needed(const ChipConfig& cfg, const ir::Graph& m, std::uint64_t images,
                              std::uint32_t chips) {
  const double n = static_cast<double>(images);
  HostMemory h;
  double all_params = 0;
  double largest = static_cast<double>(m.input.size());
  for (const ir::Op& l : m.ops) {
    largest = std::max(largest, static_cast<double>(l.out.size()));
    double params = 0;
    for (const ir::ParamSpec& spec : ir::op_info(l.kind).params(l))
      params += static_cast<double>(spec.elements());
    h.weights += params * kBytesPerWeight;
    all_params += params;
  }
  const double input = static_cast<double>(m.input.size());
  h.inputs = (n * kBytesPerInput + static_cast<double>(nn::kCalibrationImages) * 4) * input;
  h.activations = n * largest * kBytesPerActivation;
  h.outputs = n * static_cast<double>(m.output().size()) * kBytesPerOutput;
  // Unified buffer and accumulators are mapped lazily, but a program may touch all of them; each
  // MXU holds its weight FIFO and its resident and shifting tiles.
  const double tiles = static_cast<double>(cfg.tensor_cores) * cfg.mxu.count *
                       (cfg.mxu.weight_fifo_tiles + cfg.mxu.weight_buffers) *
                       static_cast<double>(cfg.weight_tile_bytes());
  h.chip = static_cast<double>(cfg.on_chip_bytes()) + tiles;
  // A system: every chip's model, and every further chip's off-chip memory holding the weights
  // (at most fp32).
  h.chip = h.chip * chips + (chips - 1.0) * all_params * 4;
  return h;
}

std::uint64_t configured_limit() {
  const char* v = std::getenv(kLimitVariable);
  if (!v || !*v) return std::numeric_limits<std::uint64_t>::max();
  const std::string text = v;
  errno = 0;
  char* end = nullptr;
  const unsigned long long number = std::strtoull(text.c_str(), &end, 10);
  const std::string suffix = end;
  int shift = -1;
  if (suffix.empty())
    shift = 0;
  else if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  const bool digits = end != text.c_str() && text[0] >= '0' && text[0] <= '9';
  if (!digits || shift < 0 || errno == ERANGE || number == 0 ||
      number > (std::numeric_limits<std::uint64_t>::max() >> shift))
    throw InputError(fmt::format(
        "{}={}: not a size (a positive number of bytes, optionally with K, M, G or T for "
        "powers of 1024, e.g. 8G)",
        kLimitVariable, text));
  return static_cast<std::uint64_t>(number) << shift;
}

HostLimit host_memory_limit() {
  HostLimit l{physical_limit(), "three quarters of physical memory"};
  auto tighter = [&](std::uint64_t bytes, const char* why) {
    if (bytes < l.bytes) l = HostLimit{bytes, why};
  };
  tighter(configured_limit(), kLimitVariable);
  tighter(left_under(RLIMIT_AS, "VmSize"),
          "the address-space limit (ulimit -v) less what tpusim already maps");
  tighter(left_under(RLIMIT_DATA, "VmData"),
          "the data limit (ulimit -d) less what tpusim already uses");
  return l;
}

std::string out_of_memory_message() {
  return fmt::format(
      "the host refused memory ({}): run fewer images or a smaller model, or raise the limit "
      "(docs/robustness.md)",
      limits_in_force());
}

void check_host_memory(const ChipConfig& cfg, const ir::Graph& m, std::uint64_t images,
                       std::uint32_t chips) {
  const HostLimit limit = host_memory_limit();
  const HostMemory h = host_memory_needed(cfg, m, images, chips);
  if (h.total() <= static_cast<double>(limit.bytes)) return;
  throw InputError(fmt::format(
      "{}: {} image(s) on {}{} ({}) need about {} of host memory (weights {}, inputs {}, "
      "activations {}, outputs {}, chip {}), more than the limit of {} ({}; "
      "docs/robustness.md)",
      m.file, images, chips > 1 ? fmt::format("{} chips of ", chips) : "", cfg.name, cfg.file,
      readable(h.total()), readable(h.weights), readable(h.inputs), readable(h.activations),
      readable(h.outputs), readable(h.chip), readable(static_cast<double>(limit.bytes)),
      limit.source));
}

}  // namespace tpu::sim
