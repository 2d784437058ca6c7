// The run report's load and steady state (docs/report.md, "Load and steady state"): the load
// ends when the driver has written the memory image; the steady state is every batch after it,
// its figures from the counters since then, checked here against hand computations on a small
// weight-streaming MLP on v1.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "common/cli.h"
#include "hw/config/chip_config.h"
#include "sw/sim/session.h"

namespace tpu {
namespace {

using nlohmann::ordered_json;
using test::source;

// Three 1024 x 1024 dense layers (tb/system/run/data/mlp_1024x3.json): int8 weights, one byte
// each, 3 MiB in all.
constexpr std::uint64_t kWidth = 1024, kLayers = 3;
constexpr std::uint64_t kWeightBytes = kLayers * kWidth * kWidth;

ChipConfig v1() { return load_chip_config(source("configs/chips/v1.json")); }

ordered_json run_mlp(const ChipConfig& cfg, std::uint64_t images, std::uint32_t batch) {
  sim::RunOptions o;
  o.model = source("tb/system/run/data/mlp_1024x3.json");
  o.random_weights = true;
  o.images = images;
  o.batch = batch;
  o.timing_only = true;  // cycles, bytes and energy as a full run's
  return sim::run_workload(cfg, o);
}

double rel(double x) { return 1e-12 * x; }

TEST(SteadyState, IsEveryBatchAfterTheMemoryImageLoadByHand) {
  const ChipConfig cfg = v1();
  const std::uint64_t images = 600;
  const std::uint32_t batch = 200;
  const ordered_json r = run_mlp(cfg, images, batch);
  const auto& t = r["totals"];
  const auto& load = r["load"];
  const auto& st = r["steady_state"];
  const auto c = t["cycles"].get<double>();
  const auto l = t["memory_image_loaded_cycle"].get<double>();
  ASSERT_GT(l, 0);
  EXPECT_EQ(load["cycles"].get<double>(), l);

  // The steady state is [L, C), every batch in it.
  const double f = cfg.clock_hz();
  EXPECT_EQ(st["cycles"].get<double>(), c - l);
  EXPECT_EQ(st["batches"].get<std::uint64_t>(), images / batch);
  EXPECT_NEAR(st["cycles_per_batch"].get<double>(), (c - l) / 3, rel(c));
  EXPECT_NEAR(st["seconds_per_batch"].get<double>(), (c - l) / 3 / f, rel(c / f));
  const double macs = static_cast<double>(images * kWeightBytes);  // K·N per image per layer
  EXPECT_EQ(st["macs"].get<double>(), macs);
  EXPECT_NEAR(st["ops_per_s"].get<double>(), 2 * macs * f / (c - l), rel(2 * macs * f / (c - l)));
  EXPECT_NEAR(st["images_per_s"].get<double>(), static_cast<double>(images) * f / (c - l), 1e-6);
  EXPECT_NEAR(st["utilization"].get<double>(),
              macs / (static_cast<double>(cfg.peak_macs_per_cycle()) * (c - l)), 1e-12);

  // The load moved the memory image, the weights among it, over the host link into off-chip
  // memory, and nothing else: every weight fetch from DDR3 comes after it, once per batch.
  EXPECT_GE(load["bytes_host_link"].get<std::uint64_t>(), kWeightBytes);
  EXPECT_EQ(load["bytes_off_chip"], load["bytes_host_link"]);
  EXPECT_EQ(st["bytes_off_chip_weights"].get<std::uint64_t>(), images / batch * kWeightBytes);
  EXPECT_EQ(t["bytes"]["off_chip_weights"], st["bytes_off_chip_weights"]);
  EXPECT_EQ(
      load["bytes_host_link"].get<std::uint64_t>() + st["bytes_host_link"].get<std::uint64_t>(),
      t["bytes_host_link"].get<std::uint64_t>());
  EXPECT_EQ(load["bytes_off_chip"].get<std::uint64_t>() + st["bytes_off_chip"].get<std::uint64_t>(),
            t["bytes_off_chip"].get<std::uint64_t>());
  // Energy is linear in counts and seconds: the two parts make the total.
  const auto e = t["energy_j"].get<double>();
  EXPECT_NEAR(load["energy_j"].get<double>() + st["energy_j"].get<double>(), e, 1e-9 * e);
  EXPECT_NEAR(st["energy_per_image_j"].get<double>(),
              st["energy_j"].get<double>() / static_cast<double>(images), 1e-15);

  // By hand: each batch streams every weight byte from DDR3 once (docs/timing-model.md: r bytes
  // per cycle), and the inputs and outputs cross the host link; reading a batch's inputs
  // overlaps the batch before, writing its outputs the batch after, except the first batch's
  // inputs (the fill) and the last one's outputs (the drain). So the steady state takes
  // B·⌈W / r_mem⌉ + in / r_host + out / r_host cycles, within the latencies and the parameter
  // records' read (1% here).
  const double r_mem = r["chip"]["off_chip_bytes_per_s"].get<double>() / f;
  const double r_host = r["chip"]["host_link_bytes_per_s"].get<double>() / f;
  const double in = static_cast<double>(batch * kWidth);  // int8 inputs, one byte each
  const double out = t["bytes"]["host_link_out"].get<double>() / images * batch;
  const double hand =
      3 * std::ceil(static_cast<double>(kWeightBytes) / r_mem) + in / r_host + out / r_host;
  EXPECT_NEAR(st["cycles"].get<double>(), hand, 0.01 * hand);
  // A batch's ops/s cannot pass the DDR3 roof: `batch` MACs per int8 weight byte streamed.
  const double roof = 2 * r["chip"]["off_chip_bytes_per_s"].get<double>() * batch;
  EXPECT_LE(st["ops_per_s"].get<double>(), roof);
  // The totals, with the load, serve far slower.
  EXPECT_LT(t["ops_per_s"].get<double>(), st["ops_per_s"].get<double>());
}

TEST(SteadyState, WithOneBatchIsThatBatchAfterTheLoad) {
  const ordered_json r = run_mlp(v1(), 200, 200);
  const auto& st = r["steady_state"];
  const auto c = r["totals"]["cycles"].get<double>();
  const auto l = r["totals"]["memory_image_loaded_cycle"].get<double>();
  EXPECT_EQ(st["batches"].get<std::uint64_t>(), 1u);
  EXPECT_EQ(st["cycles_per_batch"].get<double>(), c - l);
  EXPECT_EQ(st["cycles"].get<double>(), c - l);
  EXPECT_EQ(st["bytes_off_chip_weights"].get<std::uint64_t>(), kWeightBytes);
}

TEST(SteadyState, ALastPartialBatchCountsAsOne) {
  const ordered_json r = run_mlp(v1(), 300, 200);
  const auto& st = r["steady_state"];
  EXPECT_EQ(st["batches"].get<std::uint64_t>(), 2u);
  EXPECT_NEAR(st["cycles_per_batch"].get<double>(), st["cycles"].get<double>() / 2, 1e-9);
}

}  // namespace
}  // namespace tpu
