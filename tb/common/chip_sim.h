// A chip built from a shipped config with a TestHost streaming its programs: the harness of the
// whole-chip tests. One per process (the SystemC kernel cannot be re-elaborated).
#pragma once

#include <algorithm>
#include <string>
#include <utility>

#include "common/test_host.h"
#include "hw/chip/chip.h"
#include "hw/config/chip_config.h"

namespace tpu::test {

inline ChipConfig shipped(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/" + name + ".json");
}

struct Simulation {
  Chip chip;
  TestHost host;
  explicit Simulation(ChipConfig cfg, std::size_t host_bytes = 1 << 20, SimOptions options = {})
      : chip("chip", std::move(cfg), std::nullopt, options), host("host", chip, host_bytes) {}
  // Runs every core's program to its halt; returns the cycle the last core halted at.
  Cycle run() {
    sc_core::sc_start();
    Cycle end = 0;
    for (Cycle c : host.halted_at) end = std::max(end, c);
    chip.finish(end);
    return end;
  }
  const MxuBuckets& mxu0() { return chip.cores[0]->mxus[0]->buckets(); }
  // The message the run stopped with ("" if it did not stop on an error).
  std::string run_expecting_error() {
    try {
      sc_core::sc_start();
    } catch (const sc_core::sc_report& r) {
      return r.get_msg();
    }
    return "";
  }
};

}  // namespace tpu::test
