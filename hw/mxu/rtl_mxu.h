// RtlMxu: the Mxu with the Verilated RTL array (rtl/mxu/mxu_array.sv) in place of the C++
// systolic array, for mxu.impl = "rtl" (make_mxu). ReadWeights, the weight FIFO and the cycle
// buckets are Mxu's; the RTL shifts the weights in, multiplies, and decides every cycle of the
// stream. This adapter only drives its pins:
//   w    the tiles of the weight FIFO, one tile row per cycle, zero-padded to the array;
//   in   each MatMul's input rows, gathered from the unified buffer at the rate its port
//        delivers them (mxu.rows elements, zero-padded), in_swap on the first row of a swap;
//   out  column sums written (or added) into the accumulators.
// Nothing here computes a duration: a MatMul's feed starts when the array can take its first
// row, ends after the handshake of its last row, and completes after its last result row left
// the array (docs/rtl.md).
//
// Timing: the arrays of one clock are stepped one cycle at a time by one thread (RtlClock in
// rtl_mxu.cpp), in step with SystemC time and only while an array has work. A cycle is evaluated
// at the end of its time step, after every other process ran at that time, so inputs that
// appear at cycle t (a tile reaching the FIFO, a MatMul reaching the array) are in the pins of
// cycle t, exactly as the TLM Mxu sees them, and what the array does in cycle t (a FIFO slot
// freed, a feed ended, a result written) takes effect at t. An idle array is not clocked: it
// holds its state (mxu_array.sv), so skipping its idle cycles changes nothing.
//
// Timing only (SimOptions): the RTL still decides every cycle, on zero weights and inputs (its
// handshakes do not depend on values), and its column sums are not written.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hw/mxu/mxu.h"
#include "rtl/model/array_model.h"

namespace tpu {

class RtlClock;

class RtlMxu final : public Mxu {
 public:
  // `array` is a reset model of cfg.mxu.rows x cfg.mxu.cols (rtl::make_array_model).
  RtlMxu(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
         const CoreStorage& storage, LayerCounters& counters, std::string core_name,
         std::unique_ptr<rtl::ArrayModel> array, SimOptions options = {});
  ~RtlMxu() override;

  // The Verilated array, e.g. to write its waveform before the simulation starts.
  [[nodiscard]] rtl::ArrayModel& array() { return *rtl_; }

  // Called by RtlClock. Whether a clock edge could change anything without new inputs.
  [[nodiscard]] bool active() const;
  // One cycle of the array, evaluated at cycle `now` after every other process ran at `now`.
  void step(Cycle now);
  [[nodiscard]] const sc_core::sc_event& tiles_changed() const { return weights_changed_; }

 private:
  // A tile past the FIFO: its size, and when its first row entered the array.
  struct TileInfo {
    std::uint32_t rows = 0;
    std::uint32_t cols = 0;
    Cycle shift_start = 0;
  };
  // A MatMul in the array: its rows, how many entered and how many results left.
  struct Job {
    std::shared_ptr<InFlight> f;
    std::vector<std::uint8_t> x;  // rows x k input elements, as gathered (none: timing only)
    std::uint32_t rows = 0;
    std::uint32_t k = 0;
    std::uint32_t n = 0;
    bool swap = false;
    std::uint32_t dst = 0;
    bool accumulate = false;
    std::optional<Cycle> feed_start;  // first cycle the array could take the first row
    std::uint32_t fed = 0;
    std::uint32_t out = 0;
  };

  void compute();
  [[nodiscard]] bool row_delivered(const Job& j, Cycle now) const;
  void take_row(Cycle now);
  void take_beat(Cycle now);
  void take_result(Cycle now);

  std::unique_ptr<rtl::ArrayModel> rtl_;
  std::shared_ptr<RtlClock> rtl_clock_;
  Cycle next_cycle_ = 0;  // the first cycle the array has not been clocked for

  std::optional<WeightTile> shifting_;  // the tile whose rows are entering the array
  Cycle shift_start_ = 0;
  std::uint32_t beats_ = 0;  // of `shifting_`, entered so far
  std::optional<TileInfo> shadow_tile_;
  std::optional<TileInfo> resident_tile_;

  std::deque<Job> jobs_;    // in issue order: the back may still be feeding
  Job* feeding_ = nullptr;  // the job whose rows are entering
  Cycle feed_start_ = 0;    // of the last job whose rows all entered
  Cycle feed_end_ = 0;
  sc_core::sc_event feed_done_;
};

}  // namespace tpu
