#include "sw/compiler/partition.h"

#include <fmt/format.h>

#include <algorithm>

#include "hw/common/error.h"
#include "sw/compiler/memory.h"

namespace tpu::compiler {

Partition partition(const ChipConfig& cfg, const Options& opt) {
  if (opt.images == 0) throw InputError("compile: no images to run");
  if (opt.batch == 0) throw InputError("compile: --batch must be >= 1");
  Partition p;
  const std::uint32_t cores = cfg.tensor_cores;
  p.per_core = ceil_div(std::min<std::uint64_t>(opt.batch, opt.images), cores);
  for (std::uint32_t c = 0; c < cores; ++c)
    p.images.emplace_back(opt.images * c / cores, opt.images * (c + 1) / cores);
  p.acc_slot = cfg.accumulators.entries / (2 * cfg.mxu.count);
  if (p.acc_slot == 0)
    throw InputError(
        fmt::format("{}: {} accumulator entries cannot give each of {} MXUs two "
                    "slots",
                    cfg.name, cfg.accumulators.entries, cfg.mxu.count));
  return p;
}

}  // namespace tpu::compiler
