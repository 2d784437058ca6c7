// fit's check catches what it is there to catch: a reference state that differs from the chip's
// by one bit after one step ends the run naming the step, the replica, the parameter and the
// element, as a bug in tpusim (std::logic_error, status 3 from the command line), and a run
// without the fault passes. The fault is injected into the reference's state
// (FitOptions::reference_fault), so the chip's own arithmetic is untouched.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "hw/config/chip_config.h"
#include "sw/nn/weights.h"
#include "sw/sim/fit.h"

namespace tpu::sim {
namespace {

using ::testing::HasSubstr;

FitOptions short_fit() {
  FitOptions o;
  o.model = std::string(TPUSIM_SOURCE_DIR) + "/configs/models/fashion_mnist_cnn.json";
  o.epochs = 1;
  o.steps_per_epoch = 3;
  o.batch = 8;
  o.validation_freq = 2;  // none: only the steps matter here
  return o;
}

TEST(FitCheck, AOneBitDifferenceAfterStepTwoEndsTheRunNamingWhere) {
  const ChipConfig cfg =
      load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/v3.json");
  FitOptions o = short_fit();
  o.reference_fault = [](std::uint64_t step, nn::TrainState& s) {
    if (step != 2) return;
    float& w = s.weights.layers[0].kernel[5];  // conv2d/kernel, element 5
    std::uint32_t bits = 0;
    std::memcpy(&bits, &w, 4);
    bits ^= 1u;  // the last bit of the mantissa
    std::memcpy(&w, &bits, 4);
  };
  try {
    (void)fit_session(system_of_chip(cfg), o);
    FAIL() << "the run passed its check";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("after step 2, replica 0's conv2d/kernel[5] is "));
    EXPECT_THAT(e.what(), HasSubstr("in the reference"));
  }
}

TEST(FitCheck, WithoutTheFaultTheSameRunPasses) {
  const ChipConfig cfg =
      load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/v3.json");
  FitOptions o = short_fit();
  std::uint64_t calls = 0;
  o.reference_fault = [&calls](std::uint64_t, nn::TrainState&) { ++calls; };
  const FitResult r = fit_session(system_of_chip(cfg), o);
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ(r.report["steps"], 3);
  EXPECT_EQ(r.report["checked"], true);
}

}  // namespace
}  // namespace tpu::sim
