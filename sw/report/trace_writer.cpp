#include "sw/report/trace_writer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>

namespace tpu::report {
namespace {

std::string layer_name(const std::vector<std::string>& layers, std::uint32_t id) {
  return id < layers.size() ? layers[id] : fmt::format("tag {}", id);
}

std::string stall_name(const TraceSlice& s) {
  switch (s.stall) {
    case Stall::QueueFull: return fmt::format("stall: {} queue full", track_name(s.blocked_track));
    case Stall::Sync: return "stall: sync (waits for earlier instructions)";
    case Stall::Halt: return "stall: halt (waits for earlier instructions)";
  }
  return "stall";
}

}  // namespace

std::string chrome_trace_json(const Trace& trace, const ChipConfig& cfg,
                              const std::vector<std::string>& layers) {
  using nlohmann::ordered_json;
  const double us_per_cycle = 1e6 / cfg.clock_hz();
  std::ostringstream out;
  out << "{\"displayTimeUnit\":\"ns\",\"otherData\":"
      << ordered_json{{"chip", cfg.name}, {"clock_hz", cfg.clock_hz()}, {"time_unit", "us"}}.dump()
      << ",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const ordered_json& e) {
    if (!first) out << ",\n";
    first = false;
    out << e.dump();
  };
  // Every track of every core is named, so empty ones still show: the layout mirrors the chip.
  const std::uint32_t tracks = mxu_track(cfg.mxu.count - 1) + 1;
  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    emit({{"name", "process_name"},
          {"ph", "M"},
          {"pid", c},
          {"args", {{"name", fmt::format("{} core {}", cfg.name, c)}}}});
    emit({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", c}, {"args", {{"sort_index", c}}}});
    for (std::uint32_t t = 0; t < tracks; ++t) {
      emit({{"name", "thread_name"},
            {"ph", "M"},
            {"pid", c},
            {"tid", t},
            {"args", {{"name", track_name(t)}}}});
      emit({{"name", "thread_sort_index"},
            {"ph", "M"},
            {"pid", c},
            {"tid", t},
            {"args", {{"sort_index", t}}}});
    }
  }
  for (const TraceSlice& s : trace.slices()) {
    const std::string layer = layer_name(layers, s.layer);
    const std::string name =
        s.is_stall ? stall_name(s) : fmt::format("{} {}", isa::mnemonic(s.opcode), layer);
    emit({{"name", name},
          {"cat", s.is_stall ? "stall" : isa::mnemonic(s.opcode)},
          {"ph", "X"},
          {"ts", static_cast<double>(s.begin) * us_per_cycle},
          {"dur", static_cast<double>(s.end - s.begin) * us_per_cycle},
          {"pid", s.core},
          {"tid", s.track},
          {"args",
           {{"instruction", s.index},
            {"layer", layer},
            {"begin_cycle", s.begin},
            {"end_cycle", s.end},
            {"cycles", s.end - s.begin}}}});
  }
  out << "\n]}\n";
  return out.str();
}

}  // namespace tpu::report
