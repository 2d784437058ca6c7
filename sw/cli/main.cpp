// tpusim: the command line. Each subcommand runs at most one simulation per process: the
// SystemC kernel cannot be reset.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>
#include <systemc>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"
#include "hw/isa/assembler.h"
#include "sw/cli/build_info.h"
#include "sw/cli/compare_cmd.h"
#include "sw/cli/fit_cmd.h"
#include "sw/cli/graph_cmd.h"
#include "sw/cli/info.h"
#include "sw/cli/run_cmd.h"
#include "sw/cli/shipped.h"
#include "sw/cli/sweep_cmd.h"
#include "sw/cli/train_cmd.h"
#include "sw/io/output.h"
#include "sw/io/signals.h"
#include "sw/sim/host_memory.h"

namespace {

// A command-line mistake as the one line after "tpusim: " (docs/cli.md, "Usage errors"): what
// was wrong, naming the argument, and what is allowed or where the list is.
std::string usage_error(const CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* cmd = &app;
  while (!cmd->get_subcommands().empty()) cmd = cmd->get_subcommands().front();
  const bool top = cmd == &app;
  const std::string name = top ? "tpusim" : cmd->get_name();
  const std::string help = top ? "tpusim --help" : "tpusim " + name + " --help";
  std::string commands;
  for (const CLI::App* sub : app.get_subcommands({}))
    commands += (commands.empty() ? "" : ", ") + sub->get_name();
  // An argument nobody took says more than what is missing because of it: `run --bogus` is
  // about --bogus, not about the --chip CLI11 checks first.
  for (const CLI::App* a = cmd; a != nullptr; a = a->get_parent()) {
    const std::vector<std::string> left = a->remaining();
    if (left.empty()) continue;
    const std::string& arg = left.front();
    const std::string where = a == &app ? "tpusim" : a->get_name();
    if (!arg.empty() && arg[0] == '-')
      return fmt::format("{}: not an option of {} ({} lists them)", arg, where,
                         a == &app ? "tpusim --help" : "tpusim " + where + " --help");
    if (a == &app) return fmt::format("{}: no such command (commands: {})", arg, commands);
    std::vector<std::string> positionals;
    for (const CLI::Option* o : a->get_options())
      if (!o->nonpositional()) positionals.push_back(o->get_name());
    return fmt::format("{}: unexpected argument; {} takes {}", arg, where,
                       positionals.empty()
                           ? std::string("no positional argument")
                           : fmt::format("one {}", fmt::join(positionals, " and one ")));
  }
  if (top && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr)
    return fmt::format("a command is required (commands: {}; tpusim --help describes them)",
                       commands);
  // CLI11's own message names the option and the rule (a range, a choice, "excludes");
  // some span lines, and a usage error is one.
  std::string what = e.what();
  for (char& c : what)
    if (c == '\n') c = ' ';
  // CLI11 prefixes a hidden option's error with its empty display name.
  if (what.rfind(": ", 0) == 0) what.erase(0, 2);
  return fmt::format("{}{} ({} lists the options)", top ? "" : name + ": ", what, help);
}

// A flag that names a file under another name now, so that each flag means one thing in every
// command (docs/cli.md: `--out` is sweep's directory): hidden from --help, and given, one usage
// error that names the new flag.
void renamed_flag(CLI::App* cmd, const std::string& old_name, const std::string& now) {
  static std::string ignored;
  cmd->add_option(old_name, ignored)->group("")->each([old_name, now](const std::string&) {
    throw CLI::ValidationError(
        old_name,
        fmt::format("renamed: the file is {} ({} names a directory, as in sweep)", now, old_name));
  });
}

int run_cli(int argc, char** argv) {
  CLI::App app{"tpusim: a SystemC TLM-2.0 model of Google's TPU chips"};
  app.require_subcommand(1);
  // The release is the linked library's, not its headers': the one that runs.
  app.set_version_flag("--version", fmt::format("tpusim {} (git {}, SystemC {})", TPUSIM_VERSION,
                                                tpu::cli::kGitCommit, sc_core::sc_release()));

  std::string chip_file, system_file, info_json;
  CLI::App* info = app.add_subcommand(
      "info", "Print a chip's or a system's resolved configuration and derived figures");
  // Exactly one of --chip and --system (docs/systems.md).
  CLI::Option_group* info_config = info->add_option_group("config", "What to describe");
  info_config->add_option("--chip", chip_file, "Chip config (JSON)");
  CLI::Option* info_system =
      info_config->add_option("--system", system_file, "System config (JSON, docs/systems.md)");
  info_config->require_option(1);
  // A path, as --json is everywhere; bare, it is `-`, as when it was a switch.
  CLI::Option* info_json_opt =
      info->add_option("--json", info_json,
                       "Write the configuration as JSON to FILE (bare or -: standard output, "
                       "instead of the text)")
          ->expected(0, 1)
          ->type_name("[FILE]");

  tpu::cli::RunCommand rc;
  CLI::App* run =
      app.add_subcommand("run", "Run a network on a simulated chip or system and report");
  CLI::Option* run_chip = run->add_option("--chip", rc.chip, "Chip config (JSON)");
  run->add_option("--system", rc.system,
                  "System config (JSON): every chip runs its share of the images and of the "
                  "batch (docs/systems.md)")
      ->excludes(run_chip);
  tpu::cli::add_workload_options(run, rc);
  run->add_option("--json", rc.json, "Write the JSON report here (docs/report.md)");
  run->add_option("--csv", rc.csv,
                  "Write the per-layer table as CSV (LAYERS.csv's columns) to this file");
  run->add_option("--scalesim-csv", rc.scalesim_dir,
                  "Write COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv (SCALE-Sim's columns) and "
                  "LAYERS.csv into this directory");
  run->add_option("--markdown", rc.markdown, "Write the report as Markdown tables here");
  run->add_option("--trace", rc.options.trace,
                  "Write a Chrome trace-event JSON here (opens in ui.perfetto.dev; docs/trace.md)");

  tpu::cli::CompareCommand cc;
  CLI::App* compare = app.add_subcommand(
      "compare", "Run one workload on several chips, each in its own process, side by side");
  compare->add_option("--chip", cc.chips, "Chip config (JSON), repeatable");
  compare->add_option("--system", cc.systems,
                      "System config (JSON), repeatable: runs after the chips (docs/systems.md)");
  tpu::cli::add_workload_options(compare, cc.workload);
  compare->add_option("-j,--jobs", cc.jobs, "Simulations at a time (default: one per core)")
      ->check(CLI::Range(1u, 1024u));
  compare->add_option("--json", cc.json, "Write the tpusim.compare/1 JSON here");
  compare->add_option("--markdown", cc.markdown, "Write the Markdown comparison here");
  compare->add_option("--csv", cc.csv, "Write one CSV row per chip here");
  compare->add_option("--trace", cc.trace,
                      "Write one Chrome trace-event JSON here, each run's tracks under its "
                      "chip's name (docs/trace.md)");

  tpu::cli::SweepCommand sc;
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Run every design point of a sweep spec, each in its own process (docs/sweeps.md)");
  sweep->add_option("spec", sc.spec, "Sweep spec (JSON)");
  sweep->add_option("--out", sc.out, "Results directory (default: results/<sweep name>)");
  sweep->add_option("-j,--jobs", sc.jobs, "Simulations at a time (default: one per core)")
      ->check(CLI::Range(1u, 1024u));
  sweep->add_option("--executor", sc.executor, "local or slurm (a job array)")
      ->check(CLI::IsMember({"local", "slurm"}));
  sweep->add_flag("--emit-only", sc.emit_only, "slurm: write the batch script, do not submit");
  sweep
      ->add_option("--max-array-size", sc.max_array_size,
                   "slurm: array indices per job array (default: MaxArraySize of `scontrol show "
                   "config`, else Slurm's 1001); more runs go into further arrays")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4000001}));
  sweep->add_option("--sbatch-arg", sc.sbatch_args, "slurm: an extra sbatch argument (repeatable)")
      ->allow_extra_args(false);
  sweep->add_flag("--retry-failed", sc.retry_failed, "Run failed points again too");
  sweep->add_option("--shuffle", sc.shuffle_seed, "Run the points in a random order (seed)");
  sweep->add_option("--task", sc.task, "Run one task of the sweep in --out (a Slurm array task)");
  sweep->add_flag("--timing-only", sc.timing_only,
                  "Every run with --timing-only: cycles, bytes and energy only, as full runs'");

  std::string asm_in, asm_out, disasm_in;
  CLI::App* asm_cmd =
      app.add_subcommand("asm", "Assemble text into a binary program (docs/isa.md)");
  asm_cmd->add_option("file", asm_in, "Assembly text")->required();
  asm_cmd->add_option("-o,--output", asm_out, "Binary program to write")->required();
  renamed_flag(asm_cmd, "--out", "-o, --output FILE");
  CLI::App* disasm_cmd = app.add_subcommand("disasm", "Print a binary program as assembly text");
  disasm_cmd->add_option("file", disasm_in, "Binary program")->required();

  tpu::cli::GraphCommand gc;
  gc.workload.options.model = tpu::cli::shipped_file(gc.workload.options.model);
  CLI::App* graph = app.add_subcommand(
      "graph", "Print a model's graph after each compiler pass (docs/compiler.md)");
  graph->add_option("--chip", gc.workload.chip,
                    "Chip config (JSON): add quantization, tiling and buffer lifetimes");
  graph
      ->add_option("--model", gc.workload.options.model,
                   "Model: tpusim or Keras JSON, ONNX (docs/onnx.md) or a SCALE-Sim CSV")
      ->capture_default_str();
  graph->add_option("--weights", gc.workload.weights, "Weights file");
  graph->add_flag("--random-weights", gc.workload.options.random_weights,
                  "Seeded random weights instead");
  graph->add_option("--seed", gc.workload.options.seed, "Seed for random weights and inputs")
      ->capture_default_str();
  graph->add_option("--data-dir", gc.workload.options.data_dir,
                    "Fashion-MNIST directory (default: Debian's)");
  graph->add_option("--pass", gc.pass, "Show this pass only");
  graph->add_option("--json", gc.json, "Write the graphs as JSON here (- for standard output)");

  tpu::cli::FitCommand fc;
  CLI::App* fit = app.add_subcommand(
      "fit", "Train a model on the simulated chip, as Keras's model.fit (docs/training.md)");
  tpu::cli::add_fit_options(fit, fc);

  tpu::cli::TrainCommand tc;
  tc.model = tpu::cli::shipped_file(tc.model);
  tc.out = tpu::cli::shipped_file(tc.out);
  CLI::App* train =
      app.add_subcommand("train", "Train a model on Fashion-MNIST and write its weights");
  train->add_option("--model", tc.model, "Model (Keras-style JSON)")->capture_default_str();
  train->add_option("--save", tc.out, "Weights file to write (metadata goes beside it, .json)")
      ->capture_default_str();
  renamed_flag(train, "--out", "--save FILE");
  train->add_option("--data-dir", tc.data_dir, "Fashion-MNIST directory (default: Debian's)");
  train->add_option("--epochs", tc.options.epochs)
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  train->add_option("--batch", tc.options.batch)
      ->capture_default_str()
      ->check(CLI::Range(1u, 60000u));
  train->add_option("--seed", tc.options.seed)->capture_default_str();
  train->add_option("--lr", tc.options.learning_rate, "Adam learning rate")
      ->capture_default_str()
      ->check(CLI::Range(1e-9, 10.0));
  train
      ->add_option("--input-scale", tc.options.input_scale,
                   "Pixel scale while training, folded into the first layer's weights")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1.0));

  // Help and --version print and succeed; any other command-line error is one `tpusim:` line and
  // status 2, as every other bad input (docs/robustness.md), not CLI11's own exit codes.
  try {
    if (app.get_name().empty()) app.name(argv[0]);
    // CLI11 takes the words last first.
    std::vector<std::string> words =
        tpu::cli::pair_sbatch_values(std::vector<std::string>(argv + 1, argv + argc));
    std::reverse(words.begin(), words.end());
    app.parse(words);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "tpusim: " << usage_error(app, e) << "\n";
    return 2;
  }

  if (info->parsed()) {
    tpu::io::OutputSet out;
    std::optional<std::size_t> json;
    if (info_json_opt->count() > 0)
      json = out.add(info_json.empty() ? "-" : info_json, "--json output");
    out.check({{info_system->count() > 0 ? system_file : chip_file, "config"}});
    auto print = [&](const auto& cfg) {
      if (json) out.set(*json, tpu::to_json(cfg).dump(2) + "\n");
      out.commit();
      // The text is the same content: it makes way for the JSON on standard output.
      if (!out.uses_stdout()) std::cout << tpu::cli::describe(cfg);
    };
    if (info_system->count() > 0)
      print(tpu::load_system_config(system_file));
    else
      print(tpu::load_chip_config(chip_file));
  } else if (asm_cmd->parsed()) {
    tpu::io::OutputSet out;
    const std::size_t binary = out.add(asm_out, "-o output");
    out.check({{asm_in, "assembly text"}});
    const auto program = tpu::isa::assemble(
        tpu::read_input_file(asm_in, "assembly text", tpu::kMaxProgramBytes), asm_in);
    // An empty program is a mistake (an empty or truncated file), never something to run.
    if (program.empty()) throw tpu::ProgramError(asm_in + ": no instructions in the file");
    const auto bytes = tpu::isa::to_binary(program);
    out.set(binary, std::string(bytes.begin(), bytes.end()));
    out.commit();
  } else if (disasm_cmd->parsed()) {
    const std::string text =
        tpu::read_input_file(disasm_in, "binary program", tpu::kMaxProgramBytes);
    const auto program =
        tpu::isa::from_binary(std::vector<std::uint8_t>(text.begin(), text.end()), disasm_in);
    if (program.empty()) throw tpu::ProgramError(disasm_in + ": no instructions in the file");
    std::cout << tpu::isa::disassemble(program);
  } else if (graph->parsed()) {
    tpu::cli::run_graph(gc);
  } else if (fit->parsed()) {
    tpu::cli::run_fit(fc);
  } else if (train->parsed()) {
    tpu::cli::run_train(tc);
  } else if (run->parsed()) {
    tpu::cli::run_run(rc);
  } else if (compare->parsed()) {
    return tpu::cli::run_compare(cc);
  } else if (sweep->parsed()) {
    return tpu::cli::run_sweep(sc);
  }
  return 0;
}

}  // namespace

namespace {

// What was printed on standard output must have arrived: `tpusim disasm p.bin > /dev/full` is a
// failure, not a success.
int flushed(int status) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
  std::cerr << "tpusim: standard output: cannot write (" << tpu::path_error_reason(errno) << ")\n";
  return 2;
}

}  // namespace

int sc_main(int argc, char* argv[]) {
  tpu::io::install_signal_handlers();
  try {
    return flushed(run_cli(argc, argv));
  } catch (const tpu::InputError& e) {
    std::cerr << "tpusim: " << e.what() << "\n";
    return 2;
  } catch (const sc_core::sc_report& e) {
    std::cerr << "tpusim: " << e.get_msg() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // The run's estimate (docs/robustness.md, "Resource bounds") passed, yet the host refused
    // memory: another process took it, or a limit the estimate cannot see.
    std::cerr << "tpusim: " << tpu::sim::out_of_memory_message() << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    // Every path tpusim opens goes through hw/common/input_file.h or sw/io/output.h; this is the
    // net under the rest (directory listings): the path and the reason are the user's to fix.
    std::cerr << "tpusim: " << e.path1().string() << ": "
              << tpu::path_error_reason(e.code().value()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tpusim: internal error: " << e.what() << "\n";
    return 3;
  }
}

// Our own entry point, ahead of libsystemc's: the kernel prints its banner before sc_main runs
// unless told not to, and the banner is noise in every tool's output.
int main(int argc, char* argv[]) {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1);
  return sc_core::sc_elab_and_sim(argc, argv);
}
