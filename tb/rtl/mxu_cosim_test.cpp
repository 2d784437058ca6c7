// The Verilated RTL array (rtl/mxu) and the TLM MXU run the same stimulus and must agree bit for
// bit on the results and cycle for cycle on every MatMul (tb/rtl/cosim.h), for every chip JSON the
// co-simulation builds an array for. One test per process (gtest_discover_tests).
#include <gtest/gtest.h>

#include <filesystem>

#include "tb/rtl/cosim.h"

namespace tpu {
namespace {

class MxuCosim : public ::testing::TestWithParam<std::string> {
 protected:
  ChipConfig cfg = load_chip_config(GetParam());

  void expect_agree(const cosim::Stimulus& s) {
    const cosim::Result r = cosim::run(cfg, s);
    ASSERT_FALSE(r.tlm.matmuls.empty()) << s.name;
    EXPECT_EQ(cosim::first_difference(cfg, s, r), "")
        << cfg.mxu.rows << "x" << cfg.mxu.cols << ", " << s.name;
  }
};

TEST_P(MxuCosim, RandomTilesAndBatchesAgreeBitAndCycleExactly) {
  expect_agree(cosim::random_mix(cfg, 1));
}

TEST_P(MxuCosim, BatchSmallerThanTheArrayExposesPartOfEachShiftIdentically) {
  expect_agree(cosim::back_to_back(cfg, std::max(1u, cfg.mxu.rows / 2), 6));
}

TEST_P(MxuCosim, BatchEqualToTheArrayHidesEachShiftIdentically) {
  expect_agree(cosim::back_to_back(cfg, cfg.mxu.rows, 6));
}

TEST_P(MxuCosim, BatchLargerThanTheArrayAgrees) {
  expect_agree(cosim::back_to_back(cfg, 3 * (cfg.mxu.rows + cfg.mxu.cols), 4));
}

TEST_P(MxuCosim, NarrowUnifiedBufferPortStretchesTheFeedIdentically) {
  // A port narrower than an input row: rows enter slower than one per cycle.
  cfg.unified_buffer.bytes_per_cycle = std::max(1u, cfg.mxu.rows / 3);
  expect_agree(cosim::random_mix(cfg, 2));
}

TEST_P(MxuCosim, FashionMnistConvTilesAgree) { expect_agree(cosim::fashion_mnist_conv(cfg, 1)); }

TEST_P(MxuCosim, FashionMnistDenseTilesAgree) {
  expect_agree(cosim::fashion_mnist_dense(cfg, 2 * cfg.mxu.rows + 1, 24));
}

std::string size_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = std::filesystem::path(info.param).stem().string();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Chips, MxuCosim, ::testing::ValuesIn(cosim::config_files()), size_name);

}  // namespace
}  // namespace tpu
