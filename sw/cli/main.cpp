// tpusim: the command line. Each subcommand is one simulation (or none) per process: the
// SystemC kernel cannot be reset.
#include <systemc>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/cli/info.h"

namespace {

int run_cli(int argc, char** argv) {
  CLI::App app{"tpusim: a SystemC TLM-2.0 model of Google's TPU chips"};
  app.require_subcommand(1);

  std::string chip_file;
  bool as_json = false;
  CLI::App* info = app.add_subcommand("info", "Print a chip's resolved configuration and derived figures");
  info->add_option("--chip", chip_file, "Chip config (JSON)")->required();
  info->add_flag("--json", as_json, "Print JSON instead of text");

  CLI11_PARSE(app, argc, argv);

  if (info->parsed()) {
    const tpu::ChipConfig cfg = tpu::load_chip_config(chip_file);
    if (as_json)
      std::cout << tpu::to_json(cfg).dump(2) << "\n";
    else
      std::cout << tpu::cli::describe(cfg);
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
