// The training reference (sw/nn/training_reference.h) on the tutorial's network: one step of
// Adam on a global batch as `tpusim fit` will check every step of the chip against, at the
// tutorial's global batch of 1000 (two replicas of 500, as on a two-TensorCore chip, in
// micro-batches of 50) and at 64 images. Random pixels 0-255 and labels; the time does not
// depend on the values. Run: build/tb/bench/training_reference_bench --benchmark_repetitions=3.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sw/import/import.h"
#include "sw/ir/autodiff.h"
#include "sw/nn/training_reference.h"

namespace tpu {
namespace {

void BM_TutorialStep(benchmark::State& state) {
  const ir::Graph g = importers::load_model(std::string(TPUSIM_SOURCE_DIR) +
                                            "/configs/models/fashion_mnist_cnn.json");
  const ir::TrainingGraph t = ir::differentiate(g);
  const auto n = static_cast<std::size_t>(state.range(0));
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> pixel(0.0f, 255.0f);
  std::vector<float> images(n * g.input.size());
  for (float& x : images) x = pixel(rng);
  std::vector<std::int32_t> labels(n);
  for (auto& l : labels) l = static_cast<std::int32_t>(rng() % 10);
  const nn::Optimizer adam;
  nn::TrainState s = nn::initial_state(g, t, nn::random_weights(g, 1), adam);
  const nn::TrainPlan plan{128, 2, 50, {}};
  for (auto _ : state) {
    const nn::StepRecords r =
        nn::reference_step(g, t, plan, adam, s, images.data(), labels.data(), n);
    benchmark::DoNotOptimize(r.loss.data());
  }
  state.counters["images/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_TutorialStep)->Arg(64)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tpu

BENCHMARK_MAIN();
