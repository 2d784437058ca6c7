// The backward-pass forms of the MXU's inputs on both models (tb/rtl/cosim.h): transposed and
// strided weight tiles, transposed dense and windowed MatMuls and input-dilated windows. The RTL
// adapter gathers its rows with SystolicArray::gather, the TLM multiplies them itself; both must
// agree bit for bit and cycle for cycle, for every chip JSON the co-simulation builds.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "tb/common/mxu_helpers.h"
#include "tb/rtl/cosim.h"

namespace tpu {
namespace {

class TrainingCosim : public ::testing::TestWithParam<std::string> {
 protected:
  ChipConfig cfg = load_chip_config(GetParam());
};

TEST_P(TrainingCosim, TransposedAndDilatedInputsAgreeBitAndCycleExactly) {
  const std::uint32_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  cosim::Stimulus s;
  s.name = "transposed and dilated inputs";
  s.ub.resize(16384);
  std::mt19937 rng(11);
  for (auto& b : s.ub) b = static_cast<std::uint8_t>(rng());

  // 1. A transposed tile from a strided sub-block (K = stored cols <= R, N = stored rows <= C),
  //    times a transposed dense input: B = 20 columns of a K-row matrix 37 bytes apart.
  const std::uint32_t side = std::min(R, C);
  s.steps.push_back({test::read_weights(true, 0x40, side - 2, side - 1, side + 5, true), 0, {}});
  isa::MatMul dense;
  dense.swap_weights = true, dense.transpose = true;
  dense.src = UbAddr(0x800), dense.rows = 20, dense.src_stride = 37, dense.dst = AccAddr(0);
  s.steps.push_back({dense, 0, {}});

  // 2. A tile of K pixels, times a transposed windowed input: 20 window elements of a padded
  //    6x6x3 image, each a row of the K pixels' values.
  isa::SetWindow g;
  g.in_h = 6, g.in_w = 6, g.in_c = 3, g.kernel_h = 3, g.kernel_w = 3, g.pad_top = 1, g.pad_left = 1,
  g.out_h = 6, g.out_w = 6;
  s.steps.push_back({test::read_weights(true, 0x1000, R, C, 0, false), 0, {}});
  isa::MatMul wt;
  wt.swap_weights = true, wt.transpose = true, wt.window = true;
  wt.src = UbAddr(0x2000), wt.rows = 20, wt.first_pixel = 3, wt.k_first = 2, wt.dst = AccAddr(32);
  s.steps.push_back({wt, 0, g});

  // 3. A windowed input over a 3x3x3 image dilated by 2 (zeros between its pixels).
  isa::SetWindow d;
  d.in_h = 3, d.in_w = 3, d.in_c = 3, d.kernel_h = 3, d.kernel_w = 3, d.pad_top = 2, d.pad_left = 2,
  d.out_h = 5, d.out_w = 5, d.in_dilation_h = 2, d.in_dilation_w = 2;
  const std::uint32_t k = std::min(R, 12u);
  s.steps.push_back({test::read_weights(true, 0x3000, k, C, 0, false), 0, {}});
  isa::MatMul wd;
  wd.swap_weights = true, wd.window = true;
  wd.src = UbAddr(0x3400), wd.rows = 25, wd.k_first = 3, wd.dst = AccAddr(64);
  s.steps.push_back({wd, 0, d});

  const cosim::Result r = cosim::run(cfg, s);
  ASSERT_EQ(r.tlm.matmuls.size(), 3u);
  EXPECT_TRUE(std::any_of(r.tlm.acc.begin(), r.tlm.acc.end(), [](std::uint32_t a) { return a; }));
  EXPECT_EQ(cosim::first_difference(cfg, s, r), "") << R << "x" << C;
}

std::string size_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = std::filesystem::path(info.param).stem().string();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Chips, TrainingCosim, ::testing::ValuesIn(cosim::config_files()),
                         size_name);

}  // namespace
}  // namespace tpu
