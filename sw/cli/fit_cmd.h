// `tpusim fit`: the tutorial's model.fit on the simulated chip (docs/training.md): Keras's log on
// standard error, a tpusim.fit/1 report (--json, --markdown) and a trace (--trace).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "sw/sim/fit.h"

namespace tpu::cli {

struct FitCommand {
  std::string chip;
  std::string system;
  sim::FitOptions options;
  std::string optimizer = "adam";
  std::optional<float> weight_decay, lars_eta;  // lars only (nn::Optimizer's defaults)
  std::string activations = "auto";
  std::uint32_t steps = 0;  // --steps: one epoch of this many steps
  bool random_weights = false;
  bool no_check = false;
  std::string json;
  std::string markdown;
};

void add_fit_options(CLI::App* app, FitCommand& cmd);
void run_fit(FitCommand& cmd);

}  // namespace tpu::cli
