// Chrome trace-event JSON (the format Perfetto and chrome://tracing open) from a chip's Trace:
// one process per TensorCore, one thread (track) per unit — sequencer stalls, host link, off-chip
// DMA, each MXU's weight path and array, the vector unit — and one complete ("X") event per
// instruction, named by instruction and layer. Timestamps are microseconds of simulated time.
#pragma once

#include <string>
#include <vector>

#include "hw/config/chip_config.h"
#include "hw/unit/trace.h"

namespace tpu::report {

// The JSON text; `layers[id]` names Tag id `id`.
std::string chrome_trace_json(const Trace& trace, const ChipConfig& cfg,
                              const std::vector<std::string>& layers);

}  // namespace tpu::report
