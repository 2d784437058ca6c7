// Chrome trace-event JSON (the format Perfetto and chrome://tracing open) from a chip's Trace:
// one process per TensorCore, one thread (track) per unit — sequencer stalls, host link, off-chip
// DMA, each MXU's weight path and array, the vector unit — and one complete ("X") event per
// instruction, named by instruction and layer; for a fit, a process for the host's steps and one
// for the ICI links, a track per link; for both, the model's upload on a host track and counter
// tracks of bandwidth and MXU occupancy over time (a fit's over its traced steps). Timestamps are
// microseconds of simulated time.
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

// What a run and a fit add to the instructions' slices (docs/trace.md, "The model load and the
// counters"): the driver's upload of the memory image, which ends at `load_end` before any
// instruction reaches the chip, and per core (`[core][i]`) the bytes the i-th instruction of the
// core's program moved over the host link and to or from off-chip memory, from which the counter
// tracks draw bandwidth over time, sampled over `spans`.
struct CounterSpan {
  Cycle begin = 0, end = 0;  // cycles sampled: windows from `begin`, the last one reaching `end`
  // Per core: the index in its stream (TraceSlice::index) of the program's first instruction.
  // A core's sequencer counts on from program to program, so a fit's step begins further on.
  std::vector<std::uint64_t> first_index;
};
struct LoadAndCounters {
  Cycle load_end = 0;  // 0: no load slice
  std::uint64_t load_bytes = 0;
  std::vector<std::vector<std::uint64_t>> host_link_bytes, off_chip_bytes;  // empty: no counters
  // Each an execution of the program (a fit's traced step), sampled in windows of its own. None:
  // one from cycle 0 to the last slice's end, every core's program from index 0 (a run).
  std::vector<CounterSpan> spans;
};

// Each instruction's bytes over the host link and to or from off-chip memory, per core of
// `program_cores` (read_host/write_host; read_mem, write_mem, gather, and read_weights from
// off-chip memory at `weight_element_bytes` per element). A system's cores run copies of the
// chip's programs: core c runs program_cores[c % program_cores.size()].
LoadAndCounters load_and_counters(const std::vector<std::vector<isa::Instruction>>& program_cores,
                                  std::uint32_t cores, std::uint32_t weight_element_bytes,
                                  Cycle load_end, std::uint64_t load_bytes);

// The JSON text; `layers[id]` names Tag id `id`.
std::string chrome_trace_json(const Trace& trace, const ChipConfig& cfg,
                              const std::vector<std::string>& layers, const FitTracks& fit = {},
                              const LoadAndCounters& run = {});

}  // namespace tpu::report
