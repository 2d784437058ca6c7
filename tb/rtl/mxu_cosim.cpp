// mxu_cosim: runs one co-simulation stimulus on the TLM MXU and the Verilated RTL array side by
// side (tb/rtl/cosim.h), prints each MatMul's cycles in both, and exits 1 at the first
// disagreement, which it names. With --vcd, the RTL array's waveform is written for GTKWave.
//
//   build/tb/rtl/mxu_cosim --rows 16 --cols 16 --vcd mxu.vcd
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <systemc>

#include "hw/common/error.h"
#include "tb/rtl/cosim.h"

namespace {

using namespace tpu;

std::string config_for(std::uint32_t rows, std::uint32_t cols) {
  std::string sizes;
  for (const std::string& f : cosim::config_files()) {
    const ChipConfig c = load_chip_config(f);
    if (c.mxu.rows == rows && c.mxu.cols == cols) return f;
    sizes += fmt::format("{}{}x{}", sizes.empty() ? "" : ", ", c.mxu.rows, c.mxu.cols);
  }
  throw InputError(
      fmt::format("--rows {} --cols {}: no co-simulation config of that size (there "
                  "are: {}; or give --chip)",
                  rows, cols, sizes));
}

int run(int argc, char** argv) {
  CLI::App app("Co-simulates the TLM MXU and the Verilated RTL array on one stimulus");
  std::string chip;
  std::uint32_t rows = 16, cols = 16;
  std::string scenario = "mix";
  std::uint64_t seed = 1;
  std::string vcd;
  app.add_option("--chip", chip, "Chip JSON whose array to use (default: by --rows/--cols)");
  app.add_option("--rows", rows, "Array rows (picks a config of tb/rtl/configs or tiny-rtl)")
      ->capture_default_str();
  app.add_option("--cols", cols, "Array columns")->capture_default_str();
  app.add_option("--scenario", scenario,
                 "mix (random tiles and batches), back-to-back, conv (Fashion-MNIST conv2d), "
                 "dense (Fashion-MNIST dense)")
      ->capture_default_str();
  app.add_option("--seed", seed, "Seed of the mix scenario")->capture_default_str();
  app.add_option("--vcd", vcd, "Write the RTL array's waveform (VCD) here");
  CLI11_PARSE(app, argc, argv);

  const ChipConfig cfg = load_chip_config(chip.empty() ? config_for(rows, cols) : chip);
  cosim::Stimulus s;
  if (scenario == "mix")
    s = cosim::random_mix(cfg, seed);
  else if (scenario == "back-to-back")
    s = cosim::back_to_back(cfg, cfg.mxu.rows, 6);
  else if (scenario == "conv")
    s = cosim::fashion_mnist_conv(cfg, 1);
  else if (scenario == "dense")
    s = cosim::fashion_mnist_dense(cfg, 2 * cfg.mxu.rows + 1, 24);
  else
    throw InputError(
        fmt::format("--scenario {} (allowed: mix, back-to-back, conv, dense)", scenario));

  const cosim::Result r = cosim::run(cfg, s, vcd);
  fmt::print("{} x {} array ({}), {}\n", cfg.mxu.rows, cfg.mxu.cols, cfg.file, s.name);
  fmt::print("{:>6} {:>6} {:>5} | {:>21} | {:>21} | {:>21} | {:>9}\n", "matmul", "B", "swap",
             "feed start tlm/rtl", "feed end tlm/rtl", "done tlm/rtl", "in->out");
  std::size_t m = 0;
  for (const cosim::Step& st : s.steps) {
    const auto* mm = std::get_if<isa::MatMul>(&st.inst);
    if (!mm || m >= r.tlm.matmuls.size() || m >= r.rtl.matmuls.size()) continue;
    const auto& a = r.tlm.matmuls[m];
    const auto& b = r.rtl.matmuls[m];
    fmt::print("{:>6} {:>6} {:>5} | {:>10}/{:<10} | {:>10}/{:<10} | {:>10}/{:<10} | {:>9}\n", m,
               mm->rows, mm->swap_weights ? "yes" : "", a.feed_start, b.feed_start, a.feed_end,
               b.feed_end, a.done, b.done, b.done - b.feed_start);
    ++m;
  }
  const MxuBuckets& k = r.rtl.buckets;
  fmt::print(
      "RTL MXU cycles: active {}, weight_stall {}, weight_shift {}, input_stall {}, idle {}\n",
      k.active, k.weight_stall, k.weight_shift, k.input_stall, k.idle);
  if (!vcd.empty()) fmt::print("waveform: {}\n", vcd);
  const std::string diff = cosim::first_difference(cfg, s, r);
  if (!diff.empty()) {
    fmt::print("DISAGREE: {}\n", diff);
    return 1;
  }
  fmt::print("agree: {} MatMuls, results and every cycle bucket equal, last result at cycle {}\n",
             m, r.end);
  return 0;
}

}  // namespace

int sc_main(int argc, char* argv[]) {
  try {
    return run(argc, argv);
  } catch (const sc_core::sc_report& e) {
    std::cerr << "mxu_cosim: " << e.get_msg() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mxu_cosim: " << e.what() << "\n";
    return 2;
  }
}

// As tpusim's: without the kernel's banner.
int main(int argc, char* argv[]) {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1);
  return sc_core::sc_elab_and_sim(argc, argv);
}
