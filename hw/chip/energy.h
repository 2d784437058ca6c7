// Energy = Σ counts × per-action energy + idle power × time (DESIGN; derivation of every
// per-action figure in docs/energy-model.md).
#pragma once

#include <nlohmann/json.hpp>

#include "hw/common/counters.h"
#include "hw/config/chip_config.h"

namespace tpu {

struct EnergyBreakdown {
  double mxu_j = 0;
  double accumulators_j = 0;
  double unified_buffer_j = 0;
  double vector_unit_j = 0;
  double sequencer_j = 0;  // instruction fetch, decode, issue
  double off_chip_j = 0;
  double host_link_j = 0;
  double static_j = 0;  // idle_w x time

  [[nodiscard]] double total_j() const {
    return mxu_j + accumulators_j + unified_buffer_j + vector_unit_j + sequencer_j + off_chip_j +
           host_link_j + static_j;
  }
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

EnergyBreakdown energy_of(const EnergyConfig& e, const Counters& c, double seconds);

}  // namespace tpu
