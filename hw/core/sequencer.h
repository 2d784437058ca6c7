// Sequencer: a TensorCore's front end. It takes 32-byte instruction words from the instruction
// queue the host fills (J17: the host sends instructions; the TPU does not fetch), decodes one
// per cycle, checks each against the core's storage, records its hazards in the scoreboard and
// issues it, in order, into the queue of the unit that runs it. Sync and Halt wait for every
// earlier instruction to finish.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <systemc>
#include <vector>

#include "hw/common/clock.h"
#include "hw/common/counters.h"
#include "hw/config/chip_config.h"
#include "hw/core/scoreboard.h"
#include "hw/isa/isa.h"
#include "hw/unit/issued.h"

namespace tpu {

struct InstructionWord {
  isa::Word bytes{};
  friend std::ostream& operator<<(std::ostream& os, const InstructionWord&) { return os; }
};

// What the chip's cores share to synchronise: the barrier of Sync with all_cores, and the ICI
// semaphores (isa::kIciSemaphores) that count the arrivals of other chips' ici_writes.
class ChipSync : public EngineSync {
 public:
  explicit ChipSync(std::uint32_t cores) : cores_(cores) {}
  // From an SC_THREAD: returns once every core has arrived.
  void arrive_and_wait();
  // One arrival on semaphore `sem` (sem < isa::kIciSemaphores).
  void signal(std::uint32_t sem);
  // From an SC_THREAD: waits until semaphore `sem` holds `count` arrivals no earlier take took,
  // and takes them.
  void take(std::uint32_t sem, std::uint32_t count) override;
  // The region syncs' barrier, on the cores' ICI engines.
  void engine_barrier() override;

 private:
  struct Barrier {
    std::uint32_t arrived = 0;
    std::uint64_t generation = 0;
    sc_core::sc_event released;
  };
  static void arrive(Barrier& b, std::uint32_t cores);
  std::uint32_t cores_;
  Barrier sequencers_, engines_;
  std::array<std::uint64_t, isa::kIciSemaphores> arrivals_{};
  sc_core::sc_event signalled_;
};

// The destinations the sequencer issues into.
struct UnitQueues {
  UnitQueue* dma = nullptr;
  UnitQueue* ici = nullptr;  // ici_write: the core's ICI DMA engine
  UnitQueue* vector = nullptr;
  std::vector<UnitQueue*> weights;  // per MXU
  std::vector<UnitQueue*> matmul;   // per MXU
};

class Sequencer : public sc_core::sc_module {
 public:
  sc_core::sc_fifo<InstructionWord> instructions;

  Sequencer(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
            const CoreStorage& storage, const UnitQueues& queues, ChipSync& sync,
            LayerCounters& counters, std::string core_name);

  [[nodiscard]] std::uint64_t issued() const { return index_; }
  [[nodiscard]] std::uint64_t halts() const { return halts_; }
  [[nodiscard]] Cycle halted_at() const { return halted_at_; }
  [[nodiscard]] std::uint32_t layer() const { return layer_; }
  // Charges every cycle of the run to a layer: the layer of the oldest unfinished instruction
  // (retirement order), the cycles after the last one to the last layer. Per core, the layers'
  // cycles add up to `end`. Also records each layer's span: from the first start to the last
  // completion of its instructions that units ran. A host that runs program after program (fit's
  // steps) may call it after each, with every instruction finished: each call charges the cycles
  // since the previous one, so per core they add up to `end` minus the previous call's `end`.
  // `end` must be at or after every halt.
  void finish(Cycle end);
  const sc_core::sc_event& halted_event() const { return halted_event_; }
  // Records every instruction's slice and the sequencer's stalls into `trace` (before the run).
  void set_trace(Trace* trace, std::uint32_t core) {
    trace_ = trace;
    core_id_ = core;
  }
  // Instructions the host may still write before the queue is full.
  [[nodiscard]] int free_slots() const { return instructions.num_free(); }

 private:
  void run();
  void issue(std::uint64_t index, const isa::Instruction& inst);
  // Charges the ledger's instructions (all done, none after `end`) to their layers and empties
  // it; retired_ carries the retirement front over.
  void retire_ledger(Cycle end);
  void check_acc(const InFlight& f, const char* field, std::uint64_t first,
                 std::uint64_t count) const;

  const ChipConfig& cfg_;
  const Clock& clock_;
  CoreStorage storage_;
  UnitQueues queues_;
  ChipSync& sync_;
  LayerCounters& counters_;
  std::string core_name_;
  Scoreboard scoreboard_;

  std::uint64_t index_ = 0;
  std::uint32_t layer_ = 0;
  // Per instruction, in issue order: its layer and when it finished.
  std::vector<std::uint32_t> ledger_layer_;
  std::vector<Cycle> ledger_done_;
  std::vector<Cycle> ledger_started_;  // instructions a unit runs: when it started them
  struct Wait {
    std::uint32_t layer;
    Cycle begin, end;
  };
  std::vector<Wait> waits_;  // the sequencer's waits at sync and ici_wait since the last retire
  // Counters::busy_cycles and exposed_cycles of the ledger's instructions and waits_.
  void count_busy();
  Cycle retired_ = 0;  // the latest completion of the retired instructions, or finish's end
  isa::SetWindow window_{};
  // Tile shapes (rows, cols) read into each MXU's FIFO and not yet swapped in, and the shape
  // resident after the last swap: a MatMul's K is the resident tile's row count.
  std::vector<std::deque<std::pair<std::uint32_t, std::uint32_t>>> pending_tiles_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> resident_tile_;
  std::uint64_t halts_ = 0;
  Cycle halted_at_ = 0;
  Trace* trace_ = nullptr;
  std::uint32_t core_id_ = 0;
  sc_core::sc_event halted_event_;
};

}  // namespace tpu
