#include "sw/report/trace_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

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

// Counter tracks sample a span (the run, or a fit's traced step) in this many windows at most:
// fine enough to see the layers, small enough to keep the file's size set by its slices.
constexpr std::uint64_t kCounterWindows = 500;

// Spreads `amount` evenly over [begin, end) into windows of `width` cycles (an instant's amount
// goes into its window).
void spread(std::vector<double>& windows, Cycle width, Cycle begin, Cycle end, double amount) {
  if (end <= begin) {
    windows[std::min<std::size_t>(begin / width, windows.size() - 1)] += amount;
    return;
  }
  const double per_cycle = amount / static_cast<double>(end - begin);
  for (Cycle w = begin / width; w * width < end && w < windows.size(); ++w) {
    const Cycle lo = std::max(begin, w * width), hi = std::min(end, (w + 1) * width);
    windows[w] += per_cycle * static_cast<double>(hi - lo);
  }
}

}  // namespace

LoadAndCounters load_and_counters(const std::vector<std::vector<isa::Instruction>>& program_cores,
                                  std::uint32_t cores, std::uint32_t weight_element_bytes,
                                  Cycle load_end, std::uint64_t load_bytes) {
  LoadAndCounters r;
  r.load_end = load_end;
  r.load_bytes = load_bytes;
  r.host_link_bytes.resize(cores);
  r.off_chip_bytes.resize(cores);
  for (std::uint32_t c = 0; c < cores && !program_cores.empty(); ++c) {
    const auto& prog = program_cores[c % program_cores.size()];
    auto& host = r.host_link_bytes[c];
    auto& mem = r.off_chip_bytes[c];
    host.assign(prog.size(), 0);
    mem.assign(prog.size(), 0);
    for (std::size_t i = 0; i < prog.size(); ++i) {
      std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, isa::ReadHost> || std::is_same_v<T, isa::WriteHost>)
              host[i] = x.bytes;
            else if constexpr (std::is_same_v<T, isa::ReadMem> || std::is_same_v<T, isa::WriteMem>)
              mem[i] = x.bytes;
            else if constexpr (std::is_same_v<T, isa::Gather>)
              mem[i] = std::uint64_t{x.count} * x.row_bytes;
            else if constexpr (std::is_same_v<T, isa::ReadWeights>)
              mem[i] = x.source == isa::WeightSource::OffChip
                           ? std::uint64_t{x.rows} * x.cols * weight_element_bytes
                           : 0;
          },
          prog[i]);
    }
  }
  return r;
}

std::string chrome_trace_json(const Trace& trace, const ChipConfig& cfg,
                              const std::vector<std::string>& layers, const FitTracks& fit,
                              const LoadAndCounters& run) {
  using nlohmann::ordered_json;
  const double us_per_cycle = 1e6 / cfg.clock_hz();
  // The counters' spans, each sampled in windows of its own width; a run's is one from cycle 0 to
  // the last slice's end.
  std::vector<CounterSpan> spans = run.spans;
  if (spans.empty() && !run.host_link_bytes.empty()) {
    Cycle last = run.load_end;
    for (const TraceSlice& s : trace.slices()) last = std::max(last, s.end);
    spans.push_back({0, last, std::vector<std::uint64_t>(cfg.tensor_cores, 0)});
  }
  const auto width_of = [](const CounterSpan& sp) {
    return std::max<Cycle>(1, (sp.end - sp.begin + kCounterWindows - 1) / kCounterWindows);
  };
  ordered_json other{{"chip", cfg.name}, {"clock_hz", cfg.clock_hz()}, {"time_unit", "us"}};
  if (!run.host_link_bytes.empty()) {
    if (spans.size() == 1) other["counter_window_cycles"] = width_of(spans[0]);
    other["counter_spans"] = ordered_json::array();
    for (const CounterSpan& sp : spans)
      other["counter_spans"].push_back(
          {{"begin_cycle", sp.begin}, {"end_cycle", sp.end}, {"window_cycles", width_of(sp)}});
  }
  std::ostringstream out;
  out << "{\"displayTimeUnit\":\"ns\",\"otherData\":" << other.dump() << ",\"traceEvents\":[\n";
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
  // Per core, counter tracks over windows of each span: bandwidth over the host link (the data
  // read_host and write_host move; the instruction stream the driver writes over it is not
  // traced) and to or from off-chip memory (each instruction's bytes spread over its slice), and
  // the share of the core's MXUs streaming a matmul (their array tracks' slices: active and
  // input_stall cycles). A slice belongs to the span whose program holds its instruction index.
  auto counters = [&] {
    constexpr std::size_t kHost = 0, kMem = 1, kMxu = 2;
    const std::uint32_t cores = std::min<std::uint32_t>(
        cfg.tensor_cores, static_cast<std::uint32_t>(run.host_link_bytes.size()));
    // [span][core][series][window]
    std::vector<std::vector<std::array<std::vector<double>, 3>>> values(spans.size());
    for (std::size_t k = 0; k < spans.size(); ++k) {
      const CounterSpan& sp = spans[k];
      const Cycle width = width_of(sp);
      const std::size_t n = (sp.end - sp.begin + width - 1) / width;
      values[k].resize(cores);
      if (n == 0) continue;
      for (auto& series : values[k]) series.fill(std::vector<double>(n, 0.0));
      for (const TraceSlice& s : trace.slices()) {
        if (s.core >= cores || s.is_stall || s.core >= sp.first_index.size()) continue;
        const std::uint64_t base = sp.first_index[s.core];
        const auto& host = run.host_link_bytes[s.core];
        if (s.index < base || s.index - base >= host.size()) continue;
        const std::uint64_t i = s.index - base;
        const Cycle begin = std::max(s.begin, sp.begin) - sp.begin;
        const Cycle end = std::max(s.end, sp.begin) - sp.begin;
        auto& v = values[k][s.core];
        spread(v[kHost], width, begin, end, static_cast<double>(host[i]));
        spread(v[kMem], width, begin, end, static_cast<double>(run.off_chip_bytes[s.core][i]));
        if (s.track >= kFirstMxuTrack && (s.track - kFirstMxuTrack) % 2 == 1)
          spread(v[kMxu], width, begin, end, static_cast<double>(end - begin));
      }
    }
    const std::array<const char*, 3> names = {"host link (GB/s)", "off-chip memory (GB/s)",
                                              "MXUs streaming (%)"};
    for (std::uint32_t c = 0; c < cores; ++c)
      for (std::size_t series = 0; series < names.size(); ++series)
        for (std::size_t k = 0; k < spans.size(); ++k) {
          const CounterSpan& sp = spans[k];
          const std::vector<double>& v = values[k][c][series];
          const Cycle width = width_of(sp);
          auto sample = [&](Cycle at, double value) {
            emit({{"name", names[series]},
                  {"ph", "C"},
                  {"ts", static_cast<double>(at) * us_per_cycle},
                  {"pid", c},
                  {"args", {{"value", value}}}});
          };
          // A value is drawn until the next: only changes are written, and the last window, which
          // ends with the span (it may be shorter); there the counter drops to 0, unless the next
          // span begins right away.
          double previous = 0;
          for (std::size_t w = 0; w < v.size(); ++w) {
            const Cycle at = sp.begin + w * width;
            const auto cycles = static_cast<double>(std::min(width, sp.end - at));
            const double value = series == kMxu ? v[w] * 100.0 / (cycles * cfg.mxu.count)
                                                : v[w] * 1e-9 / (cycles / cfg.clock_hz());
            if (w == 0 || w + 1 == v.size() || value != previous) sample(at, value);
            previous = value;
          }
          if (!v.empty() && (k + 1 == spans.size() || spans[k + 1].begin > sp.end))
            sample(sp.end, 0.0);
        }
  };
  // The fit's processes after the cores': the host's steps, then the ICI links, every link
  // named (an idle one shows too: on a mesh, the links a ring does not use). A run's host has
  // the model load instead, so that the trace covers the run from cycle 0.
  const std::uint32_t host_pid = cfg.tensor_cores, ici_pid = cfg.tensor_cores + 1;
  // A fit's host has both: its steps on thread 0, the model load on thread 1.
  const std::size_t load_tid = fit.steps.empty() ? 0 : 1;
  if (!fit.steps.empty() || run.load_end > 0) process(host_pid, "host");
  if (!fit.steps.empty()) thread(host_pid, 0, "training steps");
  if (run.load_end > 0) {
    thread(host_pid, load_tid, "model load");
    emit({{"name", "upload memory image"},
          {"cat", "load"},
          {"ph", "X"},
          {"ts", 0.0},
          {"dur", static_cast<double>(run.load_end) * us_per_cycle},
          {"pid", host_pid},
          {"tid", load_tid},
          {"args",
           {{"bytes_host_link", run.load_bytes},
            {"begin_cycle", 0},
            {"end_cycle", run.load_end},
            {"cycles", run.load_end}}}});
  }
  if (!run.host_link_bytes.empty()) counters();
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
