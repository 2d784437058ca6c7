// The all-reduce executed by the chips of a system (docs/systems.md, "All-reduce"): every
// TensorCore of every chip contributes a vector of fp32 values; afterwards every chip holds their
// sum, each element added in the order the reference follows (sw/nn/all_reduce.h). Lowered here
// once, for training's gradient exchange (training.cpp) and for the collective's own tests.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hw/config/system_config.h"
#include "hw/isa/isa.h"

namespace tpu::compiler {

// Where an all-reduce's data lives; the same addresses on every chip.
struct AllReduceLayout {
  std::vector<std::uint32_t> dims;  // the chips' torus (row-major, the first the slowest)
  // A group of the system's chips (distributed BatchNormalization, docs/training.md): the
  // system's torus, of which `dims` is a box whose extents divide it; the boxes tile it, and each
  // all-reduces on its own (a box's ring along an axis it does not span closes over the links
  // between its ends). Empty: `dims` is the whole system.
  std::vector<std::uint32_t> torus;
  // The first of the chip's semaphores the all-reduce uses (all_reduce_semaphores of them).
  std::uint32_t first_semaphore = 0;
  std::uint32_t cores = 1;     // TensorCores per chip
  std::uint64_t elements = 0;  // fp32 values of the vector every core contributes
  // Off-chip memory: per core of the chip, its vector (read only); the all-reduce area, where
  // the chip's sums go and the total ends; per dimension, the landing area of its
  // reduce-scatter's partial sums (0 for an extent of 1). Each holds `elements` fp32 values.
  std::vector<std::uint64_t> slots;
  std::uint64_t area = 0;
  std::vector<std::uint64_t> landing;
  // Unified buffer: four staging buffers of `stage_elements` fp32 values each, the pieces the
  // rings stream.
  std::array<std::uint64_t, 4> stage{};
  std::uint64_t stage_elements = 0;
  // Queued (a bucket of the gradient, all-reduced while the backward pass goes on): the waits
  // and barriers are the region forms of ici_wait and sync and the memory traffic runs on the
  // ICI engine (docs/isa.md), which takes them in its order while the sequencer issues on; it
  // starts with a barrier per slot (every core's slot written), so the caller needs no sync
  // all_cores before it.
  bool queued = false;
};

// The box of `chips` consecutive chips (row-major ids) in `torus`: its extents, filled from the
// last (fastest) dimension, each dividing the torus's, so that the boxes tile the torus; empty
// when `chips` does not cut the torus that way (4 chips of a 2 x 4 torus: {1, 4}; of 4 x 2:
// {2, 2}; 3 chips of 2 x 4: none).
std::vector<std::uint32_t> group_box(const std::vector<std::uint32_t>& torus, std::uint32_t chips);

// Semaphores per chip the all-reduce uses: per core, per dimension of more than one chip, four
// (reduce-scatter and all-gather, each direction).
std::uint64_t all_reduce_semaphores(const AllReduceLayout& l);

// Core `core` of chip `chip` (the system's id)'s share of the all-reduce: the chip's sum of its
// cores' vectors (each pair of cores a part of it), then the reduce-scatters and all-gathers over
// the chips, with a barrier across the chip's cores after each stage. Afterwards the total is in
// the chip's area once every core of the chip has reached its next `sync all_cores` (the caller's).
// The layout must need no more than isa::kIciSemaphores semaphores.
void emit_all_reduce(const AllReduceLayout& l, std::uint32_t chip, std::uint32_t core,
                     std::vector<isa::Instruction>& out);

// What the all-reduce costs on `sys` (docs/systems.md, "What an all-reduce costs"), in cycles of
// the chip clock, from the config alone: each phase's pipeline of pieces under the timing
// model's formulas (reads and writes at the unified-buffer port or the off-chip memory's share,
// additions on the vector unit, link transfers at the link's share, hop latency), every chip and
// ring member alike. A phase's cycles run to the barrier that ends it.
struct AllReduceCost {
  double chip_sum = 0;                 // the chip's sum of its cores' vectors
  std::vector<double> reduce_scatter;  // per dimension of more than one chip, in order
  std::vector<double> all_gather;      // per dimension of more than one chip, in order
  [[nodiscard]] double total() const;
};
AllReduceCost all_reduce_cost(const SystemConfig& sys, const AllReduceLayout& l);

}  // namespace tpu::compiler
