// `tpusim info`: the resolved configuration and the figures that follow from it.
#pragma once

#include <string>

#include "hw/config/chip_config.h"

namespace tpu::cli {

// The human summary `tpusim info` prints.
std::string describe(const ChipConfig& cfg);

}  // namespace tpu::cli
