// The one place that picks the MXU model from mxu.impl: the TLM Mxu ("tlm") or RtlMxu around the
// Verilated array of the config's size ("rtl").
#pragma once

#include <memory>
#include <string>

#include "hw/mxu/mxu.h"

namespace tpu {

// Throws ConfigError, naming the config file and /mxu/impl, if mxu.impl is "rtl" and this build
// has no Verilated array of mxu.rows x mxu.cols (rtl/CMakeLists.txt says which it builds).
std::unique_ptr<Mxu> make_mxu(const std::string& name, const ChipConfig& cfg, const Clock& clock,
                              const CoreStorage& storage, LayerCounters& counters,
                              const std::string& core_name, SimOptions options = {});

}  // namespace tpu
