// The all-reduce the chips execute (sw/compiler/collectives.h) on systems built for the test:
// every core of every chip contributes a vector; afterwards every chip holds the sum bit for bit
// as the reference (sw/nn/all_reduce.h) takes it, in the time the documented cost formula gives
// from the config (docs/systems.md, "What an all-reduce costs").
#include "sw/nn/all_reduce.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/child.h"
#include "common/test_host.h"
#include "hw/config/system_config.h"
#include "hw/system/system.h"
#include "sw/compiler/collectives.h"

namespace tpu {
namespace {

// A v3 pod's chips and links (configs/systems/v3-2048.json) on another torus.
SystemConfig v3_on(std::vector<std::uint32_t> dims, std::vector<bool> wraparound,
                   std::uint32_t cores = 2) {
  SystemConfig s =
      load_system_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/systems/v3-2048.json");
  s.ici.dims = std::move(dims);
  s.ici.wraparound = std::move(wraparound);
  s.chip.tensor_cores = cores;
  return s;
}

struct Measured {
  Cycles cycles{0};  // from the first instruction's start to the last core's halt
  bool bit_exact = false;
  compiler::AllReduceCost formula;
};

// Runs the all-reduce of `elements` values per core on `cfg`, checks every chip's total against
// the reference and measures its time. `group`: each group of that many consecutive chips (a box
// of the torus, compiler::group_box) all-reduces on its own, all at once, on semaphores after
// the first four; the reference sums each group's vectors over its box.
Measured run_all_reduce(const SystemConfig& cfg, std::uint64_t elements, std::uint32_t group = 0) {
  constexpr std::uint64_t kStage = 48 * 1024;
  const std::uint32_t chips = cfg.chips(), cores = cfg.chip.tensor_cores;
  compiler::AllReduceLayout l;
  l.dims = cfg.ici.dims;
  if (group > 0) {
    l.dims = compiler::group_box(cfg.ici.dims, group);
    l.torus = cfg.ici.dims;
    l.first_semaphore = 4;
  }
  l.cores = cores;
  l.elements = elements;
  const std::uint64_t bytes = elements * 4;
  std::uint64_t at = 0;
  const auto take = [&] {
    const std::uint64_t a = at;
    at += (bytes + 4095) / 4096 * 4096;
    return a;
  };
  for (std::uint32_t c = 0; c < cores; ++c) l.slots.push_back(take());
  l.area = take();
  for (std::uint32_t d : l.dims) l.landing.push_back(d > 1 ? take() : 0);
  l.stage_elements = std::min<std::uint64_t>(kStage, elements);
  for (std::size_t i = 0; i < 4; ++i) l.stage[i] = i * l.stage_elements * 4;

  System system("system", cfg);
  std::vector<std::unique_ptr<test::TestHost>> hosts;
  std::vector<std::vector<float>> grads;  // per replica, chip-major
  std::mt19937 rng(chips * 131 + cores);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::uint32_t chip = 0; chip < chips; ++chip) {
    hosts.push_back(std::make_unique<test::TestHost>(("host" + std::to_string(chip)).c_str(),
                                                     system.chip(chip), 4096));
    hosts.back()->instructions_per_write = 256;
    for (std::uint32_t core = 0; core < cores; ++core) {
      grads.emplace_back(elements);
      for (float& x : grads.back()) x = u(rng);
      std::vector<std::uint8_t> image(bytes);
      std::memcpy(image.data(), grads.back().data(), bytes);
      hosts.back()->load_memory(l.slots[core], image);
      auto& program = hosts.back()->programs[core];
      compiler::emit_all_reduce(l, chip, core, program);
      if (cores > 1) program.push_back(isa::Sync{true});
      program.push_back(isa::Halt{});
    }
  }
  Trace trace;
  system.chip(0).enable_trace(trace);
  sc_core::sc_start();

  Measured m;
  Cycle first = ~Cycle{0}, last = 0;
  for (const TraceSlice& sl : trace.slices()) first = std::min(first, sl.begin);
  for (const auto& h : hosts)
    for (Cycle t : h->halted_at) last = std::max(last, t);
  m.cycles = Cycles(last - first);
  m.formula = compiler::all_reduce_cost(cfg, l);
  m.bit_exact = true;
  const std::uint32_t per = group > 0 ? group : chips;  // chips per all-reduce
  std::vector<float> got(elements);
  for (std::uint32_t box = 0; box < chips; box += per) {
    const std::vector<std::vector<float>> mine(grads.begin() + box * cores,
                                               grads.begin() + (box + per) * cores);
    const std::vector<float> want = nn::all_reduce(mine, cores, l.dims);
    for (std::uint32_t chip = box; chip < box + per; ++chip) {
      test::read_memory(*hosts[chip], l.area, got.data(), bytes);
      if (std::memcmp(got.data(), want.data(), bytes) != 0) m.bit_exact = false;
    }
  }
  return m;
}

// What a run in a child process reports (a process elaborates one system).
struct Outcome {
  double cycles = 0, chip_sum = 0;
  bool bit_exact = false, ok = false;
};
Outcome run_in_child(const SystemConfig& cfg, std::uint64_t elements) {
  return test::in_child([&] {
           const Measured m = run_all_reduce(cfg, elements);
           return Outcome{static_cast<double>(m.cycles.value()), m.formula.chip_sum, m.bit_exact,
                          true};
         })
      .value_or(Outcome{});
}

struct Case {
  const char* name;
  std::vector<std::uint32_t> dims;
  std::vector<bool> wraparound;
  std::uint32_t cores;
  std::uint64_t elements;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class AllReduceOnChips : public ::testing::TestWithParam<Case> {};

TEST_P(AllReduceOnChips, IsBitExactAndTakesTheFormulasTime) {
  const Case& c = GetParam();
  const SystemConfig cfg = v3_on(c.dims, c.wraparound, c.cores);
  const Measured m = run_all_reduce(cfg, c.elements);
  EXPECT_TRUE(m.bit_exact);
  const double measured = static_cast<double>(m.cycles.value());
  std::printf("%s: %.0f cycles simulated, %.0f by the formula (%+.3f%%)\n", c.name, measured,
              m.formula.total(), 100.0 * (m.formula.total() / measured - 1));
  EXPECT_NEAR(m.formula.total(), measured, 0.02 * measured);
}

INSTANTIATE_TEST_SUITE_P(
    Tori, AllReduceOnChips,
    ::testing::Values(Case{"ring8", {8}, {true}, 2, 4 << 20},
                      Case{"ring8_small", {8}, {true}, 2, 10000},
                      Case{"ring8_one_core", {8}, {true}, 1, 4 << 20},
                      Case{"ring8_four_cores", {8}, {true}, 4, 4 << 20},
                      Case{"ring3", {3}, {true}, 2, 1 << 20},
                      Case{"torus4x4", {4, 4}, {true, true}, 2, 4 << 20},
                      Case{"torus3x3x3", {3, 3, 3}, {true, true, true}, 2, 4 << 20},
                      Case{"torus4x2x2", {4, 2, 2}, {true, true, true}, 2, 4 << 20},
                      Case{"mesh4x4", {4, 4}, {false, false}, 2, 4 << 20},
                      Case{"mesh2x2", {2, 2}, {false, false}, 2, 1 << 20},
                      Case{"line8", {8}, {false}, 2, 4 << 20}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// Distributed BatchNormalization's all-reduces (docs/training.md): the torus cut into boxes of
// consecutive chips, each all-reducing its own cores' vectors at once, a box's ring along an axis
// it does not span closing over the links between its ends. Every chip holds its box's sum bit
// for bit as the reference sums that box's vectors.
struct GroupCase {
  const char* name;
  std::vector<std::uint32_t> dims;
  std::vector<bool> wraparound;
  std::uint32_t group;  // chips
};
void PrintTo(const GroupCase& c, std::ostream* os) { *os << c.name; }

class AllReduceInGroups : public ::testing::TestWithParam<GroupCase> {};

TEST_P(AllReduceInGroups, EveryBoxHoldsItsOwnSumBitExact) {
  const GroupCase& c = GetParam();
  ASSERT_FALSE(compiler::group_box(c.dims, c.group).empty());
  const Measured m = run_all_reduce(v3_on(c.dims, c.wraparound), 3000, c.group);
  std::printf("%s: %.0f cycles\n", c.name, static_cast<double>(m.cycles.value()));
  EXPECT_TRUE(m.bit_exact);
}

INSTANTIATE_TEST_SUITE_P(
    Boxes, AllReduceInGroups,
    ::testing::Values(GroupCase{"torus4x4_pairs", {4, 4}, {true, true}, 2},
                      GroupCase{"torus4x4_rows", {4, 4}, {true, true}, 4},
                      GroupCase{"torus4x4_halves", {4, 4}, {true, true}, 8},
                      GroupCase{"ring8_fours", {8}, {true}, 4},
                      GroupCase{"line8_fours", {8}, {false}, 4},
                      GroupCase{"mesh2x2_one_chip", {2, 2}, {false, false}, 1}),
    [](const ::testing::TestParamInfo<GroupCase>& i) { return std::string(i.param.name); });

TEST(GroupBox, FillsTheTorusFromItsLastDimension) {
  using V = std::vector<std::uint32_t>;
  EXPECT_EQ(compiler::group_box({2, 4}, 4), (V{1, 4}));
  EXPECT_EQ(compiler::group_box({4, 2}, 4), (V{2, 2}));
  EXPECT_EQ(compiler::group_box({32, 32}, 4), (V{1, 4}));
  EXPECT_EQ(compiler::group_box({16, 16, 16}, 512), (V{2, 16, 16}));
  EXPECT_EQ(compiler::group_box({2, 2, 1}, 2), (V{1, 2, 1}));
  EXPECT_EQ(compiler::group_box({2, 4}, 1), (V{1, 1}));
  EXPECT_TRUE(compiler::group_box({2, 4}, 3).empty());
  EXPECT_TRUE(compiler::group_box({3, 4}, 8).empty());
}

// Two collectives on the same links: a chip of four cores has two pairs, each all-reducing its
// half of the vector over the same rings at once. Their rings take about twice as long as one
// pair's alone on the same half (the links' bandwidth split between them); the chip's sum, on
// the off-chip memory and the cores' own ports, is not the links' and is left out.
TEST(AllReduceContention, TwoPairsOnTheSameLinksTakeTwiceAsLongAsOneAlone) {
  const std::uint64_t half = 2 << 20;
  const Outcome both = run_in_child(v3_on({8}, {true}, 4), 2 * half);
  const Outcome alone = run_in_child(v3_on({8}, {true}, 2), half);
  ASSERT_TRUE(both.ok && alone.ok) << "a child run failed";
  EXPECT_TRUE(both.bit_exact);
  EXPECT_TRUE(alone.bit_exact);
  const double rings_both = both.cycles - both.chip_sum;
  const double rings_alone = alone.cycles - alone.chip_sum;
  std::printf("rings: %.0f cycles for two pairs at once, %.0f for one alone (%.2fx)\n", rings_both,
              rings_alone, rings_both / rings_alone);
  EXPECT_GT(rings_both / rings_alone, 1.8);
  EXPECT_LT(rings_both / rings_alone, 2.2);
}

}  // namespace
}  // namespace tpu
