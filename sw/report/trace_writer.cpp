#include "sw/report/trace_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

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

// A link's slice is named by the transfers in it, as "chip 0 → chip 1", each source and
// destination once in the order they came.
std::string link_slice_name(const LinkBusy& b) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> seen;
  std::string name;
  for (const LinkTransfer& t : b.transfers) {
    if (std::find(seen.begin(), seen.end(), std::pair{t.from, t.to}) != seen.end()) continue;
    seen.emplace_back(t.from, t.to);
    name += fmt::format("{}chip {} \u2192 chip {}", name.empty() ? "" : ", ", t.from, t.to);
  }
  return name;
}

}  // namespace

std::string chrome_trace_json(const Trace& trace, const ChipConfig& cfg,
                              const std::vector<std::string>& layers, const FitTracks& fit) {
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
  // A process or a thread named, and sorted by its id.
  auto process = [&](std::uint32_t pid, const std::string& name) {
    emit({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}});
    emit({{"name", "process_sort_index"},
          {"ph", "M"},
          {"pid", pid},
          {"args", {{"sort_index", pid}}}});
  };
  auto thread = [&](std::uint32_t pid, std::size_t tid, const std::string& name) {
    emit({{"name", "thread_name"},
          {"ph", "M"},
          {"pid", pid},
          {"tid", tid},
          {"args", {{"name", name}}}});
    emit({{"name", "thread_sort_index"},
          {"ph", "M"},
          {"pid", pid},
          {"tid", tid},
          {"args", {{"sort_index", tid}}}});
  };
  // Every track of every core is named, so empty ones still show: the layout mirrors the chip.
  const std::uint32_t tracks = mxu_track(cfg.mxu.count - 1) + 1;
  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    process(c, fmt::format("{} core {}", cfg.name, c));
    for (std::uint32_t t = 0; t < tracks; ++t) thread(c, t, track_name(t));
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
  // The fit's processes after the cores': the host's steps, then the ICI links, every link
  // named (an idle one shows too: on a mesh, the links a ring does not use).
  const std::uint32_t host_pid = cfg.tensor_cores, ici_pid = cfg.tensor_cores + 1;
  if (!fit.steps.empty()) {
    process(host_pid, "host");
    thread(host_pid, 0, "training steps");
  }
  for (const StepSpan& s : fit.steps)
    emit({{"name", fmt::format("step {}", s.step)},
          {"cat", "step"},
          {"ph", "X"},
          {"ts", static_cast<double>(s.begin) * us_per_cycle},
          {"dur", static_cast<double>(s.end - s.begin) * us_per_cycle},
          {"pid", host_pid},
          {"tid", 0},
          {"args",
           {{"step", s.step},
            {"begin_cycle", s.begin},
            {"end_cycle", s.end},
            {"cycles", s.end - s.begin}}}});
  if (!fit.links.empty()) process(ici_pid, "ICI links");
  for (std::size_t l = 0; l < fit.links.size(); ++l) {
    thread(ici_pid, l, fit.links[l].name);
    for (const LinkBusy& b : fit.links[l].busy) {
      ordered_json transfers = ordered_json::array();
      for (const LinkTransfer& t : b.transfers)
        transfers.push_back({{"from", t.from}, {"to", t.to}, {"bytes", std::llround(t.bytes)}});
      emit({{"name", link_slice_name(b)},
            {"cat", "ici"},
            {"ph", "X"},
            {"ts", b.begin * us_per_cycle},
            {"dur", (b.end - b.begin) * us_per_cycle},
            {"pid", ici_pid},
            {"tid", l},
            {"args",
             {{"link", fit.links[l].name},
              {"bytes", std::llround(b.bytes)},
              {"transfers", std::move(transfers)},
              {"begin_cycle", b.begin},
              {"end_cycle", b.end},
              {"cycles", b.end - b.begin}}}});
    }
  }
  out << "\n]}\n";
  return out.str();
}

}  // namespace tpu::report
