// Instruction semantics (hw/isa/semantics.h) against docs/isa.md §6.1: the unit of every
// instruction and the bytes it reads and writes. The expected ranges are typed in from the
// document's table, not derived from semantics.cpp.
#include "hw/isa/semantics.h"

#include <gtest/gtest.h>

#include <utility>
#include <variant>
#include <vector>

#include "hw/isa/window.h"
#include "hw/unit/trace.h"

namespace tpu::isa {
namespace {

// One instruction of every kind, in the variant's order.
template <std::size_t... I>
std::vector<Instruction> one_of_each(std::index_sequence<I...>) {
  return {Instruction(std::in_place_index<I>)...};
}
std::vector<Instruction> every_kind() {
  return one_of_each(std::make_index_sequence<std::variant_size_v<Instruction>>{});
}

FootprintContext context() {
  FootprintContext c;
  c.acc_entry_bytes = 256 * 4;  // 256 columns of 4 bytes (v1)
  c.mxu_input_type = DType::Int8;
  c.tile_rows = 200;
  return c;
}

struct Range {
  Space space;
  std::uint64_t lo, hi;
  bool write;
  std::string field;
  friend bool operator==(const Range& a, const Range& b) {
    return a.space == b.space && a.lo == b.lo && a.hi == b.hi && a.write == b.write &&
           a.field == b.field;
  }
};
std::vector<Range> ranges(const Instruction& i, const FootprintContext& c = context()) {
  std::vector<Range> r;
  for (const Access& a : footprint(i, c)) r.push_back({a.space, a.lo, a.hi, a.write, a.field});
  return r;
}
std::ostream& operator<<(std::ostream& os, const Range& r) {
  return os << "{" << static_cast<int>(r.space) << ", " << r.lo << ", " << r.hi << ", "
            << (r.write ? "write" : "read") << ", " << r.field << "}";
}

TEST(Semantics, EveryInstructionHasTheUnitTheDocumentNames) {
  std::vector<UnitKind> kinds;
  for (const Instruction& i : every_kind()) kinds.push_back(unit_of(i).kind);
  // Nop, ReadHost, WriteHost, ReadMem, WriteMem, ReadWeights, SetWindow, MatMul, Activate, Pool,
  // Eltwise, Softmax, Sync, Tag, Halt, Gather, Copy, Map, Xent, Update, Reduce,
  // PoolGrad, IciWrite, IciWait.
  const std::vector<UnitKind> doc = {
      UnitKind::Sequencer, UnitKind::Dma,        UnitKind::Dma,       UnitKind::Dma,
      UnitKind::Dma,       UnitKind::MxuWeights, UnitKind::Sequencer, UnitKind::MxuArray,
      UnitKind::Vector,    UnitKind::Vector,     UnitKind::Vector,    UnitKind::Vector,
      UnitKind::Sequencer, UnitKind::Sequencer,  UnitKind::Sequencer, UnitKind::Dma,
      UnitKind::Vector,    UnitKind::Vector,     UnitKind::Vector,    UnitKind::Vector,
      UnitKind::Vector,    UnitKind::Vector,     UnitKind::Ici,       UnitKind::Sequencer};
  EXPECT_EQ(kinds, doc);
  EXPECT_TRUE(unit_of(ReadHost{}).host_link);
  EXPECT_FALSE(unit_of(ReadMem{}).host_link);
  EXPECT_FALSE(unit_of(Gather{}).host_link) << "a gather reads off-chip memory";
  ReadWeights rw;
  rw.mxu = 3;
  MatMul mm;
  mm.mxu = 3;
  EXPECT_EQ(unit_of(rw).mxu, 3);
  EXPECT_EQ(unit_of(mm).mxu, 3);
  EXPECT_FALSE(unit_of(rw) == unit_of(mm)) << "an MXU's weight path and array are two units";
}

TEST(Semantics, TheTraceTrackFollowsTheUnit) {
  EXPECT_EQ(track_of(ReadHost{}), static_cast<std::uint32_t>(TrackKind::HostLink));
  EXPECT_EQ(track_of(WriteMem{}), static_cast<std::uint32_t>(TrackKind::Dma));
  EXPECT_EQ(track_of(Gather{}), static_cast<std::uint32_t>(TrackKind::Dma));
  ReadWeights rw;
  rw.mxu = 2;
  EXPECT_EQ(track_of(rw), mxu_weights_track(2));
  EXPECT_EQ(track_of(Softmax{}), static_cast<std::uint32_t>(TrackKind::Vector));
  EXPECT_EQ(track_of(Halt{}), static_cast<std::uint32_t>(TrackKind::Sequencer));
}

TEST(Semantics, SequencerInstructionsTouchNothing) {
  for (const Instruction& i : {Instruction(Nop{}), Instruction(Tag{}), Instruction(SetWindow{}),
                               Instruction(Sync{}), Instruction(Halt{})})
    EXPECT_TRUE(footprint(i, context()).empty());
}

// The region forms of ici_wait and sync (bytes > 0) and read_mem / write_mem with `ici` run on
// the ICI engine; the region forms count as writing their region, so what touches it after them
// waits for them while the sequencer issues on.
TEST(Semantics, RegionWaitsAndBarriersAndIciTransfersRunOnTheIciEngine) {
  IciWait w;
  w.sem = 3, w.count = 1, w.dst = MemAddr(0x8000), w.bytes = 256;
  Sync s;
  s.all_cores = true, s.dst = MemAddr(0x4000), s.bytes = 64;
  ReadMem rm;
  rm.src = MemAddr(0x8000), rm.dst = UbAddr(0x40), rm.bytes = 256, rm.ici = true;
  WriteMem wm;
  wm.src = UbAddr(0x40), wm.dst = MemAddr(0x4000), wm.bytes = 64, wm.ici = true;
  for (const Instruction& i : {Instruction(w), Instruction(s), Instruction(rm), Instruction(wm)})
    EXPECT_EQ(unit_of(i).kind, UnitKind::Ici) << to_string(i);
  EXPECT_EQ(ranges(w), (std::vector<Range>{{Space::OffChip, 0x8000, 0x8100, true, "dst"}}));
  EXPECT_EQ(ranges(s), (std::vector<Range>{{Space::OffChip, 0x4000, 0x4040, true, "dst"}}));
  EXPECT_EQ(ranges(rm), (std::vector<Range>{{Space::UnifiedBuffer, 0x40, 0x140, true, "dst"},
                                            {Space::OffChip, 0x8000, 0x8100, false, "src"}}));
  // The plain forms stay the sequencer's and the DMA's.
  EXPECT_EQ(unit_of(IciWait{}).kind, UnitKind::Sequencer);
  EXPECT_EQ(unit_of(Sync{true}).kind, UnitKind::Sequencer);
  EXPECT_EQ(unit_of(ReadMem{}).kind, UnitKind::Dma);
}

TEST(Semantics, TransfersReadTheirSourceAndWriteTheirDestination) {
  ReadHost rh;
  rh.src = HostAddr(0x1000), rh.dst = UbAddr(0x40), rh.bytes = 100;
  EXPECT_EQ(ranges(rh), (std::vector<Range>{{Space::UnifiedBuffer, 0x40, 0x40 + 100, true, "dst"},
                                            {Space::Host, 0x1000, 0x1000 + 100, false, "src"}}));
  WriteMem wm;
  wm.src = UbAddr(0x80), wm.dst = MemAddr(0x9000), wm.bytes = 64;
  EXPECT_EQ(ranges(wm), (std::vector<Range>{{Space::UnifiedBuffer, 0x80, 0xc0, false, "src"},
                                            {Space::OffChip, 0x9000, 0x9040, true, "dst"}}));
}

TEST(Semantics, AGatherMayReadAnyRowOfItsTableAndReadsItsIndicesBeforeWritingItsRows) {
  Gather g;
  g.table = MemAddr(0x100000), g.indices = UbAddr(0x40), g.dst = UbAddr(0x2000);
  g.count = 10, g.row_bytes = 96, g.rows = 5000;
  // The rows it reads depend on the indices, so the whole table is its off-chip read.
  EXPECT_EQ(ranges(g),
            (std::vector<Range>{{Space::OffChip, 0x100000, 0x100000 + 5000 * 96, false, "table"},
                                {Space::UnifiedBuffer, 0x40, 0x40 + 10 * 4, false, "indices"},
                                {Space::UnifiedBuffer, 0x2000, 0x2000 + 10 * 96, true, "dst"}}));
  g.table = MemAddr(0xffffffffffff0000ull), g.rows = 0xffffffffu, g.row_bytes = 0xffffffffu;
  EXPECT_EQ(ranges(g).front().hi, 0xffffffffffffffffull) << "the table's end saturates";
}

TEST(Semantics, ReadWeightsReadsKTimesNElementsOfTheInputType) {
  ReadWeights rw;
  rw.addr = 0x100, rw.rows = 128, rw.cols = 64, rw.source = WeightSource::OffChip;
  FootprintContext bf16 = context();
  bf16.mxu_input_type = DType::Bf16;
  EXPECT_EQ(ranges(rw, bf16),
            (std::vector<Range>{{Space::OffChip, 0x100, 0x100 + 128 * 64 * 2, false, "addr"}}));
  rw.source = WeightSource::UnifiedBuffer;
  EXPECT_EQ(ranges(rw).front().space, Space::UnifiedBuffer);
}

TEST(Semantics, ADenseMatMulReadsItsRowsAndWritesWholeAccumulatorEntries) {
  MatMul mm;
  mm.src = UbAddr(0x200), mm.rows = 10, mm.src_stride = 256, mm.dst = AccAddr(7);
  const std::uint64_t entry = context().acc_entry_bytes;
  // UB [src, src + (B-1)*stride + K*e), Acc entries [dst, dst+B).
  EXPECT_EQ(ranges(mm),
            (std::vector<Range>{{Space::UnifiedBuffer, 0x200, 0x200 + 9 * 256 + 200, false, "src"},
                                {Space::Accumulators, 7 * entry, 17 * entry, true, "dst"}}));
  mm.accumulate = true;
  EXPECT_EQ(ranges(mm).back(), (Range{Space::Accumulators, 7 * entry, 17 * entry, false, "dst"}));
}

// An 8x8x4 image read through a 3x3 window by a whole-window tile (K = 36), and the windowed
// MatMul of output pixels [0, rows) at UB 0x1000.
FootprintContext window_context(std::uint16_t out_side) {
  FootprintContext c = context();
  c.window.in_h = 8, c.window.in_w = 8, c.window.in_c = 4;
  c.window.kernel_h = 3, c.window.kernel_w = 3, c.window.out_h = out_side,
  c.window.out_w = out_side;
  c.tile_rows = 36;
  return c;
}
MatMul windowed_matmul(std::uint32_t rows) {
  MatMul mm;
  mm.window = true, mm.src = UbAddr(0x1000), mm.rows = rows;
  return mm;
}

TEST(Semantics, AWindowedMatMulReadsTheWindowsBoundingRange) {
  const auto r = ranges(windowed_matmul(36), window_context(6));
  ASSERT_FALSE(r.empty());
  // Output pixels 0..35 of one 8x8x4 image through a 3x3 window read every input element.
  EXPECT_EQ(r.front(), (Range{Space::UnifiedBuffer, 0x1000, 0x1000 + 8 * 8 * 4, false, "window"}));
}

TEST(Semantics, ADilatedWindowReadsPositionsDilationApart) {
  FootprintContext c = window_context(4);
  const MatMul mm = windowed_matmul(1);
  // Output pixel 0 reads input pixels (0, 0) to (2*d_h, 2*d_w), each of its 4 channels.
  auto range_to = [&](std::uint64_t y, std::uint64_t x) {
    return Range{Space::UnifiedBuffer, 0x1000, 0x1000 + (y * 8 + x) * 4 + 4, false, "window"};
  };
  c.window.dilation_h = 2, c.window.dilation_w = 2;
  EXPECT_EQ(ranges(mm, c).front(), range_to(4, 4));
  c.window.dilation_h = 3, c.window.dilation_w = 1;
  EXPECT_EQ(ranges(mm, c).front(), range_to(6, 2));
  // Dilation 0 (a program written before the field existed) is dilation 1.
  c.window.dilation_h = 0, c.window.dilation_w = 0;
  EXPECT_EQ(ranges(mm, c).front(), range_to(2, 2));
}

TEST(Semantics, ActivateReadsEntriesAndParametersAndWritesStridedRows) {
  Activate a;
  a.src = AccAddr(2), a.rows = 4, a.cols = 10, a.params = UbAddr(0x300), a.dst = UbAddr(0x400);
  a.dst_stride = 64, a.out_type = DType::Bf16;
  const std::uint64_t entry = context().acc_entry_bytes;
  EXPECT_EQ(ranges(a), (std::vector<Range>{
                           {Space::Accumulators, 2 * entry, 6 * entry, false, "src"},
                           {Space::UnifiedBuffer, 0x300, 0x300 + 12 * 10, false, "params"},
                           {Space::UnifiedBuffer, 0x400, 0x400 + 3 * 64 + 10 * 2, true, "dst"}}));
}

TEST(Semantics, PoolEltwiseAndSoftmaxFollowTheirGeometry) {
  Pool p;
  p.src = UbAddr(0), p.dst = UbAddr(0x1000), p.in_h = 4, p.in_w = 4, p.channels = 8;
  p.kernel_h = 2, p.kernel_w = 2, p.stride_h = 2, p.stride_w = 2, p.images = 3;
  EXPECT_EQ(ranges(p), (std::vector<Range>{
                           {Space::UnifiedBuffer, 0, 3 * 4 * 4 * 8, false, "src"},
                           {Space::UnifiedBuffer, 0x1000, 0x1000 + 3 * 2 * 2 * 8, true, "dst"}}));
  p.kernel_h = 5;  // larger than the input: the unit rejects it, so no destination is known
  EXPECT_EQ(ranges(p).size(), 1u);
  // With padding the output is out_h x out_w pixels, whatever the kernel.
  p.pad_top = p.pad_left = 1, p.out_h = 2, p.out_w = 3;
  EXPECT_EQ(ranges(p).back(),
            (Range{Space::UnifiedBuffer, 0x1000, 0x1000 + 3 * 2 * 3 * 8, true, "dst"}));
  Eltwise e;
  e.a = UbAddr(0), e.b = UbAddr(100), e.dst = UbAddr(200), e.count = 50, e.type = DType::Bf16;
  EXPECT_EQ(ranges(e), (std::vector<Range>{{Space::UnifiedBuffer, 0, 100, false, "a"},
                                           {Space::UnifiedBuffer, 100, 200, false, "b"},
                                           {Space::UnifiedBuffer, 200, 300, true, "dst"}}));
  // A broadcast b is its b_period elements, whatever count is (docs/isa.md §6.1).
  e.b_period = 7;
  EXPECT_EQ(ranges(e), (std::vector<Range>{{Space::UnifiedBuffer, 0, 100, false, "a"},
                                           {Space::UnifiedBuffer, 100, 114, false, "b"},
                                           {Space::UnifiedBuffer, 200, 300, true, "dst"}}));
  Softmax s;
  s.src = UbAddr(0), s.dst = UbAddr(0x800), s.rows = 3, s.cols = 10, s.src_stride = 64;
  s.dst_stride = 48;
  EXPECT_EQ(ranges(s),
            (std::vector<Range>{{Space::UnifiedBuffer, 0, 2 * 64 + 40, false, "src"},
                                {Space::UnifiedBuffer, 0x800, 0x800 + 2 * 48 + 40, true, "dst"}}));
}

TEST(Semantics, CopyReadsAndWritesItsStridedRows) {
  Copy c;
  c.src = UbAddr(0x100), c.dst = UbAddr(0x2000), c.rows = 4, c.row_bytes = 24;
  c.src_stride = 0, c.dst_stride = 40;  // one row repeated into a strided border
  EXPECT_EQ(ranges(c), (std::vector<Range>{
                           {Space::UnifiedBuffer, 0x100, 0x100 + 24, false, "src"},
                           {Space::UnifiedBuffer, 0x2000, 0x2000 + 3 * 40 + 24, true, "dst"}}));
  c.rows = 0;
  EXPECT_TRUE(ranges(c).empty());
}

TEST(Semantics, MapReadsItsInputAndChannelRecordsAndWritesItsOutput) {
  Map m;
  m.src = UbAddr(0x100), m.dst = UbAddr(0x4000), m.params = UbAddr(0x8000);
  m.count = 1000, m.channels = 10, m.in_type = DType::Int8, m.out_type = DType::Fp32;
  EXPECT_EQ(ranges(m), (std::vector<Range>{
                           {Space::UnifiedBuffer, 0x100, 0x100 + 1000, false, "src"},
                           {Space::UnifiedBuffer, 0x4000, 0x4000 + 4 * 1000, true, "dst"},
                           {Space::UnifiedBuffer, 0x8000, 0x8000 + 12 * 10, false, "params"}}));
}

TEST(Semantics, XentReadsLogitsAndLabelsAndWritesGradientsAndRecords) {
  Xent x;
  x.src = UbAddr(0x100), x.labels = UbAddr(0x2000), x.dst = UbAddr(0x100), x.out = UbAddr(0x3000);
  x.rows = 125, x.cols = 10;
  EXPECT_EQ(ranges(x),
            (std::vector<Range>{{Space::UnifiedBuffer, 0x100, 0x100 + 125 * 10 * 4, false, "src"},
                                {Space::UnifiedBuffer, 0x2000, 0x2000 + 125 * 4, false, "labels"},
                                {Space::UnifiedBuffer, 0x100, 0x100 + 125 * 10 * 4, true, "dst"},
                                {Space::UnifiedBuffer, 0x3000, 0x3000 + 125 * 8, true, "out"}}));
}

// Each array the kind uses is read, the ones it steps written too; the record is 4 bytes per
// value: sgd 1, momentum 2, adam 6, lars 6 (its sums of squares included).
TEST(Semantics, UpdateReadsAndWritesTheArraysItsKindUsesAndReadsItsRecord) {
  Update u;
  u.w = UbAddr(0x1000), u.g = UbAddr(0x2000), u.m = UbAddr(0x3000), u.v = UbAddr(0x4000);
  u.params = UbAddr(0x5000), u.count = 100;
  const auto ub = [](std::uint64_t lo, std::uint64_t bytes, bool write, const char* field) {
    return Range{Space::UnifiedBuffer, lo, lo + bytes, write, field};
  };
  u.kind = UpdateKind::Adam;
  EXPECT_EQ(ranges(u),
            (std::vector<Range>{ub(0x1000, 400, false, "w"), ub(0x1000, 400, true, "w"),
                                ub(0x2000, 400, false, "g"), ub(0x3000, 400, false, "m"),
                                ub(0x3000, 400, true, "m"), ub(0x4000, 400, false, "v"),
                                ub(0x4000, 400, true, "v"), ub(0x5000, 24, false, "params")}));
  u.kind = UpdateKind::Lars, u.v = UbAddr(0);
  EXPECT_EQ(ranges(u),
            (std::vector<Range>{ub(0x1000, 400, false, "w"), ub(0x1000, 400, true, "w"),
                                ub(0x2000, 400, false, "g"), ub(0x3000, 400, false, "m"),
                                ub(0x3000, 400, true, "m"), ub(0x5000, 24, false, "params")}));
  u.kind = UpdateKind::Momentum;
  EXPECT_EQ(ranges(u),
            (std::vector<Range>{ub(0x1000, 400, false, "w"), ub(0x1000, 400, true, "w"),
                                ub(0x2000, 400, false, "g"), ub(0x3000, 400, false, "m"),
                                ub(0x3000, 400, true, "m"), ub(0x5000, 8, false, "params")}));
  u.kind = UpdateKind::Sgd, u.m = UbAddr(0);
  EXPECT_EQ(ranges(u),
            (std::vector<Range>{ub(0x1000, 400, false, "w"), ub(0x1000, 400, true, "w"),
                                ub(0x2000, 400, false, "g"), ub(0x5000, 4, false, "params")}));
}

// docs/isa.md §6.1: the rows' extent read, dst's cols fp32 values written (and read with acc).
TEST(Semantics, ReduceReadsItsStridedRowsAndWritesOneRowOfColumns) {
  Reduce r;
  r.src = UbAddr(0x100), r.dst = UbAddr(0x4000), r.rows = 5, r.cols = 10, r.stride = 64;
  EXPECT_EQ(ranges(r),
            (std::vector<Range>{{Space::UnifiedBuffer, 0x100, 0x100 + 4 * 64 + 40, false, "src"},
                                {Space::UnifiedBuffer, 0x4000, 0x4000 + 40, true, "dst"}}));
  r.accumulate = true;
  EXPECT_EQ(ranges(r).back(), (Range{Space::UnifiedBuffer, 0x4000, 0x4000 + 40, false, "dst"}));
  r.rows = 0;
  EXPECT_EQ(ranges(r).size(), 2u) << "no rows: nothing read from src";
}

// docs/isa.md §6.1: the geometry is the window registers' at issue; x (max only) and dX are
// images x in_h x in_w x in_c fp32, dy images x out_h x out_w x in_c.
TEST(Semantics, PoolGradTakesItsShapesFromTheWindowRegisters) {
  FootprintContext c = context();
  c.window.in_h = 6, c.window.in_w = 5, c.window.in_c = 3;
  c.window.kernel_h = 2, c.window.kernel_w = 2, c.window.stride_h = 2, c.window.stride_w = 2;
  c.window.out_h = 3, c.window.out_w = 2;
  PoolGrad g;
  g.x = UbAddr(0x1000), g.dy = UbAddr(0x3000), g.dst = UbAddr(0x5000), g.images = 2;
  const std::uint64_t in = 2 * 6 * 5 * 3 * 4, out = 2 * 3 * 2 * 3 * 4;
  EXPECT_EQ(ranges(g, c),
            (std::vector<Range>{{Space::UnifiedBuffer, 0x1000, 0x1000 + in, false, "x"},
                                {Space::UnifiedBuffer, 0x3000, 0x3000 + out, false, "dy"},
                                {Space::UnifiedBuffer, 0x5000, 0x5000 + in, true, "dst"}}));
  g.kind = PoolKind::Avg;  // avg does not read x
  EXPECT_EQ(ranges(g, c),
            (std::vector<Range>{{Space::UnifiedBuffer, 0x3000, 0x3000 + out, false, "dy"},
                                {Space::UnifiedBuffer, 0x5000, 0x5000 + in, true, "dst"}}));
}

TEST(Semantics, AbsurdAddressesSaturateInsteadOfWrappingIntoRange) {
  MatMul mm;
  mm.src = UbAddr(0xffffff00u), mm.rows = 0xffffffffu, mm.src_stride = 0xffffffffu;
  const auto r = ranges(mm);
  EXPECT_GT(r.front().hi, 0xffffff00u) << "wrapped around";
}

}  // namespace
}  // namespace tpu::isa
