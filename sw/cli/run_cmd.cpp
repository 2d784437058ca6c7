#include "sw/cli/run_cmd.h"

#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <optional>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/cli/shipped.h"
#include "sw/io/output.h"
#include "sw/report/formats.h"

namespace tpu::cli {

void add_workload_options(CLI::App* app, RunCommand& cmd) {
  auto& ro = cmd.options;
  ro.model = shipped_file(ro.model);
  app->add_option("--model", ro.model,
                  "Model: tpusim or Keras JSON, ONNX (docs/onnx.md) or a SCALE-Sim CSV")
      ->capture_default_str();
  // run and compare take the same workload options: compare hands them to each chip's run.
  app->add_option("--topology", ro.topology,
                  "SCALE-Sim topology CSV (convolution or M,N,K GEMM rows) to run instead of "
                  "--model, with random weights (docs/models.md)");
  app->add_option("--weights", cmd.weights,
                  "Weights file (default: configs/weights/<model>.bin beside the model's folder, "
                  "if present)");
  app->add_flag("--random-weights", ro.random_weights, "Seeded random weights instead");
  app->add_option("--seed", ro.seed, "Seed for random weights and inputs")->capture_default_str();
  app->add_option("--data-dir", ro.data_dir, "Fashion-MNIST directory (default: Debian's)");
  app->add_option("--images", ro.images, "Images (or generated samples) to run")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  app->add_option("--batch", ro.batch, "Images per step across the chip")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app->add_flag("--no-check", cmd.no_check, "Skip the bit-exact comparison with the reference");
  app->add_flag("--timing-only", ro.timing_only,
                "Cycles, bytes and energy only, as a full run's: compute no outputs, store no "
                "data (no check, no accuracy)");
}

std::vector<std::string> workload_args(const RunCommand& cmd) {
  const auto& ro = cmd.options;
  std::vector<std::string> a = {"--model",  ro.model,
                                "--seed",   std::to_string(ro.seed),
                                "--images", std::to_string(ro.images),
                                "--batch",  std::to_string(ro.batch)};
  if (!ro.topology.empty()) a.insert(a.end(), {"--topology", ro.topology});
  if (!cmd.weights.empty()) a.insert(a.end(), {"--weights", cmd.weights});
  if (ro.random_weights) a.emplace_back("--random-weights");
  if (!ro.data_dir.empty()) a.insert(a.end(), {"--data-dir", ro.data_dir});
  if (cmd.no_check) a.emplace_back("--no-check");
  if (ro.timing_only) a.emplace_back("--timing-only");
  return a;
}

void resolve_workload(RunCommand& cmd) {
  if (!cmd.weights.empty() && cmd.options.random_weights)
    throw InputError("--weights and --random-weights exclude each other");
  if (!cmd.weights.empty()) cmd.options.weights = cmd.weights;
  cmd.options.check = !cmd.no_check;
}

std::vector<io::NamedInput> workload_inputs(const RunCommand& cmd) {
  const auto& o = cmd.options;
  return {{o.topology.empty() ? o.model : o.topology, o.topology.empty() ? "model" : "topology"},
          {cmd.weights, "weights file"}};
}

SystemConfig chip_or_system(const std::string& chip, const std::string& system,
                            const std::string& command) {
  if (chip.empty() && system.empty())
    throw InputError(
        fmt::format("{} needs a chip config (--chip) or a system config (--system)", command));
  return system.empty() ? system_of_chip(load_chip_config(chip)) : load_system_config(system);
}

void run_run(RunCommand& cmd) {
  resolve_workload(cmd);
  // Every output is resolved and its temporary created before the simulation: an impossible
  // path costs nothing, and the set is written all or nothing (sw/io/output.h).
  io::OutputSet out;
  std::optional<std::size_t> json, csv, markdown, trace;
  std::vector<std::size_t> scalesim;
  if (!cmd.json.empty()) json = out.add(cmd.json, "--json output");
  // --csv names one file in every command (docs/cli.md); it was run's directory of SCALE-Sim's
  // files, which is --scalesim-csv now.
  std::error_code ec;
  if (!cmd.csv.empty() && cmd.csv != "-" && std::filesystem::is_directory(cmd.csv, ec))
    throw InputError(fmt::format(
        "--csv {}: a directory; --csv names one file (the per-layer table), and --scalesim-csv "
        "DIR writes COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv and LAYERS.csv into a directory",
        cmd.csv));
  if (!cmd.csv.empty()) csv = out.add(cmd.csv, "--csv output");
  if (!cmd.scalesim_dir.empty()) {
    out.add_directory(cmd.scalesim_dir, "--scalesim-csv output");
    for (const auto& name : report::kCsvReportFiles)
      scalesim.push_back(out.add(cmd.scalesim_dir + "/" + name, "--scalesim-csv output"));
  }
  if (!cmd.markdown.empty()) markdown = out.add(cmd.markdown, "--markdown output");
  if (!cmd.options.trace.empty()) trace = out.add(cmd.options.trace, "--trace output");

  const SystemConfig sys = chip_or_system(cmd.chip, cmd.system, "run");
  out.check(workload_inputs(cmd));
  sim::RunResult r = sim::run_session(sys, cmd.options);
  if (json) out.set(*json, r.report.dump(2) + "\n");
  if (csv) out.set(*csv, report::layers_csv(r.report));
  if (!scalesim.empty()) {
    const auto files = report::csv_reports(r.report);
    for (std::size_t i = 0; i < scalesim.size(); ++i) out.set(scalesim[i], files.at(i).second);
  }
  if (markdown) out.set(*markdown, report::run_markdown(r.report));
  if (trace) out.set(*trace, std::move(r.trace_json));
  out.commit();
  (out.uses_stdout() ? std::cerr : std::cout) << sim::summary(r.report);
}

}  // namespace tpu::cli
