// The contract between a TensorCore's sequencer and the units that execute its instructions (the
// DMA, each MXU's weight path and array, the vector unit): what the sequencer hands a unit (an
// issued instruction, through an in-order queue), what the unit owes it back (wait for the
// instruction's dependencies, say when it started, complete it at a cycle), and the backdoor view
// of the core's storage the units work on (DESIGN: big data moves directly). A unit includes this
// header and never the sequencer; a new unit (a transpose unit, an inter-chip DMA) is a new
// queue and nothing else in hw/core.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <systemc>
#include <vector>

#include "hw/common/clock.h"
#include "hw/isa/isa.h"
#include "hw/isa/semantics.h"
#include "hw/unit/trace.h"

namespace tpu {

// One issued instruction: what it touches, which unit runs it, and when it is done.
struct InFlight {
  std::uint64_t index = 0;  // position in the core's instruction stream
  isa::Instruction inst;
  std::uint32_t layer = 0;
  int unit = -1;  // unit queue id: instructions of one unit complete in issue order
  // Its footprint (isa::footprint) in the spaces the core orders: unified buffer, accumulators,
  // off-chip memory.
  std::vector<isa::Access> reads, writes;
  std::vector<std::shared_ptr<InFlight>> deps;  // earlier instructions it must wait for
  isa::SetWindow window;  // the window registers at issue, for windowed MatMuls

  Cycle issued_at = 0;
  // When its unit began the work itself (after hazards, FIFO space, weights); units set it.
  Cycle started_at = std::numeric_limits<Cycle>::max();
  // When its unit could take the next one, if earlier than done_at (an MXU's feed ends; the
  // results drain through the array after it). Traces show the unit busy until then.
  Cycle busy_until = std::numeric_limits<Cycle>::max();
  Cycle done_at = std::numeric_limits<Cycle>::max();
  sc_core::sc_event done;
  // Where the core's retirement ledger records done_at, and when the unit started it (see
  // Sequencer::finish).
  std::vector<Cycle>* ledger = nullptr;
  std::vector<Cycle>* ledger_started = nullptr;
  // Its entry in both (the ledger is emptied at every halt and by Sequencer::finish).
  std::size_t ledger_slot = 0;
  // When tracing: where the slice goes, and the core it ran on.
  Trace* trace = nullptr;
  std::uint32_t core = 0;

  [[nodiscard]] bool is_done(const Clock& clock) const { return clock.now() >= done_at; }
  // Completes at absolute cycle `c` (>= now): dependants wake then.
  void complete_at(const Clock& clock, Cycle c);
  // Waits until every dependency is done.
  void wait_deps(const Clock& clock) const;
};

using UnitQueue = sc_core::sc_fifo<std::shared_ptr<InFlight>>;

// What a unit that takes the region forms of ici_wait and sync (the ICI engine) waits on: the
// chip's ICI semaphores and a barrier of the chip's cores' engines (separate from the
// sequencers' sync all_cores). Both are called from the unit's SC_THREAD and return when done.
class EngineSync {
 public:
  virtual ~EngineSync() = default;
  // Waits until semaphore `sem` holds `count` arrivals no earlier take took, and takes them.
  virtual void take(std::uint32_t sem, std::uint32_t count) = 0;
  // Returns once every core's engine has arrived.
  virtual void engine_barrier() = 0;
};

// A full unit queue back-pressures the sequencer. 16 entries cover the longest runs of small
// instructions a unit receives back to back while keeping the scoreboard scan short (a
// modelling assumption, not a published figure).
inline constexpr int kUnitQueueDepth = 16;
// The ICI engine's queue is deeper: it takes a whole gradient bucket's collective (its memory
// traffic, sends, waits and barriers: hundreds of instructions) while the sequencer issues the
// backward pass on, as a DMA engine's descriptor ring in memory would (a modelling assumption;
// docs/systems.md, "Overlap"). With 16 entries the sequencer waited for the links.
inline constexpr int kIciQueueDepth = 4096;

struct CoreStorage {
  std::uint8_t* ub = nullptr;
  std::uint64_t ub_bytes = 0;
  std::uint32_t* acc = nullptr;
  std::uint32_t acc_entries = 0;
  std::uint32_t acc_words_per_entry = 0;
};

}  // namespace tpu
