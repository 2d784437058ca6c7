// The activity figures the run and fit reports share (docs/report.md): time, work, rates,
// utilization, energy and bytes of a stretch of simulated cycles, from the chip's counters.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "hw/common/counters.h"
#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"

namespace tpu::sim {

// The system as one chip for a report's rates and energy: every chip's TensorCores and MXUs (the
// peaks add up), every chip's idle power, the chip's per-action energies (docs/systems.md). A
// one-chip system is its chip, unchanged.
ChipConfig system_as_one_chip(const SystemConfig& sys);

// Every MXU cycle by bucket (DESIGN "Stall accounting").
nlohmann::ordered_json buckets_json(const MxuBuckets& b);
// Bytes moved per memory level.
nlohmann::ordered_json bytes_json(const Counters& c);
// What a stretch of `cycles` (a layer, or the whole run) did: the keys layers[] and totals
// share. `cycles` may be fractional (a layer's average over the cores); energy and power use it,
// so layers add up to the run. Rates (ops/s, utilization, images/s) use `span_cycles`, the time
// the work actually took: for a layer, from its first instruction's start to its last one's end
// (docs/report.md) — layers overlap, so a layer's retirement cycles can be shorter than its work.
// `macs` is the network's work in the stretch (the operation table's MACs): the array may do
// more — a DepthwiseConv2D multiplies a block-diagonal kernel, mostly zeros — and its energy
// counts what the array did (c.macs), while ops and utilization count what the network asks.
nlohmann::ordered_json activity_json(const ChipConfig& cfg, const Counters& c, double cycles,
                                     double span_cycles, std::uint64_t images,
                                     std::uint64_t network_macs);

// What the counters counted after a snapshot `before` of them: `total` less `before`, action
// count by action count (what the energy model and the byte figures use). Spans, cycles and MXU
// buckets are not split by a snapshot (an MXU charges an idle stretch when it ends): they are
// left zero, and the figures below do not read them.
Counters counts_since(const Counters& total, const Counters& before);

// The run report's `load` block (docs/report.md, "Load and steady state"): the one-time model load,
// cycles [0, `loaded_at`), and `load`, the counters at its end.
nlohmann::ordered_json load_json(const ChipConfig& cfg, const Counters& load,
                                 std::uint64_t loaded_at);

// The run report's `steady_state` block: `cycles` after the load, serving `batches` batches of
// `images` images in all, doing `network_macs` of the network's MACs; `c` is what was counted
// over them (counts_since the load). Rates use `cycles`: every batch ran inside them.
nlohmann::ordered_json steady_state_json(const ChipConfig& cfg, const Counters& c,
                                         std::uint64_t cycles, std::uint64_t batches,
                                         std::uint64_t images, std::uint64_t network_macs);

}  // namespace tpu::sim
