// System: the chips of a board, slice or pod joined by the ICI fabric (docs/systems.md). Every
// chip is a whole Chip (its cores, memory, host link and host interface); their ici_writes leave
// through chip2ici into the router, cross the fabric and arrive through the destination's
// ici2chip. A chip's host side (host2chip, chip2host) is the driver's to bind.
//
// Scale kRepresentative (fit's scale-out mode, docs/systems.md, "Scale-out"): chip 0 alone, on
// the whole system's fabric, its ICI writes mirrored back to it (hw/system/ici_router.h) as its
// identical peers' writes to it.
#pragma once

#include <cstdint>
#include <memory>
#include <systemc>
#include <vector>

#include "hw/chip/chip.h"
#include "hw/common/clock.h"
#include "hw/common/sim_options.h"
#include "hw/config/system_config.h"
#include "hw/system/ici_fabric.h"
#include "hw/system/ici_router.h"

namespace tpu {

class System : public sc_core::sc_module {
  // Declared first: the fabric and the router are built from them.
  SystemConfig cfg_;
  Clock clock_;  // the fabric's: every chip runs at the chip config's clock

 public:
  enum class Scale { kEveryChip, kRepresentative };
  // `options` reach every chip; `rings`: kRepresentative's rings of one message a step
  // (IciRouter's MirroredRing).
  System(sc_core::sc_module_name name, SystemConfig cfg, Scale scale = Scale::kEveryChip,
         SimOptions options = {}, std::vector<MirroredRing> rings = {});

  [[nodiscard]] const SystemConfig& config() const { return cfg_; }
  [[nodiscard]] std::size_t size() const { return chips_.size(); }
  [[nodiscard]] Chip& chip(std::size_t i) { return *chips_.at(i); }
  [[nodiscard]] const Chip& chip(std::size_t i) const { return *chips_.at(i); }
  [[nodiscard]] IciFabric& fabric() { return fabric_; }
  [[nodiscard]] const Clock& clock() const { return clock_; }

 private:
  std::vector<std::unique_ptr<Chip>> chips_;
  IciFabric fabric_;
  IciRouter router_;
};

}  // namespace tpu
