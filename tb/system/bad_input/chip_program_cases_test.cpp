// Bad-input rows for binary programs streamed into a chip: instructions that address outside the
// unified buffer, the accumulators, off-chip or host memory, or ask for units that do not exist.
// The CLI has no command that streams a raw program, so the harness is the testbench's host
// (tb/common/test_host.h) in a forked child, which prints the message the run stopped with,
// prefixed by the program's file name as a command would.
#include <fmt/format.h>

#include <iostream>

#include "bad_input.h"
#include "common/test_host.h"
#include "hw/chip/chip.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "hw/isa/assembler.h"

namespace tpu::test::bad_input {
namespace {

using namespace isa;

// Host memory the test host serves to read_host / write_host.
constexpr std::size_t kHostBytes = 1 << 20;

ChipConfig shipped(const std::string& name) {
  return load_chip_config(source_path("configs/chips/" + name + ".json"));
}

// Streams the program in `p.input` into core 0 of the chip and runs to the end.
int run_program(const Paths& p, const std::string& chip_name) {
  const std::string text = read_bytes(p.input);
  const std::vector<std::uint8_t> bytes(text.begin(), text.end());
  try {
    Chip chip("chip", shipped(chip_name));
    TestHost host("host", chip, kHostBytes);
    host.raw[0] = bytes;
    sc_core::sc_start();
    if (chip.halts(0) == 1) return 0;
    std::cerr << p.input.string() << ": core 0 did not halt\n";
  } catch (const sc_core::sc_report& r) {
    std::cerr << p.input.string() << ": " << r.get_msg() << "\n";
  } catch (const InputError& e) {
    std::cerr << p.input.string() << ": " << e.what() << "\n";
  }
  return 2;
}

const EntryPoint kOnV1{"binary program on v1", "", [](const Paths& p) {
                         return run_forked([&] { return run_program(p, "v1"); }, kTimeLimitSeconds);
                       }};
const EntryPoint kOnV3{"binary program on v3", "", [](const Paths& p) {
                         return run_forked([&] { return run_program(p, "v3"); }, kTimeLimitSeconds);
                       }};

// The program ends in halt; `bad` is the index of the instruction the run must stop on.
Case on(const EntryPoint& chip, std::string name, std::vector<Instruction> program, std::size_t bad,
        std::vector<std::string> expect) {
  const auto op = mnemonic(opcode_of(program.at(bad)));
  program.push_back(Halt{});
  const auto b = to_binary(program);
  expect.insert(expect.begin(), fmt::format("core 0 instruction {} ({})", bad, op));
  return Case{&chip, std::move(name), file("p.bin", std::string(b.begin(), b.end())),
              std::move(expect)};
}
std::string hex(std::uint64_t v) { return fmt::format("{:#x}", v); }

// A maker of instructions that differ from `base` by what an edit changes.
template <class T>
auto edited(const T& base) {
  return [base](auto edit) {
    T t = base;
    edit(t);
    return t;
  };
}

std::vector<Case> cases() {
  const ChipConfig v1 = shipped("v1");
  const std::uint64_t ub = v1.unified_buffer.bytes;
  const std::uint64_t mem = v1.off_chip_memory.bytes;
  const std::uint32_t acc = v1.accumulators.entries;
  const auto rows = static_cast<std::uint16_t>(v1.mxu.rows);
  const auto cols = static_cast<std::uint16_t>(v1.mxu.cols);
  const std::uint32_t row_bytes = v1.mxu.rows;  // int8 inputs
  const auto v3_mxus = static_cast<std::uint8_t>(shipped("v3").mxu.count);
  const auto near_ub_end = static_cast<std::uint32_t>(ub - 16);
  // A resident weight tile, shifted in from the unified buffer's first bytes.
  const std::vector<Instruction> weights = {
      ReadWeights{0, WeightSource::UnifiedBuffer, 0, rows, cols}};
  auto with_weights = [&](Instruction i) {
    std::vector<Instruction> p = weights;
    p.push_back(i);
    return p;
  };
  MatMul mm;
  mm.swap_weights = true;
  mm.rows = 4;
  mm.src_stride = row_bytes;
  const auto matmul = edited(mm);
  Activate act;
  act.rows = 1;
  act.cols = cols;
  act.dst_stride = cols;
  act.dst = UbAddr(0x10000);
  act.params = UbAddr(0x20000);
  const auto activate = edited(act);
  Pool pool;
  pool.in_h = pool.in_w = 4;
  pool.channels = 8;
  pool.kernel_h = pool.kernel_w = pool.stride_h = pool.stride_w = 2;
  pool.images = 1;
  pool.dst = UbAddr(0x1000);
  const auto pooled = edited(pool);
  Eltwise elt;
  elt.b = UbAddr(0x1000);
  elt.dst = UbAddr(0x2000);
  elt.count = 64;
  const auto eltwise = edited(elt);
  Map map;
  map.dst = UbAddr(0x1000);
  map.params = UbAddr(0x2000);
  map.count = 64;
  const auto mapped = edited(map);
  Copy copy;
  copy.dst = UbAddr(0x1000);
  copy.rows = 4;
  copy.row_bytes = copy.src_stride = copy.dst_stride = 16;
  const auto copied = edited(copy);
  Xent xent;
  xent.rows = 4;
  xent.cols = 10;
  xent.labels = UbAddr(0x1000);
  xent.out = UbAddr(0x2000);
  xent.scale = 0.25f;
  const auto xented = edited(xent);
  Update update;
  update.w = UbAddr(0x1000);
  update.g = UbAddr(0x2000);
  update.m = UbAddr(0x3000);
  update.v = UbAddr(0x4000);
  update.params = UbAddr(0x5000);
  update.count = 64;
  update.kind = UpdateKind::Adam;
  const auto updated = edited(update);
  Reduce red;
  red.dst = UbAddr(0x1000);
  red.rows = 4;
  red.cols = 4;
  red.stride = 16;
  const auto reduced = edited(red);
  SetWindow win;
  win.in_h = win.in_w = 4;
  win.in_c = 8;
  win.kernel_h = win.kernel_w = win.stride_h = win.stride_w = 2;
  win.out_h = win.out_w = 2;
  PoolGrad pg;
  pg.dy = UbAddr(0x1000);
  pg.dst = UbAddr(0x2000);
  pg.images = 1;
  const auto pool_grad = edited(pg);

  const Case illegal_opcode = [] {
    std::vector<std::uint8_t> b = to_binary({Nop{}, Nop{}, Nop{}, Halt{}});
    b[2 * kInstructionBytes] = 0x7e;
    return Case{&kOnV1,
                "illegal_opcode",
                file("p.bin", std::string(b.begin(), b.end())),
                {"core 0 instruction 2", "illegal opcode 0x7e"}};
  }();
  const Case reserved_bits = [] {
    std::vector<std::uint8_t> b = to_binary({Nop{}, Halt{}});
    b[kInstructionBytes - 1] = 0x01;
    return Case{&kOnV1,
                "reserved_bits_set",
                file("p.bin", std::string(b.begin(), b.end())),
                {"core 0 instruction 0", "reserved bits"}};
  }();

  return {
      illegal_opcode,
      reserved_bits,
      // Unified buffer.
      on(kOnV1, "read_host_past_the_unified_buffer",
         {Nop{}, ReadHost{HostAddr(0), UbAddr(near_ub_end), 64}}, 1, {hex(near_ub_end)}),
      on(kOnV1, "read_host_of_4_gib", {ReadHost{HostAddr(0), UbAddr(0), 0xffffffffu}}, 0,
         {"4294967295"}),
      on(kOnV1, "write_host_from_past_the_unified_buffer",
         {WriteHost{UbAddr(0xffffff00u), HostAddr(0), 16}}, 0, {hex(0xffffff00u)}),
      on(kOnV1, "read_mem_into_past_the_unified_buffer",
         {ReadMem{MemAddr(0), UbAddr(near_ub_end), 64}}, 0, {hex(near_ub_end)}),
      on(kOnV1, "write_mem_from_past_the_unified_buffer",
         {WriteMem{UbAddr(near_ub_end), MemAddr(0), 64}}, 0, {hex(near_ub_end)}),
      on(kOnV1, "read_weights_from_past_the_unified_buffer",
         {ReadWeights{0, WeightSource::UnifiedBuffer, ub - 100, rows, cols}}, 0, {hex(ub - 100)}),
      on(kOnV1, "matmul_input_past_the_unified_buffer",
         with_weights(matmul([&](MatMul& m) { m.src = UbAddr(near_ub_end); })), 1,
         {hex(near_ub_end)}),
      on(kOnV1, "matmul_rows_times_stride_past_32_bits", with_weights(matmul([&](MatMul& m) {
           m.rows = 0xffffffffu;
           m.src_stride = 0xffffffffu;
         })),
         1, {"outside"}),
      on(kOnV1, "activate_output_past_the_unified_buffer",
         {activate([&](Activate& a) { a.dst = UbAddr(near_ub_end); })}, 0, {hex(near_ub_end)}),
      on(kOnV1, "activate_parameters_past_the_unified_buffer",
         {activate([&](Activate& a) { a.params = UbAddr(near_ub_end); })}, 0, {hex(near_ub_end)}),
      on(kOnV1, "pool_input_past_the_unified_buffer",
         {pooled([&](Pool& q) { q.src = UbAddr(near_ub_end); })}, 0, {hex(near_ub_end)}),
      on(kOnV1, "pool_output_past_the_unified_buffer",
         {pooled([&](Pool& q) { q.dst = UbAddr(near_ub_end); })}, 0, {hex(near_ub_end)}),
      on(kOnV1, "eltwise_operand_past_the_unified_buffer",
         {eltwise([&](Eltwise& e) { e.b = UbAddr(near_ub_end); })}, 0, {hex(near_ub_end)}),
      on(kOnV1, "eltwise_count_of_4_g_bf16", {eltwise([&](Eltwise& e) {
           e.count = 0xffffffffu;
           e.type = DType::Bf16;
         })},
         0, {"outside"}),
      // Accumulators.
      on(kOnV1, "matmul_output_past_the_accumulators",
         with_weights(matmul([&](MatMul& m) { m.dst = AccAddr(acc); })), 1, {std::to_string(acc)}),
      on(kOnV1, "matmul_rows_running_past_the_accumulators", with_weights(matmul([&](MatMul& m) {
           m.dst = AccAddr(acc - 2);
           m.rows = 8;
         })),
         1, {std::to_string(acc - 2)}),
      on(kOnV1, "activate_input_past_the_accumulators",
         {activate([&](Activate& a) { a.src = AccAddr(acc + 5); })}, 0, {std::to_string(acc + 5)}),
      on(kOnV1, "activate_wider_than_an_accumulator_entry",
         {activate([&](Activate& a) { a.cols = static_cast<std::uint16_t>(cols + 1); })}, 0,
         {std::to_string(cols + 1)}),
      // Off-chip memory: the memory answers with a TLM error response.
      on(kOnV1, "read_mem_past_off_chip_memory", {ReadMem{MemAddr(mem - 8), UbAddr(0), 64}}, 0,
         {hex(mem - 8), "address error"}),
      on(kOnV1, "read_mem_at_the_top_of_the_48_bit_space",
         {ReadMem{MemAddr((std::uint64_t{1} << 48) - 1), UbAddr(0), 64}}, 0,
         {hex((std::uint64_t{1} << 48) - 1)}),
      on(kOnV1, "write_mem_past_off_chip_memory", {WriteMem{UbAddr(0), MemAddr(mem), 1}}, 0,
         {hex(mem), "address error"}),
      on(kOnV1, "read_weights_past_off_chip_memory",
         {ReadWeights{0, WeightSource::OffChip, mem - 4, rows, cols}}, 0,
         {hex(mem - 4), "address error"}),
      // Host memory: the test host answers with a TLM error response.
      on(kOnV1, "read_host_past_host_memory", {ReadHost{HostAddr(kHostBytes - 8), UbAddr(0), 64}},
         0, {hex(kHostBytes - 8)}),
      on(kOnV1, "write_host_past_host_memory",
         {WriteHost{UbAddr(0), HostAddr(0xffffffffffffull), 64}}, 0, {hex(0xffffffffffffull)}),
      // Units and shapes the chip does not have.
      on(kOnV1, "read_weights_into_a_second_mxu",
         {ReadWeights{1, WeightSource::UnifiedBuffer, 0, rows, cols}}, 0, {"mxu 1"}),
      on(kOnV1, "weight_tile_taller_than_the_array",
         {ReadWeights{0, WeightSource::UnifiedBuffer, 0, static_cast<std::uint16_t>(rows + 1),
                      cols}},
         0, {std::to_string(rows + 1)}),
      on(kOnV1, "matmul_without_weights", {matmul([](MatMul& m) { m.swap_weights = false; })}, 0,
         {"no resident weights"}),
      on(kOnV1, "swap_without_a_weight_load", {matmul([](MatMul&) {})}, 0,
         {"no read_weights is pending"}),
      on(kOnV1, "windowed_matmul_without_a_window",
         with_weights(matmul([](MatMul& m) { m.window = true; })), 1, {"window"}),
      on(kOnV1, "set_window_of_zero_size", {SetWindow{}}, 0, {"must all be >= 1"}),
      on(kOnV1, "pool_with_a_zero_kernel", {pooled([](Pool& q) { q.kernel_h = 0; })}, 0,
         {"kernel_h"}),
      on(kOnV1, "pool_kernel_larger_than_the_image", {pooled([](Pool& q) { q.kernel_w = 9; })}, 0,
         {"kernel_w"}),
      on(kOnV1, "pool_padding_as_wide_as_its_window", {pooled([](Pool& q) {
           q.pad_top = 2;
           q.out_h = q.out_w = 2;
         })},
         0, {"pad_top = 2"}),
      on(kOnV1, "pool_padding_with_valid_output", {pooled([](Pool& q) { q.pad_left = 1; })}, 0,
         {"pad_left = 1", "out_w = 0"}),
      on(kOnV1, "map_of_int8_without_a_scale", {mapped([](Map&) {})}, 0, {"in_scale = 0"}),
      on(kOnV1, "map_output_onto_its_records", {mapped([](Map& m) {
           m.in_scale = m.out_scale = 1.0f;
           m.dst = m.params;
         })},
         0, {"overlaps params"}),
      on(kOnV1, "copy_onto_its_source",
         {copied([](Copy& c) { c.dst = UbAddr(c.src.value() + 8); })}, 0, {"overlaps src"}),
      on(kOnV1, "copy_past_the_unified_buffer",
         {copied([&](Copy& c) { c.dst = UbAddr(near_ub_end); })}, 0, {hex(near_ub_end)}),
      on(kOnV1, "eltwise_mul_with_a_negative_multiplier", {eltwise([](Eltwise& e) {
           e.op = EltOp::Mul;
           e.multiplier = -1;
         })},
         0, {"multiplier = -1"}),
      on(kOnV1, "xent_records_onto_its_logits",
         {xented([](Xent& x) { x.out = UbAddr(x.src.value() + 16); })}, 0, {"out", "overlaps src"}),
      // The unified buffer starts zeroed: Adam's record reads epsilon = 0.
      on(kOnV1, "update_adam_with_an_empty_record", {updated([](Update&) {})}, 0,
         {"update: epsilon = 0"}),
      on(kOnV1, "update_sgd_with_a_slot",
         {updated([](Update& u) { u.kind = UpdateKind::Sgd, u.v = UbAddr(0); })}, 0,
         {"m = 0x3000", "must be 0"}),
      // LARS's record read from the zeroed unified buffer: eta = 0 has no trust ratio.
      on(kOnV1, "update_lars_with_an_empty_record",
         {updated([](Update& u) { u.kind = UpdateKind::Lars, u.v = UbAddr(0); })}, 0,
         {"update: eta = 0 (must be finite and > 0)"}),
      on(kOnV1, "update_lars_with_a_second_slot",
         {updated([](Update& u) { u.kind = UpdateKind::Lars; })}, 0,
         {"v = 0x4000", "with kind lars", "must be 0"}),
      on(kOnV1, "reduce_sum_squares_onto_its_rows",
         {reduced([](Reduce& r) { r.op = ReduceOp::SumSquares, r.dst = UbAddr(4); })}, 0,
         {"reduce: dst = 0x4", "overlaps src"}),
      on(kOnV3, "matmul_on_a_third_mxu", {matmul([&](MatMul& m) { m.mxu = v3_mxus; })}, 0,
         {fmt::format("mxu {}", v3_mxus)}),
      // Gather: its indices and rows in the unified buffer, each index in the table, each row in
      // off-chip memory (the unified buffer starts zeroed, so every index read is 0).
      on(kOnV1, "gather_indices_past_the_unified_buffer",
         {Gather{MemAddr(0), UbAddr(near_ub_end), UbAddr(0), 64, 8, 10}}, 0,
         {"indices", hex(near_ub_end)}),
      on(kOnV1, "gather_rows_past_the_unified_buffer",
         {Gather{MemAddr(0), UbAddr(0), UbAddr(near_ub_end), 4, 64, 10}}, 0,
         {"dst", hex(near_ub_end)}),
      on(kOnV1, "gather_count_times_row_bytes_past_32_bits",
         {Gather{MemAddr(0), UbAddr(0), UbAddr(0x100), 0xffffffffu, 0xffffffffu, 10}}, 0,
         {"outside"}),
      on(kOnV1, "gather_from_a_table_of_no_rows",
         {Gather{MemAddr(0), UbAddr(0), UbAddr(0x100), 1, 64, 0}}, 0, {"index 0", "[0, 0)"}),
      on(kOnV1, "gather_row_past_off_chip_memory",
         {Gather{MemAddr(mem - 8), UbAddr(0), UbAddr(0x100), 1, 64, 1}}, 0,
         {hex(mem - 8), "off-chip memory"}),
      // The ICI instructions: a chip alone has no fabric; semaphores are 0 to 31; the source in
      // the unified buffer.
      on(kOnV3, "ici_write_on_a_chip_alone", {IciWrite{UbAddr(0), MemAddr(0), 64, 1, 0}}, 0,
         {"not part of a system"}),
      on(kOnV3, "ici_write_to_semaphore_32", {IciWrite{UbAddr(0), MemAddr(0), 64, 0, 32}}, 0,
         {"sem 32 does not exist", "0 to 31"}),
      on(kOnV3, "ici_write_past_the_unified_buffer",
         {IciWrite{UbAddr(near_ub_end), MemAddr(0), 64, 0, 0}}, 0, {hex(near_ub_end)}),
      on(kOnV3, "ici_wait_on_semaphore_40", {IciWait{40, 1}}, 0,
         {"sem 40 does not exist", "0 to 31"}),
      // The training instructions: reduce, pool_grad (its shapes from set_window) and the eltwise
      // gradient ops.
      on(kOnV1, "reduce_rows_past_the_unified_buffer",
         {reduced([&](Reduce& r) { r.src = UbAddr(near_ub_end); })}, 0, {hex(near_ub_end)}),
      on(kOnV1, "reduce_onto_its_rows", {reduced([](Reduce& r) { r.dst = UbAddr(32); })}, 0,
         {"overlaps src"}),
      on(kOnV1, "pool_grad_without_a_window", {pool_grad([](PoolGrad&) {})}, 0,
         {"set_window must precede"}),
      on(kOnV1, "pool_grad_gradient_past_the_unified_buffer",
         {win, pool_grad([&](PoolGrad& g) { g.dy = UbAddr(near_ub_end); })}, 1, {hex(near_ub_end)}),
      on(kOnV1, "eltwise_relu_grad_of_int8", {eltwise([](Eltwise& e) { e.op = EltOp::ReluGrad; })},
         0, {"relu_grad", "int8"}),
      // BatchNormalization's additions: a broadcast b (b_period), div and map's rsqrt. The
      // broadcast b's range is the footprint's, checked at issue; the rest at execution.
      on(kOnV1, "eltwise_broadcast_operand_past_the_unified_buffer", {eltwise([&](Eltwise& e) {
           e.b = UbAddr(near_ub_end);
           e.b_period = 17;
         })},
         0, {"b range", hex(near_ub_end), "+ 17 bytes"}),
      on(kOnV1, "eltwise_b_period_longer_than_count",
         {eltwise([](Eltwise& e) { e.b_period = 65; })}, 0,
         {"eltwise: b_period = 65", "1..count = 64"}),
      on(kOnV1, "eltwise_onto_its_broadcast_operand", {eltwise([](Eltwise& e) {
           e.b_period = 8;
           e.dst = e.b;
         })},
         0, {"dst = 0x1000", "overlaps b", "b_period = 8 < count = 64"}),
      on(kOnV1, "eltwise_div_of_bf16", {eltwise([](Eltwise& e) {
           e.op = EltOp::Div;
           e.type = DType::Bf16;
         })},
         0, {"eltwise: op div with type = bf16", "fp32 only"}),
      on(kOnV1, "map_rsqrt_of_int8", {mapped([](Map& m) {
           m.func = MapFunc::Rsqrt;
           m.in_scale = 1.0f;
           m.out_type = DType::Fp32;
         })},
         0, {"map: func rsqrt with in = int8", "fp32 in and out only"}),
  };
}

INSTANTIATE_TEST_SUITE_P(ChipProgram, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
