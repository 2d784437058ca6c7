// Partitioning over cores (docs/compiler.md, "Passes"): the run's images split evenly over the
// TensorCores, each batch's share per core, and each MXU two slots of the accumulators (one
// fills while the vector unit drains the other).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "hw/config/chip_config.h"

namespace tpu::compiler {

struct Options {
  std::uint64_t images = 0;
  std::uint32_t batch = 256;  // images per step across the chip
};

struct Partition {
  // Per core, its images of the run: [first, last).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> images;
  std::uint64_t per_core = 0;  // a batch's images per core (the largest micro-batch)
  std::uint32_t acc_slot = 0;  // accumulator entries per slot; MXU m has slots 2m and 2m + 1
};

// Throws InputError for no images, a zero batch, or accumulators too small for two slots per
// MXU.
Partition partition(const ChipConfig& cfg, const Options& opt);

}  // namespace tpu::compiler
