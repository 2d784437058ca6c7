// Co-simulation of the two MXU models: the TLM Mxu (hw/mxu/mxu.*) and RtlMxu, the Verilated RTL
// array behind its adapter (hw/mxu/rtl_mxu.*), side by side in one elaboration, each with its own
// unified buffer and accumulators, handed the same instructions at the same cycles as a
// sequencer would. They must agree bit for bit on the accumulators and cycle for cycle on every
// MatMul (feed start, feed end, completion), on the cycle buckets and on the counters.
// One run per process: the SystemC kernel cannot be re-elaborated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/common/counters.h"
#include "hw/config/chip_config.h"
#include "hw/isa/isa.h"

namespace tpu::cosim {

// One instruction (ReadWeights or MatMul) and the cycle at which it is handed to the MXU's queue
// (later if the queue is full). `window` is the SetWindow state a windowed MatMul reads.
struct Step {
  isa::Instruction inst;
  Cycle at = 0;
  isa::SetWindow window;
};

struct Stimulus {
  std::string name;
  std::vector<std::uint8_t> ub;  // the unified buffer's first bytes at cycle 0 (rest zero)
  std::vector<Step> steps;
};

// What one model did with a stimulus.
struct Outcome {
  struct MatMulTiming {
    Cycle feed_start = 0;  // the array could take the first row
    Cycle feed_end = 0;    // the cycle after the last row entered
    Cycle done = 0;        // the last result row is in the accumulators
  };
  std::vector<MatMulTiming> matmuls;  // in stimulus order
  std::vector<std::uint32_t> acc;     // every accumulator word at the end
  MxuBuckets buckets;                 // up to the end of the later of the two runs
  Counters counters;                  // all layers
};

struct Result {
  Outcome tlm;
  Outcome rtl;
  Cycle end = 0;  // the later of the two last completions
};

// Runs `s` on both models of `cfg` (whose mxu.impl is ignored). With `vcd`, the RTL array's
// waveform goes there.
Result run(const ChipConfig& cfg, const Stimulus& s, const std::string& vcd = "");

// "" when the two outcomes agree; otherwise the first difference, naming the MatMul, the element
// or the bucket, and the cycle.
std::string first_difference(const ChipConfig& cfg, const Stimulus& s, const Result& r);

// Stimuli. Sizes come from cfg (mxu.rows, mxu.cols, accumulators, unified buffer).
// Random tiles and dense MatMuls: tile sizes up to the array, B from 1 to several times the
// array, swaps, accumulation and idle gaps, seeded.
Stimulus random_mix(const ChipConfig& cfg, std::uint64_t seed);
// Full tiles back to back, one swapping MatMul of `b` rows each: the next tile shifts in behind
// each multiply (hidden when b >= mxu.rows, partly exposed below).
Stimulus back_to_back(const ChipConfig& cfg, std::uint32_t b, std::uint32_t tiles);
// The Fashion-MNIST CNN's first layer on real test images: its trained int8 3x3 kernels cut into
// array tiles, windowed MatMuls over the quantized images (valid padding), K chunks accumulated.
Stimulus fashion_mnist_conv(const ChipConfig& cfg, std::uint32_t images);
// The CNN's dense layer: its trained int8 weights cut into array tiles (every K chunk of the
// 10816 inputs, up to `tiles` tiles), times `b` seeded int8 activation rows.
Stimulus fashion_mnist_dense(const ChipConfig& cfg, std::uint32_t b, std::uint32_t tiles);

// The chip JSONs the co-simulation runs (tb/rtl/configs/*.json and configs/chips/tiny-rtl.json).
std::vector<std::string> config_files();

}  // namespace tpu::cosim
