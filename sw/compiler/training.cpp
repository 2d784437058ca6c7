#include "sw/compiler/training.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "hw/common/error.h"
#include "sw/compiler/emit.h"
#include "sw/compiler/memory.h"
#include "sw/ir/ops.h"

namespace tpu::compiler {
namespace {

using ir::Act;
using ir::GradKind;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Role;
using ir::TensorId;

constexpr std::uint64_t kRecordBytes = 8;   // per image: {loss, correct}
constexpr std::uint64_t kParamRecord = 12;  // activate's and map's record per column
constexpr std::uint64_t kE = 2;             // bytes per MXU operand (bf16)
constexpr std::uint64_t kF = 4;             // bytes per fp32 value

using Code = std::vector<isa::Instruction>;

UbAddr ub(std::uint64_t a) { return UbAddr(static_cast<std::uint32_t>(a)); }

void put_f32(std::vector<std::uint8_t>& out, float v) {
  std::uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

isa::ActFunc act_func(Act a) {
  switch (a) {
    case Act::Linear: return isa::ActFunc::None;
    case Act::Relu: return isa::ActFunc::Relu;
    case Act::Relu6: return isa::ActFunc::Relu6;
    case Act::Sigmoid: return isa::ActFunc::Sigmoid;
    case Act::Tanh: return isa::ActFunc::Tanh;
    default: break;
  }
  throw std::logic_error("training lowering: activation without a gradient rule");
}

isa::EltOp grad_op(Act a) {
  switch (a) {
    case Act::Relu: return isa::EltOp::ReluGrad;
    case Act::Relu6: return isa::EltOp::Relu6Grad;
    case Act::Sigmoid: return isa::EltOp::SigmoidGrad;
    case Act::Tanh: return isa::EltOp::TanhGrad;
    default: break;
  }
  throw std::logic_error("training lowering: activation without a gradient rule");
}

isa::MapFunc map_func(Act a) {
  switch (a) {
    case Act::Linear: return isa::MapFunc::Identity;
    case Act::Relu: return isa::MapFunc::Relu;
    case Act::Relu6: return isa::MapFunc::Relu6;
    case Act::Sigmoid: return isa::MapFunc::Sigmoid;
    case Act::Tanh: return isa::MapFunc::Tanh;
    default: break;
  }
  throw std::logic_error("training lowering: activation without a gradient rule");
}

class TrainingCompiler {
 public:
  TrainingCompiler(const ir::Graph& g, const ir::TrainingGraph& t, const nn::Weights& w,
                   const nn::Optimizer& opt, const ChipConfig& cfg, std::uint32_t global_batch)
      : g_(g), t_(t), w_(w), opt_(opt), cfg_(cfg), global_(global_batch) {}

  TrainingProgram run() {
    check();
    L_.replicas = cfg_.tensor_cores;
    L_.share = global_ / L_.replicas;
    L_.tile_rows = cfg_.mxu.rows;
    acc_slot_ = cfg_.accumulators.entries / (2 * cfg_.mxu.count);
    plan_host();
    plan_memory();
    plan_ub();
    for (std::uint32_t c = 0; c < L_.replicas; ++c) {
      P_.setup.cores.push_back(emit_setup(c));
      P_.step.cores.push_back(emit_step(c));
      P_.evaluate.cores.push_back(emit_evaluate(c));
    }
    P_.layout = L_;
    P_.step.layers = P_.setup.layers = P_.evaluate.layers = layers();
    P_.step.micro_batch = P_.setup.micro_batch = L_.micro_batch;
    P_.step.host_bytes = P_.setup.host_bytes = L_.host_bytes;
    P_.step.ub_bytes_used = P_.setup.ub_bytes_used = ub_high_;
    return std::move(P_);
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw InputError(fmt::format("{}: {}", g_.file, why));
  }
  [[noreturn]] void fail(const Op& l, const std::string& why) const { ir::refuse(g_, l, why); }

  void check() const {
    const std::string chip = cfg_.file.empty() ? cfg_.name : cfg_.file;
    if (cfg_.mxu.input_type != DType::Bf16)
      throw InputError(
          fmt::format("{}: {} is an inference chip (int8 MXU): fit trains on the "
                      "bf16 chips (v2, v3, v4)",
                      chip, cfg_.name));
    if (global_ == 0 || global_ % cfg_.tensor_cores != 0)
      throw InputError(
          fmt::format("--batch {}: the global batch must split evenly over the {} "
                      "TensorCores of {}",
                      global_, cfg_.tensor_cores, cfg_.name));
    for (const ir::GradOp& o : t_.ops) {
      if (o.kind != GradKind::ConvInput) continue;
      // Its window (conv_input): dY's channels per window position, the stride as in_dilation.
      const Op& l = g_.ops[o.op];
      if (std::uint64_t{l.kernel_h} * l.kernel_w * l.out.c > 65536 || l.stride_h > 255 ||
          l.stride_w > 255)
        fail(l,
             "fit lowers a convolution's input gradient only with kernel_h x kernel_w x "
             "filters <= 65536 window elements and strides <= 255");
    }
    for (const Op& l : g_.ops)
      if (l.kind == OpKind::BatchNormalization)
        fail(l,
             "fit does not lower BatchNormalization in training mode yet (the gradient "
             "rules and the training reference have it)");
  }

  // ---- planning ----------------------------------------------------------------------------

  void plan_host() {
    L_.image_bytes = g_.input.size() * kE;
    L_.optimizer_bytes = 6 * kF;
    std::uint64_t at = 0;
    const auto take = [&](std::uint64_t bytes) {
      const std::uint64_t a = at;
      at = align(at + bytes);
      return a;
    };
    L_.images_addr = take(std::uint64_t{global_} * L_.image_bytes);
    L_.labels_addr = take(std::uint64_t{global_} * 4);
    L_.optimizer_addr = take(L_.optimizer_bytes);
    L_.records_addr = take(std::uint64_t{global_} * kRecordBytes);
    L_.host_bytes = at;
  }

  std::uint64_t elements(const TensorId& p) const {
    return nn::tensor_of(w_.layers[p.op], p.param).size();
  }

  void plan_memory() {
    // The memory image: zeros (the source of every zero fill), then per replica its master
    // weights, optimizer slots and exchange slot.
    std::uint64_t at = 0;
    const auto take = [&](std::uint64_t bytes) {
      const std::uint64_t a = at;
      at = align(at + bytes);
      return a;
    };
    zeros_bytes_ = 64 * 1024;
    zeros_mem_ = take(zeros_bytes_);
    P_.setup.memory_image.push_back({zeros_mem_, std::vector<std::uint8_t>(zeros_bytes_, 0)});
    // Records: the unit {1, 0, 0} (map's conversions), then `widest` activate records
    // {bias 0, scale 1, 0} (a weighted operation's before its bias is copied in, and the drains
    // of gradients).
    std::vector<std::uint8_t> records;
    for (float v : {1.0f, 0.0f, 0.0f}) put_f32(records, v);
    widest_ = cfg_.mxu.cols;
    for (const Op& l : g_.ops) widest_ = std::max(widest_, l.out.c);
    for (std::uint32_t c = 0; c < widest_; ++c)
      for (float v : {0.0f, 1.0f, 0.0f}) put_f32(records, v);
    records_mem_ = take(records.size());
    P_.setup.memory_image.push_back({records_mem_, std::move(records)});
    std::uint64_t total = 0;
    for (const TensorId& p : t_.parameters) total += elements(p);
    grad_bytes_ = total * kF;
    const bool has_m = opt_.kind != nn::OptimizerKind::Sgd;
    const bool has_v = opt_.kind == nn::OptimizerKind::Adam;
    L_.params.assign(L_.replicas, {});
    for (std::uint32_t r = 0; r < L_.replicas; ++r) {
      for (const TensorId& p : t_.parameters) {
        TrainingLayout::Home h;
        h.elements = elements(p);
        h.w = take(h.elements * kF);
        if (has_m) h.m = take(h.elements * kF);
        if (has_v) h.v = take(h.elements * kF);
        std::vector<std::uint8_t> bytes;
        for (float x : nn::tensor_of(w_.layers[p.op], p.param)) put_f32(bytes, x);
        P_.setup.memory_image.push_back({h.w, std::move(bytes)});
        if (has_m)
          P_.setup.memory_image.push_back({h.m, std::vector<std::uint8_t>(h.elements * kF)});
        if (has_v)
          P_.setup.memory_image.push_back({h.v, std::vector<std::uint8_t>(h.elements * kF)});
        L_.params[r].push_back(h);
      }
      L_.exchange.push_back(take(grad_bytes_));
    }
    if (at > cfg_.off_chip_memory.bytes)
      fail(
          fmt::format("the master weights, optimizer state and gradient exchange of {} "
                      "replicas take {} bytes; {} has {} bytes of off-chip memory",
                      L_.replicas, at, cfg_.name, cfg_.off_chip_memory.bytes));
  }

  // Per-image tensors a pass keeps: fp32 values and gradients, and the bf16 copies the MXU
  // reads. A view (Flatten, Reshape) shares its input's storage, a pass its input's gradient.
  std::size_t storage_of(std::size_t op) const {
    std::size_t i = op;
    while (i != kGraphInput && g_.ops[i].is_view()) i = g_.ops[i].inputs[0];
    return i;
  }

  std::uint64_t per_image(std::size_t op) const {
    return op == kGraphInput ? g_.input.size() : g_.ops[op].out.size();
  }

  void plan_ub() {
    // Persistent regions (the whole fit): zeros, unit records, per weighted operation its bf16
    // kernel and activate records, per parameter its gradient sums; the optimizer's record; a
    // staging area for the update.
    zeros_ub_ = alloc(zeros_bytes_);
    units_ub_ = alloc(kParamRecord);
    zero_records_ = alloc(std::uint64_t{cfg_.mxu.cols} * kParamRecord);
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
      const TensorId& p = t_.parameters[k];
      if (p.param == ir::Param::Kernel) kernel_ub_[p.op] = alloc(elements(p) * kE);
      if (p.param == ir::Param::Bias) records_ub_[p.op] = alloc(elements(p) * kParamRecord);
      grad_ub_.push_back(alloc(elements(p) * kF));
    }
    for (std::size_t i = 0; i < g_.ops.size(); ++i)
      if (g_.ops[i].has_weights() && !records_ub_.count(i))  // no bias: records of zeros
        records_ub_[i] = alloc(std::uint64_t{g_.ops[i].out.c} * kParamRecord);
    optimizer_ub_ = alloc(L_.optimizer_bytes);
    std::uint64_t largest = 0;
    for (const TensorId& p : t_.parameters) largest = std::max(largest, elements(p));
    stage_elems_ = std::min<std::uint64_t>(largest, 1u << 16);
    for (auto& s : stage_ub_) s = alloc(stage_elems_ * kF);
    // Per image of a pass. A tensor read by several layers has its gradient summed: each
    // later contribution is computed into the scratch, then added in (reference_step's order).
    std::uint64_t scratch = 0;
    for (const ir::GradOp& o : t_.ops)
      if (needs_scratch(o)) scratch = std::max(scratch, per_image(o.output.op) * kF);
    std::uint64_t bytes = L_.image_bytes + 4 + kRecordBytes + scratch;
    for (std::size_t i = 0; i < g_.ops.size(); ++i) {
      if (storage_of(i) != i) continue;
      bytes += 2 * per_image(i) * kF;  // value and gradient
      bytes += 2 * per_image(i) * kE;  // bf16 copies
    }
    const std::uint64_t free =
        cfg_.unified_buffer.bytes > ub_high_ ? cfg_.unified_buffer.bytes - ub_high_ : 0;
    const std::uint64_t fit = free / (bytes + 6 * kAlign);
    if (fit == 0)
      fail(
          fmt::format("one image's tensors of a training pass take {} bytes; {} leaves {} of "
                      "its {}-byte unified buffer after the weights and gradient sums",
                      bytes, cfg_.name, free, cfg_.unified_buffer.bytes));
    L_.micro_batch = static_cast<std::uint32_t>(std::min<std::uint64_t>(fit, L_.share));
    const std::uint64_t m = L_.micro_batch;
    images_ub_ = alloc(m * L_.image_bytes);
    labels_ub_ = alloc(m * 4);
    out_records_ub_ = alloc(m * kRecordBytes);
    scratch_ub_ = alloc(m * scratch);
    for (std::size_t i = 0; i < g_.ops.size(); ++i) {
      if (storage_of(i) != i) continue;
      value_ub_[i] = alloc(m * per_image(i) * kF);
      grad_ub_t_[i] = alloc(m * per_image(i) * kF);
      value_bf_[i] = alloc(m * per_image(i) * kE);
      grad_bf_[i] = alloc(m * per_image(i) * kE);
    }
  }

  std::uint64_t alloc(std::uint64_t bytes) {
    const std::uint64_t a = ub_high_;
    ub_high_ = align(ub_high_ + bytes);
    return a;
  }

  // ---- emission helpers --------------------------------------------------------------------

  std::vector<LayerInfo> layers() const {
    // Tag ids: 0 setup and host I/O; 1 + i the forward of operation i; 1 + n + i its backward;
    // 1 + 2n the loss; 2 + 2n the gradient exchange; 3 + 2n the update.
    std::vector<LayerInfo> out = {{"setup", "", 0}};
    for (const Op& l : g_.ops) out.push_back({l.name, std::string(ir::name_of(l.kind)), l.macs()});
    // A backward row's MACs: the forward's per matrix product its gradient ops run (a Conv2D's
    // or Dense's input and kernel gradients; a first convolution has no input gradient).
    for (std::size_t i = 0; i < g_.ops.size(); ++i) {
      std::uint64_t macs = 0;
      for (const ir::GradOp& o : t_.ops)
        if (o.op == i && (o.kind == GradKind::ConvInput || o.kind == GradKind::ConvKernel ||
                          o.kind == GradKind::DenseInput || o.kind == GradKind::DenseKernel))
          macs += g_.ops[i].macs();
      out.push_back(
          {g_.ops[i].name + " (backward)", std::string(ir::name_of(g_.ops[i].kind)), macs});
    }
    out.push_back({"loss", "SparseCategoricalCrossentropy", 0});
    out.push_back({"gradient exchange", "all-reduce", 0});
    out.push_back({"update", optimizer_name(), 0});
    return out;
  }
  std::string optimizer_name() const {
    switch (opt_.kind) {
      case nn::OptimizerKind::Sgd: return "SGD";
      case nn::OptimizerKind::Momentum: return "SGD (momentum)";
      case nn::OptimizerKind::Adam: return "Adam";
    }
    return "?";
  }
  std::uint32_t fwd_tag(std::size_t i) const { return static_cast<std::uint32_t>(1 + i); }
  std::uint32_t bwd_tag(std::size_t i) const {
    return static_cast<std::uint32_t>(1 + g_.ops.size() + i);
  }
  std::uint32_t loss_tag() const { return static_cast<std::uint32_t>(1 + 2 * g_.ops.size()); }
  std::uint32_t exchange_tag() const { return loss_tag() + 1; }
  std::uint32_t update_tag() const { return loss_tag() + 2; }

  void tag(Code& out, std::uint32_t id) {
    if (id == tag_) return;
    out.push_back(isa::Tag{id});
    tag_ = id;
  }

  std::pair<std::uint32_t, std::uint32_t> next_slot() {
    const std::uint32_t m = next_mxu_;
    next_mxu_ = (next_mxu_ + 1) % cfg_.mxu.count;
    const std::uint32_t acc = (2 * m + parity_[m]) * acc_slot_;
    parity_[m] ^= 1;
    return {m, acc};
  }

  // Every value the lowering adds or fills is fp32.
  static void eltwise(Code& out, isa::EltOp op, std::uint64_t a, std::uint64_t b, std::uint64_t dst,
                      std::uint64_t count) {
    emit_eltwise(out, op, a, b, dst, count, DType::Fp32);
  }
  void zero_fill(Code& out, std::uint64_t dst, std::uint64_t count) const {
    emit_zero_fill(out, zeros_ub_, zeros_bytes_, dst, count, DType::Fp32);
  }
  // fp32 -> bf16 (map identity with the unit records: x * 1 + 0).
  void to_bf16(Code& out, std::uint64_t src, std::uint64_t dst, std::uint64_t count) {
    map(out, src, dst, count, Act::Linear, DType::Fp32, DType::Bf16);
  }
  void map(Code& out, std::uint64_t src, std::uint64_t dst, std::uint64_t count, Act a, DType in,
           DType out_type) {
    constexpr std::uint64_t kMax = std::numeric_limits<std::uint32_t>::max();
    for (std::uint64_t k = 0; k < count; k += kMax) {
      isa::Map m;
      m.src = ub(src + k * size_of(in));
      m.dst = ub(dst + k * size_of(out_type));
      m.params = ub(units_ub_);
      m.count = static_cast<std::uint32_t>(std::min(kMax, count - k));
      m.channels = 1;
      m.func = map_func(a);
      m.in_type = in;
      m.out_type = out_type;
      out.push_back(m);
    }
  }

  // A matrix product on the MXUs in the documented order: out[r][n] = sum over k < K of
  // input(r, k) * weight(k, n), K in tiles of R rows (consecutive, in order), each tile's rows
  // summed by the array from +0 and added into the accumulators; `acc_into` keeps summing into
  // the accumulators of an earlier call (its row chunks must match). tile(k0, kr, n0, nc) makes
  // the ReadWeights of a tile; feed(mm, r0, k0) fills the MatMul's input fields; drain(r0, rows,
  // n0, nc, acc) the instructions that take the accumulators out.
  struct Gemm {
    std::uint64_t rows = 0;
    std::uint32_t K = 0, N = 0;
    std::function<isa::ReadWeights(std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t)>
        tile;
    std::function<void(isa::MatMul&, std::uint64_t, std::uint32_t)> feed;
    std::function<void(Code&, std::uint64_t, std::uint32_t, std::uint32_t, std::uint32_t,
                       std::uint32_t)>
        drain;
    std::uint64_t max_rows = 0;  // rows per chunk, at most (0: an accumulator slot)
  };
  void gemm(Code& out, const Gemm& gm) {
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols;
    const std::uint64_t chunk =
        gm.max_rows ? std::min<std::uint64_t>(gm.max_rows, acc_slot_) : acc_slot_;
    for (std::uint32_t n0 = 0; n0 < gm.N; n0 += C) {
      const std::uint32_t nc = std::min(C, gm.N - n0);
      for (std::uint64_t r0 = 0; r0 < gm.rows; r0 += chunk) {
        const auto rows = static_cast<std::uint32_t>(std::min(chunk, gm.rows - r0));
        const auto [m, acc] = next_slot();
        for (std::uint32_t k0 = 0; k0 < gm.K; k0 += R) {
          const std::uint32_t kr = std::min(R, gm.K - k0);
          isa::ReadWeights rw = gm.tile(k0, kr, n0, nc);
          rw.mxu = static_cast<std::uint8_t>(m);
          out.push_back(rw);
          isa::MatMul mm;
          mm.mxu = static_cast<std::uint8_t>(m);
          mm.accumulate = k0 > 0;
          mm.swap_weights = true;
          mm.dst = AccAddr(acc);
          mm.rows = rows;
          gm.feed(mm, r0, k0);
          out.push_back(mm);
        }
        gm.drain(out, r0, rows, n0, nc, acc);
      }
    }
  }

  isa::ReadWeights ub_tile(std::uint64_t addr, std::uint32_t rows, std::uint32_t cols,
                           std::uint64_t stride, bool transpose) const {
    isa::ReadWeights rw;
    rw.source = isa::WeightSource::UnifiedBuffer;
    rw.addr = addr;
    rw.rows = static_cast<std::uint16_t>(rows);
    rw.cols = static_cast<std::uint16_t>(cols);
    rw.stride = static_cast<std::uint32_t>(stride);
    rw.transpose = transpose;
    return rw;
  }

  isa::Activate drain_fp32(std::uint32_t acc, std::uint32_t rows, std::uint32_t nc,
                           std::uint64_t dst, std::uint64_t dst_stride, std::uint64_t params,
                           Act a) const {
    isa::Activate ac;
    ac.src = AccAddr(acc);
    ac.dst = ub(dst);
    ac.params = ub(params);
    ac.rows = rows;
    ac.cols = static_cast<std::uint16_t>(nc);
    ac.dst_stride = static_cast<std::uint32_t>(dst_stride);
    ac.func = act_func(a);
    ac.out_type = DType::Fp32;
    return ac;
  }

  isa::SetWindow window_of(const Op& l) const {
    const ir::Pads p = ir::window_pads(l);
    isa::SetWindow w;
    w.in_h = static_cast<std::uint16_t>(l.in.h);
    w.in_w = static_cast<std::uint16_t>(l.in.w);
    w.in_c = static_cast<std::uint16_t>(l.in.c);
    const bool global =
        l.kind == OpKind::GlobalAveragePooling2D || l.kind == OpKind::GlobalMaxPooling2D;
    w.kernel_h = static_cast<std::uint16_t>(global ? l.in.h : l.kernel_h);
    w.kernel_w = static_cast<std::uint16_t>(global ? l.in.w : l.kernel_w);
    w.stride_h = static_cast<std::uint16_t>(global ? 1 : l.stride_h);
    w.stride_w = static_cast<std::uint16_t>(global ? 1 : l.stride_w);
    w.pad_top = static_cast<std::uint16_t>(global ? 0 : p.top);
    w.pad_left = static_cast<std::uint16_t>(global ? 0 : p.left);
    w.dilation_h = static_cast<std::uint16_t>(global ? 1 : l.dilation_h);
    w.dilation_w = static_cast<std::uint16_t>(global ? 1 : l.dilation_w);
    w.out_h = static_cast<std::uint16_t>(l.out.h);
    w.out_w = static_cast<std::uint16_t>(l.out.w);
    return w;
  }

  // ---- programs ----------------------------------------------------------------------------

  Code emit_setup(std::uint32_t core) {
    Code out;
    reset_core();
    tag(out, 0);
    out.push_back(
        isa::ReadMem{MemAddr(zeros_mem_), ub(zeros_ub_), static_cast<std::uint32_t>(zeros_bytes_)});
    out.push_back(isa::ReadMem{MemAddr(records_mem_), ub(units_ub_),
                               static_cast<std::uint32_t>(kParamRecord)});
    const auto records = [&](std::uint64_t dst, std::uint64_t columns) {
      out.push_back(isa::ReadMem{MemAddr(records_mem_ + kParamRecord), ub(dst),
                                 static_cast<std::uint32_t>(columns * kParamRecord)});
    };
    records(zero_records_, cfg_.mxu.cols);
    for (std::size_t i = 0; i < g_.ops.size(); ++i)
      if (g_.ops[i].has_weights()) records(records_ub_.at(i), g_.ops[i].out.c);
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) refresh(out, core, k, true);
    out.push_back(isa::Halt{});
    return out;
  }

  // Parameter k's step copy from its fp32 master values: the bf16 kernel, or the bias slots of
  // the activate records.
  void refresh(Code& out, std::uint32_t core, std::size_t k, bool read) {
    const TensorId& p = t_.parameters[k];
    const TrainingLayout::Home& h = L_.params[core][k];
    for (std::uint64_t e0 = 0; e0 < h.elements; e0 += stage_elems_) {
      const std::uint64_t n = std::min(stage_elems_, h.elements - e0);
      if (read)
        out.push_back(isa::ReadMem{MemAddr(h.w + e0 * kF), ub(stage_ub_[0]),
                                   static_cast<std::uint32_t>(n * kF)});
      if (p.param == ir::Param::Kernel) {
        to_bf16(out, stage_ub_[0], kernel_ub_.at(p.op) + e0 * kE, n);
      } else {
        isa::Copy c;
        c.src = ub(stage_ub_[0]);
        c.dst = ub(records_ub_.at(p.op) + e0 * kParamRecord);
        c.rows = static_cast<std::uint32_t>(n);
        c.row_bytes = kF;
        c.src_stride = kF;
        c.dst_stride = kParamRecord;
        out.push_back(c);
      }
    }
  }

  void reset_core() {
    tag_ = std::numeric_limits<std::uint32_t>::max();
    next_mxu_ = 0;
    parity_.assign(cfg_.mxu.count, 0);
  }

  Code emit_step(std::uint32_t core) {
    Code out;
    reset_core();
    tag(out, 0);
    out.push_back(isa::ReadHost{HostAddr(L_.optimizer_addr), ub(optimizer_ub_),
                                static_cast<std::uint32_t>(L_.optimizer_bytes)});
    for (std::size_t k = 0; k < t_.parameters.size(); ++k)
      zero_fill(out, grad_ub_[k], elements(t_.parameters[k]));
    const std::uint64_t first = std::uint64_t{core} * L_.share;
    for (std::uint64_t s = 0; s < L_.share; s += L_.micro_batch) {
      const auto n =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(L_.micro_batch, L_.share - s));
      emit_pass(out, first + s, n);
    }
    emit_exchange(out, core);
    emit_update(out, core);
    out.push_back(isa::Halt{});
    return out;
  }

  Code emit_evaluate(std::uint32_t core) {
    Code out;
    reset_core();
    const std::uint64_t first = std::uint64_t{core} * L_.share;
    for (std::uint64_t s = 0; s < L_.share; s += L_.micro_batch) {
      const auto n =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(L_.micro_batch, L_.share - s));
      emit_pass(out, first + s, n, false);
    }
    out.push_back(isa::Halt{});
    return out;
  }

  void emit_pass(Code& out, std::uint64_t image, std::uint32_t n, bool train = true) {
    tag(out, 0);
    out.push_back(isa::ReadHost{HostAddr(L_.images_addr + image * L_.image_bytes), ub(images_ub_),
                                static_cast<std::uint32_t>(n * L_.image_bytes)});
    out.push_back(isa::ReadHost{HostAddr(L_.labels_addr + image * 4), ub(labels_ub_), n * 4u});
    bf16_ready_.clear();
    for (std::size_t i = 0; i < g_.ops.size(); ++i) forward(out, i, n);
    for (const ir::GradOp& o : t_.ops) {
      backward(out, o, n);
      if (!train) break;  // evaluation: the loss records only
    }
    tag(out, 0);
    out.push_back(isa::WriteHost{ub(out_records_ub_),
                                 HostAddr(L_.records_addr + image * kRecordBytes),
                                 static_cast<std::uint32_t>(n * kRecordBytes)});
  }

  // The fp32 value of tensor t (kGraphInput has none: the images arrive as bf16) and its bf16
  // copy for the MXU.
  std::uint64_t value(std::size_t t) const { return value_ub_.at(storage_of(t)); }
  std::uint64_t value_bf16(std::size_t t) const {
    return t == kGraphInput || storage_of(t) == kGraphInput ? images_ub_
                                                            : value_bf_.at(storage_of(t));
  }
  std::uint64_t grad(std::size_t t) const { return grad_ub_t_.at(storage_of(t)); }
  std::uint64_t grad_bf16(std::size_t t) const { return grad_bf_.at(storage_of(t)); }

  // The gradient tensor a GradOp writes or reads: a forward op's gradient (a PreActivation
  // gradient shares the storage: the activation's gradient overwrites nothing it still reads).
  std::uint64_t grad_of(const TensorId& id) const {
    switch (id.role) {
      case Role::Gradient: return grad(id.op);
      case Role::PreActivationGradient: return grad(id.op);
      default: break;
    }
    throw std::logic_error("training lowering: not a gradient tensor");
  }

  void forward(Code& out, std::size_t i, std::uint32_t n) {
    const Op& l = g_.ops[i];
    if (l.is_view()) return;
    tag(out, fwd_tag(i));
    const bool loss = i == t_.loss_op;
    switch (l.kind) {
      case OpKind::Dense:
      case OpKind::Conv2D: {
        // Values of op i's input read by the MXU: its bf16 copy, made once per pass.
        const std::size_t x = l.inputs[0];
        if (storage_of(x) != kGraphInput)
          to_bf16(out, value(x), value_bf16(x), std::uint64_t{n} * per_image(x));
        const bool conv = l.kind == OpKind::Conv2D;
        const std::uint32_t N = l.out.c;
        const auto K = static_cast<std::uint32_t>(
            conv ? std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c : l.in.size());
        if (conv) out.push_back(window_of(l));
        const std::uint64_t kernel = kernel_ub_.at(i);
        const std::uint64_t dst = loss ? logits_ub() : value(i);
        const Act act = loss ? Act::Linear : l.activation;
        Gemm gm;
        gm.rows = conv ? std::uint64_t{n} * l.out.h * l.out.w : n;
        gm.K = K, gm.N = N;
        gm.tile = [&](std::uint32_t k0, std::uint32_t kr, std::uint32_t n0, std::uint32_t nc) {
          return ub_tile(kernel + (std::uint64_t{k0} * N + n0) * kE, kr, nc, std::uint64_t{N} * kE,
                         false);
        };
        const std::uint64_t src = value_bf16(x);
        gm.feed = [&](isa::MatMul& mm, std::uint64_t r0, std::uint32_t k0) {
          mm.window = conv;
          if (conv) {
            mm.src = ub(src);
            mm.first_pixel = static_cast<std::uint32_t>(r0);
            mm.k_first = static_cast<std::uint16_t>(k0);
          } else {
            mm.src = ub(src + (r0 * K + k0) * kE);
            mm.src_stride = static_cast<std::uint32_t>(std::uint64_t{K} * kE);
          }
        };
        gm.drain = [&](Code& o, std::uint64_t r0, std::uint32_t rows, std::uint32_t n0,
                       std::uint32_t nc, std::uint32_t acc) {
          o.push_back(drain_fp32(acc, rows, nc, dst + (r0 * N + n0) * kF, std::uint64_t{N} * kF,
                                 records_ub_.at(i) + n0 * kParamRecord, act));
        };
        gemm(out, gm);
        return;
      }
      case OpKind::MaxPooling2D:
      case OpKind::AveragePooling2D:
      case OpKind::GlobalAveragePooling2D:
      case OpKind::GlobalMaxPooling2D: {
        const isa::SetWindow w = window_of(l);
        isa::Pool p;
        p.src = ub(value(l.inputs[0]));
        p.dst = ub(value(i));
        p.in_h = w.in_h, p.in_w = w.in_w, p.channels = w.in_c;
        p.kernel_h = w.kernel_h, p.kernel_w = w.kernel_w;
        p.stride_h = static_cast<std::uint8_t>(w.stride_h);
        p.stride_w = static_cast<std::uint8_t>(w.stride_w);
        p.pad_top = static_cast<std::uint8_t>(w.pad_top);
        p.pad_left = static_cast<std::uint8_t>(w.pad_left);
        p.out_h = w.out_h, p.out_w = w.out_w;
        p.images = static_cast<std::uint16_t>(n);
        p.kind = l.kind == OpKind::MaxPooling2D || l.kind == OpKind::GlobalMaxPooling2D
                     ? isa::PoolKind::Max
                     : isa::PoolKind::Avg;
        p.type = DType::Fp32;
        out.push_back(p);
        return;
      }
      case OpKind::Activation:
        if (loss) return;  // the loss reads the logits
        map(out, value(l.inputs[0]), value(i), std::uint64_t{n} * l.out.size(), l.activation,
            DType::Fp32, DType::Fp32);
        return;
      case OpKind::Add: {
        eltwise(out, isa::EltOp::Add, value(l.inputs[0]), value(l.inputs[1]), value(i),
                std::uint64_t{n} * l.out.size());
        for (std::size_t k = 2; k < l.inputs.size(); ++k)
          eltwise(out, isa::EltOp::Add, value(i), value(l.inputs[k]), value(i),
                  std::uint64_t{n} * l.out.size());
        return;
      }
      default: fail(l, "fit does not lower this kind of layer yet");
    }
  }

  // The logits: the value of the loss operation's input (an Activation softmax), or the loss
  // operation's own output before its softmax.
  std::uint64_t logits_ub() const {
    const Op& l = g_.ops[t_.loss_op];
    return l.kind == OpKind::Activation ? value(l.inputs[0]) : value(t_.loss_op);
  }

  void backward(Code& out, const ir::GradOp& o, std::uint32_t n) {
    const Op& l = g_.ops[o.op];
    tag(out, o.kind == GradKind::SoftmaxCrossEntropy ? loss_tag() : bwd_tag(o.op));
    const std::uint64_t count =
        std::uint64_t{n} * (o.output.role == Role::ParameterGradient ? 0 : per_image(o.output.op));
    switch (o.kind) {
      case GradKind::SoftmaxCrossEntropy: {
        isa::Xent x;
        x.src = ub(logits_ub());
        x.labels = ub(labels_ub_);
        x.dst = ub(grad_of(o.output));
        x.out = ub(out_records_ub_);
        x.rows = n;
        x.cols = static_cast<std::uint16_t>(g_.output().size());
        x.scale = 1.0f / static_cast<float>(global_);
        out.push_back(x);
        return;
      }
      case GradKind::Activation: {
        const std::uint64_t dst = o.accumulate ? scratch_for(o) : grad_of(o.output);
        eltwise(out, grad_op(o.act), value(o.inputs[0].op), grad_of(o.inputs[1]), dst, count);
        if (o.accumulate)
          eltwise(out, isa::EltOp::Add, grad_of(o.output), dst, grad_of(o.output), count);
        return;
      }
      case GradKind::Pass: {
        const std::uint64_t src = grad_of(o.inputs[0]), dst = grad_of(o.output);
        if (o.accumulate)
          eltwise(out, isa::EltOp::Add, dst, src, dst, count);
        else if (src != dst)
          eltwise(out, isa::EltOp::Max, src, src, dst, count);  // a copy
        return;
      }
      case GradKind::Pool: {
        out.push_back(window_of(l));
        isa::PoolGrad p;
        p.kind = l.kind == OpKind::MaxPooling2D || l.kind == OpKind::GlobalMaxPooling2D
                     ? isa::PoolKind::Max
                     : isa::PoolKind::Avg;
        p.type = DType::Fp32;
        p.x = ub(value(o.inputs[0].op));
        p.dy = ub(grad_of(o.inputs[1]));
        p.dst = ub(o.accumulate ? scratch_for(o) : grad_of(o.output));
        p.images = n;
        out.push_back(p);
        if (o.accumulate)
          eltwise(out, isa::EltOp::Add, grad_of(o.output), scratch_for(o), grad_of(o.output),
                  count);
        return;
      }
      case GradKind::DenseInput: {
        // dx[b][k] = sum over c of dz[b][c] W[k][c]: tiles of W transposed (rows c, columns k).
        const std::uint64_t dz = grad_of(o.inputs[0]);
        const auto K = static_cast<std::uint32_t>(l.in.size());
        const std::uint32_t N = l.out.c;
        dz_bf16(out, o.op, dz, std::uint64_t{n} * N);
        const std::uint64_t kernel = kernel_ub_.at(o.op), dzb = grad_bf16(o.op);
        const std::uint64_t dst = o.accumulate ? scratch_for(o) : grad_of(o.output);
        Gemm gm;
        gm.rows = n, gm.K = N, gm.N = K;
        gm.tile = [&](std::uint32_t c0, std::uint32_t cr, std::uint32_t k0, std::uint32_t kc) {
          // The stored block W[k0 .. k0+kc)[c0 .. c0+cr), transposed to cr x kc.
          return ub_tile(kernel + (std::uint64_t{k0} * N + c0) * kE, kc, cr, std::uint64_t{N} * kE,
                         true);
        };
        gm.feed = [&](isa::MatMul& mm, std::uint64_t r0, std::uint32_t c0) {
          mm.src = ub(dzb + (r0 * N + c0) * kE);
          mm.src_stride = static_cast<std::uint32_t>(std::uint64_t{N} * kE);
        };
        gm.drain = [&](Code& oc, std::uint64_t r0, std::uint32_t rows, std::uint32_t k0,
                       std::uint32_t kc, std::uint32_t acc) {
          oc.push_back(drain_fp32(acc, rows, kc, dst + (r0 * K + k0) * kF, std::uint64_t{K} * kF,
                                  zero_records_, Act::Linear));
        };
        gemm(out, gm);
        if (o.accumulate)
          eltwise(out, isa::EltOp::Add, grad_of(o.output), dst, grad_of(o.output), count);
        return;
      }
      case GradKind::DenseKernel:
      case GradKind::ConvKernel: {
        // dW[k][c] = sum over the pass's rows j (images, or output pixels) of x(j, k) dz[j][c]:
        // tiles of dz (rows j, columns c), inputs the columns of x (transposed MatMul).
        const bool conv = o.kind == GradKind::ConvKernel;
        const std::uint64_t dz = grad_of(o.inputs[1]);
        const std::uint32_t N = l.out.c;
        const auto K = static_cast<std::uint32_t>(
            conv ? std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c : l.in.size());
        const std::uint64_t J = conv ? std::uint64_t{n} * l.out.h * l.out.w : n;
        dz_bf16(out, o.op, dz, J * N);
        const std::uint64_t dzb = grad_bf16(o.op), xb = value_bf16(o.inputs[0].op);
        const std::size_t k = param_index(o.output);
        if (conv) out.push_back(window_of(l));
        Gemm gm;
        gm.rows = K, gm.K = static_cast<std::uint32_t>(std::min<std::uint64_t>(J, ~0u)), gm.N = N;
        gm.tile = [&](std::uint32_t j0, std::uint32_t jr, std::uint32_t c0, std::uint32_t cc) {
          return ub_tile(dzb + (std::uint64_t{j0} * N + c0) * kE, jr, cc, std::uint64_t{N} * kE,
                         false);
        };
        gm.feed = [&](isa::MatMul& mm, std::uint64_t r0, std::uint32_t j0) {
          mm.transpose = true;
          mm.window = conv;
          if (conv) {
            mm.src = ub(xb);
            mm.first_pixel = j0;
            mm.k_first = static_cast<std::uint16_t>(r0);
          } else {
            mm.src = ub(xb + (std::uint64_t{j0} * K + r0) * kE);
            mm.src_stride = static_cast<std::uint32_t>(std::uint64_t{K} * kE);
          }
        };
        // This pass's sum, then one add into the running sum (nn::reference_step's order). When
        // the chunk spans every column its rows are contiguous in the gradient too: one add.
        const std::uint64_t part = stage_ub_[1];
        gm.drain = [&](Code& oc, std::uint64_t r0, std::uint32_t rows, std::uint32_t c0,
                       std::uint32_t cc, std::uint32_t acc) {
          oc.push_back(
              drain_fp32(acc, rows, cc, part, std::uint64_t{cc} * kF, zero_records_, Act::Linear));
          const std::uint64_t g0 = grad_ub_[k] + (r0 * N + c0) * kF;
          if (cc == N) {
            eltwise(oc, isa::EltOp::Add, g0, part, g0, std::uint64_t{rows} * cc);
            return;
          }
          for (std::uint32_t r = 0; r < rows; ++r) {
            const std::uint64_t g = g0 + std::uint64_t{r} * N * kF;
            eltwise(oc, isa::EltOp::Add, g, part + std::uint64_t{r} * cc * kF, g, cc);
          }
        };
        gm.max_rows = stage_elems_ / N;
        gemm(out, gm);
        return;
      }
      case GradKind::Bias: {
        isa::Reduce r;
        r.accumulate = true;
        r.op = isa::ReduceOp::Sum;
        r.src = ub(grad_of(o.inputs[0]));
        r.dst = ub(grad_ub_[param_index(o.output)]);
        r.rows = static_cast<std::uint32_t>(std::uint64_t{n} * l.out.h * l.out.w);
        r.cols = static_cast<std::uint16_t>(l.out.c);
        r.stride = l.out.c * static_cast<std::uint32_t>(kF);
        out.push_back(r);
        return;
      }
      case GradKind::ConvInput: conv_input(out, o, n); return;
      case GradKind::BatchNormGamma:
      case GradKind::BatchNormInput:
        fail(l, "fit does not lower BatchNormalization in training mode yet");
    }
  }

  // dX of a convolution (docs/isa.md §1.1): a windowed product over dY dilated by the forward
  // stride with the flipped kernel. Per dX pixel, the window's positions (fy, fx) in row-major
  // order, each position's contraction over the output channels in tiles of R rows, all adding
  // into the same accumulators (nn::reference_step's conv_input_grad). Tiles never straddle two
  // positions, so this loop is written out instead of `gemm`'s, which tiles K as one run.
  void conv_input(Code& out, const ir::GradOp& o, std::uint32_t n) {
    const Op& l = g_.ops[o.op];
    const std::uint64_t dz = grad_of(o.inputs[0]);
    const std::uint32_t co = l.out.c, ci = l.in.c, kh = l.kernel_h, kw = l.kernel_w;
    dz_bf16(out, o.op, dz, std::uint64_t{n} * l.out.size());
    const std::uint64_t kernel = kernel_ub_.at(o.op), dzb = grad_bf16(o.op);
    const std::uint64_t dst = o.accumulate ? scratch_for(o) : grad_of(o.output);
    const ir::Pads p = ir::window_pads(l);
    isa::SetWindow w;
    w.in_h = static_cast<std::uint16_t>(l.out.h);
    w.in_w = static_cast<std::uint16_t>(l.out.w);
    w.in_c = static_cast<std::uint16_t>(co);
    w.kernel_h = static_cast<std::uint16_t>(kh);
    w.kernel_w = static_cast<std::uint16_t>(kw);
    w.dilation_h = static_cast<std::uint16_t>(l.dilation_h);
    w.dilation_w = static_cast<std::uint16_t>(l.dilation_w);
    w.in_dilation_h = static_cast<std::uint8_t>(l.stride_h);
    w.in_dilation_w = static_cast<std::uint8_t>(l.stride_w);
    w.pad_top = static_cast<std::uint16_t>((kh - 1) * l.dilation_h - p.top);
    w.pad_left = static_cast<std::uint16_t>((kw - 1) * l.dilation_w - p.left);
    w.out_h = static_cast<std::uint16_t>(l.in.h);
    w.out_w = static_cast<std::uint16_t>(l.in.w);
    out.push_back(w);
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols;
    const std::uint64_t rows = std::uint64_t{n} * l.in.h * l.in.w;
    for (std::uint32_t n0 = 0; n0 < ci; n0 += C) {
      const std::uint32_t nc = std::min(C, ci - n0);
      for (std::uint64_t r0 = 0; r0 < rows; r0 += acc_slot_) {
        const auto rr = static_cast<std::uint32_t>(std::min<std::uint64_t>(acc_slot_, rows - r0));
        const auto [m, acc] = next_slot();
        bool first = true;
        for (std::uint32_t fy = 0; fy < kh; ++fy)
          for (std::uint32_t fx = 0; fx < kw; ++fx) {
            // Window position (fy, fx) reads the forward kernel's position (ky, kx).
            const std::uint64_t pos = std::uint64_t{kh - 1 - fy} * kw + (kw - 1 - fx);
            for (std::uint32_t c0 = 0; c0 < co; c0 += R) {
              const std::uint32_t cr = std::min(R, co - c0);
              // The stored block W[ky][kx][n0 .. n0+nc)[c0 .. c0+cr), transposed to cr x nc.
              isa::ReadWeights rw = ub_tile(kernel + ((pos * ci + n0) * co + c0) * kE, nc, cr,
                                            std::uint64_t{co} * kE, true);
              rw.mxu = static_cast<std::uint8_t>(m);
              out.push_back(rw);
              isa::MatMul mm;
              mm.mxu = static_cast<std::uint8_t>(m);
              mm.accumulate = !first;
              mm.swap_weights = true;
              mm.window = true;
              mm.src = ub(dzb);
              mm.dst = AccAddr(acc);
              mm.rows = rr;
              mm.first_pixel = static_cast<std::uint32_t>(r0);
              mm.k_first = static_cast<std::uint16_t>((std::uint64_t{fy} * kw + fx) * co + c0);
              out.push_back(mm);
              first = false;
            }
          }
        out.push_back(drain_fp32(acc, rr, nc, dst + (r0 * ci + n0) * kF, std::uint64_t{ci} * kF,
                                 zero_records_, Act::Linear));
      }
    }
    if (o.accumulate)
      eltwise(out, isa::EltOp::Add, grad_of(o.output), dst, grad_of(o.output),
              std::uint64_t{n} * l.in.size());
  }

  // The bf16 copy of operation i's output gradient for the MXU, made once per pass.
  void dz_bf16(Code& out, std::size_t i, std::uint64_t dz, std::uint64_t count) {
    if (bf16_ready_.insert(i).second) to_bf16(out, dz, grad_bf16(i), count);
  }

  std::size_t param_index(const TensorId& grad) const {
    for (std::size_t k = 0; k < t_.parameters.size(); ++k)
      if (t_.parameters[k].op == grad.op && t_.parameters[k].param == grad.param) return k;
    throw std::logic_error("training lowering: a gradient of no trainable parameter");
  }

  // A GradOp that adds into a gradient already written, through the scratch (a Pass adds its
  // source in place and needs none).
  static bool needs_scratch(const ir::GradOp& o) {
    return o.accumulate && o.output.role == Role::Gradient && o.kind != GradKind::Pass;
  }
  std::uint64_t scratch_for(const ir::GradOp& o) const {
    if (!needs_scratch(o)) throw std::logic_error("training lowering: a scratch not planned");
    return scratch_ub_;
  }

  void emit_exchange(Code& out, std::uint32_t core) {
    tag(out, exchange_tag());
    if (L_.replicas == 1) return;
    // Every replica's sums into its slot; after the barrier each adds the slots in replica
    // order (its own included), so every replica holds ((g0 + g1) + g2) + ... bit for bit.
    std::uint64_t off = 0;
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
      const std::uint64_t bytes = elements(t_.parameters[k]) * kF;
      out.push_back(isa::WriteMem{ub(grad_ub_[k]), MemAddr(L_.exchange[core] + off),
                                  static_cast<std::uint32_t>(bytes)});
      off += bytes;
    }
    out.push_back(isa::Sync{true});
    off = 0;
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
      const std::uint64_t count = elements(t_.parameters[k]);
      for (std::uint64_t e0 = 0; e0 < count; e0 += stage_elems_) {
        const std::uint64_t m = std::min(stage_elems_, count - e0);
        const std::uint64_t at = off + e0 * kF;
        out.push_back(isa::ReadMem{MemAddr(L_.exchange[0] + at), ub(stage_ub_[0]),
                                   static_cast<std::uint32_t>(m * kF)});
        for (std::uint32_t r = 1; r < L_.replicas; ++r) {
          out.push_back(isa::ReadMem{MemAddr(L_.exchange[r] + at), ub(stage_ub_[1]),
                                     static_cast<std::uint32_t>(m * kF)});
          eltwise(out, isa::EltOp::Add, stage_ub_[0], stage_ub_[1], stage_ub_[0], m);
        }
        eltwise(out, isa::EltOp::Max, stage_ub_[0], stage_ub_[0], grad_ub_[k] + e0 * kF, m);
      }
      off += count * kF;
    }
    // No replica writes its slot again before every replica has read them all.
    out.push_back(isa::Sync{true});
  }

  void emit_update(Code& out, std::uint32_t core) {
    tag(out, update_tag());
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
      const TrainingLayout::Home& h = L_.params[core][k];
      for (std::uint64_t e0 = 0; e0 < h.elements; e0 += stage_elems_) {
        const std::uint64_t n = std::min(stage_elems_, h.elements - e0);
        const auto bytes = static_cast<std::uint32_t>(n * kF);
        out.push_back(isa::ReadMem{MemAddr(h.w + e0 * kF), ub(stage_ub_[0]), bytes});
        if (h.m) out.push_back(isa::ReadMem{MemAddr(h.m + e0 * kF), ub(stage_ub_[1]), bytes});
        if (h.v) out.push_back(isa::ReadMem{MemAddr(h.v + e0 * kF), ub(stage_ub_[2]), bytes});
        isa::Update u;
        u.kind = opt_.kind == nn::OptimizerKind::Sgd        ? isa::UpdateKind::Sgd
                 : opt_.kind == nn::OptimizerKind::Momentum ? isa::UpdateKind::Momentum
                                                            : isa::UpdateKind::Adam;
        u.w = ub(stage_ub_[0]);
        u.g = ub(grad_ub_[k] + e0 * kF);
        u.m = ub(h.m ? stage_ub_[1] : 0);
        u.v = ub(h.v ? stage_ub_[2] : 0);
        u.params = ub(optimizer_ub_);
        u.count = static_cast<std::uint32_t>(n);
        out.push_back(u);
        out.push_back(isa::WriteMem{ub(stage_ub_[0]), MemAddr(h.w + e0 * kF), bytes});
        if (h.m) out.push_back(isa::WriteMem{ub(stage_ub_[1]), MemAddr(h.m + e0 * kF), bytes});
        if (h.v) out.push_back(isa::WriteMem{ub(stage_ub_[2]), MemAddr(h.v + e0 * kF), bytes});
        // The next step's bf16 kernel or bias records, from the values just written.
        refresh_from_stage(out, k, e0, n);
      }
    }
  }

  void refresh_from_stage(Code& out, std::size_t k, std::uint64_t e0, std::uint64_t n) {
    const TensorId& p = t_.parameters[k];
    if (p.param == ir::Param::Kernel) {
      to_bf16(out, stage_ub_[0], kernel_ub_.at(p.op) + e0 * kE, n);
      return;
    }
    isa::Copy c;
    c.src = ub(stage_ub_[0]);
    c.dst = ub(records_ub_.at(p.op) + e0 * kParamRecord);
    c.rows = static_cast<std::uint32_t>(n);
    c.row_bytes = kF;
    c.src_stride = kF;
    c.dst_stride = kParamRecord;
    out.push_back(c);
  }

  const ir::Graph& g_;
  const ir::TrainingGraph& t_;
  const nn::Weights& w_;
  const nn::Optimizer& opt_;
  const ChipConfig& cfg_;
  const std::uint32_t global_;
  TrainingLayout L_;
  TrainingProgram P_;

  std::uint32_t acc_slot_ = 0;
  std::uint64_t ub_high_ = 0, zeros_bytes_ = 0, zeros_mem_ = 0, zeros_ub_ = 0;
  std::uint64_t units_ub_ = 0, records_mem_ = 0;
  std::uint32_t widest_ = 0;
  std::uint64_t zero_records_ = 0, optimizer_ub_ = 0, grad_bytes_ = 0, stage_elems_ = 0;
  std::uint64_t stage_ub_[3] = {0, 0, 0};
  std::uint64_t images_ub_ = 0, labels_ub_ = 0, out_records_ub_ = 0, scratch_ub_ = 0;
  std::map<std::size_t, std::uint64_t> kernel_ub_, records_ub_;
  std::vector<std::uint64_t> grad_ub_;  // per parameter: its gradient sums
  std::map<std::size_t, std::uint64_t> value_ub_, grad_ub_t_, value_bf_, grad_bf_;
  std::set<std::size_t> bf16_ready_;

  std::uint32_t tag_ = 0, next_mxu_ = 0;
  std::vector<std::uint32_t> parity_;
};

}  // namespace

TrainingProgram compile_training(const ir::Graph& g, const ir::TrainingGraph& t,
                                 const nn::Weights& w, const nn::Optimizer& opt,
                                 const ChipConfig& cfg, std::uint32_t global_batch) {
  return TrainingCompiler(g, t, w, opt, cfg, global_batch).run();
}

}  // namespace tpu::compiler
