// Bad-input rows for programs as files (hw/isa/assembler.cpp, docs/isa.md): assembly text fed to
// `tpusim asm`, binary programs fed to `tpusim disasm`.
#include "bad_input.h"
#include "hw/isa/assembler.h"

namespace tpu::test::bad_input {
namespace {

const EntryPoint kAsm{"assembly text", "program.bin", [](const Paths& p) {
                        return run_tpusim({"asm", p.input.string(), "-o", p.out.string()});
                      }};
const EntryPoint kBinary{"binary program", "listing.s", [](const Paths& p) {
                           return run_tpusim({"disasm", p.input.string()});
                         }};

Case text(std::string name, std::string source, std::string expect) {
  return Case{&kAsm, std::move(name), file("p.s", std::move(source)), {std::move(expect)}};
}
Case binary(std::string name, std::string bytes, std::string expect) {
  return Case{&kBinary, std::move(name), file("p.bin", std::move(bytes)), {std::move(expect)}};
}

// A legal program's words, to corrupt.
std::string words(const std::vector<isa::Instruction>& program) {
  const auto b = isa::to_binary(program);
  return std::string(b.begin(), b.end());
}

std::vector<Case> asm_cases() {
  return {
      text("empty_file", "", "no instructions"),
      text("only_comments", "# nothing\n; at all\n\n", "no instructions"),
      text("binary_garbage", garbage(4096, 6), ":1:"),
      text("nul_bytes", std::string(100, '\0'), "\\x00"),
      text("unknown_mnemonic", "nop\nmatmull rows=1\n", ":2: unknown mnemonic \"matmull\""),
      text("unknown_field", "matmul rowz=3\n", "unknown field \"rowz\""),
      text("field_given_twice", "matmul rows=3 rows=4\n", "rows given twice"),
      text("value_past_32_bits", "matmul rows=4294967296\n", "rows"),
      text("value_past_64_bits", "read_mem src=0x10000000000000000 bytes=1\n", "src"),
      text("mxu_past_8_bits", "matmul mxu=256\n", "mxu"),
      text("negative_value", "read_host bytes=-1\n", "bytes"),
      text("not_a_number", "tag id=12abc\n", "id"),
      text("empty_value", "tag id=\n", "id"),
      text("no_field_name", "tag =5\n", "no field name"),
      text("value_for_a_flag", "matmul swap=yes\n", "swap"),
      text("flag_without_value_for_a_number", "tag id\n", "id"),
      text("unknown_function", "activate func=gelu\n", "func"),
      text("pool_of_int32", "pool type=int32\n", "type"),
      text("eltwise_unknown_op", "eltwise op=pow\n", "op"),
      text("eltwise_b_period_past_32_bits", "eltwise b_period=4294967296\n", "b_period"),
      text("eltwise_negative_b_period", "eltwise b_period=-7\n", "b_period"),
      text("eltwise_shift_past_8_signed_bits", "eltwise shift=-129\n", "shift"),
      text("pool_stride_past_8_bits", "pool stride_h=256\n", "stride_h"),
      text("map_scale_not_a_number", "map in_scale=0.5.5\n", "in_scale"),
      text("map_scale_past_fp32", "map out_scale=1e39\n", "out of range"),
      text("map_scale_bits_past_32", "map out_scale=0x100000000\n", "out_scale"),
      text("map_unknown_function", "map func=gelu\n", "func"),
      text("update_unknown_kind", "update kind=rmsprop\n", "kind"),
      text("xent_scale_not_a_number", "xent scale=1/125\n", "scale"),
      text("weights_from_nowhere", "read_weights from=disk\n", "from"),
      text("megabyte_line", "tag id=" + std::string(1 << 20, '9') + "\n", "id"),
      text("bad_line_after_many_good", std::string(10000, '\n') + "nop\nhalt now\n", ":10002:"),
  };
}

std::vector<Case> binary_cases() {
  std::string reserved_flag = words({isa::MatMul{}});
  reserved_flag[1] = static_cast<char>(reserved_flag[1] | 0x80);
  std::string reserved_operand = words({isa::Nop{}, isa::Halt{}});
  reserved_operand[32 + 31] = 1;
  std::string bad_func = words({isa::Activate{}});
  bad_func[2] = 9;
  std::string bad_type = words({isa::Activate{}});
  bad_type[3] = 4;
  std::string pool_int32 = words({isa::Pool{}});
  pool_int32[3] = static_cast<char>(static_cast<std::uint8_t>(DType::Int32));
  std::string bad_op = words({isa::Nop{}, isa::Nop{}, isa::Eltwise{}});
  bad_op[64 + 2] = 10;  // 0..9 are ops (relu_grad..tanh_grad are 5..8, div 9)
  std::string illegal = words({isa::Nop{}, isa::Nop{}, isa::Nop{}});
  illegal[64] = 0x7e;
  std::string bad_map = words({isa::Map{}});
  bad_map[2] = 9;  // 0..8 are functions (rsqrt 8)
  std::string bad_update = words({isa::Update{}});
  bad_update[2] = 4;  // 0..3 are optimizers (lars 3)
  return {
      binary("empty_file", "", "no instructions"),
      binary("one_byte", "\x0f", "not a whole number"),
      binary("thirty_three_bytes", words({isa::Halt{}}) + "x", "not a whole number"),
      binary("illegal_opcode", illegal, "instruction 2: illegal opcode 0x7e"),
      binary("opcode_0xff", std::string(32, '\xff'), "instruction 0: illegal opcode 0xff"),
      binary("reserved_flag_bit", reserved_flag, "reserved bits"),
      binary("reserved_operand_byte", reserved_operand, "instruction 1: halt: reserved bits"),
      binary("activation_function_9", bad_func, "out of range"),
      binary("activation_type_4", bad_type, "out of range"),
      binary("pool_of_int32", pool_int32, "out of range"),
      binary("eltwise_op_10", bad_op, "instruction 2"),
      binary("map_function_9", bad_map, "out of range"),
      binary("update_kind_4", bad_update, "out of range"),
      binary("binary_garbage", garbage(32 * 64, 7), "instruction 0"),
      // 32 bytes of text: one word whose opcode is 'r' (0x72).
      binary("assembly_text_instead", "read_host src=0 dst=0 bytes=64\n\n",
             "instruction 0: illegal opcode 0x72"),
  };
}

INSTANTIATE_TEST_SUITE_P(Assembly, BadInput, ::testing::ValuesIn(asm_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Binary, BadInput, ::testing::ValuesIn(binary_cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
