// Mxu: one matrix unit of a TensorCore (J17 §2). Three processes model its decoupled paths:
//   load_weights  ReadWeights: fetches a tile from off-chip memory (through mxu2mem_weights,
//                 sharing the memory's bandwidth) or from the unified buffer into the weight FIFO;
//   shift_weights with two weight buffers, shifts the FIFO head into the shadow buffer (mxu.rows
//                 cycles) while the resident tile computes;
//   compute       MatMul: swaps in the shadow tile if asked, streams B input rows (one per cycle,
//                 or slower if the UB port cannot keep up) and writes the accumulators.
// The math is SystolicArray's; timing formulas are in docs/timing-model.md.
//
// Timing only (SimOptions): tiles carry their shape and no bytes (off-chip fetches land in a
// scratch buffer the memory leaves untouched), and a MatMul checks its operands as SystolicArray
// would and multiplies nothing. The timing never depended on the values.
#pragma once

#include <tlm_utils/simple_initiator_socket.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <systemc>
#include <tlm>

#include "hw/common/clock.h"
#include "hw/common/counters.h"
#include "hw/common/sim_options.h"
#include "hw/config/chip_config.h"
#include "hw/mxu/systolic_array.h"
#include "hw/unit/issued.h"

namespace tpu {

class Mxu : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Mxu> mxu2mem_weights;
  UnitQueue weight_queue;  // ReadWeights
  UnitQueue matmul_queue;  // MatMul

  Mxu(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
      const CoreStorage& storage, LayerCounters& counters, std::string core_name,
      SimOptions options = {});

  // Pipeline fill and drain: the last input row's results reach the accumulators this many
  // cycles after it entered the array (docs/timing-model.md).
  [[nodiscard]] Cycles drain_cycles() const;
  // Cycles to stream `rows` input rows of K elements through one UB port.
  [[nodiscard]] Cycles feed_cycles(std::uint32_t rows, std::uint32_t k) const;
  [[nodiscard]] Cycles shift_cycles() const { return Cycles(cfg_.mxu.rows); }

  // Closes the cycle accounting at the end of the run: the MXU idles from its last feed to `end`.
  void finish(Cycle end);
  [[nodiscard]] const MxuBuckets& buckets() const { return buckets_; }
  // When the last MatMul's input rows finished entering the array.
  [[nodiscard]] Cycle last_feed_end() const { return last_feed_end_; }

 protected:
  // For another model of the array (RtlMxu): only load_weights runs here; the subclass takes
  // tiles from fifo_ (maintaining fifo_reserved_ and weights_changed_) and streams MatMuls.
  struct ArrayElsewhere {};
  Mxu(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
      const CoreStorage& storage, LayerCounters& counters, std::string core_name,
      SimOptions options, ArrayElsewhere);

  void add_bucket(std::uint64_t MxuBuckets::*bucket, std::uint32_t layer, std::uint64_t cycles);
  // The first two steps of every MatMul, whichever model computes it: the gap since the last
  // feed ended is `idle`, the wait for its operands (scoreboard) `data_hazard`.
  void wait_for_operands(InFlight& f);
  // Accounts a MatMul whose rows of k elements entered the array during [start, end): `active`
  // for its B rows, `input_stall` for the rest, the traffic counters, and last_feed_end_.
  void account_feed(InFlight& f, const isa::MatMul& mm, std::uint32_t k, std::uint32_t n,
                    Cycle start, Cycle end);
  // Where a MatMul's input rows come from.
  static InputSpec input_spec(const InFlight& f, const isa::MatMul& mm);
  // Stops with a ProgramError if the MatMul's rows leave the accumulators.
  void check_acc_range(const InFlight& f, const isa::MatMul& mm) const;

  const ChipConfig& cfg_;
  const Clock& clock_;
  CoreStorage storage_;
  LayerCounters& counters_;
  std::string core_name_;
  bool timing_only_;
  SystolicArray array_;

  std::deque<WeightTile> fifo_;
  std::size_t fifo_reserved_ = 0;  // tiles in the FIFO plus tiles being fetched into it
  sc_core::sc_event weights_changed_;

  Cycle last_feed_end_ = 0;
  std::uint32_t last_layer_ = 0;

 private:
  void load_weights();
  void shift_weights();
  void compute();
  void take_weights(const InFlight& f);
  // Stops with a ProgramError if the ReadWeights' tile does not fit the array after its transpose,
  // or its stride overlaps its rows.
  void check_weights(const InFlight& f, const isa::ReadWeights& rw) const;

  // Tiles being fetched, in issue order: fetches overlap (each FIFO slot has its own request in
  // flight), and a tile enters the FIFO only after every tile issued before it.
  struct Fetch {
    WeightTile tile;
    bool ready = false;
  };
  std::deque<std::shared_ptr<Fetch>> fetching_;
  // Timing only: where every off-chip fetch lands (the largest stored tile), never read.
  std::unique_ptr<std::uint8_t[]> fetch_scratch_;
  Cycle last_fetch_end_ = 0;
  void fetch_off_chip(std::shared_ptr<InFlight> f, std::shared_ptr<Fetch> fetch);
  void deliver_fetched();
  std::optional<WeightTile> shadow_;
  Cycle shadow_ready_ = 0;
  Cycle shadow_free_at_ = 0;  // the next tile may start shifting in from this cycle
  std::optional<WeightTile> resident_;

  Cycle accounted_until_ = 0;  // finish() has charged idle cycles up to here
  MxuBuckets buckets_;
};

}  // namespace tpu
