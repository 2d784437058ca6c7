// The co-simulation's own report: a disagreement names the first MatMul, element or bucket that
// differs, with the cycle.
#include "tb/rtl/cosim.h"

#include <gtest/gtest.h>

namespace tpu {
namespace {

struct Fixture {
  ChipConfig cfg =
      load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/tiny-rtl.json");
  cosim::Stimulus s;
  cosim::Result r;
  Fixture() {
    isa::MatMul m;
    m.swap_weights = true;
    m.rows = 3;
    s.steps = {{isa::ReadWeights{}, 0, {}}, {m, 0, {}}, {m, 0, {}}};
    r.tlm.matmuls = {{5, 8, 8 + cfg.mxu.rows + cfg.mxu.cols - 1},
                     {8, 11, 11 + cfg.mxu.rows + cfg.mxu.cols - 1}};
    r.tlm.acc.assign(std::size_t{4} * cfg.mxu.cols, 0);
    r.rtl = r.tlm;
    r.end = r.tlm.matmuls.back().done;
  }
};

TEST(Cosim, AgreementReportsNothing) {
  Fixture f;
  EXPECT_EQ(cosim::first_difference(f.cfg, f.s, f.r), "");
}

TEST(Cosim, TimingDisagreementNamesTheMatMulAndBothCycles) {
  Fixture f;
  const Cycle done = f.r.tlm.matmuls[1].done;
  f.r.rtl.matmuls[1].done = done + 1;
  EXPECT_EQ(cosim::first_difference(f.cfg, f.s, f.r),
            "MatMul #1 (step 2, B = 3, swap): results are in the accumulators at cycle " +
                std::to_string(done) + " in the TLM, " + std::to_string(done + 1) + " in the RTL");
}

TEST(Cosim, ResultDisagreementNamesTheAccumulatorEntryAndColumn) {
  Fixture f;
  f.r.rtl.acc[f.cfg.mxu.cols + 2] = static_cast<std::uint32_t>(-7);
  const std::string d = cosim::first_difference(f.cfg, f.s, f.r);
  EXPECT_EQ(d.rfind("accumulator entry 1 column 2: 0 in the TLM, -7 in the RTL", 0), 0u) << d;
}

TEST(Cosim, BucketDisagreementNamesTheBucket) {
  Fixture f;
  f.r.rtl.buckets.weight_shift += 1;
  const std::string d = cosim::first_difference(f.cfg, f.s, f.r);
  EXPECT_EQ(d.rfind("mxu cycles weight_shift: 0 in the TLM, 1 in the RTL", 0), 0u) << d;
}

}  // namespace
}  // namespace tpu
