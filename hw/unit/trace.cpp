#include "hw/unit/trace.h"

#include <fmt/format.h>

#include "hw/isa/semantics.h"

namespace tpu {

std::uint32_t track_of(const isa::Instruction& inst) {
  const isa::Unit u = isa::unit_of(inst);
  switch (u.kind) {
    case isa::UnitKind::Dma:
      return static_cast<std::uint32_t>(u.host_link ? TrackKind::HostLink : TrackKind::Dma);
    case isa::UnitKind::MxuWeights: return mxu_weights_track(u.mxu);
    case isa::UnitKind::MxuArray: return mxu_track(u.mxu);
    case isa::UnitKind::Vector: return static_cast<std::uint32_t>(TrackKind::Vector);
    case isa::UnitKind::Ici: return static_cast<std::uint32_t>(TrackKind::Ici);
    case isa::UnitKind::Sequencer: break;
  }
  return static_cast<std::uint32_t>(TrackKind::Sequencer);
}

std::string track_name(std::uint32_t track) {
  switch (track) {
    case static_cast<std::uint32_t>(TrackKind::Sequencer): return "sequencer stalls";
    case static_cast<std::uint32_t>(TrackKind::HostLink): return "host link (DMA)";
    case static_cast<std::uint32_t>(TrackKind::Dma): return "off-chip memory (DMA)";
    case static_cast<std::uint32_t>(TrackKind::Vector): return "vector unit";
    case static_cast<std::uint32_t>(TrackKind::Ici): return "ICI links (DMA)";
    default: {
      const std::uint32_t m = (track - kFirstMxuTrack) / 2;
      return (track - kFirstMxuTrack) % 2 == 0 ? fmt::format("MXU {} weights", m)
                                               : fmt::format("MXU {}", m);
    }
  }
}

void Trace::add_stall(std::uint32_t core, std::uint64_t index, std::uint32_t layer, Stall why,
                      std::uint32_t blocked_track, Cycle begin, Cycle end) {
  if (end <= begin) return;
  TraceSlice s;
  s.core = core;
  s.track = static_cast<std::uint32_t>(TrackKind::Sequencer);
  s.index = index;
  s.layer = layer;
  s.begin = begin;
  s.end = end;
  s.stall = why;
  s.blocked_track = blocked_track;
  s.is_stall = true;
  slices_.push_back(s);
}

}  // namespace tpu
