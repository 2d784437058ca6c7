// fit's steady state (docs/report.md, "Training"): the steps after the first, their mean cycles,
// seconds and energy, checked against the per-step records; absent after a single step.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "hw/config/chip_config.h"
#include "sw/sim/fit.h"

namespace tpu::sim {
namespace {

ChipConfig v3() {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/v3.json");
}

FitResult short_fit(std::uint32_t steps) {
  FitOptions o;
  o.model = std::string(TPUSIM_SOURCE_DIR) + "/configs/models/fashion_mnist_cnn.json";
  o.epochs = 1;
  o.steps_per_epoch = steps;
  o.batch = 8;
  o.validation_freq = 2;  // none: only the steps matter here
  o.timing_only = true;
  return fit_session(system_of_chip(v3()), o);
}

TEST(FitSteadyState, IsTheMeanOfTheStepsAfterTheFirst) {
  const nlohmann::ordered_json r = short_fit(3).report;
  ASSERT_TRUE(r.contains("steady_state"));
  const auto& st = r["steady_state"];
  const auto& per = r["per_step"];
  const double cycles = (per[1]["cycles"].get<double>() + per[2]["cycles"].get<double>()) / 2;
  const double energy = (per[1]["energy_j"].get<double>() + per[2]["energy_j"].get<double>()) / 2;
  EXPECT_EQ(st["steps"].get<std::uint64_t>(), 2u);
  EXPECT_EQ(st["first_step"].get<std::uint64_t>(), 2u);
  EXPECT_DOUBLE_EQ(st["cycles_per_step"].get<double>(), cycles);
  const double seconds = cycles / v3().clock_hz();
  EXPECT_NEAR(st["seconds_per_step"].get<double>(), seconds, 1e-12 * seconds);
  EXPECT_NEAR(st["images_per_s"].get<double>(), 8 / seconds, 1e-9 * 8 / seconds);
  EXPECT_NEAR(st["energy_per_step_j"].get<double>(), energy, 1e-12 * energy);
  EXPECT_NEAR(st["energy_per_image_j"].get<double>(), energy / 8, 1e-12 * energy);
}

TEST(FitSteadyState, IsAbsentAfterASingleStep) {
  const nlohmann::ordered_json r = short_fit(1).report;
  EXPECT_EQ(r["steps"], 1);
  EXPECT_FALSE(r.contains("steady_state"));
}

}  // namespace
}  // namespace tpu::sim
