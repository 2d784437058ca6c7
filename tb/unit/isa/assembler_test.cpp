// The text form of the instruction set (docs/isa.md §3.3): the assembler reads back exactly what
// the disassembler prints, reports bad text with file, line, token and what is allowed, and never
// crashes on hostile input. Instructions are compared through their 32-byte encodings: encode is
// injective on legal instructions (IsaEncoding tests), so equal words mean equal instructions.
#include "hw/isa/assembler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "hw/common/error.h"
#include "hw/isa/fields.h"

namespace tpu::isa {
namespace {

// docs/isa.md §2, in opcode order.
const std::vector<std::string> kMnemonics = {
    "nop",        "read_host", "write_host", "read_mem", "write_mem", "read_weights",
    "set_window", "matmul",    "activate",   "pool",     "eltwise",   "sync",
    "tag",        "softmax",   "halt",       "gather",   "copy",      "map",
    "xent",       "update",    "reduce",     "pool_grad"};

// docs/isa.md §3.1 enum names in code order, and the subset pool, eltwise and map accept (§4.8,
// §4.9, §4.16).
const std::vector<std::string> kTypeNames = {"int8", "int32", "bf16", "fp32"};
const std::vector<std::string> kElementTypeNames = {"int8", "bf16", "fp32"};
const std::vector<std::string> kFuncNames = {"none", "relu", "relu6", "sigmoid", "tanh", "softmax"};
const std::vector<std::string> kKindNames = {"max", "avg"};
const std::vector<std::string> kOpNames = {"add",       "mul",       "max",        "min",
                                           "sub",       "relu_grad", "relu6_grad", "sigmoid_grad",
                                           "tanh_grad", "div"};
const std::vector<std::string> kReduceOpNames = {"sum", "max", "sum_squares"};
const std::vector<std::string> kMapFuncNames = {"identity", "relu", "relu6", "leaky_relu", "elu",
                                                "sigmoid",  "tanh", "prelu", "rsqrt"};
const std::vector<std::string> kSourceNames = {"mem", "ub"};
const std::vector<std::string> kUpdateKindNames = {"sgd", "momentum", "adam", "lars"};

// The names a field accepts and, by position, their codes; empty for non-enum fields.
std::vector<std::string> enum_names(std::string_view op_name, std::string_view field) {
  if (op_name == "read_weights" && field == "from") return kSourceNames;
  if (op_name == "activate" && field == "func") return kFuncNames;
  if (op_name == "activate" && field == "out") return kTypeNames;
  if (op_name == "pool" && field == "kind") return kKindNames;
  if (op_name == "eltwise" && field == "op") return kOpNames;
  if (op_name == "pool" && field == "type") return kElementTypeNames;
  if (op_name == "eltwise" && field == "type") return kElementTypeNames;
  if (op_name == "map" && field == "func") return kMapFuncNames;
  if (op_name == "map" && (field == "in" || field == "out")) return kElementTypeNames;
  if (op_name == "update" && field == "kind") return kUpdateKindNames;
  if (op_name == "reduce" && field == "op") return kReduceOpNames;
  if (op_name == "pool_grad" && field == "kind") return kKindNames;
  if ((op_name == "reduce" || op_name == "pool_grad") && field == "type") return kTypeNames;
  return {};
}

unsigned type_code(const std::string& name) {
  for (unsigned c = 0; c < kTypeNames.size(); ++c)
    if (kTypeNames[c] == name) return c;
  ADD_FAILURE() << "no data type " << name;
  return 0;
}

// The code of `names[i]` for an enum field: data types are looked up in the full type table.
unsigned enum_code(const std::vector<std::string>& names, std::size_t i) {
  if (names == kElementTypeNames) return type_code(names[i]);
  return static_cast<unsigned>(i);
}

std::vector<Instruction> blanks() {
  std::vector<Instruction> out;
  for (const auto& m : kMnemonics) out.push_back(assemble(m, "blank.s").at(0));
  return out;
}

// Sets every field through fields.h: integers from `next_int(max)`, enums to the
// `enum_index(count)`-th documented name, flags from `next_flag()`.
template <class NextInt, class EnumIndex, class NextFlag>
void set_fields(Instruction& inst, NextInt&& next_int, EnumIndex&& enum_index,
                NextFlag&& next_flag) {
  const std::string op_name = mnemonic(opcode_of(inst));
  std::visit(
      [&](auto& i) {
        visit_fields(i, [&](std::string_view name, auto&& v) {
          using F = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<F, bool>) {
            v = next_flag();
          } else if constexpr (std::is_enum_v<F>) {
            const std::vector<std::string> names = enum_names(op_name, name);
            ASSERT_FALSE(names.empty()) << op_name << " " << name;
            v = static_cast<F>(enum_code(names, enum_index(names.size())));
          } else if constexpr (std::is_same_v<F, RawAddress>) {
            v.value = next_int(std::numeric_limits<std::uint64_t>::max());
          } else if constexpr (std::is_integral_v<F>) {
            // Signed fields over their whole range: the unsigned value of the same width wraps.
            v = static_cast<F>(next_int(std::numeric_limits<std::make_unsigned_t<F>>::max()));
          } else if constexpr (std::is_floating_point_v<F>) {
            // Any 32 bits: NaN payloads, infinities, subnormals and signed zeros included.
            const auto bits = static_cast<std::uint32_t>(next_int(0xffffffffu));
            std::memcpy(&v, &bits, sizeof v);
          } else {
            using Rep = typename F::rep;
            v = F(static_cast<Rep>(next_int(std::numeric_limits<Rep>::max())));
          }
        });
      },
      inst);
}

std::string message_of(const std::string& text, const std::string& origin) {
  try {
    (void)assemble(text, origin);
  } catch (const ProgramError& e) {
    return e.what();
  }
  ADD_FAILURE() << "assembled: " << text;
  return {};
}

void expect_error(const std::string& text, const std::vector<std::string>& parts) {
  const std::string msg = message_of(text, "prog.s");
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
}

void expect_round_trip(const std::vector<Instruction>& program) {
  const std::string text = disassemble(program);
  const std::vector<Instruction> back = assemble(text, "round.s");
  ASSERT_EQ(back.size(), program.size());
  for (std::size_t i = 0; i < program.size(); ++i)
    EXPECT_EQ(encode(back[i]), encode(program[i])) << to_string(program[i]);
  EXPECT_EQ(disassemble(back), text);
}

TEST(Assembler, EveryOpcodeFieldEnumValueAndFlagRoundTrips) {
  std::vector<Instruction> program;
  std::size_t used_enum_names = 0;
  for (const Instruction& blank : blanks()) {
    // One instruction per name of the opcode's longest enum list, so every name appears; the
    // integers count down from each field's maximum so that no field holds its default.
    std::size_t variants = 1;
    std::visit(
        [&](auto i) {
          visit_fields(i, [&](std::string_view name, auto&&) {
            variants = std::max(variants, enum_names(mnemonic(opcode_of(blank)), name).size());
          });
        },
        blank);
    for (std::size_t k = 0; k < variants; ++k) {
      Instruction inst = blank;
      std::uint64_t field = 0;
      set_fields(
          inst, [&](std::uint64_t max) { return max - k - 3 * field++; },
          [&](std::size_t count) {
            ++used_enum_names;
            return k % count;
          },
          [&] { return true; });
      program.push_back(inst);
    }
  }
  ASSERT_GT(used_enum_names, 0u);
  expect_round_trip(program);

  const std::string text = disassemble(program);
  for (const auto& m : kMnemonics)
    EXPECT_NE(text.find(m), std::string::npos) << m << " missing from:\n" << text;
  for (const auto* names : {&kTypeNames, &kFuncNames, &kKindNames, &kOpNames, &kSourceNames,
                            &kMapFuncNames, &kUpdateKindNames})
    for (const auto& n : *names)
      EXPECT_TRUE(text.find("=" + n + " ") != std::string::npos ||
                  text.find("=" + n + "\n") != std::string::npos)
          << n;
  for (const std::string flag : {" acc", " swap", " window", " all_cores"})
    EXPECT_NE(text.find(flag), std::string::npos) << flag;
}

TEST(Assembler, RandomLegalInstructionsRoundTrip) {
  std::mt19937_64 rng(20240611);
  const std::vector<Instruction> kinds = blanks();
  // Mostly edge values (0, 1, max, max-1) and small numbers, the rest uniform over the width.
  const auto next_int = [&](std::uint64_t max) -> std::uint64_t {
    switch (rng() % 6) {
      case 0: return 0;
      case 1: return 1;
      case 2: return max;
      case 3: return max - 1;
      case 4: return std::min<std::uint64_t>(rng() % 300, max);
      default: return std::uniform_int_distribution<std::uint64_t>(0, max)(rng);
    }
  };
  const auto enum_index = [&](std::size_t count) { return rng() % count; };
  const auto next_flag = [&] { return rng() % 2 == 1; };
  std::vector<Instruction> program;
  for (int n = 0; n < 5000; ++n) {
    Instruction inst = kinds[rng() % kinds.size()];
    set_fields(inst, next_int, enum_index, next_flag);
    program.push_back(inst);
  }
  expect_round_trip(program);
}

TEST(Assembler, ReadsFieldsInAnyOrderDecimalOrHexAndDefaultsTheRest) {
  const std::string text =
      "# a comment line\n"
      "\n"
      "   ; another comment, indented\n"
      "matmul rows=64 src=256 swap mxu=0x1 dst=0X1f   # trailing comment\n"
      "\tset_window in_h=28 in_w=0x1C\t; strides keep their default\r\n"
      "read_weights addr=1048576 from=ub rows=0xFF cols=007\n"
      "sync all_cores;no space before the comment\n"
      "activate func=relu6\n"
      "halt";
  MatMul mm;
  mm.rows = 64;
  mm.src = UbAddr(256);
  mm.swap_weights = true;
  mm.mxu = 1;
  mm.dst = AccAddr(0x1f);
  SetWindow sw;
  sw.in_h = 28;
  sw.in_w = 28;
  ReadWeights rw;
  rw.addr = 1048576;
  rw.source = WeightSource::UnifiedBuffer;
  rw.rows = 255;
  rw.cols = 7;
  Activate act;
  act.func = ActFunc::Relu6;
  const std::vector<Instruction> expect = {mm, sw, rw, Sync{true}, act, Halt{}};
  EXPECT_EQ(to_binary(assemble(text, "order.s")), to_binary(expect));
}

// docs/isa.md §4.14's example line.
TEST(Assembler, ReadsTheDocumentedGatherLine) {
  Gather g;
  g.table = MemAddr(0x10000000);
  g.indices = UbAddr(0x0);
  g.dst = UbAddr(0x1000);
  g.count = 256;
  g.row_bytes = 128;
  g.rows = 30000;
  const std::string line =
      "gather table=0x10000000 indices=0x0 dst=0x1000 count=256 row_bytes=128 rows=30000";
  EXPECT_EQ(to_binary(assemble(line, "gather.s")), to_binary({g}));
  EXPECT_EQ(to_string(g), line);
}

// docs/isa.md §4.19's and §4.20's example lines: the fp32 scale prints as the shortest decimal
// that reads back, and update's kind by name.
TEST(Assembler, ReadsTheDocumentedXentAndUpdateLines) {
  Xent x;
  x.src = UbAddr(0x0), x.labels = UbAddr(0x1400), x.dst = UbAddr(0x0), x.out = UbAddr(0x1600);
  x.rows = 125, x.cols = 10, x.scale = 0.001f;
  const std::string xent_line =
      "xent src=0x0 labels=0x1400 dst=0x0 out=0x1600 rows=125 cols=10 scale=0.001";
  EXPECT_EQ(to_binary(assemble(xent_line, "xent.s")), to_binary({x}));
  EXPECT_EQ(to_string(x), xent_line);
  // With label smoothing (§4.19's second line); +0 prints nothing, as above.
  x.smoothing = 0.1f;
  const std::string smoothed_line = xent_line + " smoothing=0.1";
  EXPECT_EQ(to_binary(assemble(smoothed_line, "xent.s")), to_binary({x}));
  EXPECT_EQ(to_string(x), smoothed_line);
  Update u;
  u.w = UbAddr(0x0), u.g = UbAddr(0x10000), u.m = UbAddr(0x20000), u.v = UbAddr(0x30000);
  u.params = UbAddr(0x40000), u.count = 16384, u.kind = UpdateKind::Adam;
  const std::string update_line =
      "update w=0x0 g=0x10000 m=0x20000 v=0x30000 params=0x40000 count=16384 kind=adam";
  EXPECT_EQ(to_binary(assemble(update_line, "update.s")), to_binary({u}));
  EXPECT_EQ(to_string(u), update_line);
  // Left out, kind is sgd.
  EXPECT_EQ(std::get<Update>(assemble("update count=4", "sgd.s").front()).kind, UpdateKind::Sgd);
  u.v = UbAddr(0x0), u.kind = UpdateKind::Lars;
  const std::string lars_line =
      "update w=0x0 g=0x10000 m=0x20000 v=0x0 params=0x40000 count=16384 kind=lars";
  EXPECT_EQ(to_binary(assemble(lars_line, "lars.s")), to_binary({u}));
  EXPECT_EQ(to_string(u), lars_line);
}

// docs/isa.md §4.17 and §4.18's example lines, which print back as written; left out, their
// type is fp32 (§3.3) and reduce's op sum, pool_grad's kind max.
TEST(Assembler, ReadsTheDocumentedReduceAndPoolGradLines) {
  Reduce r;
  r.src = UbAddr(0x0);
  r.dst = UbAddr(0x8000);
  r.rows = 784;
  r.cols = 32;
  r.stride = 128;
  r.accumulate = true;
  const std::string reduce_line =
      "reduce src=0x0 dst=0x8000 rows=784 cols=32 stride=128 op=sum type=fp32 acc";
  EXPECT_EQ(to_binary(assemble(reduce_line, "reduce.s")), to_binary({r}));
  EXPECT_EQ(to_string(r), reduce_line);
  r.op = ReduceOp::SumSquares, r.accumulate = false;
  const std::string sum_squares_line =
      "reduce src=0x0 dst=0x8000 rows=784 cols=32 stride=128 op=sum_squares type=fp32";
  EXPECT_EQ(to_binary(assemble(sum_squares_line, "sum_squares.s")), to_binary({r}));
  EXPECT_EQ(to_string(r), sum_squares_line);
  PoolGrad g;
  g.x = UbAddr(0x0);
  g.dy = UbAddr(0x40000);
  g.dst = UbAddr(0x50000);
  g.images = 8;
  const std::string pool_grad_line =
      "pool_grad x=0x0 dy=0x40000 dst=0x50000 images=8 kind=max type=fp32";
  EXPECT_EQ(to_binary(assemble(pool_grad_line, "pool_grad.s")), to_binary({g}));
  EXPECT_EQ(to_string(g), pool_grad_line);
  const std::vector<Instruction> defaults = assemble("reduce\npool_grad\n", "defaults.s");
  EXPECT_EQ(std::get<Reduce>(defaults.at(0)).type, DType::Fp32);
  EXPECT_EQ(std::get<Reduce>(defaults.at(0)).op, ReduceOp::Sum);
  EXPECT_EQ(std::get<PoolGrad>(defaults.at(1)).type, DType::Fp32);
  EXPECT_EQ(std::get<PoolGrad>(defaults.at(1)).kind, PoolKind::Max);
  Eltwise e;
  e.op = EltOp::SigmoidGrad;
  e.type = DType::Fp32;
  e.count = 4;
  EXPECT_EQ(to_binary(assemble("eltwise count=4 op=sigmoid_grad type=fp32", "e.s")),
            to_binary({e}));
}

TEST(Assembler, EmptyAndCommentOnlyTextIsAnEmptyProgram) {
  EXPECT_TRUE(assemble("", "empty.s").empty());
  EXPECT_TRUE(assemble("\n\n  \t\r\n# halt\n; halt\n", "comments.s").empty());
  EXPECT_EQ(disassemble({}), "");
}

TEST(Disassembler, PrintsOneLinePerInstructionWithEveryAddressInHex) {
  ReadWeights rw;
  rw.addr = 0x100000;
  ReadMem rm;
  rm.src = MemAddr(0x10000000);
  const std::string text = disassemble({rw, rm, Halt{}});
  EXPECT_EQ(text, to_string(rw) + "\n" + to_string(rm) + "\nhalt\n");
  EXPECT_NE(text.find(" addr=0x100000 "), std::string::npos) << text;
  EXPECT_NE(text.find(" src=0x10000000 "), std::string::npos) << text;
}

TEST(Assembler, BinaryRoundTripsAndIsTheEncodedWords) {
  const std::vector<Instruction> program =
      assemble("read_host src=0x40 dst=0x0 bytes=64\ntag id=9\nsync all_cores\nhalt\n", "b.s");
  const std::vector<std::uint8_t> bytes = to_binary(program);
  EXPECT_EQ(bytes, encode_all(program));
  EXPECT_EQ(bytes.size(), program.size() * kInstructionBytes);
  EXPECT_EQ(to_binary(from_binary(bytes, "b.bin")), bytes);
  EXPECT_TRUE(from_binary({}, "empty.bin").empty());
}

TEST(Assembler, BinaryErrorsNameTheFileAndTheInstruction) {
  std::vector<std::uint8_t> bytes = to_binary(assemble("nop\nnop\nnop\nhalt\n", "b.s"));
  bytes[2 * kInstructionBytes] = 0xff;
  try {
    (void)from_binary(bytes, "prog.bin");
    ADD_FAILURE() << "an illegal opcode decoded";
  } catch (const ProgramError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("prog.bin: instruction 2: ", 0), 0u) << e.what();
  }
  bytes.pop_back();
  try {
    (void)from_binary(bytes, "prog.bin");
    ADD_FAILURE() << "a partial word decoded";
  } catch (const ProgramError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("prog.bin: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(bytes.size())), std::string::npos);
  }
}

TEST(AssemblerErrors, UnknownFieldListsTheFieldsAndFlags) {
  EXPECT_EQ(message_of("nop\n\nmatmul mxu=0 rowz=4\n", "prog.s"),
            "prog.s:3: matmul: unknown field \"rowz\" (fields: mxu, src, dst, rows, stride, "
            "first_pixel, k_first; flags: acc, swap, window, transpose)");
  expect_error("nop x=1", {"prog.s:1: nop: ", "\"x\"", "nop takes no fields"});
  expect_error("sync all", {"prog.s:1: sync: ", "\"all\"", "flags: all_cores"});
  expect_error("tag =5", {"prog.s:1: tag: ", "\"=5\""});
}

TEST(AssemblerErrors, UnknownMnemonicListsEveryMnemonic) {
  const std::string msg = message_of("# header\nmatmull rows=1\n", "prog.s");
  EXPECT_EQ(msg.rfind("prog.s:2: unknown mnemonic \"matmull\"", 0), 0u) << msg;
  for (const auto& m : kMnemonics) EXPECT_NE(msg.find(m), std::string::npos) << m;
  expect_error("HALT", {"prog.s:1:", "\"HALT\""});
}

TEST(AssemblerErrors, ValuesMustFitTheFieldWidth) {
  const auto max_of = [](auto v) {
    return std::to_string(std::numeric_limits<decltype(v)>::max());
  };
  expect_error("matmul mxu=300",
               {"prog.s:1: matmul: ", "\"mxu=300\"", "0.." + max_of(std::uint8_t{})});
  expect_error("read_weights rows=65536", {"\"rows=65536\"", "0.." + max_of(std::uint16_t{})});
  expect_error("matmul src=0x100000000", {"\"src=0x100000000\"", "0.." + max_of(std::uint32_t{})});
  const std::string u64_max = max_of(std::uint64_t{});
  EXPECT_EQ(
      to_binary(assemble("read_mem src=" + u64_max + " dst=0xffffffff bytes=4294967295", "max.s")),
      to_binary({ReadMem{MemAddr(std::numeric_limits<std::uint64_t>::max()),
                         UbAddr(std::numeric_limits<std::uint32_t>::max()),
                         std::numeric_limits<std::uint32_t>::max()}}));
  expect_error("read_mem src=18446744073709551616", {"\"src=18446744073709551616\"", u64_max});
  expect_error("read_weights addr=0x10000000000000000", {"\"addr=0x10000000000000000\""});
  expect_error("tag id=" + std::string(5000, '9'), {"prog.s:1: tag: ", "\"id=999", "out of range"});
}

// eltwise's shift and multiplier are signed (docs/isa.md §4.9): a '-' may lead, and the range
// is the two's complement one of the width.
TEST(Assembler, SignedFieldsTakeAMinusSignWithinTheirRange) {
  Eltwise e;
  e.op = EltOp::Mul;
  e.shift = -128;
  e.multiplier = std::numeric_limits<std::int32_t>::min();
  const std::vector<Instruction> expect = {e};
  EXPECT_EQ(to_binary(assemble("eltwise op=mul shift=-128 multiplier=-0x80000000", "s.s")),
            to_binary(expect));
  expect_round_trip(expect);
  const std::string i8 = "-128..127";
  expect_error("eltwise shift=-129", {"prog.s:1: eltwise: ", "\"shift=-129\"", i8});
  expect_error("eltwise shift=128", {"\"shift=128\"", "signed 8-bit", i8});
  expect_error("eltwise multiplier=2147483648", {"\"multiplier=2147483648\"", "2147483647"});
  for (const std::string bad : {"-", "--1", "+1", "-x"})
    expect_error("eltwise shift=" + bad, {"\"shift=" + bad + "\"", "not a number"});
}

TEST(AssemblerErrors, ValuesMustBePlainUnsignedNumbers) {
  for (const std::string bad :
       {"-1", "+1", "12abc", "0x", "0x1g", "1.5", "1e3", "", "0b101", "1_000", "0x-1"}) {
    const std::string tok = "rows=" + bad;
    expect_error("nop\nmatmul " + tok, {"prog.s:2: matmul: ", "\"" + tok + "\"", "not a number"});
  }
}

TEST(AssemblerErrors, EnumValuesMustBeNamesTheDecoderAccepts) {
  std::string all_funcs;
  for (const auto& f : kFuncNames) all_funcs += (all_funcs.empty() ? "" : ", ") + f;
  expect_error("activate func=relu7", {"prog.s:1: activate: ", "\"func=relu7\"", all_funcs});
  expect_error("activate func=RELU", {"\"func=RELU\""});
  expect_error("activate func=1", {"\"func=1\""});
  expect_error("pool type=int32",
               {"prog.s:1: pool: ", "\"type=int32\"", "allowed: int8, bf16, fp32"});
  expect_error("eltwise type=int32", {"\"type=int32\"", "allowed: int8, bf16, fp32"});
  expect_error("read_weights from=hbm", {"\"from=hbm\"", "allowed: mem, ub"});
}

TEST(AssemblerErrors, FlagsTakeNoValueAndFieldsNeedOne) {
  expect_error("matmul acc=1", {"prog.s:1: matmul: ", "\"acc=1\"", "flag"});
  expect_error("sync all_cores=true", {"\"all_cores=true\"", "flag"});
  expect_error("matmul rows", {"prog.s:1: matmul: ", "\"rows\"", "needs a value"});
  expect_error("activate func", {"\"func\"", "needs a value"});
}

TEST(AssemblerErrors, AFieldOrFlagMayAppearOnlyOnce) {
  expect_error("tag id=1 id=1", {"prog.s:1: tag: ", "\"id=1\"", "twice"});
  expect_error("matmul acc swap acc", {"prog.s:1: matmul: ", "\"acc\"", "twice"});
}

TEST(AssemblerErrors, LineNumbersCountCommentsAndBlankLines) {
  expect_error("# 1\n\n; 3\nnop\r\n  \nhalt extra\n", {"prog.s:6: halt: ", "\"extra\""});
}

TEST(AssemblerErrors, HostileTextGivesABoundedPrintableMessage) {
  const std::string long_token(1 << 20, 'a');
  for (const std::string& text : {long_token, "matmul " + long_token, "matmul rows=" + long_token,
                                  std::string("halt\n\x01\xff\x7f"), std::string("tag id=1\0", 9),
                                  std::string("matmul \x80=1")}) {
    const std::string msg = message_of(text, "hostile.s");
    EXPECT_LT(msg.size(), 500u) << msg.substr(0, 500);
    for (const char c : msg)
      EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << "byte " << static_cast<int>(c) << " in " << msg;
  }
  EXPECT_NE(message_of(std::string("tag id=1\0", 9), "h.s").find("\\x00"), std::string::npos);
}

TEST(AssemblerErrors, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"matmul", "rows=", "0x",   "9",   " ",    "\n", "=",
                                           "acc",    "#",     "halt", "tag", "id=1", ";",  "\t"};
  for (int n = 0; n < 2000; ++n) {
    std::string text;
    const std::size_t len = rng() % 64;
    for (std::size_t i = 0; i < len; ++i) {
      if (rng() % 2)
        text += static_cast<char>(rng() % 256);
      else
        text += pieces[rng() % pieces.size()];
    }
    try {
      expect_round_trip(assemble(text, "fuzz.s"));
    } catch (const ProgramError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("fuzz.s:", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace tpu::isa
