#include "sw/report/formats.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <vector>

namespace tpu::report {
namespace {

using nlohmann::ordered_json;

constexpr const char* kBuckets[] = {"active",      "weight_stall", "weight_shift",
                                    "data_hazard", "input_stall",  "idle"};
constexpr const char* kByteLevels[] = {
    "host_link",        "off_chip_read",       "off_chip_write",
    "off_chip_weights", "unified_buffer_read", "unified_buffer_write",
    "mxu_input",        "accumulators_read",   "accumulators_write"};

double num(const ordered_json& j, const char* key) { return j.at(key).get<double>(); }
double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

std::uint32_t bytes_of(const std::string& type) {
  if (type == "int8") return 1;
  if (type == "bf16") return 2;
  return 4;
}

// Round-trippable and short: integers print as integers, the rest with 9 significant digits.
std::string cell(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
    return fmt::format("{:.0f}", v);
  return fmt::format("{:.9g}", v);
}

// Stall cycles the way SCALE-Sim counts them (cycles the array waits while it has work), per
// MXU: the buckets that are neither feeding nor idle, averaged over the chip's MXUs.
double stall_cycles(const ordered_json& layer, double mxus) {
  const auto& b = layer.at("mxu_cycles");
  return (num(b, "weight_stall") + num(b, "weight_shift") + num(b, "data_hazard") +
          num(b, "input_stall")) /
         mxus;
}

struct ChipShape {
  double mxus = 1, pes = 1, peak_macs = 1;
  std::uint32_t in_bytes = 1, acc_bytes = 4;
};

// A run on a system (run --system) counts every chip's MXUs.
ChipShape shape_of(const ordered_json& run) {
  const auto& c = run.at("chip");
  const double chips = run.contains("system") ? num(run.at("system"), "chips") : 1;
  ChipShape s;
  s.mxus = chips * num(c, "tensor_cores") * num(c, "mxus_per_core");
  s.pes = num(c, "mxu_rows") * num(c, "mxu_cols");
  s.peak_macs = chips * num(c, "peak_macs_per_cycle");
  s.in_bytes = bytes_of(c.at("input_type").get<std::string>());
  s.acc_bytes = bytes_of(c.at("acc_type").get<std::string>());
  return s;
}

std::string md_row(const std::vector<std::string>& cells) {
  std::string s = "|";
  for (const auto& c : cells) s += " " + c + " |";
  return s + "\n";
}

std::string md_header(const std::vector<std::string>& cells) {
  std::string s = md_row(cells) + "|";
  for (std::size_t i = 0; i < cells.size(); ++i) s += " --- |";
  return s + "\n";
}

// What a per-layer table's rates are taken over: the clock and the peak they divide by.
struct RateBasis {
  double clock_hz = 0, peak_macs_per_cycle = 0;
};

// `layers` rows of a run or a fit step; `total` the cycles their retirement shares are of. The
// rates use each row's span (docs/report.md, "Per-layer cycles"), so the span comes first and
// the line above the table says how to recompute them from the row.
std::string layers_markdown(const ordered_json& layers, double total, const RateBasis& basis) {
  std::string s = fmt::format(
      "Rates over each row's span: T ops/s = 2 × G MAC × 10⁹ × {} Hz / span cycles; "
      "utilization = G MAC × 10⁹ / ({} MAC/cycle × span cycles). Retired cycles (each cycle "
      "charged to the oldest unfinished instruction's layer) add up to the run's; spans overlap "
      "and do not.\n\n",
      cell(basis.clock_hz), cell(basis.peak_macs_per_cycle));
  s += md_header({"layer", "type", "span (cycles)", "retired (cycles)", "retired share (%)",
                  "G MAC", "T ops/s", "utilization (%)", "off-chip bytes", "MAC per off-chip B",
                  "energy (µJ)",
                  "MXU active / w.stall / w.shift / hazard / in.stall / idle (cycles)"});
  for (const auto& l : layers) {
    const auto& b = l.at("mxu_cycles");
    std::string buckets;
    for (const char* k : kBuckets) buckets += (buckets.empty() ? "" : " / ") + thousands(num(b, k));
    s += md_row({l.at("name").get<std::string>(), l.at("type").get<std::string>(),
                 thousands(num(l, "span_cycles")), thousands(num(l, "cycles")),
                 fmt::format("{:.1f}", 100 * ratio(num(l, "cycles"), total)),
                 fmt::format("{:.3f}", num(l, "macs") / 1e9),
                 fmt::format("{:.3f}", num(l, "ops_per_s") / 1e12),
                 fmt::format("{:.2f}", 100 * num(l, "utilization")),
                 thousands(num(l, "bytes_off_chip")),
                 fmt::format("{:.1f}", num(l, "macs_per_off_chip_byte")),
                 fmt::format("{:.1f}", 1e6 * num(l, "energy_j")), buckets});
  }
  return s;
}

std::string layers_markdown(const ordered_json& run) {
  const double chips = run.contains("system") ? num(run.at("system"), "chips") : 1;
  const auto& chip = run.at("chip");
  return layers_markdown(run.at("layers"), num(run.at("totals"), "cycles"),
                         {num(chip, "clock_hz"), chips * num(chip, "peak_macs_per_cycle")});
}

struct Column {
  const char* name;
  std::string (*value)(const ordered_json& run);
};

std::string top1(const ordered_json& r) {
  if (!r.contains("accuracy") || !r["accuracy"].contains("top1")) return "-";
  return fmt::format("{:.2f}", 100 * r["accuracy"]["top1"].get<double>());
}
std::string bit_exact(const ordered_json& r) {
  if (r.contains("outputs_computed")) return "timing only";
  if (!r.contains("accuracy")) return "not checked";
  return r["accuracy"]["bit_exact"].get<bool>() ? "yes" : "NO";
}

// What a run ran on: its system (run --system) or its chip.
const ordered_json& machine(const ordered_json& r) {
  return r.contains("system") ? r.at("system") : r.at("chip");
}

const Column kCompareColumns[] = {
    {"chip", [](const ordered_json& r) { return machine(r)["name"].get<std::string>(); }},
    {"top-1 (%)", top1},
    {"bit-exact", bit_exact},
    {"cycles", [](const ordered_json& r) { return thousands(num(r["totals"], "cycles")); }},
    {"time (ms)",
     [](const ordered_json& r) {
       return fmt::format("{:.3f}", 1e3 * num(r["totals"], "seconds"));
     }},
    {"images/s", [](const ordered_json& r) { return thousands(num(r["totals"], "images_per_s")); }},
    // After the one-time model load (docs/report.md, "Load and steady state").
    {"steady images/s",
     [](const ordered_json& r) {
       return r.contains("steady_state") ? thousands(num(r.at("steady_state"), "images_per_s"))
                                         : std::string("-");
     }},
    {"T ops/s",
     [](const ordered_json& r) {
       return fmt::format("{:.3f}", num(r["totals"], "ops_per_s") / 1e12);
     }},
    {"peak T ops/s",
     [](const ordered_json& r) {
       return fmt::format("{:.2f}", num(machine(r), "peak_ops_per_s") / 1e12);
     }},
    {"utilization (%)",
     [](const ordered_json& r) {
       return fmt::format("{:.2f}", 100 * num(r["totals"], "utilization"));
     }},
    {"MAC per off-chip byte",
     [](const ordered_json& r) {
       return fmt::format("{:.1f}", num(r["totals"], "macs_per_off_chip_byte"));
     }},
    {"energy/image (µJ)",
     [](const ordered_json& r) {
       return fmt::format("{:.2f}", 1e6 * num(r["totals"], "energy_per_image_j"));
     }},
    {"avg power (W)",
     [](const ordered_json& r) { return fmt::format("{:.1f}", num(r["totals"], "avg_power_w")); }},
    {"G ops/J",
     [](const ordered_json& r) {
       return fmt::format("{:.1f}", num(r["totals"], "ops_per_j") / 1e9);
     }},
};

std::string workload_line(const ordered_json& w) {
  return fmt::format("Workload: {}, {} images, batch {}; weights: {}; inputs: {}\n",
                     w.at("model").get<std::string>(), w.at("images").get<std::uint64_t>(),
                     w.at("batch").get<std::uint64_t>(), w.at("weights").get<std::string>(),
                     w.at("inputs").get<std::string>());
}

}  // namespace

std::string thousands(double v) {
  const long long n = std::llround(v);
  std::string digits = std::to_string(n < 0 ? -n : n), s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return n < 0 ? "-" + s : s;
}

std::string compute_report_csv(const ordered_json& run) {
  const ChipShape c = shape_of(run);
  std::string s =
      "LayerID, Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %, Compute Util "
      "%,\n";
  std::uint32_t id = 0;
  for (const auto& l : run.at("layers")) {
    const double macs = num(l, "macs");
    if (macs <= 0) continue;
    // SCALE-Sim runs one layer at a time; the span is the time this layer's work took.
    const double cycles = num(l, "span_cycles");
    const double stall = stall_cycles(l, c.mxus);
    const double active = num(l.at("mxu_cycles"), "active");
    s += fmt::format("{}, {}, {}, {}, {}, {},\n", id++, cell(cycles), cell(stall),
                     cell(100 * num(l, "utilization")), cell(100 * ratio(macs, active * c.pes)),
                     cell(100 * ratio(macs, c.peak_macs * (cycles - stall))));
  }
  return s;
}

std::string bandwidth_report_csv(const ordered_json& run) {
  const ChipShape c = shape_of(run);
  std::string s =
      "LayerID, Avg IFMAP SRAM BW, Avg FILTER SRAM BW, Avg OFMAP SRAM BW, Avg IFMAP DRAM BW, Avg "
      "FILTER DRAM BW, Avg OFMAP DRAM BW,\n";
  std::uint32_t id = 0;
  for (const auto& l : run.at("layers")) {
    if (num(l, "macs") <= 0) continue;
    const double cycles = num(l, "span_cycles");
    const auto& b = l.at("bytes");
    // Words per cycle, as SCALE-Sim: a word is one MXU input element (int8 or bf16); outputs are
    // accumulator words. "DRAM" is our off-chip memory.
    auto wpc = [&](double bytes, std::uint32_t word) { return cell(ratio(bytes / word, cycles)); };
    const double weights_off = num(b, "off_chip_weights");
    s += fmt::format("{}, {}, {}, {}, {}, {}, {},\n", id++, wpc(num(b, "mxu_input"), c.in_bytes),
                     wpc(num(b, "weights"), c.in_bytes),
                     wpc(num(b, "accumulators_write"), c.acc_bytes),
                     wpc(num(b, "off_chip_read") - weights_off, c.in_bytes),
                     wpc(weights_off, c.in_bytes), wpc(num(b, "off_chip_write"), c.in_bytes));
  }
  return s;
}

std::string layers_csv(const ordered_json& run) {
  std::vector<std::string> head = {"layer",        "type", "cycles", "span_cycles", "seconds",
                                   "images_per_s", "macs", "ops",    "ops_per_s",   "utilization"};
  for (const char* b : kBuckets) head.push_back(fmt::format("mxu_{}_cycles", b));
  for (const char* b : kByteLevels) head.push_back(fmt::format("bytes_{}", b));
  head.push_back("macs_per_off_chip_byte");
  const auto& parts = run.at("energy");
  for (const auto& [k, v] : parts.items()) head.push_back("energy_" + k);
  for (const char* k : {"energy_j", "avg_power_w", "ops_per_j"}) head.emplace_back(k);

  auto row = [&](const std::string& name, const std::string& type, const ordered_json& a,
                 const ordered_json& energy) {
    std::vector<std::string> r = {name, type};
    for (const char* k : {"cycles", "span_cycles", "seconds", "images_per_s", "macs", "ops",
                          "ops_per_s", "utilization"})
      r.push_back(cell(num(a, k)));
    for (const char* b : kBuckets) r.push_back(cell(num(a.at("mxu_cycles"), b)));
    for (const char* b : kByteLevels) r.push_back(cell(num(a.at("bytes"), b)));
    r.push_back(cell(num(a, "macs_per_off_chip_byte")));
    for (const auto& [k, v] : parts.items()) r.push_back(cell(energy.at(k).get<double>()));
    for (const char* k : {"energy_j", "avg_power_w", "ops_per_j"}) r.push_back(cell(num(a, k)));
    return r;
  };
  auto line = [](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t i = 0; i < cells.size(); ++i) s += (i ? "," : "") + cells[i];
    return s + "\n";
  };
  std::string s = line(head);
  for (const auto& l : run.at("layers"))
    s += line(
        row(l.at("name").get<std::string>(), l.at("type").get<std::string>(), l, l.at("energy")));
  s += line(row("total", "", run.at("totals"), parts));
  // After the model load (docs/report.md, "Load and steady state"): the figures the block has,
  // the per-bucket, per-level and per-part columns left empty.
  if (run.contains("steady_state")) {
    const auto& st = run.at("steady_state");
    std::vector<std::string> r = {"steady_state", ""};
    for (std::size_t i = 2; i < head.size(); ++i)
      r.push_back(st.contains(head[i]) ? cell(num(st, head[i].c_str())) : std::string());
    s += line(r);
  }
  return s;
}

std::vector<std::pair<std::string, std::string>> csv_reports(const ordered_json& run) {
  return {{kCsvReportFiles[0], compute_report_csv(run)},
          {kCsvReportFiles[1], bandwidth_report_csv(run)},
          {kCsvReportFiles[2], layers_csv(run)}};
}

std::string run_markdown(const ordered_json& run) {
  std::string s = fmt::format("# {} on {}\n\n", run.at("workload").at("model").get<std::string>(),
                              machine(run).at("name").get<std::string>());
  s += workload_line(run.at("workload")) + "\n";
  std::vector<std::string> head, cells;
  for (const auto& c : kCompareColumns) {
    head.emplace_back(c.name);
    cells.push_back(c.value(run));
  }
  s += md_header(head) + md_row(cells) + "\n";
  s += "Energy by component (µJ):\n\n";
  std::vector<std::string> eh, ev;
  for (const auto& [k, v] : run.at("energy").items()) {
    eh.push_back(k.substr(0, k.size() - 2));
    ev.push_back(fmt::format("{:.1f}", 1e6 * v.get<double>()));
  }
  s += md_header(eh) + md_row(ev) + "\n";
  s += "Per layer (docs/report.md, \"Per-layer cycles\"):\n\n" + layers_markdown(run);
  return s;
}

std::string fit_markdown(const ordered_json& fit) {
  std::string s = fmt::format("# {} trained on {}\n\n", fit.at("model").get<std::string>(),
                              fit.at("chip").get<std::string>());
  s += fmt::format(
      "Steps: {}, each a global batch of {} images ({} replicas, micro-batches of {}); {} at "
      "learning rate {:g}; {}.\n\n",
      fit.at("steps").get<std::uint64_t>(), fit.at("global_batch").get<std::uint64_t>(),
      fit.at("replicas").get<std::uint64_t>(), fit.at("micro_batch").get<std::uint64_t>(),
      fit.at("optimizer").get<std::string>(), num(fit, "learning_rate"),
      fit.contains("outputs_computed") ? "timing only: no losses or weights computed"
      : fit.at("checked").get<bool>()  ? "every step checked bit for bit against the reference"
      : fit.value("mode", "") == "scale_out"
          ? "scale-out: chip 0 simulated, the others taken as identical; timing only"
          : "not checked (--no-check)");
  // Big-batch practice (docs/training.md): the warm-up's schedule and the loss's smoothing.
  if (fit.contains("warmup")) {
    const auto steps = fit.at("warmup").at("steps").get<std::uint64_t>();
    const double lr = num(fit, "learning_rate");
    s += fmt::format(
        "Warm-up: the learning rate rises linearly over the first {} steps, step t at {:g} x t / "
        "{}, then stays at {:g} (per_step[].learning_rate in the JSON).\n\n",
        steps, lr, steps, lr);
  }
  if (fit.contains("label_smoothing"))
    s += fmt::format("Label smoothing: {:g} (targets (1 - E) x onehot + E / classes).\n\n",
                     num(fit, "label_smoothing"));
  if (fit.contains("bn_group"))
    s += fmt::format(
        "Distributed BatchNormalization: statistics over groups of {:g} replicas, all-reduced "
        "by the chips (the `BatchNormalization group sums` row, in communication).\n\n",
        num(fit, "bn_group"));
  s += md_header({"epoch", "loss", "accuracy", "val_loss", "val_accuracy", "simulated s",
                  "validation simulated s", "energy (J)"});
  for (const auto& e : fit.at("epochs")) {
    auto opt = [&](const char* k) {
      return e.contains(k) ? fmt::format("{:.4f}", num(e, k)) : std::string("-");
    };
    s += md_row({cell(num(e, "epoch")), opt("loss"), opt("accuracy"), opt("val_loss"),
                 opt("val_accuracy"), fmt::format("{:.6f}", num(e, "simulated_seconds")),
                 e.contains("val_simulated_seconds")
                     ? fmt::format("{:.6f}", num(e, "val_simulated_seconds"))
                     : "-",
                 fmt::format("{:.4f}", num(e, "energy_j"))});
  }
  if (!fit.contains("step")) return s;
  // The steps after the first (docs/report.md, "Training").
  if (fit.contains("steady_state")) {
    const auto& st = fit.at("steady_state");
    s += fmt::format(
        "\nSteady state (steps 2..{}): {} cycles = {:.6f} s per step, {} images/s, {:.3f} TFLOPS, "
        "MXU utilization {:.2f}%, {:.3f} mJ per image\n",
        st.at("steps").get<std::uint64_t>() + 1, thousands(num(st, "cycles_per_step")),
        num(st, "seconds_per_step"), thousands(num(st, "images_per_s")), num(st, "tflops"),
        100 * num(st, "utilization"), 1e3 * num(st, "energy_per_image_j"));
  }
  const auto& last = fit.at("step").at("last");
  const double cycles = num(last, "cycles");
  s += fmt::format(
      "\n## Step {} (the last)\n\n{} cycles = {:.6f} s simulated, {:.3f} TFLOPS, MXU "
      "utilization {:.2f}%, {:.3f} mJ\n\nThe step split (by retirement, docs/training.md):\n\n",
      last.at("step").get<std::uint64_t>(), thousands(cycles), num(last, "seconds"),
      num(last, "tflops"), 100 * num(last, "utilization"), 1e3 * num(last, "energy_j"));
  s += md_header({"part", "cycles", "share of cycles (%)"});
  for (const auto& [part, c] : last.at("split_cycles").items())
    s += md_row({part, thousands(c.get<double>()),
                 fmt::format("{:.1f}", 100 * ratio(c.get<double>(), cycles))});
  if (last.contains("all_reduce")) {
    const auto& a = last.at("all_reduce");
    s += fmt::format(
        "\nThe gradient's all-reduce ({} bucket{}{}): busy {} cycles, exposed {} (not "
        "overlapped with other work), hidden {} = {:.1f}% (docs/systems.md, \"Overlap\").\n",
        a.at("buckets").get<std::uint64_t>(), a.at("buckets").get<std::uint64_t>() == 1 ? "" : "s",
        a.at("overlap").get<bool>() ? ", overlapping the backward pass" : "",
        thousands(num(a, "cycles")), thousands(num(a, "exposed_cycles")),
        thousands(num(a, "hidden_cycles")), 100 * num(a, "hidden_share"));
  }
  // The fit report names its chip only; its clock and peak follow from the step's figures.
  const double clock_hz = ratio(cycles, num(last, "seconds"));
  s += "\nPer tag (docs/report.md, \"Per-layer cycles\"):\n\n" +
       layers_markdown(last.at("layers"), cycles,
                       {clock_hz, ratio(num(last, "peak_ops_per_s"), 2 * clock_hz)});
  return s;
}

// Each run's name in a comparison; two configs with the same name (a variant that kept its
// parent's) are told apart by their files.
std::vector<std::string> compare_labels(const ordered_json& runs) {
  std::map<std::string, int> seen;
  for (const auto& r : runs) ++seen[machine(r).at("name").get<std::string>()];
  std::vector<std::string> labels;
  for (const auto& r : runs) {
    const std::string name = machine(r).at("name").get<std::string>();
    labels.push_back(seen[name] > 1
                         ? fmt::format("{} ({})", name, machine(r).at("file").get<std::string>())
                         : name);
  }
  return labels;
}

std::string compare_markdown(const ordered_json& cmp) {
  std::string s = "# Chip comparison\n\n" + workload_line(cmp.at("workload")) + "\n";
  std::vector<std::string> head;
  for (const auto& c : kCompareColumns) head.emplace_back(c.name);
  s += md_header(head);
  const std::vector<std::string> labels = compare_labels(cmp.at("runs"));
  std::size_t i = 0;
  for (const auto& r : cmp.at("runs")) {
    std::vector<std::string> cells;
    for (const auto& c : kCompareColumns) cells.push_back(c.value(r));
    cells[0] = labels[i++];
    s += md_row(cells);
  }
  if (cmp.contains("failed"))
    for (const auto& f : cmp.at("failed"))
      s += fmt::format("\nFAILED: {} — {}\n",
                       f.value("chip_file", f.value("system_file", std::string())),
                       f.at("error").get<std::string>());
  i = 0;
  for (const auto& r : cmp.at("runs"))
    s += fmt::format("\n## {}\n\n", labels[i++]) + layers_markdown(r);
  return s;
}

std::string compare_csv(const ordered_json& cmp) {
  std::string s =
      "chip,chip_file,cycles,seconds,images_per_s,macs,ops_per_s,peak_ops_per_s,utilization,"
      "bytes_off_chip,bytes_host_link,macs_per_off_chip_byte,energy_j,energy_per_image_j,"
      "avg_power_w,ops_per_j,top1,bit_exact,steady_state_images_per_s\n";
  for (const auto& r : cmp.at("runs")) {
    const auto& t = r.at("totals");
    const bool checked = r.contains("accuracy");
    s += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
        machine(r).at("name").get<std::string>(), machine(r).at("file").get<std::string>(),
        cell(num(t, "cycles")), cell(num(t, "seconds")), cell(num(t, "images_per_s")),
        cell(num(t, "macs")), cell(num(t, "ops_per_s")), cell(num(t, "peak_ops_per_s")),
        cell(num(t, "utilization")), cell(num(t, "bytes_off_chip")),
        cell(num(t, "bytes_host_link")), cell(num(t, "macs_per_off_chip_byte")),
        cell(num(t, "energy_j")), cell(num(t, "energy_per_image_j")), cell(num(t, "avg_power_w")),
        cell(num(t, "ops_per_j")),
        checked && r["accuracy"].contains("top1") ? cell(r["accuracy"]["top1"].get<double>()) : "",
        checked ? (r["accuracy"]["bit_exact"].get<bool>() ? "yes" : "no") : "",
        r.contains("steady_state") ? cell(num(r.at("steady_state"), "images_per_s")) : "");
  }
  return s;
}

}  // namespace tpu::report
