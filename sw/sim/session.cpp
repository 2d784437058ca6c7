#include "sw/sim/session.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <optional>
#include <random>
#include <system_error>

#include "hw/chip/chip.h"
#include "hw/common/error.h"
#include "hw/system/system.h"
#include "sw/compiler/compiler.h"
#include "sw/compiler/rewrite.h"
#include "sw/data/idx.h"
#include "sw/driver/driver.h"
#include "sw/import/import.h"
#include "sw/io/output.h"
#include "sw/io/signals.h"
#include "sw/nn/metrics.h"
#include "sw/nn/quantized.h"
#include "sw/nn/reference.h"
#include "sw/nn/weights.h"
#include "sw/report/trace_writer.h"
#include "sw/sim/activity.h"
#include "sw/sim/compiled.h"
#include "sw/sim/host_memory.h"
#include "sw/sim/progress.h"
#include "sw/sim/workload.h"

namespace tpu::sim {
namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Simulated {
  std::vector<float> outputs;
  Cycle cycles = 0;
  Cycle loaded_at = 0;
  LayerCounters counters;
  Counters load;  // every chip's counters when its driver had written the memory image
  std::vector<ordered_json> mxus;
};

// Every chip of `sys` runs `prog` on its share of the images (encoded: chip c's are the c-th
// of sys.chips() equal parts), each with its own driver, as TPUStrategy's replicas serve a batch
// (docs/systems.md, "Inference on a system"). A chip alone is built as itself.
Simulated simulate(const SystemConfig& sys, const compiler::Program& prog,
                   const std::vector<std::uint8_t>& encoded, Trace* trace, SimOptions options) {
  const ChipConfig& cfg = sys.chip;
  const std::uint32_t n = sys.chips();
  std::optional<Chip> alone;
  std::optional<System> system;
  std::vector<Chip*> chips;
  if (n == 1) {
    chips.push_back(&alone.emplace("chip", cfg, std::nullopt, options));
  } else {
    system.emplace("system", sys, System::Scale::kEveryChip, options);
    for (std::uint32_t c = 0; c < n; ++c) chips.push_back(&system->chip(c));
  }
  const std::size_t share = encoded.size() / n;
  Simulated s;
  std::deque<driver::Driver> drivers;
  for (std::uint32_t c = 0; c < n; ++c) {
    const std::string name = n == 1 ? std::string("driver") : fmt::format("driver_{}", c);
    drivers.emplace_back(name.c_str(), prog, encoded.data() + c * share, share, chips[c]->clock(),
                         options.timing_only);
    driver::attach(drivers.back(), *chips[c]);
    drivers.back().on_loaded([&s, chip = chips[c]] { s.load += chip->counters().total(); });
    if (trace) chips[c]->enable_trace(*trace, c * cfg.tensor_cores);
  }
  run_simulation(n == 1 ? "run" : fmt::format("run on {} chips", n), cfg.clock_hz(), [&] {
    Progress p;
    for (const Chip* chip : chips)
      for (std::uint32_t k = 0; k < cfg.tensor_cores; ++k) {
        p.done += chip->cores[k]->sequencer->issued();
        p.total += prog.cores[k].size();
      }
    return p;
  });
  std::string where;
  bool done = true;
  for (std::uint32_t c = 0; c < n; ++c) {
    if (drivers[c].done()) continue;
    done = false;
    for (std::uint32_t k = 0; k < cfg.tensor_cores; ++k)
      if (chips[c]->halts(k) == 0)
        where += fmt::format(" {}core {} stopped after issuing {} of {} instructions;",
                             n == 1 ? std::string() : fmt::format("chip {} ", c), k,
                             chips[c]->cores[k]->sequencer->issued(), prog.cores[k].size());
  }
  if (!done)
    throw ProgramError(fmt::format("the {} deadlocked (no event left before every core halted):",
                                   n == 1 ? "chip" : "system") +
                       where);
  for (const Chip* chip : chips)
    for (std::uint32_t k = 0; k < cfg.tensor_cores; ++k)
      s.cycles = std::max(s.cycles, chip->halted_at(k));
  for (std::uint32_t c = 0; c < n; ++c) {
    Chip& chip = *chips[c];
    chip.finish(s.cycles);
    if (!options.timing_only) {
      const std::vector<float> out = drivers[c].outputs();
      s.outputs.insert(s.outputs.end(), out.begin(), out.end());
    }
    s.loaded_at = std::max(s.loaded_at, drivers[c].loaded_at());
    s.counters += chip.counters();
    for (const auto& core : chip.cores)
      for (std::size_t m = 0; m < core->mxus.size(); ++m) {
        ordered_json j;
        if (n > 1) j["chip"] = c;
        j["core"] = core->id();
        j["mxu"] = m;
        j["cycles"] = buckets_json(core->mxus[m]->buckets());
        s.mxus.push_back(std::move(j));
      }
  }
  return s;
}

}  // namespace

RunResult run_session(const ChipConfig& cfg, const RunOptions& opt) {
  return run_session(system_of_chip(cfg), opt);
}

RunResult run_session(const SystemConfig& sys, const RunOptions& opt) {
  const ChipConfig& cfg = sys.chip;
  const std::uint32_t chips = sys.chips();
  const double t0 = now_s();
  const CompiledWorkload compiled = compile_workload(sys, opt);
  const std::uint64_t images = compiled.images_per_chip;
  const std::string& model_file = compiled.model_file;
  const ir::Graph& model = compiled.model;
  const std::string& weights_source = compiled.weights_source;
  const nn::Weights& weights = compiled.weights;
  const Inputs& in = compiled.inputs;
  const nn::QuantizedModel& q = compiled.quantized;
  const compiler::Program& prog = compiled.program;
  const auto encoded = nn::encode_input(q, in.images.data(), opt.images);
  // Timing only: no outputs to check.
  const bool check = opt.check && !opt.timing_only;

  // The references run on another core while the (single-threaded) kernel simulates: they
  // share nothing with it but read-only inputs.
  struct Reference {
    std::vector<float> quantized, fp32;
    double wall = 0;
  };
  auto compute_reference = [&] {
    Reference ref;
    const double t = now_s();
    ref.quantized = nn::forward_quantized(q, in.images.data(), opt.images);
    if (!in.labels.empty())
      ref.fp32 = nn::forward_float(model, weights, in.images.data(), opt.images);
    ref.wall = now_s() - t;
    return ref;
  };
  std::future<Reference> reference;
  if (check) {
    // The thread blocks the termination signals (it inherits the mask in force when it is
    // made), so they reach the main thread only (sw/io/signals.h). A process that may not start
    // another thread (RLIMIT_NPROC) computes the reference after the simulation instead.
    io::SignalBlock block;
    try {
      reference = std::async(std::launch::async, compute_reference);
    } catch (const std::system_error&) {
      reference = std::async(std::launch::deferred, compute_reference);
    }
  }
  const double t_sim = now_s();
  Trace trace;
  SimOptions sim_options;
  sim_options.timing_only = opt.timing_only;
  const Simulated sim =
      simulate(sys, prog, encoded, opt.trace.empty() ? nullptr : &trace, sim_options);
  // The system as one chip for the rates and energy (every chip's MXUs and idle power).
  const ChipConfig all = system_as_one_chip(sys);
  const double sim_wall = now_s() - t_sim;
  RunResult result;
  if (!opt.trace.empty()) {
    std::vector<std::string> names;
    for (const auto& l : prog.layers) names.push_back(l.name);
    // The trace starts at cycle 0 with the memory image's upload (docs/trace.md).
    result.trace_json = report::chrome_trace_json(
        trace, all, names, {},
        report::load_and_counters(prog.cores, all.tensor_cores, size_of(cfg.mxu.input_type),
                                  sim.loaded_at, sim.load.host_bytes_in + sim.load.host_bytes_out));
  }

  const Counters tot = sim.counters.total();
  const double sim_cycles = static_cast<double>(sim.cycles);
  ordered_json r;
  r["schema"] = "tpusim.run/1";
  if (opt.timing_only) r["outputs_computed"] = false;
  r["chip"] = chip_summary_json(cfg);
  r["chip"]["file"] = cfg.file;
  if (chips > 1) {
    r["system"] = system_summary_json(sys);
    r["system"]["file"] = sys.file;
  }
  r["workload"] = {{"model", model.name}, {"model_file", model_file}, {"weights", weights_source},
                   {"inputs", in.source}, {"images", opt.images},     {"batch", opt.batch}};
  if (chips > 1) {
    r["workload"]["images_per_chip"] = images;
    r["workload"]["batch_per_chip"] = opt.batch / chips;
  }
  r["workload"].update(ordered_json{{"micro_batch_per_core", prog.micro_batch},
                                    {"instructions", prog.instruction_count()},
                                    {"weights_in_unified_buffer", prog.weights_in_ub},
                                    {"unified_buffer_bytes_used", prog.ub_bytes_used}});

  // Reference and accuracy.
  double ref_wall = 0;
  if (check) {
    const Reference refs = reference.get();
    const auto& ref = refs.quantized;
    ref_wall = refs.wall;
    const std::size_t k = prog.output_elements;
    std::uint64_t mismatches = 0;
    for (std::size_t i = 0; i < opt.images; ++i)
      mismatches +=
          std::memcmp(ref.data() + i * k, sim.outputs.data() + i * k, k * sizeof(float)) != 0;
    ordered_json acc;
    if (!in.labels.empty()) {
      acc["top1"] = nn::top1(sim.outputs, k, in.labels);
      acc["reference_top1"] = nn::top1(ref, k, in.labels);
      acc["float_top1"] = nn::top1(refs.fp32, k, in.labels);
    }
    acc["bit_exact"] = mismatches == 0;
    acc["mismatches"] = mismatches;
    r["accuracy"] = acc;
  }

  ordered_json t;
  t["cycles"] = sim.cycles;
  std::uint64_t network_macs = 0;
  for (const auto& l : prog.layers) network_macs += l.macs_per_image * opt.images;
  t.update(activity_json(all, tot, sim_cycles, sim_cycles, opt.images, network_macs));
  t["memory_image_loaded_cycle"] = sim.loaded_at;
  r["energy"] = t["energy"];
  t.erase("energy");
  r["totals"] = t;
  // The one-time model load, then every batch (docs/report.md, "Load and steady state").
  const std::uint32_t batch = opt.batch / chips;
  const std::uint64_t batches = (images + batch - 1) / batch;
  r["load"] = load_json(all, sim.load, sim.loaded_at);
  r["steady_state"] =
      steady_state_json(all, counts_since(tot, sim.load), sim.cycles - sim.loaded_at, batches,
                        opt.images, network_macs);
  r["mxus"] = sim.mxus;

  // Layers: tag 0 (setup, host I/O) and one row per model layer. A layer's cycles are the time
  // the cores' sequencers spent on it, averaged over the cores, so the rows add up to the total.
  ordered_json layers = ordered_json::array();
  const auto& by_layer = sim.counters.by_layer();
  for (std::size_t id = 0; id < prog.layers.size(); ++id) {
    const auto it = by_layer.find(static_cast<std::uint32_t>(id));
    const Counters c = it == by_layer.end() ? Counters{} : it->second;
    const double cyc = static_cast<double>(c.cycles) / all.tensor_cores;
    ordered_json l;
    l["name"] = prog.layers[id].name;
    l["type"] = prog.layers[id].type;
    l["cycles"] = cyc;
    l.update(activity_json(all, c, cyc, static_cast<double>(c.span()), opt.images,
                           prog.layers[id].macs_per_image * opt.images));
    layers.push_back(l);
  }
  r["layers"] = layers;
  r["host"] = {{"wall_seconds", now_s() - t0},
               {"simulation_wall_seconds", sim_wall},
               {"reference_wall_seconds", ref_wall},
               {"simulated_macs_per_s", static_cast<double>(tot.macs) / sim_wall}};
  if (!opt.trace.empty()) r["host"]["trace_file"] = opt.trace;
  result.report = std::move(r);
  return result;
}

ordered_json run_workload(const ChipConfig& cfg, const RunOptions& opt) {
  return run_workload(system_of_chip(cfg), opt);
}

ordered_json run_workload(const SystemConfig& sys, const RunOptions& opt) {
  RunResult r = run_session(sys, opt);
  if (!opt.trace.empty()) io::write_file(opt.trace, r.trace_json, "--trace output");
  return std::move(r.report);
}

std::string summary(const ordered_json& r) {
  const auto& t = r["totals"];
  const auto& c = r["chip"];
  std::string s;
  s += fmt::format("chip        {} ({})\n", c["name"].get<std::string>(),
                   c["file"].get<std::string>());
  if (r.contains("system"))
    s += fmt::format("system      {} ({}): {} chips, each on {} of the images\n",
                     r["system"]["name"].get<std::string>(), r["system"]["file"].get<std::string>(),
                     r["system"]["chips"].get<std::uint64_t>(),
                     r["workload"]["images_per_chip"].get<std::uint64_t>());
  s += fmt::format(
      "workload    {} on {} images, batch {}; weights: {}; inputs: {}\n",
      r["workload"]["model"].get<std::string>(), r["workload"]["images"].get<std::uint64_t>(),
      r["workload"]["batch"].get<std::uint32_t>(), r["workload"]["weights"].get<std::string>(),
      r["workload"]["inputs"].get<std::string>());
  if (r.contains("outputs_computed"))
    s += "outputs     not computed (--timing-only): cycles, bytes and energy as a full run's\n";
  if (r.contains("accuracy")) {
    const auto& a = r["accuracy"];
    if (a.contains("top1"))
      s += fmt::format("accuracy    top-1 {:.2f}% (quantized reference {:.2f}%, float {:.2f}%)\n",
                       100 * a["top1"].get<double>(), 100 * a["reference_top1"].get<double>(),
                       100 * a["float_top1"].get<double>());
    s += fmt::format("bit-exact   {} ({} mismatching images)\n",
                     a["bit_exact"].get<bool>() ? "yes" : "NO",
                     a["mismatches"].get<std::uint64_t>());
  }
  s += fmt::format("cycles      {}  = {:.6f} s simulated, {:.0f} images/s\n",
                   t["cycles"].get<std::uint64_t>(), t["seconds"].get<double>(),
                   t["images_per_s"].get<double>());
  s += fmt::format("throughput  {:.3f} T ops/s of {:.2f} peak, utilization {:.2f}%\n",
                   t["ops_per_s"].get<double>() / 1e12, t["peak_ops_per_s"].get<double>() / 1e12,
                   100 * t["utilization"].get<double>());
  s += fmt::format("energy      {:.3f} mJ per image, {:.2f} W average, {:.3g} ops/J\n",
                   1e3 * t["energy_per_image_j"].get<double>(), t["avg_power_w"].get<double>(),
                   t["ops_per_j"].get<double>());
  const auto& st = r["steady_state"];
  s += fmt::format(
      "steady      after the {}-cycle model load: {:.0f} cycles per batch ({} batches), {:.0f} "
      "images/s, {:.3f} T ops/s, utilization {:.2f}%, {:.3f} mJ per image\n",
      r["load"]["cycles"].get<std::uint64_t>(), st["cycles_per_batch"].get<double>(),
      st["batches"].get<std::uint64_t>(), st["images_per_s"].get<double>(),
      st["ops_per_s"].get<double>() / 1e12, 100 * st["utilization"].get<double>(),
      1e3 * st["energy_per_image_j"].get<double>());
  s += fmt::format("host        {:.2f} s wall ({:.2f} s simulating, {:.2f} s reference)\n",
                   r["host"]["wall_seconds"].get<double>(),
                   r["host"]["simulation_wall_seconds"].get<double>(),
                   r["host"]["reference_wall_seconds"].get<double>());
  return s;
}

}  // namespace tpu::sim
