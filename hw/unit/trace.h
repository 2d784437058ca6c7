// Execution trace: one slice per instruction on the track of the unit that ran it, plus the
// sequencer's stalls, recorded in cycles while the chip runs (sw/report/trace_writer turns it into
// Chrome trace-event JSON for Perfetto). Off unless a Trace is attached: the units only record
// when an InFlight carries a Trace pointer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hw/common/types.h"
#include "hw/isa/isa.h"

namespace tpu {

// Tracks of one core: fixed ones first, then two per MXU (its weight path and its array).
enum class TrackKind : std::uint32_t { Sequencer = 0, HostLink = 1, Dma = 2, Vector = 3, Ici = 4 };
inline constexpr std::uint32_t kFirstMxuTrack = 5;
inline constexpr std::uint32_t mxu_weights_track(std::uint32_t mxu) {
  return kFirstMxuTrack + 2 * mxu;
}
inline constexpr std::uint32_t mxu_track(std::uint32_t mxu) { return kFirstMxuTrack + 2 * mxu + 1; }

std::uint32_t track_of(const isa::Instruction& inst);
std::string track_name(std::uint32_t track);

// Why the sequencer did not issue: the slice's name on the sequencer track.
enum class Stall : std::uint8_t { QueueFull, Sync, Halt };

struct TraceSlice {
  std::uint32_t core = 0;
  std::uint32_t track = 0;
  std::uint64_t index = 0;  // instruction index in the core's stream
  isa::Opcode opcode = isa::Opcode::Nop;
  std::uint32_t layer = 0;  // Tag id
  Cycle begin = 0, end = 0;
  // Sequencer stalls only: the cause, and for QueueFull the track of the unit whose queue was full.
  Stall stall = Stall::QueueFull;
  std::uint32_t blocked_track = 0;
  bool is_stall = false;
};

class Trace {
 public:
  void add(const TraceSlice& s) { slices_.push_back(s); }
  void add_stall(std::uint32_t core, std::uint64_t index, std::uint32_t layer, Stall why,
                 std::uint32_t blocked_track, Cycle begin, Cycle end);
  [[nodiscard]] const std::vector<TraceSlice>& slices() const { return slices_; }

 private:
  std::vector<TraceSlice> slices_;
};

}  // namespace tpu
