// The binary encoding of the instruction set against docs/isa.md: the opcode table (§2), the
// word layouts (§4), the enum codes (§3.1) and the decoding rules (§3.2). The layouts below are
// typed in from the document, not derived from isa.cpp, so a drift between the two fails here.
#include "hw/isa/isa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "hw/common/error.h"
#include "hw/isa/fields.h"
#include "hw/isa/window.h"

namespace tpu::isa {
namespace {

// One operand of a documented layout. An integer or enum field occupies bytes
// [offset, offset + width); a flag is bit `bit` of byte 1; a split fp32 field (xent's smoothing)
// has its low 16 bits at offset and its high 16 bits at `high`.
struct DocField {
  std::string name;
  std::size_t offset = 0;
  std::size_t width = 0;
  int bit = -1;
  std::vector<unsigned> codes;  // enum fields: the codes §3.1 allows for this instruction
  std::size_t high = 0;         // a split field's high half; 0: not split
};

struct DocLayout {
  std::uint8_t opcode;
  std::string mnemonic;
  Instruction blank;
  std::vector<DocField> fields;
};

DocField integer(const std::string& name, std::size_t offset, std::size_t width) {
  return {name, offset, width, -1, {}};
}
DocField enumeration(const std::string& name, std::size_t offset, std::vector<unsigned> codes) {
  return {name, offset, 1, -1, std::move(codes)};
}
DocField flag(const std::string& name, int bit) { return {name, 1, 0, bit, {}}; }
DocField split(const std::string& name, std::size_t low, std::size_t high) {
  return {name, low, 4, -1, {}, high};
}
// The word's byte that holds byte b of field d's value.
std::size_t byte_of(const DocField& d, std::size_t b) {
  return d.high != 0 && b >= 2 ? d.high + b - 2 : d.offset + b;
}

// docs/isa.md §3.1 enum codes: data type 0 int8, 1 int32, 2 bf16, 3 fp32; func 0..5; kind 0..1;
// op 0..9; map func 0..8. Pool and eltwise take int8, bf16 and fp32 (§4.8, §4.9); reduce and
// pool_grad decode every data type (§4.17, §4.18: the vector unit refuses all but fp32).
const std::vector<unsigned> kAllTypes = {0, 1, 2, 3};
const std::vector<unsigned> kElementTypes = {0, 2, 3};

const std::vector<DocLayout>& doc_layouts() {
  static const std::vector<DocLayout> layouts = {
      {0x00, "nop", Nop{}, {}},
      {0x01,
       "read_host",
       ReadHost{},
       {integer("src", 4, 8), integer("dst", 12, 4), integer("bytes", 16, 4)}},
      {0x02,
       "write_host",
       WriteHost{},
       {integer("src", 4, 4), integer("dst", 8, 8), integer("bytes", 16, 4)}},
      {0x03,
       "read_mem",
       ReadMem{},
       {integer("src", 4, 8), integer("dst", 12, 4), integer("bytes", 16, 4), flag("ici", 0)}},
      {0x04,
       "write_mem",
       WriteMem{},
       {integer("src", 4, 4), integer("dst", 8, 8), integer("bytes", 16, 4), flag("ici", 0)}},
      {0x05,
       "read_weights",
       ReadWeights{},
       {flag("from", 0), integer("mxu", 2, 1), integer("addr", 4, 8), integer("rows", 12, 2),
        integer("cols", 14, 2), flag("transpose", 1), integer("stride", 16, 4)}},
      {0x06,
       "set_window",
       SetWindow{},
       {integer("in_h", 4, 2), integer("in_w", 6, 2), integer("in_c", 8, 2),
        integer("kernel_h", 10, 2), integer("kernel_w", 12, 2), integer("stride_h", 14, 2),
        integer("stride_w", 16, 2), integer("pad_top", 18, 2), integer("pad_left", 20, 2),
        integer("out_h", 22, 2), integer("out_w", 24, 2), integer("dilation_h", 26, 2),
        integer("dilation_w", 28, 2), integer("in_dilation_h", 30, 1),
        integer("in_dilation_w", 31, 1)}},
      {0x07,
       "matmul",
       MatMul{},
       {flag("acc", 0), flag("swap", 1), flag("window", 2), integer("mxu", 2, 1),
        integer("src", 4, 4), integer("dst", 8, 4), integer("rows", 12, 4),
        integer("stride", 16, 4), integer("first_pixel", 20, 4), integer("k_first", 24, 2),
        flag("transpose", 3)}},
      {0x08,
       "activate",
       Activate{},
       {enumeration("func", 2, {0, 1, 2, 3, 4, 5}), enumeration("out", 3, kAllTypes),
        integer("src", 4, 4), integer("dst", 8, 4), integer("params", 12, 4),
        integer("rows", 16, 4), integer("cols", 20, 2), integer("stride", 22, 4)}},
      {0x09,
       "pool",
       Pool{},
       {enumeration("kind", 2, {0, 1}), enumeration("type", 3, kElementTypes), integer("src", 4, 4),
        integer("dst", 8, 4), integer("in_h", 12, 2), integer("in_w", 14, 2),
        integer("channels", 16, 2), integer("kernel_h", 18, 2), integer("kernel_w", 20, 2),
        integer("stride_h", 22, 1), integer("pad_top", 23, 1), integer("stride_w", 24, 1),
        integer("pad_left", 25, 1), integer("images", 26, 2), integer("out_h", 28, 2),
        integer("out_w", 30, 2)}},
      {0x0a,
       "eltwise",
       Eltwise{},
       {enumeration("op", 2, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}), enumeration("type", 3, kElementTypes),
        integer("a", 4, 4), integer("b", 8, 4), integer("dst", 12, 4), integer("count", 16, 4),
        integer("shift", 20, 1), integer("multiplier", 24, 4), integer("b_period", 28, 4)}},
      {0x0b, "sync", Sync{}, {flag("all_cores", 0), integer("dst", 8, 8), integer("bytes", 16, 4)}},
      {0x0c, "tag", Tag{}, {integer("id", 4, 4)}},
      {0x0d,
       "softmax",
       Softmax{},
       {integer("src", 4, 4), integer("dst", 8, 4), integer("rows", 12, 4), integer("cols", 16, 2),
        integer("src_stride", 20, 4), integer("dst_stride", 24, 4)}},
      {0x0f, "halt", Halt{}, {}},
      {0x20,
       "gather",
       Gather{},
       {integer("table", 4, 8), integer("indices", 12, 4), integer("dst", 16, 4),
        integer("count", 20, 4), integer("row_bytes", 24, 4), integer("rows", 28, 4)}},
      {0x11,
       "map",
       Map{},
       {enumeration("func", 2, {0, 1, 2, 3, 4, 5, 6, 7, 8}), enumeration("out", 3, kElementTypes),
        integer("src", 4, 4), integer("dst", 8, 4), integer("params", 12, 4),
        integer("count", 16, 4), integer("channels", 20, 2), enumeration("in", 22, kElementTypes),
        integer("in_scale", 24, 4), integer("out_scale", 28, 4)}},
      {0x10,
       "copy",
       Copy{},
       {integer("src", 4, 4), integer("dst", 8, 4), integer("rows", 12, 4),
        integer("row_bytes", 16, 4), integer("src_stride", 20, 4), integer("dst_stride", 24, 4)}},
      {0x12,
       "reduce",
       Reduce{},
       {flag("acc", 0), enumeration("op", 2, {0, 1, 2}), enumeration("type", 3, kAllTypes),
        integer("src", 4, 4), integer("dst", 8, 4), integer("rows", 12, 4), integer("cols", 16, 2),
        integer("stride", 20, 4)}},
      {0x13,
       "pool_grad",
       PoolGrad{},
       {enumeration("kind", 2, {0, 1}), enumeration("type", 3, kAllTypes), integer("x", 4, 4),
        integer("dy", 8, 4), integer("dst", 12, 4), integer("images", 16, 4)}},
      {0x14,
       "xent",
       Xent{},
       {integer("src", 4, 4), integer("labels", 8, 4), integer("dst", 12, 4), integer("out", 16, 4),
        integer("rows", 20, 4), integer("cols", 24, 2), integer("scale", 26, 4),
        split("smoothing", 2, 30)}},
      {0x15,
       "update",
       Update{},
       {enumeration("kind", 2, {0, 1, 2, 3}), integer("w", 4, 4), integer("g", 8, 4),
        integer("m", 12, 4), integer("v", 16, 4), integer("params", 20, 4),
        integer("count", 24, 4)}},
      {0x21,
       "ici_write",
       IciWrite{},
       {integer("src", 4, 4), integer("dst", 8, 8), integer("bytes", 16, 4), integer("chip", 20, 4),
        integer("sem", 24, 1)}},
      {0x22,
       "ici_wait",
       IciWait{},
       {integer("sem", 2, 1), integer("count", 4, 4), integer("dst", 8, 8),
        integer("bytes", 16, 4)}},
  };
  return layouts;
}

const DocField* find_field(const DocLayout& l, std::string_view name) {
  for (const DocField& f : l.fields)
    if (f.name == name) return &f;
  return nullptr;
}

// A value for integer field number `index` that fills all `width` bytes with distinct non-zero
// bytes, the top bit of each set, so a byte that lands at the wrong offset or a sign extension
// shows up in the word.
std::uint64_t pattern(std::size_t index, std::size_t width) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < width; ++i)
    v |= std::uint64_t{0x80u | ((index * 8 + i) & 0x7f)} << (8 * i);
  return v;
}

// Sets every field of `inst` to a non-default value: integers to pattern(), enums to the last
// allowed code, flags to true; returns the word docs/isa.md says it encodes to.
Word fill(const DocLayout& l, Instruction& inst) {
  Word w{};
  w[0] = l.opcode;
  std::size_t index = 0;
  std::visit(
      [&](auto& i) {
        visit_fields(i, [&](std::string_view name, auto&& v) {
          using F = std::decay_t<decltype(v)>;
          const DocField* d = find_field(l, name);
          ASSERT_NE(d, nullptr) << l.mnemonic << " " << name << " is not in docs/isa.md";
          if constexpr (std::is_same_v<F, bool>) {
            v = true;
            w[1] = static_cast<std::uint8_t>(w[1] | (1u << d->bit));
          } else if constexpr (std::is_same_v<F, WeightSource>) {
            v = WeightSource::UnifiedBuffer;
            w[1] = static_cast<std::uint8_t>(w[1] | (1u << d->bit));
          } else if constexpr (std::is_enum_v<F>) {
            ASSERT_FALSE(d->codes.empty()) << name;
            v = static_cast<F>(d->codes.back());
            w[d->offset] = static_cast<std::uint8_t>(d->codes.back());
          } else {
            const std::uint64_t p = pattern(index++, d->width);
            if constexpr (std::is_same_v<F, RawAddress>) {
              EXPECT_EQ(sizeof(v.value), d->width) << name;
              v.value = p;
            } else if constexpr (std::is_floating_point_v<F>) {
              EXPECT_EQ(sizeof(F), d->width) << name;
              const auto bits = static_cast<std::uint32_t>(p);
              std::memcpy(&v, &bits, sizeof v);
            } else if constexpr (std::is_integral_v<F>) {
              EXPECT_EQ(sizeof(F), d->width) << name;
              v = static_cast<F>(p);
            } else {
              EXPECT_EQ(sizeof(typename F::rep), d->width) << name;
              v = F(static_cast<typename F::rep>(p));
            }
            for (std::size_t b = 0; b < d->width; ++b)
              w[byte_of(*d, b)] = static_cast<std::uint8_t>(p >> (8 * b));
          }
        });
      },
      inst);
  return w;
}

std::size_t field_count(Instruction inst) {
  std::size_t n = 0;
  std::visit([&](auto& i) { visit_fields(i, [&](std::string_view, auto&&) { ++n; }); }, inst);
  return n;
}

TEST(IsaEncoding, OpcodesAndMnemonicsAreTheDocumentedOnes) {
  for (const DocLayout& l : doc_layouts()) {
    EXPECT_EQ(static_cast<unsigned>(opcode_of(l.blank)), l.opcode) << l.mnemonic;
    EXPECT_EQ(mnemonic(opcode_of(l.blank)), l.mnemonic);
  }
  EXPECT_EQ(doc_layouts().size(), std::variant_size_v<Instruction>);
}

TEST(IsaEncoding, EveryFieldSitsAtItsDocumentedOffsetAndWidth) {
  for (const DocLayout& l : doc_layouts()) {
    Instruction inst = l.blank;
    const Word expect = fill(l, inst);
    EXPECT_EQ(field_count(inst), l.fields.size()) << l.mnemonic;
    EXPECT_EQ(encode(inst), expect) << l.mnemonic;
    EXPECT_EQ(encode(decode(expect)), expect) << l.mnemonic;
  }
}

TEST(IsaDecode, RejectsEveryIllegalOpcode) {
  std::set<unsigned> legal;
  for (const DocLayout& l : doc_layouts()) legal.insert(l.opcode);
  for (unsigned op = 0; op < 256; ++op) {
    Word w{};
    w[0] = static_cast<std::uint8_t>(op);
    if (legal.count(op)) {
      EXPECT_EQ(static_cast<unsigned>(opcode_of(decode(w))), op);
      continue;
    }
    try {
      (void)decode(w);
      ADD_FAILURE() << "opcode " << op << " decoded";
    } catch (const ProgramError& e) {
      EXPECT_NE(std::string(e.what()).find("illegal opcode"), std::string::npos) << e.what();
    }
  }
}

TEST(IsaDecode, RejectsEnumCodesOutsideTheDocumentedTables) {
  for (const DocLayout& l : doc_layouts()) {
    for (const DocField& d : l.fields) {
      if (d.codes.empty()) continue;
      for (unsigned code = 0; code < 256; ++code) {
        Word w{};
        w[0] = l.opcode;
        w[d.offset] = static_cast<std::uint8_t>(code);
        const bool allowed = std::count(d.codes.begin(), d.codes.end(), code) > 0;
        try {
          (void)decode(w);
          EXPECT_TRUE(allowed) << l.mnemonic << " " << d.name << " = " << code << " decoded";
        } catch (const ProgramError& e) {
          EXPECT_FALSE(allowed) << l.mnemonic << " " << d.name << " = " << code << ": " << e.what();
          EXPECT_NE(std::string(e.what()).find(l.mnemonic), std::string::npos) << e.what();
        }
      }
    }
  }
}

TEST(IsaDecode, RejectsAnyNonZeroReservedByteOrFlagBit) {
  for (const DocLayout& l : doc_layouts()) {
    Instruction inst = l.blank;
    const Word full = fill(l, inst);
    std::vector<bool> defined(kInstructionBytes, false);
    defined[0] = defined[1] = true;
    unsigned flag_bits = 0;
    for (const DocField& d : l.fields) {
      if (d.bit >= 0) flag_bits |= 1u << d.bit;
      for (std::size_t b = 0; b < d.width; ++b) defined[byte_of(d, b)] = true;
    }
    for (std::size_t b = 0; b < kInstructionBytes; ++b) {
      if (defined[b]) continue;
      for (const unsigned junk : {0x01u, 0x80u, 0xffu}) {
        Word w = full;
        w[b] = static_cast<std::uint8_t>(junk);
        EXPECT_THROW((void)decode(w), ProgramError) << l.mnemonic << " byte " << b;
      }
    }
    for (unsigned bit = 0; bit < 8; ++bit) {
      if (flag_bits & (1u << bit)) continue;
      Word w = full;
      w[1] = static_cast<std::uint8_t>(w[1] | (1u << bit));
      try {
        (void)decode(w);
        ADD_FAILURE() << l.mnemonic << " flag bit " << bit << " decoded";
      } catch (const ProgramError& e) {
        EXPECT_NE(std::string(e.what()).find("reserved"), std::string::npos) << e.what();
      }
    }
  }
}

// docs/isa.md §4.5: words written before the dilation fields existed have zeros at bytes 26..29;
// they still decode, re-encode to the same word and read as dilation 1.
TEST(IsaDecode, SetWindowWithoutDilationBytesDecodesAndReadsAsDilationOne) {
  SetWindow g;
  g.in_h = 28, g.in_w = 28, g.in_c = 1, g.kernel_h = 3, g.kernel_w = 3, g.out_h = 26, g.out_w = 26;
  Word w = encode(g);
  w[26] = w[27] = w[28] = w[29] = 0;
  const auto back = std::get<SetWindow>(decode(w));
  EXPECT_EQ(back.dilation_h, 0);
  EXPECT_EQ(back.dilation_w, 0);
  EXPECT_EQ(encode(back), w);
  EXPECT_EQ(window_dilation_h(back), 1u);
  EXPECT_EQ(window_dilation_w(back), 1u);
  EXPECT_EQ(SetWindow{}.dilation_h, 1) << "a window written today defaults to dilation 1";
  EXPECT_EQ(SetWindow{}.dilation_w, 1);
}

// Before padding, pool's strides were 16-bit at bytes 22 and 24 and bytes 28..31 were reserved
// (docs/isa.md §4.8): such a word, with strides below 256, decodes to the same strides, no
// padding and out_h = out_w = 0, which is valid pooling.
TEST(IsaDecode, PoolWordsWrittenBeforePaddingDecodeAsValidPooling) {
  Word w{};
  w[0] = 0x09;
  w[2] = 1;                                                     // avg
  const std::uint8_t old_operands[] = {0x00, 0x01, 0x00, 0x00,  // src 0x100
                                       0x00, 0x40, 0x00, 0x00,  // dst 0x4000
                                       28,   0,    28,   0,     // in_h, in_w
                                       32,   0,    2,    0,     // channels, kernel_h
                                       3,    0,    2,    0,     // kernel_w, stride_h
                                       3,    0,    8,    0};    // stride_w, images
  std::copy(std::begin(old_operands), std::end(old_operands), w.begin() + 4);
  const Pool p = std::get<Pool>(decode(w));
  EXPECT_EQ(p.src.value(), 0x100u);
  EXPECT_EQ(p.dst.value(), 0x4000u);
  EXPECT_EQ(p.in_h, 28);
  EXPECT_EQ(p.in_w, 28);
  EXPECT_EQ(p.channels, 32);
  EXPECT_EQ(p.kernel_h, 2);
  EXPECT_EQ(p.kernel_w, 3);
  EXPECT_EQ(p.stride_h, 2);
  EXPECT_EQ(p.stride_w, 3);
  EXPECT_EQ(p.images, 8);
  EXPECT_EQ(p.kind, PoolKind::Avg);
  EXPECT_EQ(p.pad_top, 0);
  EXPECT_EQ(p.pad_left, 0);
  EXPECT_EQ(p.out_h, 0);
  EXPECT_EQ(p.out_w, 0);
}

TEST(IsaDecodeAll, RejectsAPartialWord) {
  const std::vector<std::uint8_t> bytes(kInstructionBytes + 1, 0);
  try {
    (void)decode_all(bytes.data(), bytes.size());
    ADD_FAILURE() << "a partial word decoded";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(bytes.size()) + " bytes"),
              std::string::npos)
        << e.what();
  }
}

TEST(IsaDecodeAll, NamesTheIndexOfTheBadWord) {
  const std::size_t bad = 3;
  std::vector<std::uint8_t> bytes = encode_all({Nop{}, Tag{7}, Sync{}, Halt{}, Halt{}});
  bytes[bad * kInstructionBytes] = 0x0e;  // §2: 0x0e is illegal
  try {
    (void)decode_all(bytes.data(), bytes.size());
    ADD_FAILURE() << "an illegal opcode decoded";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("instruction " + std::to_string(bad) + ": "),
              std::string::npos)
        << e.what();
  }
}

TEST(IsaDecodeAll, ConcatenatesWordsInProgramOrder) {
  const std::vector<Instruction> program = {Tag{1}, Sync{true}, Tag{2}, Halt{}};
  const std::vector<std::uint8_t> bytes = encode_all(program);
  ASSERT_EQ(bytes.size(), program.size() * kInstructionBytes);
  for (std::size_t i = 0; i < program.size(); ++i) {
    const Word w = encode(program[i]);
    EXPECT_TRUE(std::equal(w.begin(), w.end(), bytes.begin() + i * kInstructionBytes)) << i;
  }
  const std::vector<Instruction> back = decode_all(bytes.data(), bytes.size());
  EXPECT_EQ(encode_all(back), bytes);
}

}  // namespace
}  // namespace tpu::isa
