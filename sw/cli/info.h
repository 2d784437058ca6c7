// `tpusim info`: the resolved configuration and the figures that follow from it.
#pragma once

#include <string>

#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"

namespace tpu::cli {

// The human summary `tpusim info --chip` prints.
std::string describe(const ChipConfig& cfg);
// The human summary `tpusim info --system` prints: the system's figures, then its chip's as
// describe(ChipConfig) prints them.
std::string describe(const SystemConfig& cfg);

}  // namespace tpu::cli
