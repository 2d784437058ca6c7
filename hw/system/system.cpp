#include "hw/system/system.h"

#include <fmt/format.h>

namespace tpu {

System::System(sc_core::sc_module_name name, SystemConfig cfg, Scale scale, SimOptions options,
               std::vector<MirroredRing> rings)
    : sc_core::sc_module(name),
      cfg_(std::move(cfg)),
      clock_(cfg_.chip.clock_hz()),
      fabric_("fabric", clock_, cfg_.ici.dims, cfg_.ici.wraparound,
              cfg_.chips() > 1 ? cfg_.link_bytes_per_s() : 1.0, cfg_.ici.latency_ns),
      router_("router", fabric_, cfg_.chip.off_chip_memory.bytes, scale == Scale::kRepresentative,
              std::move(rings)) {
  const std::uint32_t built = scale == Scale::kRepresentative ? 1 : cfg_.chips();
  for (std::uint32_t c = 0; c < built; ++c) {
    chips_.push_back(
        std::make_unique<Chip>(fmt::format("chip{}", c).c_str(), cfg_.chip, c, options));
    Chip& chip = *chips_.back();
    chip.chip2ici().bind(router_.in);
    router_.out.bind(chip.ici2chip());
  }
}

}  // namespace tpu
