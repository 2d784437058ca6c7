// Activity counters: what each module did, by layer (the id of the last Tag instruction). The
// energy model multiplies these by per-action energies; the report divides them by time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>

namespace tpu {

// Every cycle of every MXU lands in exactly one bucket (DESIGN "Stall accounting").
struct MxuBuckets {
  std::uint64_t active = 0;        // feeding input rows through the array
  std::uint64_t weight_stall = 0;  // next tile not yet in the weight FIFO (off-chip fetch)
  std::uint64_t weight_shift = 0;  // next tile still shifting into the array
  std::uint64_t data_hazard = 0;   // waiting for an earlier instruction's result (RAW/WAR/WAW)
  std::uint64_t input_stall = 0;   // unified-buffer port slower than one input row per cycle
  std::uint64_t idle = 0;          // no matrix work queued

  [[nodiscard]] std::uint64_t total() const {
    return active + weight_stall + weight_shift + data_hazard + input_stall + idle;
  }
  MxuBuckets& operator+=(const MxuBuckets& o) {
    active += o.active;
    weight_stall += o.weight_stall;
    weight_shift += o.weight_shift;
    data_hazard += o.data_hazard;
    input_stall += o.input_stall;
    idle += o.idle;
    return *this;
  }
};

inline constexpr std::uint64_t kNoCycle = std::numeric_limits<std::uint64_t>::max();

struct Counters {
  // Cycles the core's sequencer spent on this layer (from its Tag to the next, the last one
  // extended to the chip's end): per core, these add up to the run's cycles.
  std::uint64_t cycles = 0;
  // The layer's span, over every core: from the first start to the last completion of its
  // instructions that units ran (layers overlap, so spans do not add up; rates use them).
  std::uint64_t span_begin = kNoCycle;
  std::uint64_t span_end = 0;
  [[nodiscard]] std::uint64_t span() const {
    return span_end > span_begin ? span_end - span_begin : 0;
  }
  std::uint64_t instructions = 0;
  std::uint64_t macs = 0;                   // useful multiply-accumulates (K x N x B per MatMul)
  std::uint64_t weight_tiles = 0;           // tiles loaded into weight FIFOs
  std::uint64_t weight_bytes = 0;           // bytes of those tiles
  std::uint64_t weight_bytes_off_chip = 0;  // of which fetched from off-chip memory
  std::uint64_t mxu_input_bytes = 0;        // unified-buffer bytes streamed into the MXUs
  std::uint64_t ub_bytes_read = 0;
  std::uint64_t ub_bytes_written = 0;
  std::uint64_t acc_bytes_read = 0;
  std::uint64_t acc_bytes_written = 0;
  std::uint64_t vector_ops = 0;
  std::uint64_t off_chip_bytes_read = 0;
  std::uint64_t off_chip_bytes_written = 0;
  std::uint64_t host_bytes_in = 0;   // host -> chip over the host link
  std::uint64_t host_bytes_out = 0;  // chip -> host
  std::uint64_t ici_bytes_out = 0;   // sent to chips over the ICI links (ici_write)
  // Per core, added over the cores: cycles in which a unit of the core ran an instruction of
  // this layer or its sequencer waited at a sync or ici_wait of it (busy), and of those the
  // cycles in which no instruction of another layer ran on the core (exposed: what the layer's
  // work did not overlap).
  std::uint64_t busy_cycles = 0;
  std::uint64_t exposed_cycles = 0;
  MxuBuckets mxu;

  Counters& operator+=(const Counters& o) {
    cycles += o.cycles;
    span_begin = std::min(span_begin, o.span_begin);
    span_end = std::max(span_end, o.span_end);
    instructions += o.instructions;
    macs += o.macs;
    weight_tiles += o.weight_tiles;
    weight_bytes += o.weight_bytes;
    weight_bytes_off_chip += o.weight_bytes_off_chip;
    mxu_input_bytes += o.mxu_input_bytes;
    ub_bytes_read += o.ub_bytes_read;
    ub_bytes_written += o.ub_bytes_written;
    acc_bytes_read += o.acc_bytes_read;
    acc_bytes_written += o.acc_bytes_written;
    vector_ops += o.vector_ops;
    off_chip_bytes_read += o.off_chip_bytes_read;
    off_chip_bytes_written += o.off_chip_bytes_written;
    host_bytes_in += o.host_bytes_in;
    host_bytes_out += o.host_bytes_out;
    ici_bytes_out += o.ici_bytes_out;
    busy_cycles += o.busy_cycles;
    exposed_cycles += o.exposed_cycles;
    mxu += o.mxu;
    return *this;
  }
};

// Counters split by layer id (Tag). Layer 0 is work before the first Tag.
class LayerCounters {
 public:
  Counters& at(std::uint32_t layer) { return by_layer_[layer]; }
  [[nodiscard]] const std::map<std::uint32_t, Counters>& by_layer() const { return by_layer_; }
  [[nodiscard]] Counters total() const {
    Counters t;
    for (const auto& [id, c] : by_layer_) t += c;
    return t;
  }
  LayerCounters& operator+=(const LayerCounters& o) {
    for (const auto& [id, c] : o.by_layer_) by_layer_[id] += c;
    return *this;
  }

 private:
  std::map<std::uint32_t, Counters> by_layer_;
};

}  // namespace tpu
