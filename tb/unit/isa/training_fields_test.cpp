// The fields training added to read_weights, set_window and matmul (docs/isa.md §4.4-4.6):
// their encoding, that words written before them keep their meaning, their text form, and their
// footprints (§6.1) and window geometry, each checked against numbers typed in from the document.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hw/common/error.h"
#include "hw/isa/assembler.h"
#include "hw/isa/isa.h"
#include "hw/isa/semantics.h"
#include "hw/isa/window.h"

namespace tpu::isa {
namespace {

ReadWeights tile(std::uint64_t addr, std::uint16_t rows, std::uint16_t cols) {
  ReadWeights rw;
  rw.addr = addr, rw.rows = rows, rw.cols = cols;
  return rw;
}

TEST(TrainingEncoding, ReadWeightsTransposeIsFlagBitOneAndStrideBytes16To19) {
  ReadWeights rw = tile(0x1234, 3, 4);
  rw.transpose = true, rw.stride = 0x01020304;
  const Word w = encode(rw);
  EXPECT_EQ(w[1], 0x02);
  EXPECT_EQ(w[16], 0x04);
  EXPECT_EQ(w[17], 0x03);
  EXPECT_EQ(w[18], 0x02);
  EXPECT_EQ(w[19], 0x01);
  const auto back = std::get<ReadWeights>(decode(w));
  EXPECT_TRUE(back.transpose);
  EXPECT_EQ(back.stride, 0x01020304u);
}

TEST(TrainingEncoding, MatMulTransposeIsFlagBitThree) {
  MatMul mm;
  mm.transpose = true;
  EXPECT_EQ(encode(mm)[1], 0x08);
  EXPECT_TRUE(std::get<MatMul>(decode(encode(mm))).transpose);
}

TEST(TrainingEncoding, SetWindowInputDilationIsBytes30And31) {
  SetWindow g;
  g.in_dilation_h = 2, g.in_dilation_w = 3;
  const Word w = encode(g);
  EXPECT_EQ(w[30], 2);
  EXPECT_EQ(w[31], 3);
  const auto back = std::get<SetWindow>(decode(w));
  EXPECT_EQ(back.in_dilation_h, 2);
  EXPECT_EQ(back.in_dilation_w, 3);
}

// A word written before the fields existed has zeros there: a dense, untransposed tile of rows x
// cols, an untransposed matmul, and a window without input dilation.
TEST(TrainingEncoding, WordsWrittenBeforeTheFieldsKeepTheirMeaning) {
  Word rw{};
  rw[0] = 0x05, rw[1] = 0x01, rw[12] = 5, rw[14] = 7;  // from=ub, rows 5, cols 7
  const auto r = std::get<ReadWeights>(decode(rw));
  EXPECT_FALSE(r.transpose);
  EXPECT_EQ(r.stride, 0u);
  EXPECT_EQ(weight_tile_shape(r).k, 5u);
  EXPECT_EQ(weight_tile_shape(r).n, 7u);
  EXPECT_EQ(weight_row_pitch(r, 2), 14u);
  EXPECT_EQ(weight_extent(r, 2), 5u * 7 * 2);
  EXPECT_EQ(encode(r), rw);

  Word mm{};
  mm[0] = 0x07, mm[1] = 0x07;  // acc swap window
  EXPECT_FALSE(std::get<MatMul>(decode(mm)).transpose);

  SetWindow g;
  g.in_h = 4, g.in_w = 4, g.in_c = 1, g.kernel_h = 3, g.kernel_w = 3, g.out_h = 2, g.out_w = 2;
  Word sw = encode(g);
  sw[30] = sw[31] = 0;
  const auto back = std::get<SetWindow>(decode(sw));
  EXPECT_EQ(back.in_dilation_h, 0);
  EXPECT_EQ(window_in_dilation_h(back), 1u);
  EXPECT_EQ(window_in_dilation_w(back), 1u);
  EXPECT_EQ(encode(back), sw);
  EXPECT_EQ(SetWindow{}.in_dilation_h, 1) << "a window written today defaults to 1";
  EXPECT_EQ(SetWindow{}.in_dilation_w, 1);
}

TEST(TrainingText, NewFieldsReadAndPrintAndRoundTrip) {
  const auto p = assemble(
      "read_weights mxu=0 from=ub addr=0x100 rows=4 cols=8 stride=64 transpose\n"
      "set_window in_h=2 in_w=2 in_c=3 kernel_h=3 kernel_w=3 pad_top=2 pad_left=2 out_h=5 "
      "out_w=5 in_dilation_h=2 in_dilation_w=3\n"
      "matmul mxu=0 src=0x0 dst=0x0 rows=4 stride=16 transpose window\n",
      "train.s");
  ASSERT_EQ(p.size(), 3u);
  const auto& rw = std::get<ReadWeights>(p[0]);
  EXPECT_TRUE(rw.transpose);
  EXPECT_EQ(rw.stride, 64u);
  const auto& g = std::get<SetWindow>(p[1]);
  EXPECT_EQ(g.in_dilation_h, 2);
  EXPECT_EQ(g.in_dilation_w, 3);
  EXPECT_TRUE(std::get<MatMul>(p[2]).transpose);
  EXPECT_EQ(to_string(p[0]),
            "read_weights mxu=0 from=ub addr=0x100 rows=4 cols=8 stride=64 transpose");
  EXPECT_EQ(to_string(p[2]),
            "matmul mxu=0 src=0x0 dst=0x0 rows=4 stride=16 first_pixel=0 k_first=0 window "
            "transpose");
  const std::string text = disassemble(p);
  EXPECT_EQ(to_binary(assemble(text, "again.s")), to_binary(p));
}

TEST(TrainingText, FieldsLeftOutKeepTheirOldMeaning) {
  const auto p = assemble("read_weights rows=2 cols=3\nset_window\nmatmul rows=1\n", "old.s");
  EXPECT_FALSE(std::get<ReadWeights>(p[0]).transpose);
  EXPECT_EQ(std::get<ReadWeights>(p[0]).stride, 0u);
  EXPECT_EQ(std::get<SetWindow>(p[1]).in_dilation_h, 1);
  EXPECT_EQ(std::get<SetWindow>(p[1]).in_dilation_w, 1);
  EXPECT_FALSE(std::get<MatMul>(p[2]).transpose);
}

TEST(TrainingText, InputDilationIsAnUnsignedByte) {
  try {
    (void)assemble("set_window in_dilation_h=256", "p.s");
    ADD_FAILURE() << "in_dilation_h=256 assembled";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("\"in_dilation_h=256\""), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)assemble("read_weights transpose=1", "p.s"), ProgramError);
}

TEST(TrainingShape, TransposeSwapsTheTilesRowsAndColumns) {
  ReadWeights rw = tile(0, 3, 5);
  EXPECT_EQ(weight_tile_shape(rw).k, 3u);
  EXPECT_EQ(weight_tile_shape(rw).n, 5u);
  rw.transpose = true;
  EXPECT_EQ(weight_tile_shape(rw).k, 5u);
  EXPECT_EQ(weight_tile_shape(rw).n, 3u);
}

FootprintContext context(DType t) {
  FootprintContext c;
  c.acc_entry_bytes = 16 * 4;
  c.mxu_input_type = t;
  return c;
}

using Range = std::pair<std::uint64_t, std::uint64_t>;

Range first_range(const Instruction& i, const FootprintContext& c) {
  const auto a = footprint(i, c);
  if (a.empty()) return {0, 0};
  return {a.front().lo, a.front().hi};
}

// docs/isa.md §6.1: UB or Mem [addr, addr + (rows-1)*stride' + cols*e), whether or not the tile
// is transposed (the same bytes are read).
TEST(TrainingFootprint, AStridedTileReadsFromItsFirstToTheEndOfItsLastRow) {
  ReadWeights rw = tile(0x100, 3, 4);
  rw.stride = 100;
  EXPECT_EQ(first_range(rw, context(DType::Int8)), Range(0x100ull, 0x100ull + 200 + 4));
  EXPECT_EQ(first_range(rw, context(DType::Bf16)), Range(0x100ull, 0x100ull + 200 + 8));
  rw.transpose = true;
  EXPECT_EQ(first_range(rw, context(DType::Bf16)), Range(0x100ull, 0x100ull + 200 + 8));
  rw.stride = 0;
  EXPECT_EQ(first_range(rw, context(DType::Bf16)), Range(0x100ull, 0x100ull + 3 * 4 * 2));
}

// Dense transposed: row r, element j at src + j*stride + r*e, j < K: [src, src + (K-1)*stride +
// B*e).
TEST(TrainingFootprint, ATransposedDenseMatMulReadsKRowsOfBElements) {
  FootprintContext c = context(DType::Bf16);
  c.tile_rows = 5;
  MatMul mm;
  mm.src = UbAddr(0x200), mm.rows = 3, mm.src_stride = 64, mm.transpose = true;
  EXPECT_EQ(first_range(mm, c), Range(0x200ull, 0x200ull + 4 * 64 + 3 * 2));
  const auto a = footprint(mm, c);
  EXPECT_STREQ(a.front().field, "src");
}

// An 8x8x4 image, 3x3 window, 6x6 outputs. Transposed: tile rows are output pixels 0..35 (all of
// them), rows are window elements 0..3 (channels 0..3 of window position (0, 0)): pixel (oy, ox)
// reads input pixel (oy, ox), so elements 0 .. (5*8 + 5)*4 + 3.
TEST(TrainingFootprint, ATransposedWindowedMatMulReadsItsPixelsWindowElements) {
  FootprintContext c = context(DType::Int8);
  c.window.in_h = 8, c.window.in_w = 8, c.window.in_c = 4, c.window.kernel_h = 3,
  c.window.kernel_w = 3, c.window.out_h = 6, c.window.out_w = 6;
  c.tile_rows = 36;
  MatMul mm;
  mm.window = true, mm.transpose = true, mm.src = UbAddr(0x1000), mm.rows = 4;
  EXPECT_EQ(first_range(mm, c), Range(0x1000ull, 0x1000ull + (5 * 8 + 5) * 4 + 4));
  // Window elements past the window read nothing the footprint can name; the MXU rejects them.
  mm.k_first = 34;
  const auto r = first_range(mm, c);
  EXPECT_EQ(r.first, r.second);
}

// A 3x3x1 image dilated by 2 (virtual 5x5), padded by 2, read by a 3x3 window: output pixel
// (0, 0) covers virtual rows and columns -2..0, of which only (0, 0) is a stored pixel; output
// pixel (2, 2) covers 0..2, the stored pixels (0..1, 0..1).
TEST(TrainingFootprint, AnInputDilatedWindowReadsOnlyStoredPixels) {
  FootprintContext c = context(DType::Int8);
  c.window.in_h = 3, c.window.in_w = 3, c.window.in_c = 1, c.window.kernel_h = 3,
  c.window.kernel_w = 3, c.window.pad_top = 2, c.window.pad_left = 2, c.window.out_h = 5,
  c.window.out_w = 5, c.window.in_dilation_h = 2, c.window.in_dilation_w = 2;
  c.tile_rows = 9;
  MatMul mm;
  mm.window = true, mm.src = UbAddr(0x1000), mm.rows = 1;
  EXPECT_EQ(first_range(mm, c), Range(0x1000ull, 0x1001ull));
  mm.first_pixel = 2 * 5 + 2;
  EXPECT_EQ(first_range(mm, c), Range(0x1000ull, 0x1000ull + 1 * 3 + 1 + 1));
}

// docs/isa.md §4.5: virtual position v = o*stride + k*dilation - pad; zero if v < 0, v mod
// in_dilation != 0 or v / in_dilation >= in; else stored pixel v / in_dilation. Every position of
// a small geometry, against that rule written out here.
TEST(TrainingWindow, WindowPixelFollowsTheInputDilationRule) {
  SetWindow g;
  g.in_h = 3, g.in_w = 4, g.in_c = 1, g.kernel_h = 3, g.kernel_w = 2, g.stride_h = 2,
  g.stride_w = 1, g.pad_top = 2, g.pad_left = 1, g.out_h = 4, g.out_w = 7, g.dilation_h = 1,
  g.dilation_w = 2, g.in_dilation_h = 2, g.in_dilation_w = 3;
  auto axis = [](std::int64_t v, std::int64_t d, std::int64_t n) -> std::optional<std::int64_t> {
    if (v < 0 || v % d != 0 || v / d >= n) return std::nullopt;
    return v / d;
  };
  int stored = 0;
  for (std::uint64_t oy = 0; oy < g.out_h; ++oy)
    for (std::uint64_t ox = 0; ox < g.out_w; ++ox)
      for (std::uint32_t ky = 0; ky < g.kernel_h; ++ky)
        for (std::uint32_t kx = 0; kx < g.kernel_w; ++kx) {
          const auto y = axis(static_cast<std::int64_t>(oy * 2 + ky * 1) - 2, 2, 3);
          const auto x = axis(static_cast<std::int64_t>(ox * 1 + kx * 2) - 1, 3, 4);
          const auto got = window_pixel(g, oy, ox, ky, kx);
          ASSERT_EQ(got.has_value(), y && x) << oy << " " << ox << " " << ky << " " << kx;
          if (!got) continue;
          ++stored;
          EXPECT_EQ(got->first, static_cast<std::uint64_t>(*y));
          EXPECT_EQ(got->second, static_cast<std::uint64_t>(*x));
        }
  EXPECT_GT(stored, 10);
}

}  // namespace
}  // namespace tpu::isa
