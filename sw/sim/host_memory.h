// Host memory a run needs, estimated before anything is allocated, so that a model or chip too
// large for the host is refused with the sizes instead of being found by the OOM killer
// (docs/robustness.md "Resource bounds").
#pragma once

#include <cstdint>
#include <string>

#include "hw/config/chip_config.h"
#include "sw/ir/graph.h"

namespace tpu::sim {

// Bytes, by what holds them. An upper estimate of the dominant terms (the formulas are in
// docs/robustness.md), not an exact account: it must refuse runs the host cannot hold and
// accept every run it can.
struct HostMemory {
  double weights = 0;      // the model's parameters in their host copies
  double inputs = 0;       // images as loaded, encoded for the chip, and calibration images
  double activations = 0;  // the references' whole-batch layer outputs
  double outputs = 0;      // the chip's and the references' outputs
  double chip = 0;         // the chip model: on-chip SRAM and in-flight weight tiles
  [[nodiscard]] double total() const { return weights + inputs + activations + outputs + chip; }
};

// `chips`: a system's, each running its share of the images.
HostMemory host_memory_needed(const ChipConfig& cfg, const ir::Graph& m, std::uint64_t images,
                              std::uint32_t chips = 1);

// The limit: the tightest of three quarters of the host's physical memory,
// TPUSIM_HOST_MEMORY_LIMIT (bytes, or with a K/M/G/T suffix for powers of 1024, e.g. "8G"), and
// what the process limits RLIMIT_AS (ulimit -v) and RLIMIT_DATA (ulimit -d) leave. Throws
// InputError naming the variable when its value is not a size.
struct HostLimit {
  std::uint64_t bytes = 0;
  std::string source;  // which of the above it is, for the message
};
HostLimit host_memory_limit();

// The one line for an allocation the host refused after the estimate passed: the limits in
// force.
std::string out_of_memory_message();

// Throws InputError naming the model and chip files, the size the run needs by part and the
// limit, when the estimate exceeds the limit.
void check_host_memory(const ChipConfig& cfg, const ir::Graph& m, std::uint64_t images,
                       std::uint32_t chips = 1);

}  // namespace tpu::sim
