// tpusim: the command line. Each subcommand runs at most one simulation per process: the
// SystemC kernel cannot be reset.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <systemc>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "hw/isa/assembler.h"
#include "sw/cli/info.h"
#include "sw/cli/train_cmd.h"
#include "sw/report/session.h"

namespace {

// Writes `text` to `path` atomically: a temporary file beside it, then rename, so a failed run
// never leaves a half-written report that looks finished.
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw tpu::InputError(path + ": cannot open file");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw tpu::InputError(path + ": cannot open for writing");
    out << text;
    out.flush();
    if (!out) throw tpu::InputError(path + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw tpu::InputError(path + ": cannot rename the finished report into place");
  }
}

int run_cli(int argc, char** argv) {
  CLI::App app{"tpusim: a SystemC TLM-2.0 model of Google's TPU chips"};
  app.require_subcommand(1);

  std::string chip_file;
  bool as_json = false;
  CLI::App* info =
      app.add_subcommand("info", "Print a chip's resolved configuration and derived figures");
  info->add_option("--chip", chip_file, "Chip config (JSON)")->required();
  info->add_flag("--json", as_json, "Print JSON instead of text");

  tpu::report::RunOptions ro;
  std::string weights, json_out;
  bool no_check = false;
  CLI::App* run = app.add_subcommand("run", "Run a network on a simulated chip and report");
  run->add_option("--chip", chip_file, "Chip config (JSON)")->required();
  run->add_option("--model", ro.model, "Model (Keras-style JSON)")->capture_default_str();
  run->add_option("--weights", weights,
                  "Weights file (default: configs/weights/<model>.bin beside the model's folder, "
                  "if present)");
  run->add_flag("--random-weights", ro.random_weights, "Seeded random weights instead");
  run->add_option("--seed", ro.seed, "Seed for random weights and inputs")->capture_default_str();
  run->add_option("--data-dir", ro.data_dir, "Fashion-MNIST directory (default: Debian's)");
  run->add_option("--images", ro.images, "Images (or generated samples) to run")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  run->add_option("--batch", ro.batch, "Images per step across the chip")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  run->add_option("--json", json_out, "Write the JSON report here");
  run->add_flag("--no-check", no_check, "Skip the bit-exact comparison with the reference");

  std::string asm_in, asm_out, disasm_in;
  CLI::App* asm_cmd =
      app.add_subcommand("asm", "Assemble text into a binary program (docs/isa.md)");
  asm_cmd->add_option("file", asm_in, "Assembly text")->required();
  asm_cmd->add_option("-o,--out", asm_out, "Binary program to write")->required();
  CLI::App* disasm_cmd = app.add_subcommand("disasm", "Print a binary program as assembly text");
  disasm_cmd->add_option("file", disasm_in, "Binary program")->required();

  tpu::cli::TrainCommand tc;
  CLI::App* train =
      app.add_subcommand("train", "Train a model on Fashion-MNIST and write its weights");
  train->add_option("--model", tc.model, "Model (Keras-style JSON)")->capture_default_str();
  train->add_option("--out", tc.out, "Weights file to write (metadata goes beside it, .json)")
      ->capture_default_str();
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

  CLI11_PARSE(app, argc, argv);

  if (info->parsed()) {
    const tpu::ChipConfig cfg = tpu::load_chip_config(chip_file);
    if (as_json)
      std::cout << tpu::to_json(cfg).dump(2) << "\n";
    else
      std::cout << tpu::cli::describe(cfg);
  } else if (asm_cmd->parsed()) {
    const auto program = tpu::isa::assemble(read_file(asm_in), asm_in);
    const auto bytes = tpu::isa::to_binary(program);
    write_atomically(asm_out, std::string(bytes.begin(), bytes.end()));
  } else if (disasm_cmd->parsed()) {
    const std::string text = read_file(disasm_in);
    std::cout << tpu::isa::disassemble(
        tpu::isa::from_binary(std::vector<std::uint8_t>(text.begin(), text.end()), disasm_in));
  } else if (train->parsed()) {
    tpu::cli::run_train(tc);
  } else if (run->parsed()) {
    const tpu::ChipConfig cfg = tpu::load_chip_config(chip_file);
    if (!weights.empty()) ro.weights = weights;
    if (!weights.empty() && ro.random_weights)
      throw tpu::InputError("--weights and --random-weights exclude each other");
    ro.check = !no_check;
    const auto report = tpu::report::run_workload(cfg, ro);
    std::cout << tpu::report::summary(report);
    if (!json_out.empty()) write_atomically(json_out, report.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

int sc_main(int argc, char* argv[]) {
  try {
    return run_cli(argc, argv);
  } catch (const tpu::InputError& e) {
    std::cerr << "tpusim: " << e.what() << "\n";
    return 2;
  } catch (const sc_core::sc_report& e) {
    std::cerr << "tpusim: " << e.get_msg() << "\n";
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
