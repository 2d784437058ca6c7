// The resident schedule's micro-batch (docs/compiler.md, "Schedule" item 2): the size of least
// estimated cycles among all that fit, so a larger unified buffer never makes a run slower
// (docs/timing-model.md, "The unified buffer and the micro-batch").
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/child.h"
#include "common/cli.h"
#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"
#include "sw/compiler/compiler.h"
#include "sw/sim/compiled.h"
#include "sw/sim/session.h"

namespace tpu {
namespace {

using test::source;

constexpr std::uint64_t kMiB = 1024 * 1024;

ChipConfig v3_with_buffer(std::uint64_t bytes) {
  ChipConfig cfg = load_chip_config(source("configs/chips/v3.json"));
  cfg.unified_buffer.bytes = bytes;
  return cfg;
}

sim::RunOptions cnn(std::uint64_t images, std::uint32_t batch) {
  sim::RunOptions o;
  o.model = source("configs/models/fashion_mnist_cnn.json");
  o.images = images;
  o.batch = batch;
  o.check = false;
  o.timing_only = true;
  return o;
}

// The micro-batch the compiler chooses (no simulation).
std::uint64_t micro_batch(const ChipConfig& cfg, const sim::RunOptions& o) {
  return sim::compile_workload(system_of_chip(cfg), o, sim::InputsFor::CalibrationOnly)
      .program.micro_batch;
}

struct Point {
  std::uint64_t micro_batch = 0, cycles = 0;
  bool ok = false;
};

// A timing-only run in a child process: a process elaborates SystemC once.
Point simulate(const ChipConfig& cfg, const sim::RunOptions& o) {
  return test::in_child([&] {
           const auto r = sim::run_workload(cfg, o);
           Point p;
           p.micro_batch = r["workload"]["micro_batch_per_core"].get<std::uint64_t>();
           p.cycles = r["totals"]["cycles"].get<std::uint64_t>();
           p.ok = true;
           return p;
         })
      .value_or(Point{});
}

// From 14 MiB a core's 256 images of a batch fit at once (room for 131 or more). One
// micro-batch of 256 would leave its input read and output write unhidden, and 131 leaves a
// short last one: a core's 256 run as two of 128. Its 500 of a 1,000-image run go as four of 125
// at 14 MiB (room for 131), and as three of 167 once those fit (24 MiB and more), which
// simulates 1.1% faster (docs/timing-model.md, "The unified buffer and the micro-batch").
TEST(MicroBatchChoice, TheCnnOnV3RunsACoresImagesInEqualMicroBatchesOnceTheyFit) {
  for (std::uint64_t mib : {14, 32}) {
    const ChipConfig cfg = v3_with_buffer(mib * kMiB);
    EXPECT_EQ(micro_batch(cfg, cnn(512, 512)), 128u) << mib << " MiB";
    EXPECT_EQ(micro_batch(cfg, cnn(1000, 512)), mib == 14 ? 125u : 167u) << mib << " MiB";
  }
}

// The choice never exceeds what fits: at 2 MiB the buffer holds 18 images' tensors.
TEST(MicroBatchChoice, NeverMoreThanFits) {
  EXPECT_LE(micro_batch(v3_with_buffer(2 * kMiB), cnn(1000, 512)), 18u);
}

// The sweep that showed the anomaly: with the largest micro-batch that fits, 12 MiB ran faster
// than 14, 16, 24 or 32 MiB. The candidates only grow with the buffer, and the estimate ranks
// them as the simulation does, so the simulated cycles never grow with it. (The estimate is not
// exact: at 4 MiB it takes 36 images where 37 simulate 0.8 % faster; docs/compiler.md.)
TEST(UnifiedBufferSweep, MoreUnifiedBufferNeverSlowsTheCnnOnV3) {
  const sim::RunOptions o = cnn(1000, 512);
  std::uint64_t previous = 0, previous_mib = 0;
  for (std::uint64_t mib : {2, 4, 8, 10, 12, 14, 16, 24, 32}) {
    const Point p = simulate(v3_with_buffer(mib * kMiB), o);
    ASSERT_TRUE(p.ok) << mib << " MiB";
    if (previous != 0) {
      EXPECT_LE(p.cycles, previous)
          << mib << " MiB (micro-batch " << p.micro_batch << ") against " << previous_mib << " MiB";
    }
    previous = p.cycles, previous_mib = mib;
  }
}

}  // namespace
}  // namespace tpu
