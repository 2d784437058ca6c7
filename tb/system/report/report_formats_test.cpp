// The run report's formats: the per-level byte counts and energy parts add up, the SCALE-Sim
// shaped CSVs carry the JSON's numbers under SCALE-Sim's definitions (docs/report.md), the
// Markdown lists every layer, and the trace has a track per unit per core with one slice per
// instruction (docs/trace.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/files.h"
#include "common/temp_dir.h"
#include "hw/config/chip_config.h"
#include "hw/unit/trace.h"
#include "sw/report/formats.h"
#include "sw/sim/session.h"

namespace tpu {
namespace {

using nlohmann::ordered_json;

ChipConfig shipped(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json");
}

ordered_json run_cnn(const ChipConfig& cfg, std::uint64_t images, const std::string& trace = "") {
  sim::RunOptions o;
  o.model = std::string(TPUSIM_SOURCE_DIR) + "/configs/models/fashion_mnist_cnn.json";
  o.images = images;
  o.check = false;
  o.trace = trace;
  return sim::run_workload(cfg, o);
}

std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, ',')) {
      const auto b = cell.find_first_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b));
    }
    rows.push_back(cells);
  }
  return rows;
}

TEST(RunReport, LayerBytesAndEnergyPartsAddUpToTheTotals) {
  const ChipConfig cfg = shipped("v3");
  const ordered_json r = run_cnn(cfg, 300);
  const auto& t = r["totals"];
  std::map<std::string, double> bytes;
  std::map<std::string, double> energy;
  for (const auto& l : r["layers"]) {
    for (const auto& [k, v] : l["bytes"].items()) bytes[k] += v.get<double>();
    double parts = 0;
    for (const auto& [k, v] : l["energy"].items()) {
      energy[k] += v.get<double>();
      parts += v.get<double>();
    }
    EXPECT_NEAR(parts, l["energy_j"].get<double>(), 1e-12 * l["energy_j"].get<double>())
        << l["name"];
    EXPECT_NEAR(l["energy"]["static_j"].get<double>(),
                cfg.energy.idle_w * l["seconds"].get<double>(), 1e-15)
        << l["name"];
  }
  for (const auto& [k, v] : t["bytes"].items()) EXPECT_EQ(bytes[k], v.get<double>()) << k;
  for (const auto& [k, v] : r["energy"].items())
    EXPECT_NEAR(energy[k], v.get<double>(), 1e-9 * v.get<double>()) << k;
  // Levels are consistent: what the MXUs read of the UB and the off-chip weight fetches are
  // parts of the UB and off-chip totals.
  EXPECT_LE(t["bytes"]["mxu_input"].get<double>(), t["bytes"]["unified_buffer_read"].get<double>());
  EXPECT_LE(t["bytes"]["off_chip_weights"].get<double>(),
            t["bytes"]["off_chip_read"].get<double>());
  EXPECT_DOUBLE_EQ(t["macs_per_off_chip_byte"].get<double>(),
                   t["macs"].get<double>() / t["bytes"]["off_chip"].get<double>());
}

TEST(RunReport, ScaleSimComputeReportFollowsScaleSimDefinitions) {
  const ChipConfig cfg = shipped("v1");
  const ordered_json r = run_cnn(cfg, 300);
  const auto rows = parse_csv(report::compute_report_csv(r));
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0],
            (std::vector<std::string>{"LayerID", "Total Cycles", "Stall Cycles", "Overall Util %",
                                      "Mapping Efficiency %", "Compute Util %"}));
  std::vector<ordered_json> mac_layers;
  for (const auto& l : r["layers"])
    if (l["macs"].get<double>() > 0) mac_layers.push_back(l);
  ASSERT_EQ(rows.size(), mac_layers.size() + 1);
  const double pes = static_cast<double>(cfg.mxu.rows) * cfg.mxu.cols;
  for (std::size_t i = 0; i < mac_layers.size(); ++i) {
    const auto& l = mac_layers[i];
    const auto& row = rows[i + 1];
    EXPECT_EQ(std::stoul(row[0]), i);
    EXPECT_DOUBLE_EQ(std::stod(row[1]), l["span_cycles"].get<double>());
    // A layer's span bounds its rate: no layer beats the chip's peak.
    EXPECT_LE(l["utilization"].get<double>(), 1.0);
    const auto& b = l["mxu_cycles"];
    const double stall = b["weight_stall"].get<double>() + b["weight_shift"].get<double>() +
                         b["data_hazard"].get<double>() + b["input_stall"].get<double>();
    EXPECT_NEAR(std::stod(row[2]), stall, 1e-6 * stall + 1e-9);
    EXPECT_NEAR(std::stod(row[3]), 100 * l["utilization"].get<double>(), 1e-6);
    // The conv layers use a K x N corner of the array: mapping efficiency is that corner's share.
    EXPECT_NEAR(std::stod(row[4]),
                100 * l["macs"].get<double>() / (b["active"].get<double>() * pes), 1e-6);
    EXPECT_LE(std::stod(row[4]), 100.0);
  }
}

TEST(RunReport, ScaleSimBandwidthReportIsWordsPerCycle) {
  const ChipConfig cfg = shipped("v3");
  const ordered_json r = run_cnn(cfg, 300);
  const auto rows = parse_csv(report::bandwidth_report_csv(r));
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0].size(), 7u);
  const ordered_json* first = nullptr;
  for (const auto& l : r["layers"])
    if (l["macs"].get<double>() > 0) {
      first = &l;
      break;
    }
  ASSERT_NE(first, nullptr);
  const double cycles = (*first)["span_cycles"].get<double>();
  // bf16 words of 2 bytes in, fp32 accumulator words of 4 bytes out.
  EXPECT_NEAR(std::stod(rows[1][1]), (*first)["bytes"]["mxu_input"].get<double>() / 2 / cycles,
              1e-6);
  EXPECT_NEAR(std::stod(rows[1][3]),
              (*first)["bytes"]["accumulators_write"].get<double>() / 4 / cycles, 1e-6);
  EXPECT_NEAR(std::stod(rows[1][5]),
              (*first)["bytes"]["off_chip_weights"].get<double>() / 2 / cycles, 1e-6);
}

TEST(RunReport, LayersCsvHasUnitsInEveryColumnATotalAndASteadyStateRow) {
  const ordered_json r = run_cnn(shipped("edge"), 100);
  const auto rows = parse_csv(report::layers_csv(r));
  ASSERT_EQ(rows.size(), r["layers"].size() + 3);
  for (const auto& h : rows[0]) {
    if (h == "layer" || h == "type") continue;
    const bool has_unit =
        h.find("cycles") != std::string::npos || h.find("seconds") != std::string::npos ||
        h.find("_per_") != std::string::npos || h.find("bytes") != std::string::npos ||
        h.find("_j") != std::string::npos || h.find("_w") != std::string::npos || h == "macs" ||
        h == "ops" || h == "utilization";
    EXPECT_TRUE(has_unit) << h;
  }
  EXPECT_EQ(rows[rows.size() - 2][0], "total");
  // After the model load (docs/report.md, "Load and steady state"): the block's figures under
  // the columns of the same names, the others empty.
  const auto& steady = rows.back();
  EXPECT_EQ(steady[0], "steady_state");
  for (std::size_t i = 2; i < rows[0].size(); ++i) {
    const std::string& h = rows[0][i];
    if (r["steady_state"].contains(h))
      EXPECT_NEAR(std::stod(steady[i]), r["steady_state"][h].get<double>(),
                  1e-8 * std::fabs(r["steady_state"][h].get<double>()))
          << h;  // nine significant digits
    else
      EXPECT_EQ(steady[i], "") << h;
  }
  for (const auto& row : rows) EXPECT_EQ(row.size(), rows[0].size());
}

TEST(RunReport, MarkdownHasOneRowPerLayer) {
  const ordered_json r = run_cnn(shipped("v1"), 100);
  const std::string md = report::run_markdown(r);
  for (const auto& l : r["layers"])
    EXPECT_NE(md.find("| " + l["name"].get<std::string>() + " |"), std::string::npos) << l["name"];
}

// The cells of the Markdown table row that starts with `name`.
std::vector<std::string> md_cells(const std::string& md, const std::string& name) {
  const auto at = md.find("\n| " + name + " |");
  if (at == std::string::npos) return {};
  const std::string line = md.substr(at + 2, md.find('\n', at + 1) - at - 2);
  std::vector<std::string> cells;
  std::size_t from = 1;
  for (auto bar = line.find('|', from); bar != std::string::npos; bar = line.find('|', from)) {
    cells.push_back(line.substr(from + 1, bar - from - 2));
    from = bar + 1;
  }
  return cells;
}

double without_commas(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), ','), s.end());
  return std::stod(s);
}

// Issue 17: the rates were taken over a span no table showed. Each row now shows its span, and
// the line above the table gives the clock and peak, so the row's rates recompute from it.
TEST(RunReport, MarkdownLayerRowsShowTheSpanTheirRatesAreTakenOver) {
  const ChipConfig cfg = shipped("v1");
  const ordered_json r = run_cnn(cfg, 100);
  const std::string md = report::run_markdown(r);
  EXPECT_NE(md.find("| layer | type | span (cycles) | retired (cycles) | retired share (%) | G MAC "
                    "| T ops/s | utilization (%) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find(fmt::format("× {:.0f} Hz / span cycles", cfg.clock_hz())), std::string::npos);
  EXPECT_NE(md.find(fmt::format("({} MAC/cycle × span cycles)", cfg.peak_macs_per_cycle())),
            std::string::npos);
  int multiplying = 0;
  for (const auto& l : r["layers"]) {
    const auto cells = md_cells(md, l["name"].get<std::string>());
    ASSERT_GE(cells.size(), 8u) << l["name"];
    const double span = without_commas(cells[2]);
    EXPECT_EQ(span, l["span_cycles"].get<double>()) << l["name"];
    EXPECT_EQ(without_commas(cells[3]), std::round(l["cycles"].get<double>())) << l["name"];
    if (l["macs"].get<double>() <= 0) continue;
    ++multiplying;
    // From the row alone: the printed G MAC and span, and the stated clock and peak.
    const double gmac = std::stod(cells[5]);
    const double tops = 2 * gmac * 1e9 * cfg.clock_hz() / span / 1e12;
    const auto peak = static_cast<double>(cfg.peak_macs_per_cycle());
    const double util = 100 * gmac * 1e9 / (peak * span);
    EXPECT_NEAR(std::stod(cells[6]), tops, 1e-3 + 5e-4 * tops / gmac) << l["name"];
    EXPECT_NEAR(std::stod(cells[7]), util, 1e-2 + 5e-4 * util / gmac) << l["name"];
  }
  EXPECT_GT(multiplying, 0);
}

TEST(RunReport, MarkdownShowsTheSteadyStateImagesPerSecondBesideTheTotals) {
  const ordered_json r = run_cnn(shipped("v1"), 100);
  const std::string md = report::run_markdown(r);
  EXPECT_NE(md.find("| images/s | steady images/s |"), std::string::npos) << md;
}

// A run of the CNN with --trace: its report and its parsed trace.
std::pair<ordered_json, nlohmann::json> traced_cnn(const ChipConfig& cfg, std::uint64_t images) {
  const test::TempDir tmp("tpusim-report-test");
  const std::string path = tmp / "trace.json";
  ordered_json r = run_cnn(cfg, images, path);
  return {std::move(r), nlohmann::json::parse(test::read_file(path))};
}

TEST(Trace, V3TraceHasATrackPerUnitPerCoreAndASlicePerInstruction) {
  const ChipConfig cfg = shipped("v3");
  const auto [r, trace] = traced_cnn(cfg, 300);
  std::set<std::pair<int, std::string>> named;
  std::map<std::pair<int, int>, std::string> tid_name;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> slices;
  std::uint64_t instructions = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name")
      tid_name[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
    // The model load's slice is the host's, not an instruction (the next test).
    if (e["ph"] != "X" || e["cat"] == "load") continue;
    const std::pair<int, int> track{e["pid"].get<int>(), e["tid"].get<int>()};
    slices[track].emplace_back(e["args"]["begin_cycle"].get<double>(),
                               e["args"]["end_cycle"].get<double>());
    if (e["cat"] != "stall") {
      ++instructions;
      // Named by instruction and layer.
      EXPECT_NE(e["name"].get<std::string>().find(e["args"]["layer"].get<std::string>()),
                std::string::npos);
    }
  }
  // Both cores, and on each: sequencer, host link, DMA, vector unit, and each MXU's two tracks.
  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    for (std::uint32_t m = 0; m < cfg.mxu.count; ++m) {
      const std::pair<int, int> t{static_cast<int>(c), static_cast<int>(mxu_track(m))};
      EXPECT_EQ(tid_name[t], "MXU " + std::to_string(m));
      EXPECT_FALSE(slices[t].empty()) << "core " << c << " MXU " << m << " ran no matmul";
    }
    const std::pair<int, int> link{static_cast<int>(c), static_cast<int>(TrackKind::HostLink)};
    EXPECT_EQ(tid_name[link], track_name(static_cast<std::uint32_t>(TrackKind::HostLink)));
  }
  // Units run one instruction at a time: a track's slices do not overlap.
  for (auto& [track, v] : slices) {
    std::sort(v.begin(), v.end());
    for (std::size_t i = 1; i < v.size(); ++i)
      EXPECT_LE(v[i - 1].second, v[i].first) << "track " << track.first << "/" << track.second;
  }
  // Every instruction a unit ran is a slice (Nop, Tag, SetWindow, Sync and Halt run in the
  // sequencer and have none).
  EXPECT_GT(instructions, 0u);
  EXPECT_LE(instructions, r["workload"]["instructions"].get<std::uint64_t>());
  std::uint64_t total = 0;
  for (const auto& l : r["layers"]) total += l["instructions"].get<std::uint64_t>();
  EXPECT_EQ(total, r["workload"]["instructions"].get<std::uint64_t>());
}

// Issue 17: the trace covers the whole run, the memory image's upload included, and carries
// counter tracks whose bandwidth integrates to the bytes the report counted after the load.
TEST(Trace, RunTraceStartsWithTheModelLoadAndHasBandwidthAndMxuCounters) {
  const ChipConfig cfg = shipped("v3");
  const auto [r, trace] = traced_cnn(cfg, 300);
  const double us_per_cycle = 1e6 / cfg.clock_hz();
  const double loaded = r["totals"]["memory_image_loaded_cycle"].get<double>();
  ASSERT_GT(loaded, 0.0);
  bool load_slice = false;
  double first_instruction = 1e300;
  // Per core and counter: (timestamp, value) in order.
  std::map<std::pair<int, std::string>, std::vector<std::pair<double, double>>> counters;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == "load") {
      load_slice = true;
      EXPECT_EQ(e["ts"].get<double>(), 0.0);
      EXPECT_EQ(e["args"]["end_cycle"].get<double>(), loaded);
      EXPECT_EQ(e["args"]["bytes_host_link"].get<double>(),
                r["load"]["bytes_host_link"].get<double>());
    } else if (e["ph"] == "X" && e["cat"] != "stall") {
      first_instruction = std::min(first_instruction, e["args"]["begin_cycle"].get<double>());
    } else if (e["ph"] == "C") {
      counters[{e["pid"].get<int>(), e["name"].get<std::string>()}].emplace_back(
          e["ts"].get<double>(), e["args"]["value"].get<double>());
    }
  }
  EXPECT_TRUE(load_slice);
  // Nothing reaches the chip before the load ends: the load slice is what covers [0, L).
  EXPECT_GE(first_instruction, loaded);
  const double end_us = r["totals"]["cycles"].get<double>() * us_per_cycle;
  const double window_us = trace["otherData"]["counter_window_cycles"].get<double>() * us_per_cycle;
  // Integrates a counter: each value holds until the next sample.
  auto integral = [&](const std::vector<std::pair<double, double>>& v) {
    double sum = 0;
    for (std::size_t i = 0; i + 1 < v.size(); ++i)
      sum += v[i].second * (v[i + 1].first - v[i].first);
    return sum;
  };
  double host = 0, mem = 0;
  for (std::uint32_t c = 0; c < cfg.tensor_cores; ++c) {
    for (const char* name : {"host link (GB/s)", "off-chip memory (GB/s)", "MXUs streaming (%)"}) {
      const auto& v = counters[{static_cast<int>(c), name}];
      ASSERT_GE(v.size(), 3u) << name;
      EXPECT_EQ(v.front().first, 0.0) << name;
      EXPECT_LE(v.back().first, end_us) << name;
      for (const auto& [ts, value] : v) {
        EXPECT_GE(value, 0.0) << name;
        if (std::string(name) == "MXUs streaming (%)") {
          EXPECT_LE(value, 100.0 + 1e-9);
        }
      }
    }
    // GB/s × µs = 10³ bytes; the last sample holds for one window.
    auto bytes = [&](const std::string& name) {
      auto v = counters[{static_cast<int>(c), name}];
      v.emplace_back(v.back().first + window_us, 0.0);
      return 1e3 * integral(v);
    };
    host += bytes("host link (GB/s)");
    mem += bytes("off-chip memory (GB/s)");
  }
  // The instructions' bytes are what the chip counted after the load, less, over the host link,
  // the instruction stream the driver writes (isa::kInstructionBytes per instruction).
  const auto& b = r["totals"]["bytes"];
  const double host_after =
      b["host_link"].get<double>() - r["load"]["bytes_host_link"].get<double>() -
      static_cast<double>(isa::kInstructionBytes) * r["workload"]["instructions"].get<double>();
  const double mem_after = b["off_chip"].get<double>() - r["load"]["bytes_off_chip"].get<double>();
  EXPECT_NEAR(host, host_after, 1e-6 * host_after);
  EXPECT_NEAR(mem, mem_after, 1e-6 * mem_after);
}

}  // namespace
}  // namespace tpu
