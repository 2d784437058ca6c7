// What the sequencer hands to the units: in-order queues of issued instructions, and the
// backdoor view of the core's storage the units work on (DESIGN: big data moves directly).
#pragma once

#include <cstdint>
#include <memory>
#include <systemc>

#include "hw/core/scoreboard.h"

namespace tpu {

using UnitQueue = sc_core::sc_fifo<std::shared_ptr<InFlight>>;

// A full unit queue back-pressures the sequencer. 16 entries cover the longest runs of small
// instructions a unit receives back to back while keeping the scoreboard scan short (a
// modelling assumption, not a published figure).
inline constexpr int kUnitQueueDepth = 16;

struct CoreStorage {
  std::uint8_t* ub = nullptr;
  std::uint64_t ub_bytes = 0;
  std::uint32_t* acc = nullptr;
  std::uint32_t acc_entries = 0;
  std::uint32_t acc_words_per_entry = 0;
};

}  // namespace tpu
