// `tpusim run` and the workload options it shares with `tpusim compare`.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "hw/config/system_config.h"
#include "sw/io/output.h"
#include "sw/sim/session.h"

namespace tpu::cli {

struct RunCommand {
  std::string chip, system;  // one of them
  sim::RunOptions options;
  std::string weights;
  bool no_check = false;
  // Outputs.
  std::string json, csv, scalesim_dir, markdown;  // csv: the per-layer table, one file
};

// --model, --weights, --random-weights, --seed, --data-dir, --images, --batch, --no-check,
// --timing-only.
void add_workload_options(CLI::App* app, RunCommand& cmd);
// The same options as command-line arguments, for a child `tpusim run`.
std::vector<std::string> workload_args(const RunCommand& cmd);
// Completes `cmd.options` from the flags; throws InputError for contradictory ones.
void resolve_workload(RunCommand& cmd);
// The files the workload options name (model or topology, weights), for OutputSet::check.
std::vector<io::NamedInput> workload_inputs(const RunCommand& cmd);

// The config `command` runs on: --system's, or --chip's as a one-chip system; throws InputError
// when neither is given.
SystemConfig chip_or_system(const std::string& chip, const std::string& system,
                            const std::string& command);

void run_run(RunCommand& cmd);

}  // namespace tpu::cli
