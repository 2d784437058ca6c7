#include "hw/common/trace.h"

#include <fmt/format.h>

#include <type_traits>
#include <variant>

namespace tpu {

std::uint32_t track_of(const isa::Instruction& inst) {
  return std::visit(
      [](const auto& i) -> std::uint32_t {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, isa::ReadHost> || std::is_same_v<T, isa::WriteHost>)
          return static_cast<std::uint32_t>(TrackKind::HostLink);
        else if constexpr (std::is_same_v<T, isa::ReadMem> || std::is_same_v<T, isa::WriteMem>)
          return static_cast<std::uint32_t>(TrackKind::Dma);
        else if constexpr (std::is_same_v<T, isa::ReadWeights>)
          return mxu_weights_track(i.mxu);
        else if constexpr (std::is_same_v<T, isa::MatMul>)
          return mxu_track(i.mxu);
        else if constexpr (std::is_same_v<T, isa::Activate> || std::is_same_v<T, isa::Pool> ||
                           std::is_same_v<T, isa::Eltwise> || std::is_same_v<T, isa::Softmax>)
          return static_cast<std::uint32_t>(TrackKind::Vector);
        else
          return static_cast<std::uint32_t>(TrackKind::Sequencer);
      },
      inst);
}

std::string track_name(std::uint32_t track) {
  switch (track) {
    case static_cast<std::uint32_t>(TrackKind::Sequencer): return "sequencer stalls";
    case static_cast<std::uint32_t>(TrackKind::HostLink): return "host link (DMA)";
    case static_cast<std::uint32_t>(TrackKind::Dma): return "off-chip memory (DMA)";
    case static_cast<std::uint32_t>(TrackKind::Vector): return "vector unit";
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
