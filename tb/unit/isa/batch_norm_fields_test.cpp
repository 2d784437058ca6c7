// What BatchNormalization in training mode added to eltwise and map (docs/isa.md §4.9, §4.16):
// eltwise's b_period (bytes 28..31) and op div (9), map's function rsqrt (8): their encoding, that
// words written before them keep their meaning, their text form, and the broadcast footprint the
// sequencer checks at issue (§6.1), each against numbers typed in from the document.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <variant>

#include "hw/common/error.h"
#include "hw/isa/assembler.h"
#include "hw/isa/isa.h"
#include "hw/isa/semantics.h"

namespace tpu::isa {
namespace {

TEST(BatchNormEncoding, EltwiseBPeriodIsBytes28To31AndDivIsOp9) {
  Eltwise e;
  e.op = EltOp::Div, e.type = DType::Fp32, e.count = 64, e.b_period = 0x01020304;
  const Word w = encode(e);
  EXPECT_EQ(w[2], 9);
  EXPECT_EQ(w[28], 0x04);
  EXPECT_EQ(w[29], 0x03);
  EXPECT_EQ(w[30], 0x02);
  EXPECT_EQ(w[31], 0x01);
  const auto back = std::get<Eltwise>(decode(w));
  EXPECT_EQ(back.b_period, 0x01020304u);
  EXPECT_EQ(back.op, EltOp::Div);
}

TEST(BatchNormEncoding, MapRsqrtIsFunction8) {
  Map m;
  m.func = MapFunc::Rsqrt, m.in_type = DType::Fp32, m.out_type = DType::Fp32;
  const Word w = encode(m);
  EXPECT_EQ(w[2], 8);
  EXPECT_EQ(std::get<Map>(decode(w)).func, MapFunc::Rsqrt);
}

// An eltwise word written before b_period existed has zeros at bytes 28..31: b_period 0, b of
// count elements, the same footprint and the same word back.
TEST(BatchNormEncoding, EltwiseWordsWrittenBeforeBPeriodKeepTheirMeaning) {
  Word w{};
  w[0] = 0x0a, w[2] = 0 /* add */, w[3] = 3 /* fp32 */;
  w[8] = 0x00, w[9] = 0x10;  // b = 0x1000
  w[16] = 100;               // count
  const auto e = std::get<Eltwise>(decode(w));
  EXPECT_EQ(e.b_period, 0u);
  EXPECT_EQ(encode(e), w);
  const auto fp = footprint(e, FootprintContext{});
  ASSERT_EQ(fp.size(), 3u);
  EXPECT_STREQ(fp[1].field, "b");
  EXPECT_EQ(fp[1].lo, 0x1000u);
  EXPECT_EQ(fp[1].hi, 0x1000u + 4 * 100);
  EXPECT_EQ(Eltwise{}.b_period, 0u) << "an eltwise written today defaults to no broadcast";
}

// Codes past the new ones are still refused, naming the instruction.
TEST(BatchNormEncoding, OpsPastDivAndFunctionsPastRsqrtAreRefused) {
  Word e = encode(Eltwise{});
  e[2] = 10;
  EXPECT_THROW((void)decode(e), ProgramError);
  Word m = encode(Map{});
  m[2] = 9;
  try {
    (void)decode(m);
    ADD_FAILURE() << "map func 9 decoded";
  } catch (const ProgramError& err) {
    EXPECT_NE(std::string(err.what()).find("map"), std::string::npos) << err.what();
  }
}

TEST(BatchNormText, BPeriodDivAndRsqrtReadPrintAndRoundTrip) {
  const auto p = assemble(
      "eltwise a=0x0 b=0x4000 dst=0x0 count=6272 b_period=32 op=div type=fp32\n"
      "map src=0x100 dst=0x200 params=0x300 count=32 channels=32 func=rsqrt in=fp32 out=fp32\n",
      "bn.s");
  ASSERT_EQ(p.size(), 2u);
  const auto& e = std::get<Eltwise>(p[0]);
  EXPECT_EQ(e.b_period, 32u);
  EXPECT_EQ(e.op, EltOp::Div);
  EXPECT_EQ(std::get<Map>(p[1]).func, MapFunc::Rsqrt);
  EXPECT_EQ(to_string(p[0]),
            "eltwise a=0x0 b=0x4000 dst=0x0 count=6272 shift=0 multiplier=0 b_period=32 op=div "
            "type=fp32");
  EXPECT_EQ(to_string(p[1]),
            "map src=0x100 dst=0x200 params=0x300 count=32 channels=32 in_scale=0 out_scale=0 "
            "func=rsqrt in=fp32 out=fp32");
  EXPECT_EQ(to_binary(assemble(disassemble(p), "again.s")), to_binary(p));
}

TEST(BatchNormText, BPeriodLeftOutIsNoBroadcastAndIsAnUnsigned32BitField) {
  EXPECT_EQ(std::get<Eltwise>(assemble("eltwise count=4", "old.s").at(0)).b_period, 0u);
  EXPECT_EQ(std::get<Eltwise>(assemble("eltwise b_period=4294967295", "p.s").at(0)).b_period,
            0xffffffffu);
  for (const char* bad : {"eltwise b_period=4294967296", "eltwise b_period=-1"}) {
    try {
      (void)assemble(bad, "p.s");
      ADD_FAILURE() << bad << " assembled";
    } catch (const ProgramError& e) {
      EXPECT_NE(std::string(e.what()).find("b_period"), std::string::npos) << e.what();
    }
  }
}

// docs/isa.md §6.1: a broadcast b reads b_period elements of its type; without the broadcast,
// count. The sequencer checks these ranges against the unified buffer at issue.
TEST(BatchNormFootprint, ABroadcastBReadsBPeriodElements) {
  Eltwise e;
  e.a = UbAddr(0x100), e.b = UbAddr(0x8000), e.dst = UbAddr(0x2000), e.count = 1000;
  for (const auto& [type, size] :
       {std::pair{DType::Int8, 1u}, std::pair{DType::Bf16, 2u}, std::pair{DType::Fp32, 4u}})
    for (std::uint32_t p : {0u, 1u, 16u, 1000u}) {
      e.type = type, e.b_period = p;
      const auto fp = footprint(e, FootprintContext{});
      ASSERT_EQ(fp.size(), 3u);
      EXPECT_EQ(fp[0].hi - fp[0].lo, 1000u * size) << "a";
      EXPECT_EQ(fp[1].hi - fp[1].lo, std::uint64_t{p == 0 ? 1000u : p} * size) << "b " << p;
      EXPECT_FALSE(fp[1].write);
      EXPECT_EQ(fp[2].hi - fp[2].lo, 1000u * size) << "dst";
    }
}

}  // namespace
}  // namespace tpu::isa
