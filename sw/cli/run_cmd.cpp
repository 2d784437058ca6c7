#include "sw/cli/run_cmd.h"

#include <iostream>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/report/files.h"
#include "sw/report/formats.h"

namespace tpu::cli {

void add_workload_options(CLI::App* app, RunCommand& cmd) {
  auto& ro = cmd.options;
  app->add_option("--model", ro.model, "Model (Keras-style JSON)")->capture_default_str();
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
}

std::vector<std::string> workload_args(const RunCommand& cmd) {
  const auto& ro = cmd.options;
  std::vector<std::string> a = {"--model",  ro.model,
                                "--seed",   std::to_string(ro.seed),
                                "--images", std::to_string(ro.images),
                                "--batch",  std::to_string(ro.batch)};
  if (!cmd.weights.empty()) a.insert(a.end(), {"--weights", cmd.weights});
  if (ro.random_weights) a.emplace_back("--random-weights");
  if (!ro.data_dir.empty()) a.insert(a.end(), {"--data-dir", ro.data_dir});
  if (cmd.no_check) a.emplace_back("--no-check");
  return a;
}

void resolve_workload(RunCommand& cmd) {
  if (!cmd.weights.empty() && cmd.options.random_weights)
    throw InputError("--weights and --random-weights exclude each other");
  if (!cmd.weights.empty()) cmd.options.weights = cmd.weights;
  cmd.options.check = !cmd.no_check;
}

void run_run(RunCommand& cmd) {
  const ChipConfig cfg = load_chip_config(cmd.chip);
  resolve_workload(cmd);
  const auto report = report::run_workload(cfg, cmd.options);
  std::cout << report::summary(report);
  if (!cmd.json.empty()) report::write_atomically(cmd.json, report.dump(2) + "\n");
  if (!cmd.csv_dir.empty()) report::write_csv_reports(report, cmd.csv_dir);
  if (!cmd.markdown.empty()) report::write_atomically(cmd.markdown, report::run_markdown(report));
}

}  // namespace tpu::cli
