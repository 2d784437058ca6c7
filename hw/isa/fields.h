// Field lists of the instructions: one place that names every field, used by the text form
// (disassembler and assembler) so the two cannot drift apart.
#pragma once

#include <cstdint>
#include <string_view>

#include "hw/isa/isa.h"

namespace tpu::isa {

// A field that is an address but a plain integer in its struct, because the address space it
// lies in depends on another field (read_weights addr: off-chip or unified buffer, by `from`).
// Visitors receive it as a prvalue (bind it with const auto& or auto&&); the text form prints it
// in hex like the strong address types.
struct RawAddress {
  std::uint64_t& value;
};

template <class F>
void visit_fields(Nop&, F&&) {}
template <class F>
void visit_fields(Halt&, F&&) {}
template <class F>
void visit_fields(ReadHost& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("bytes", i.bytes);
}
template <class F>
void visit_fields(WriteHost& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("bytes", i.bytes);
}
template <class F>
void visit_fields(ReadMem& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("bytes", i.bytes);
  f("ici", i.ici);
}
template <class F>
void visit_fields(WriteMem& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("bytes", i.bytes);
  f("ici", i.ici);
}
template <class F>
void visit_fields(ReadWeights& i, F&& f) {
  f("mxu", i.mxu);
  f("from", i.source);
  f("addr", RawAddress{i.addr});
  f("rows", i.rows);
  f("cols", i.cols);
  f("stride", i.stride);
  f("transpose", i.transpose);
}
template <class F>
void visit_fields(SetWindow& i, F&& f) {
  f("in_h", i.in_h);
  f("in_w", i.in_w);
  f("in_c", i.in_c);
  f("kernel_h", i.kernel_h);
  f("kernel_w", i.kernel_w);
  f("stride_h", i.stride_h);
  f("stride_w", i.stride_w);
  f("pad_top", i.pad_top);
  f("pad_left", i.pad_left);
  f("out_h", i.out_h);
  f("out_w", i.out_w);
  f("dilation_h", i.dilation_h);
  f("dilation_w", i.dilation_w);
  f("in_dilation_h", i.in_dilation_h);
  f("in_dilation_w", i.in_dilation_w);
}
template <class F>
void visit_fields(MatMul& i, F&& f) {
  f("mxu", i.mxu);
  f("src", i.src);
  f("dst", i.dst);
  f("rows", i.rows);
  f("stride", i.src_stride);
  f("first_pixel", i.first_pixel);
  f("k_first", i.k_first);
  f("acc", i.accumulate);
  f("swap", i.swap_weights);
  f("window", i.window);
  f("transpose", i.transpose);
}
template <class F>
void visit_fields(Activate& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("params", i.params);
  f("rows", i.rows);
  f("cols", i.cols);
  f("stride", i.dst_stride);
  f("func", i.func);
  f("out", i.out_type);
}
template <class F>
void visit_fields(Pool& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("in_h", i.in_h);
  f("in_w", i.in_w);
  f("channels", i.channels);
  f("kernel_h", i.kernel_h);
  f("kernel_w", i.kernel_w);
  f("stride_h", i.stride_h);
  f("stride_w", i.stride_w);
  f("images", i.images);
  f("pad_top", i.pad_top);
  f("pad_left", i.pad_left);
  f("out_h", i.out_h);
  f("out_w", i.out_w);
  f("kind", i.kind);
  f("type", i.type);
}
template <class F>
void visit_fields(Eltwise& i, F&& f) {
  f("a", i.a);
  f("b", i.b);
  f("dst", i.dst);
  f("count", i.count);
  f("shift", i.shift);
  f("multiplier", i.multiplier);
  f("b_period", i.b_period);
  f("op", i.op);
  f("type", i.type);
}
template <class F>
void visit_fields(Softmax& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("rows", i.rows);
  f("cols", i.cols);
  f("src_stride", i.src_stride);
  f("dst_stride", i.dst_stride);
}
template <class F>
void visit_fields(IciWrite& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("bytes", i.bytes);
  f("chip", i.chip);
  f("sem", i.sem);
}
template <class F>
void visit_fields(IciWait& i, F&& f) {
  f("sem", i.sem);
  f("count", i.count);
  f("dst", i.dst);
  f("bytes", i.bytes);
}
template <class F>
void visit_fields(Sync& i, F&& f) {
  f("all_cores", i.all_cores);
  f("dst", i.dst);
  f("bytes", i.bytes);
}
template <class F>
void visit_fields(Tag& i, F&& f) {
  f("id", i.id);
}
template <class F>
void visit_fields(Gather& i, F&& f) {
  f("table", i.table);
  f("indices", i.indices);
  f("dst", i.dst);
  f("count", i.count);
  f("row_bytes", i.row_bytes);
  f("rows", i.rows);
}
template <class F>
void visit_fields(Copy& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("rows", i.rows);
  f("row_bytes", i.row_bytes);
  f("src_stride", i.src_stride);
  f("dst_stride", i.dst_stride);
}
template <class F>
void visit_fields(Map& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("params", i.params);
  f("count", i.count);
  f("channels", i.channels);
  f("in_scale", i.in_scale);
  f("out_scale", i.out_scale);
  f("func", i.func);
  f("in", i.in_type);
  f("out", i.out_type);
}
template <class F>
void visit_fields(Xent& i, F&& f) {
  f("src", i.src);
  f("labels", i.labels);
  f("dst", i.dst);
  f("out", i.out);
  f("rows", i.rows);
  f("cols", i.cols);
  f("scale", i.scale);
  f("smoothing", i.smoothing);
}
template <class F>
void visit_fields(Update& i, F&& f) {
  f("w", i.w);
  f("g", i.g);
  f("m", i.m);
  f("v", i.v);
  f("params", i.params);
  f("count", i.count);
  f("kind", i.kind);
}
template <class F>
void visit_fields(Reduce& i, F&& f) {
  f("src", i.src);
  f("dst", i.dst);
  f("rows", i.rows);
  f("cols", i.cols);
  f("stride", i.stride);
  f("op", i.op);
  f("type", i.type);
  f("acc", i.accumulate);
}
template <class F>
void visit_fields(PoolGrad& i, F&& f) {
  f("x", i.x);
  f("dy", i.dy);
  f("dst", i.dst);
  f("images", i.images);
  f("kind", i.kind);
  f("type", i.type);
}

// Names of enum values in the text form.
std::string_view name_of(WeightSource v);
std::string_view name_of(ActFunc v);
std::string_view name_of(PoolKind v);
std::string_view name_of(EltOp v);
std::string_view name_of(MapFunc v);
std::string_view name_of(UpdateKind v);
std::string_view name_of(ReduceOp v);

}  // namespace tpu::isa
