// Chrome trace-event JSON (the format Perfetto and chrome://tracing open) from a chip's Trace:
// one process per TensorCore, one thread (track) per unit — sequencer stalls, host link, off-chip
// DMA, each MXU's weight path and array, the vector unit — and one complete ("X") event per
// instruction, named by instruction and layer; for a fit, a process for the host's steps and one
// for the ICI links, a track per link. Timestamps are microseconds of simulated time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/common/types.h"
#include "hw/config/chip_config.h"
#include "hw/unit/trace.h"

namespace tpu::report {

// What a fit adds to its chips' tracks (docs/trace.md), in cycles of the chips' clock: the traced
// training steps as the host saw them (from streaming the step to the last core's halt), and on a
// system of more than one chip every directed ICI link with the intervals during which it
// streamed bytes (fractional: a transfer's last byte leaves within a cycle) and the transfers
// that moved them.
struct StepSpan {
  std::uint64_t step = 0;  // 1-based
  Cycle begin = 0, end = 0;
};
struct LinkTransfer {
  std::uint32_t from = 0, to = 0;  // chips
  double bytes = 0;                // moved over the link within the interval
};
struct LinkBusy {
  double begin = 0, end = 0;            // cycles
  double bytes = 0;                     // carried in [begin, end)
  std::vector<LinkTransfer> transfers;  // in the order they started moving bytes in it
};
struct LinkTrack {
  std::string name;  // IciFabric::link_name, e.g. "chip 3 +x"
  std::vector<LinkBusy> busy;
};
struct FitTracks {
  std::vector<StepSpan> steps;
  std::vector<LinkTrack> links;  // one per directed link, in link order
};

// The JSON text; `layers[id]` names Tag id `id`.
std::string chrome_trace_json(const Trace& trace, const ChipConfig& cfg,
                              const std::vector<std::string>& layers, const FitTracks& fit = {});

}  // namespace tpu::report
