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

}  // namespace tpu::sim
