#include "sw/compiler/training.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "hw/common/error.h"
#include "numerics/optimizer.h"
#include "sw/compiler/collectives.h"
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
// Elements of one staging buffer of the exchange and the update (four of them: the gradient,
// the weights and the two optimizer slots).
constexpr std::uint64_t kStageElements = 48 * 1024;
// A LARS norm's lane sums continue from one staging piece to the next only if every piece but
// the last is whole rows of lanes (numerics::lars_sum_squares's order).
static_assert(kStageElements % numerics::kLarsNormLanes == 0);

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

// A per-image tensor of a pass: the fp32 value or gradient of an operation's output (by the
// operation that stores it: a view shares its input's storage), or the images (bf16 values).
struct Tensor {
  bool grad = false;
  std::size_t op = kGraphInput;
  friend bool operator<(const Tensor& a, const Tensor& b) {
    return std::pair(a.grad, a.op) < std::pair(b.grad, b.op);
  }
};

// How an operation's lowering uses a tensor for a chunk of images.
enum class Use {
  Read,        // its fp32 values (the images: bf16)
  ReadBf16,    // its values rounded to bf16, as the MXU reads them
  Write,       // the operation writes it
  Accumulate,  // the operation's contribution is added to what it holds
  Scratch,     // room shaped as it, neither read nor kept (an evaluation's unused gradient)
};
struct Operand {
  Tensor t;
  Use use = Use::Read;
};

// The unified-buffer addresses of an operation's operands for `count` images of the pass from
// image `first` (operand order), and of its room for temporaries.
struct Chunk {
  std::vector<std::uint64_t> at;
  std::uint64_t temp = 0;
  std::uint64_t first = 0;
  std::uint32_t count = 0;
};

// A BatchNormalization's unified-buffer state: per channel, the pass's statistics (kept from the
// forward for the backward), gamma and beta (from the master weights), the moving statistics
// (validation); the constants its arithmetic reads.
struct BatchNormState {
  std::uint64_t mean = 0, rsqrt = 0, var_eps = 0, gamma = 0, beta = 0, moving = 0;
  // {epsilon, rows of a whole pass, rows of the last pass, momentum}, the map record {1,
  // epsilon, 0}, 1 - momentum.
  std::uint64_t constants = 0;
};

// A distributed BatchNormalization's exchange of two per-channel sums (forward: Σx and Σx²;
// backward: Σdy and Σdy·(x − mean)) in off-chip memory, as collectives.h lays an all-reduce out:
// per core of the chip its sums, the group's total, per dimension of the box a landing area.
struct BnExchange {
  std::vector<std::uint64_t> slots;
  std::uint64_t area = 0;
  std::vector<std::uint64_t> landing;
};

// A bucket of the gradient's all-reduce: parameters [first, end), issued after GradOp `after`
// of the step's last pass.
struct Bucket {
  std::size_t first = 0, end = 0, after = 0;
};

class TrainingCompiler {
 public:
  TrainingCompiler(const ir::Graph& g, const ir::TrainingGraph& t, const nn::Weights& w,
                   const nn::Optimizer& opt, const ChipConfig& cfg, std::uint32_t global_batch,
                   ActivationHome home, std::vector<std::uint32_t> chip_dims,
                   std::uint32_t programmed_chips, std::uint64_t bucket_bytes,
                   float label_smoothing, std::uint32_t bn_group)
      : g_(g),
        t_(t),
        w_(w),
        opt_(opt),
        cfg_(cfg),
        global_(global_batch),
        home_(home),
        dims_(std::move(chip_dims)),
        bucket_bytes_(bucket_bytes) {
    L_.label_smoothing = label_smoothing;
    L_.bn_group = bn_group;
    for (std::uint32_t d : dims_) chips_ *= d;
    programmed_ = programmed_chips == 0 ? chips_ : std::min(programmed_chips, chips_);
  }

  TrainingProgram run() {
    check();
    L_.cores = cfg_.tensor_cores;
    L_.chip_dims = dims_;
    L_.replicas = chips_ * L_.cores;
    L_.share = global_ / L_.replicas;
    L_.programmed = programmed_ * L_.cores;
    if (L_.bn_group > L_.cores) L_.bn_dims = group_box(dims_, L_.bn_group / L_.cores);
    L_.tile_rows = cfg_.mxu.rows;
    L_.kernel_chunk.assign(g_.ops.size(), 0);
    acc_slot_ = cfg_.accumulators.entries / (2 * cfg_.mxu.count);
    plan_host();
    plan_memory();
    plan_ub();
    plan_fusion();
    if (L_.off_chip) plan_off_chip();
    for (std::uint32_t c = 0; c < L_.programmed; ++c) {
      P_.step.cores.push_back(emit_step(c));
      P_.evaluate.cores.push_back(emit_evaluate(c));
    }
    // The setup last: it loads the constants the other programs asked for.
    for (std::uint32_t c = 0; c < L_.programmed; ++c) P_.setup.cores.push_back(emit_setup(c));
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
    if (global_ == 0 || global_ % (chips_ * cfg_.tensor_cores) != 0)
      throw InputError(
          chips_ == 1 ? fmt::format("--batch {}: the global batch must split evenly over the {} "
                                    "TensorCores of {}",
                                    global_, cfg_.tensor_cores, cfg_.name)
                      : fmt::format("--batch {}: the global batch must split evenly over the {} "
                                    "TensorCores of {} {} chips",
                                    global_, chips_ * cfg_.tensor_cores, chips_, cfg_.name));
    check_bn_group();
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
  }

  // A distributed BatchNormalization group (docs/training.md): whole chips' cores, or one core,
  // and its chips a box of the torus.
  void check_bn_group() const {
    const std::uint32_t G = L_.bn_group, cores = cfg_.tensor_cores, replicas = chips_ * cores;
    const auto refuse = [&](const std::string& why) {
      throw InputError(fmt::format("--bn-group {}: {}", G, why));
    };
    if (G > 1 && !has_batch_norm())
      refuse(fmt::format("{} has no BatchNormalization whose statistics a group could share",
                         g_.file.empty() ? g_.name : g_.file));
    if (G == 0 || replicas % G != 0)
      refuse(fmt::format("a group must be a divisor of the {} replicas (TensorCores)", replicas));
    if (G > 1 && G % cores != 0)
      refuse(fmt::format("a group takes whole chips' TensorCores: 1 or a multiple of {}'s {}",
                         cfg_.name, cores));
    if (G > cores && group_box(dims_, G / cores).empty()) {
      std::string torus;
      for (std::uint32_t d : dims_) torus += (torus.empty() ? "" : " x ") + std::to_string(d);
      refuse(
          fmt::format("{} chips do not make a box of the {} torus filled from its last "
                      "dimension (a divisor of the last extent, or a multiple of it that "
                      "divides the rest the same way)",
                      G / cores, torus));
    }
  }

  bool has_batch_norm() const {
    return std::any_of(g_.ops.begin(), g_.ops.end(),
                       [](const Op& l) { return l.kind == OpKind::BatchNormalization; });
  }
  // Whether BatchNormalization's statistics are the group's (distributed): a group of several
  // replicas (check_bn_group: of a model with a BatchNormalization).
  bool distributed_bn() const { return L_.bn_group > 1; }

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
    // The programmed replicas' images (the global batch unless only some chips are programmed).
    const std::uint64_t images = std::uint64_t{L_.programmed} * L_.share;
    L_.images_addr = take(images * L_.image_bytes);
    L_.labels_addr = take(images * 4);
    L_.optimizer_addr = take(L_.optimizer_bytes);
    L_.records_addr = take(images * kRecordBytes);
    L_.host_bytes = at;
  }

  std::uint64_t elements(const TensorId& p) const {
    return nn::tensor_of(w_.layers[p.op], p.param).size();
  }

  std::uint64_t mem_take(std::uint64_t bytes) {
    const std::uint64_t a = mem_high_;
    mem_high_ = align(mem_high_ + bytes);
    return a;
  }

  void check_memory() const {
    if (mem_high_ > cfg_.off_chip_memory.bytes)
      fail(
          fmt::format("the master weights, optimizer state, gradient exchange{} of {} replicas "
                      "take {} bytes; {} has {} bytes of off-chip memory",
                      L_.off_chip ? " and activations" : "", L_.replicas, mem_high_, cfg_.name,
                      cfg_.off_chip_memory.bytes));
  }

  void plan_memory() {
    // The memory image: zeros (the source of every zero fill), then per replica its master
    // weights, optimizer slots and exchange slot.
    zeros_bytes_ = 64 * 1024;
    zeros_mem_ = mem_take(zeros_bytes_);
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
    records_mem_ = mem_take(records.size());
    P_.setup.memory_image.push_back({records_mem_, std::move(records)});
    // Per BatchNormalization: its moving mean and variance (validation reads them).
    for (std::size_t i = 0; i < g_.ops.size(); ++i) {
      if (g_.ops[i].kind != OpKind::BatchNormalization) continue;
      std::vector<std::uint8_t> bytes;
      for (float v : w_.layers[i].moving_mean) put_f32(bytes, v);
      for (float v : w_.layers[i].moving_variance) put_f32(bytes, v);
      moving_mem_[i] = mem_take(bytes.size());
      P_.setup.memory_image.push_back({moving_mem_[i], std::move(bytes)});
    }
    std::uint64_t total = 0;
    for (const TensorId& p : t_.parameters) total += elements(p);
    grad_bytes_ = total * kF;
    const bool has_m = opt_.kind != nn::OptimizerKind::Sgd;
    const bool has_v = opt_.kind == nn::OptimizerKind::Adam;
    L_.params.assign(L_.cores, {});
    for (std::uint32_t r = 0; r < L_.cores; ++r) {
      for (const TensorId& p : t_.parameters) {
        TrainingLayout::Home h;
        h.elements = elements(p);
        h.w = mem_take(h.elements * kF);
        if (has_m) h.m = mem_take(h.elements * kF);
        if (has_v) h.v = mem_take(h.elements * kF);
        std::vector<std::uint8_t> bytes;
        for (float x : nn::tensor_of(w_.layers[p.op], p.param)) put_f32(bytes, x);
        P_.setup.memory_image.push_back({h.w, std::move(bytes)});
        if (has_m)
          P_.setup.memory_image.push_back({h.m, std::vector<std::uint8_t>(h.elements * kF)});
        if (has_v)
          P_.setup.memory_image.push_back({h.v, std::vector<std::uint8_t>(h.elements * kF)});
        L_.params[r].push_back(h);
      }
      L_.exchange.push_back(mem_take(grad_bytes_));
    }
    std::uint64_t off = 0;
    for (const TensorId& p : t_.parameters) {
      slot_offset_.push_back(off);
      off += elements(p) * kF;
    }
    plan_buckets();
    if (chips_ > 1) {
      // The chip's sums, reduced in place over the chips; a landing area per reduce-scatter
      // stage, at the sums' offsets (docs/systems.md, "All-reduce").
      L_.all_reduce = mem_take(grad_bytes_);
      for (std::uint32_t d : dims_) landing_.push_back(d > 1 ? mem_take(grad_bytes_) : 0);
    }
    // LARS on one chip of several cores: per core, where its norm pass leaves the replicas' sum
    // of a tensor of several pieces for the step pass to read back, so that the slots are read
    // and added once (several chips read the all-reduce area twice; one core its own sums).
    if (chips_ == 1 && L_.cores > 1 && lars_resums())
      for (std::uint32_t r = 0; r < L_.cores; ++r) lars_sums_.push_back(mem_take(grad_bytes_));
    // Distributed BatchNormalization: per layer, the forward's and the backward's exchange of
    // their two sums (each 2 x channels fp32 values), apart, so that no layer's all-reduce waits
    // for another's to be read.
    if (distributed_bn())
      for (std::size_t i = 0; i < g_.ops.size(); ++i) {
        if (g_.ops[i].kind != OpKind::BatchNormalization) continue;
        const std::uint64_t bytes = 2 * std::uint64_t{g_.ops[i].out.c} * kF;
        for (BnExchange& x : bn_exchange_[i]) {
          for (std::uint32_t r = 0; r < L_.cores; ++r) x.slots.push_back(mem_take(bytes));
          x.area = mem_take(bytes);
          for (std::uint32_t d : bn_box()) x.landing.push_back(d > 1 ? mem_take(bytes) : 0);
        }
      }
    check_memory();
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
  // Bytes of one image of a tensor.
  std::uint64_t bytes_of(const Tensor& t) const {
    return t.op == kGraphInput ? L_.image_bytes : per_image(t.op) * kF;
  }

  // Whether an operation other than the MXU's reads the images (which arrive as bf16) as fp32
  // values: a ZeroPadding2D, a pooling or a BatchNormalization of the input.
  bool images_fp32() const {
    for (const Op& l : g_.ops)
      if (!l.is_view() && l.kind != OpKind::Conv2D && l.kind != OpKind::Dense)
        for (std::size_t x : l.inputs)
          if (storage_of(x) == kGraphInput) return true;
    return false;
  }

  // The room a BatchNormalization needs per image for its temporaries: one tensor of its shape.
  std::uint64_t temp_per_image() const {
    std::uint64_t b = 0;
    for (const Op& l : g_.ops)
      if (l.kind == OpKind::BatchNormalization) b = std::max(b, l.out.size() * kF);
    return b;
  }

  void plan_ub() {
    // Persistent regions (the whole fit): zeros, unit records, per weighted operation its
    // activate records, per BatchNormalization its state; the optimizer's record; the staging
    // buffers of the exchange and the update.
    zeros_ub_ = alloc(zeros_bytes_);
    units_ub_ = alloc(kParamRecord);
    zero_records_ = alloc(std::uint64_t{cfg_.mxu.cols} * kParamRecord);
    for (const TensorId& p : t_.parameters)
      if (p.param == ir::Param::Bias) records_ub_[p.op] = alloc(elements(p) * kParamRecord);
    for (std::size_t i = 0; i < g_.ops.size(); ++i)
      if (g_.ops[i].has_weights() && !records_ub_.count(i))  // no bias: records of zeros
        records_ub_[i] = alloc(std::uint64_t{g_.ops[i].out.c} * kParamRecord);
    std::uint32_t widest_bn = 0;
    for (std::size_t i = 0; i < g_.ops.size(); ++i) {
      const Op& l = g_.ops[i];
      if (l.kind != OpKind::BatchNormalization) continue;
      const std::uint64_t c = std::uint64_t{l.out.c} * kF;
      BatchNormState& s = bn_[i];
      s.mean = alloc(c), s.rsqrt = alloc(c), s.var_eps = alloc(c);
      s.gamma = alloc(c), s.beta = alloc(c), s.moving = alloc(2 * c);
      s.constants = alloc(8 * kF);
      widest_bn = std::max(widest_bn, l.out.c);
    }
    widest_bn_ = widest_bn;
    // Per channel temporaries of the BatchNormalization running (the sums, the backward's).
    for (auto& t : bn_temp_) t = widest_bn ? alloc(std::uint64_t{widest_bn} * kF) : 0;
    // Distributed: the backward's group sums beside its own, and the all-reduce's four staging
    // buffers, each a layer's whole vector (one piece).
    if (distributed_bn()) {
      for (auto& t : bn_group_sums_) t = alloc(std::uint64_t{widest_bn} * kF);
      for (auto& t : bn_stage_) t = alloc(2 * std::uint64_t{widest_bn} * kF);
      bn_stage_elems_ = 2 * std::uint64_t{widest_bn};
      check_semaphores();
      L_.bn_first_semaphore = static_cast<std::uint32_t>(gradient_semaphores());
      L_.bn_semaphores = static_cast<std::uint32_t>(all_reduce_semaphores(bn_layout({})));
    }
    optimizer_ub_ = alloc(L_.optimizer_bytes);
    // LARS's lane sums of squares, the weights' then the gradient's.
    if (opt_.kind == nn::OptimizerKind::Lars) lars_lanes_ub_ = alloc(2 * kLanes * kF);
    std::uint64_t largest = 0;
    for (const TensorId& p : t_.parameters) largest = std::max(largest, elements(p));
    stage_elems_ = std::min(largest, kStageElements);
    for (auto& s : stage_ub_) s = alloc(stage_elems_ * kF);
    // Gradient sums other than kernels' (biases, gamma, beta): always here.
    grad_ub_.assign(t_.parameters.size(), kNone);
    for (std::size_t k = 0; k < t_.parameters.size(); ++k)
      if (t_.parameters[k].param != ir::Param::Kernel)
        grad_ub_[k] = alloc(elements(t_.parameters[k]) * kF);
    if (home_ != ActivationHome::kOffChip && plan_resident()) return;
    if (home_ == ActivationHome::kUnifiedBuffer) fail(resident_failure_);
    L_.off_chip = true;
    plan_arena();
  }

  // The pass's tensors in the unified buffer, a micro-batch at a time, with every bf16 kernel
  // and every kernel's gradient sums; false when not even one image fits.
  bool plan_resident() {
    const std::uint64_t mark = ub_high_;
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
      const TensorId& p = t_.parameters[k];
      if (p.param != ir::Param::Kernel) continue;
      kernel_ub_[p.op] = alloc(elements(p) * kE);
      grad_ub_[k] = alloc(elements(p) * kF);
    }
    // Per image of a pass. A tensor read by several layers has its gradient summed: each
    // later contribution is computed into the scratch, then added in (reference_step's order).
    std::uint64_t scratch = 0;
    for (const ir::GradOp& o : t_.ops)
      if (needs_scratch(o)) scratch = std::max(scratch, per_image(o.output.op) * kF);
    std::uint64_t bytes = L_.image_bytes + 4 + kRecordBytes + scratch + temp_per_image();
    if (images_fp32()) bytes += g_.input.size() * kF;
    for (std::size_t i = 0; i < g_.ops.size(); ++i) {
      if (storage_of(i) != i) continue;
      bytes += 2 * per_image(i) * kF;  // value and gradient
      bytes += 2 * per_image(i) * kE;  // bf16 copies
    }
    const std::uint64_t free =
        cfg_.unified_buffer.bytes > ub_high_ ? cfg_.unified_buffer.bytes - ub_high_ : 0;
    const std::uint64_t fit =
        free / (bytes + (6 + (temp_per_image() ? 1 : 0) + (images_fp32() ? 1 : 0)) * kAlign);
    // A distributed BatchNormalization's group sums its statistics once a step: one pass.
    if (fit == 0 || (distributed_bn() && fit < L_.share)) {
      resident_failure_ =
          fit == 0 ? fmt::format(
                         "one image's tensors of a training pass take {} bytes; {} leaves {} of "
                         "its {}-byte unified buffer after the weights and gradient sums",
                         bytes, cfg_.name, free, cfg_.unified_buffer.bytes)
                   : fmt::format(
                         "distributed BatchNormalization (--bn-group {}) takes a replica's {} "
                         "images in one pass; {}'s unified buffer holds the tensors of {} (use "
                         "--activations off-chip)",
                         L_.bn_group, L_.share, cfg_.name, fit);
      ub_high_ = mark;
      kernel_ub_.clear();
      for (std::size_t k = 0; k < t_.parameters.size(); ++k)
        if (t_.parameters[k].param == ir::Param::Kernel) grad_ub_[k] = kNone;
      return false;
    }
    L_.micro_batch = static_cast<std::uint32_t>(std::min<std::uint64_t>(fit, L_.share));
    const std::uint64_t m = L_.micro_batch;
    images_ub_ = alloc(m * L_.image_bytes);
    labels_ub_ = alloc(m * 4);
    out_records_ub_ = alloc(m * kRecordBytes);
    scratch_ub_ = alloc(m * scratch);
    temp_ub_ = alloc(m * temp_per_image());
    if (images_fp32()) value_ub_[kGraphInput] = alloc(m * g_.input.size() * kF);
    for (std::size_t i = 0; i < g_.ops.size(); ++i) {
      if (storage_of(i) != i) continue;
      value_ub_[i] = alloc(m * per_image(i) * kF);
      grad_ub_t_[i] = alloc(m * per_image(i) * kF);
      value_bf_[i] = alloc(m * per_image(i) * kE);
      grad_bf_[i] = alloc(m * per_image(i) * kE);
    }
    return true;
  }

  // Off-chip tensors: the pass is the replica's share; what is left of the unified buffer is
  // the arena each operation's chunks are staged through, in two halves that alternate from
  // chunk to chunk (one chunk's loads overlap the previous one's work).
  void plan_arena() {
    L_.micro_batch = L_.share;
    labels_ub_ = alloc(std::uint64_t{L_.share} * 4);
    out_records_ub_ = alloc(std::uint64_t{L_.share} * kRecordBytes);
    if (ub_high_ >= cfg_.unified_buffer.bytes)
      fail(
          fmt::format("the per-channel state and staging buffers of a training step take {} "
                      "bytes; {} has a {}-byte unified buffer",
                      ub_high_, cfg_.name, cfg_.unified_buffer.bytes));
    arena_ = ub_high_;
    arena_bytes_ = (cfg_.unified_buffer.bytes - ub_high_) / kAlign * kAlign;
    ub_high_ = cfg_.unified_buffer.bytes;
  }

  // Forward fusion, with off-chip tensors (docs/training.md, "Fusion"): an elementwise
  // operation (BatchNormalization's normalisation, an Add, an Activation) whose output only the
  // next operation reads, an Activation or an Add, runs in the same chunks as it, its output
  // never leaving the unified buffer; and a BatchNormalization right after the convolution or
  // Dense it normalises takes its sums from that operation's chunks. Neither changes a value.
  void plan_fusion() {
    const std::size_t n = g_.ops.size();
    fused_away_.assign(n, false);
    fused_next_.assign(n, ir::kNoOp);
    group_of_.assign(n, ir::kNoOp);
    stats_in_.assign(n, ir::kNoOp);
    if (!L_.off_chip) return;
    std::vector<std::vector<std::size_t>> readers(n);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t x : g_.ops[i].inputs)
        if (x != kGraphInput) readers[x].push_back(i);
    std::set<std::size_t> read_backward;  // values a backward operation reads
    for (const ir::GradOp& o : t_.ops)
      for (const TensorId& id : o.inputs)
        if (const std::optional<Tensor> t = tensor_of(id); t && !t->grad)
          read_backward.insert(t->op);
    const auto elementwise = [&](std::size_t i) {
      const OpKind k = g_.ops[i].kind;
      return i != t_.loss_op &&
             (k == OpKind::BatchNormalization || k == OpKind::Add || k == OpKind::Activation);
    };
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t x = g_.ops[i].inputs.empty() ? kGraphInput : g_.ops[i].inputs[0];
      if (g_.ops[i].kind == OpKind::BatchNormalization && x != kGraphInput && x + 1 == i &&
          (g_.ops[x].kind == OpKind::Conv2D || g_.ops[x].kind == OpKind::Dense))
        stats_in_[x] = i;
      if (i + 1 == n) break;
      const std::size_t j = i + 1;
      const bool into = g_.ops[j].kind == OpKind::Add ||
                        (g_.ops[j].kind == OpKind::Activation && j != t_.loss_op);
      if (elementwise(i) && into && readers[i] == std::vector<std::size_t>{j} &&
          !read_backward.count(i)) {
        fused_away_[i] = true;
        fused_next_[i] = j;
        group_of_[j] = group_of_[i] == ir::kNoOp ? i : group_of_[i];
      }
    }
  }

  // Off-chip homes: per replica its bf16 kernels and the pass's tensors, each tensor from its
  // first writer to its last reader (the forward in order, then the backward), first-fit.
  void plan_off_chip() {
    for (std::uint32_t r = 0; r < L_.cores; ++r) {
      std::map<std::size_t, std::uint64_t> kernels;
      for (const TensorId& p : t_.parameters)
        if (p.param == ir::Param::Kernel) kernels[p.op] = mem_take(elements(p) * kE);
      kernel_mem_.push_back(std::move(kernels));
    }
    // Positions: the images 0, forward operation i at 1 + i, backward operation j at 1 + n + j.
    const std::size_t n = g_.ops.size();
    std::map<Tensor, std::pair<std::size_t, std::size_t>> life;  // first write, last read
    const auto write = [&](const Tensor& t, std::size_t pos) {
      if (!life.count(t)) life[t] = {pos, pos};
    };
    const auto read = [&](const Tensor& t, std::size_t pos) {
      auto& l = life.at(t);
      l.second = std::max(l.second, pos);
    };
    write({false, kGraphInput}, 0);
    for (std::size_t i = 0; i < n; ++i) {
      const Op& l = g_.ops[i];
      // A view computes nothing; the loss's softmax is not computed (the loss reads the logits).
      if (storage_of(i) != i || (i == t_.loss_op && l.kind == OpKind::Activation)) continue;
      for (std::size_t x : l.inputs) {
        const std::size_t s = storage_of(x);  // a view of the images is the images
        if (s == kGraphInput || !fused_away_[s]) read({false, s}, 1 + i);
      }
      if (!fused_away_[i]) write({false, i}, 1 + i);
    }
    for (std::size_t j = 0; j < t_.ops.size(); ++j) {
      const ir::GradOp& o = t_.ops[j];
      for (const TensorId& id : o.inputs)
        if (const std::optional<Tensor> t = tensor_of(id)) read(*t, 1 + n + j);
      if (const std::optional<Tensor> t = tensor_of(o.output)) {
        write(*t, 1 + n + j);
        if (o.accumulate) read(*t, 1 + n + j);
      }
    }
    // A gradient passed on unchanged (an Add's operand) shares its source's home instead of
    // being copied, unless a later write of one of them would change what another still has to
    // read: then it is copied.
    std::map<Tensor, Tensor> alias;  // tensor -> the tensor whose home it shares
    const auto root = [&](Tensor t) {
      while (alias.count(t)) t = alias.at(t);
      return t;
    };
    // Positions where it is written: its first contribution, the later ones added to it, and an
    // activation's gradient rewriting it in place (a PreActivationGradient shares the storage).
    std::map<Tensor, std::vector<std::size_t>> written;
    for (std::size_t j = 0; j < t_.ops.size(); ++j)
      if (const std::optional<Tensor> t = tensor_of(t_.ops[j].output))
        written[*t].push_back(1 + n + j);
    for (std::size_t j = 0; j < t_.ops.size(); ++j) {
      const ir::GradOp& o = t_.ops[j];
      if (o.kind != GradKind::Pass || o.accumulate) continue;
      const Tensor src = *tensor_of(o.inputs[0]), dst = *tensor_of(o.output);
      if (!(src < dst) && !(dst < src)) continue;
      std::vector<Tensor> group = {dst};
      for (const auto& [t, l] : life)
        if (!(root(t) < root(src)) && !(root(src) < root(t))) group.push_back(t);
      // Writing one of them later must not change what another reads after it.
      bool clash = false;
      for (const Tensor& t : group)
        for (std::size_t p : written[t])
          for (const Tensor& u : group)
            clash = clash || ((t < u || u < t) && p > 1 + n + j && life.at(u).second > p);
      if (!clash) alias[dst] = root(src);
    }
    std::map<Tensor, std::pair<std::size_t, std::size_t>> span;  // per home: its tensors' life
    for (const auto& [t, l] : life) {
      auto [it, fresh] = span.try_emplace(root(t), l);
      if (!fresh)
        it->second = {std::min(it->second.first, l.first), std::max(it->second.second, l.second)};
    }
    std::map<std::size_t, std::vector<Tensor>> starts, ends;
    for (const auto& [t, l] : span) {
      starts[l.first].push_back(t);
      ends[l.second].push_back(t);
    }
    Arena arena;
    std::map<Tensor, std::uint64_t> at;
    for (std::size_t pos = 0; pos <= 1 + n + t_.ops.size(); ++pos) {
      for (const Tensor& t : starts[pos]) at[t] = arena.alloc(bytes_of(t) * L_.share);
      for (const Tensor& t : ends[pos]) arena.release(at.at(t), bytes_of(t) * L_.share);
    }
    L_.activation_bytes = arena.high();
    for (std::uint32_t r = 0; r < L_.cores; ++r) {
      const std::uint64_t base = mem_take(arena.high());
      std::map<Tensor, std::uint64_t> homes;
      for (const auto& [t, l] : life) homes[t] = base + at.at(root(t));
      home_mem_.push_back(std::move(homes));
    }
    check_memory();
  }

  // The pass tensor a TensorId of the training graph names (none for parameters and labels).
  std::optional<Tensor> tensor_of(const TensorId& id) const {
    switch (id.role) {
      case Role::Value:
      case Role::PreActivation: return Tensor{false, storage_of(id.op)};
      case Role::Gradient:
      case Role::PreActivationGradient: return Tensor{true, storage_of(id.op)};
      default: return std::nullopt;
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
    // 1 + 2n the loss; 2 + 2n the gradient exchange; 3 + 2n the update; 4 + 2n distributed
    // BatchNormalization's all-reduces (only then).
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
    if (distributed_bn()) out.push_back({"BatchNormalization group sums", "all-reduce", 0});
    return out;
  }
  std::string optimizer_name() const {
    switch (opt_.kind) {
      case nn::OptimizerKind::Sgd: return "SGD";
      case nn::OptimizerKind::Momentum: return "SGD (momentum)";
      case nn::OptimizerKind::Adam: return "Adam";
      case nn::OptimizerKind::Lars: return "LARS";
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
  std::uint32_t bn_exchange_tag() const { return loss_tag() + 3; }

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
  // dst[i] = a[i] op b[i mod period]: a per-channel (or, period 1, a scalar) operand.
  static void broadcast(Code& out, isa::EltOp op, std::uint64_t a, std::uint64_t b,
                        std::uint64_t dst, std::uint64_t count, std::uint32_t period) {
    isa::Eltwise e;
    e.a = ub(a), e.b = ub(b), e.dst = ub(dst);
    e.count = static_cast<std::uint32_t>(count);
    e.op = op;
    e.type = DType::Fp32;
    e.b_period = period;
    out.push_back(e);
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
  // A copy of `bytes` contiguous bytes inside the unified buffer.
  static void copy(Code& out, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    isa::Copy c;
    c.src = ub(src);
    c.dst = ub(dst);
    c.rows = 1;
    c.row_bytes = static_cast<std::uint32_t>(bytes);
    c.src_stride = c.row_bytes;
    c.dst_stride = c.row_bytes;
    out.push_back(c);
  }
  static void read_mem(Code& out, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    out.push_back(isa::ReadMem{MemAddr(src), ub(dst), static_cast<std::uint32_t>(bytes)});
  }
  static void write_mem(Code& out, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    out.push_back(isa::WriteMem{ub(src), MemAddr(dst), static_cast<std::uint32_t>(bytes)});
  }

  // ---- chunks ------------------------------------------------------------------------------

  // Runs an operation's lowering `body` over the pass's n images. Unified-buffer tensors: one
  // chunk, the pass, over the resident tensors (a bf16 copy made at its first use in the pass; a
  // contribution to a sum computed into the scratch and added). Off-chip tensors: chunks of as
  // many images as fit one half of the arena (or, when one does not, the whole of it), each
  // operand loaded into the arena, converted, and stored back after the body. `temp` bytes per
  // image of room for the body's temporaries, `fixed` bytes more per chunk. Returns the images
  // per chunk.
  std::uint32_t chunked(Code& out, std::uint32_t n, const std::vector<Operand>& ops,
                        const std::function<void(Code&, const Chunk&)>& body,
                        std::uint64_t temp = 0, std::uint64_t fixed = 0) {
    Chunk c;
    if (!L_.off_chip) {
      c.count = n;
      for (const Operand& o : ops) c.at.push_back(resident(out, o, n));
      c.temp = temp_ub_;
      body(out, c);
      for (std::size_t k = 0; k < ops.size(); ++k)
        if (ops[k].use == Use::Accumulate) {
          const std::uint64_t home = resident_fp32(ops[k].t);
          eltwise(out, isa::EltOp::Add, home, c.at[k], home, n * per_image(ops[k].t.op));
        }
      return n;
    }
    std::uint64_t bytes = align(temp);
    for (const Operand& o : ops) bytes += staged_bytes(o);
    const auto images_in = [&](std::uint64_t room) -> std::uint64_t {
      return room > fixed ? (room - fixed) / (bytes + (ops.size() + 2) * kAlign) : 0;
    };
    std::uint64_t per = images_in(arena_bytes_ / 2 / kAlign * kAlign);
    bool halves = per > 0;
    if (!halves) per = images_in(arena_bytes_);
    if (per == 0)
      fail(
          fmt::format("one image's tensors of a training step's operation take {} bytes; the "
                      "{} bytes of {}'s unified buffer left for them do not hold one",
                      bytes + fixed, arena_bytes_, cfg_.name));
    const auto size = static_cast<std::uint32_t>(std::min<std::uint64_t>(per, n));
    // Per chunk: its operands' places in its half of the arena, the loaded sums of Accumulate
    // operands, the room for fixed temporaries.
    struct Staged {
      Chunk c;
      // Read and ReadBf16: where the operand is loaded (0: not loaded); Accumulate: the sum.
      std::vector<std::uint64_t> raw, kept;
      std::uint64_t fixed = 0;
    };
    const auto stage = [&](std::uint64_t first) {
      Staged st;
      st.c.first = first;
      st.c.count = static_cast<std::uint32_t>(std::min<std::uint64_t>(size, n - first));
      std::uint64_t at = halves ? arena_ + half_ * (arena_bytes_ / 2 / kAlign * kAlign) : arena_;
      if (halves) half_ ^= 1;
      const auto take = [&](std::uint64_t b) {
        const std::uint64_t a = at;
        at = align(at + b);
        return a;
      };
      st.raw.assign(ops.size(), 0);
      st.kept.assign(ops.size(), 0);
      for (std::size_t k = 0; k < ops.size(); ++k) {
        const Operand& o = ops[k];
        const std::uint64_t b = bytes_of(o.t) * st.c.count;
        const bool images = o.t.op == kGraphInput;
        switch (o.use) {
          case Use::Read:  // the images: bf16 as loaded, then fp32
            st.raw[k] = take(b);
            st.c.at.push_back(images ? take(2 * b) : st.raw[k]);
            break;
          case Use::ReadBf16:  // fp32 as loaded, then bf16 (the images: bf16 as loaded)
            st.raw[k] = take(b);
            st.c.at.push_back(images ? st.raw[k] : take(b / 2));
            break;
          case Use::Accumulate:
            st.kept[k] = take(b);
            st.c.at.push_back(take(b));
            break;
          case Use::Write:
          case Use::Scratch: st.c.at.push_back(take(b)); break;
        }
      }
      st.c.temp = take(temp * st.c.count);
      st.fixed = take(fixed);
      return st;
    };
    const auto home = [&](const Staged& st, const Operand& o) {
      return home_of(o.t) + st.c.first * bytes_of(o.t);
    };
    // The off-chip reads of a chunk: issued a chunk ahead when the halves alternate, so that
    // they overlap the previous chunk's work (the DMA runs its transfers in order).
    const auto load = [&](const Staged& st) {
      for (std::size_t k = 0; k < ops.size(); ++k) {
        const std::uint64_t b = bytes_of(ops[k].t) * st.c.count;
        if (st.raw[k] != 0) read_mem(out, home(st, ops[k]), st.raw[k], b);
        if (st.kept[k] != 0) read_mem(out, home(st, ops[k]), st.kept[k], b);
      }
    };
    std::vector<Staged> chunks;
    for (std::uint64_t first = 0; first < n; first += size) chunks.push_back(stage(first));
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const Staged& st = chunks[i];
      if (i == 0 || !halves) load(st);
      if (halves && i + 1 < chunks.size()) load(chunks[i + 1]);
      // Conversions just before the work, so the vector unit does not wait on the prefetch.
      for (std::size_t k = 0; k < ops.size(); ++k) {
        const Operand& o = ops[k];
        if (o.t.op == kGraphInput && o.use == Use::Read)
          map(out, st.raw[k], st.c.at[k], st.c.count * g_.input.size(), Act::Linear, DType::Bf16,
              DType::Fp32);
        else if (o.t.op != kGraphInput && o.use == Use::ReadBf16)
          to_bf16(out, st.raw[k], st.c.at[k], st.c.count * per_image(o.t.op));
      }
      fixed_ = st.fixed;
      body(out, st.c);
      for (std::size_t k = 0; k < ops.size(); ++k) {
        const Operand& o = ops[k];
        const std::uint64_t b = bytes_of(o.t) * st.c.count;
        if (o.use == Use::Accumulate) {
          eltwise(out, isa::EltOp::Add, st.kept[k], st.c.at[k], st.kept[k],
                  st.c.count * per_image(o.t.op));
          write_mem(out, st.kept[k], home(st, o), b);
        } else if (o.use == Use::Write) {
          write_mem(out, st.c.at[k], home(st, o), b);
        }
      }
    }
    return size;
  }

  std::uint64_t staged_bytes(const Operand& o) const {
    const std::uint64_t b = align(bytes_of(o.t));
    switch (o.use) {
      case Use::Read: return o.t.op == kGraphInput ? b + align(g_.input.size() * kF) : b;
      case Use::ReadBf16: return o.t.op == kGraphInput ? b : b + align(per_image(o.t.op) * kE);
      case Use::Accumulate: return 2 * b;
      default: return b;
    }
  }

  std::uint64_t home_of(const Tensor& t) const { return home_mem_.at(core_).at(t); }

  std::uint64_t resident_fp32(const Tensor& t) const {
    if (t.op == kGraphInput) throw std::logic_error("training lowering: the images are bf16");
    return t.grad ? grad_ub_t_.at(t.op) : value_ub_.at(t.op);
  }

  // A unified-buffer operand's address: its tensor, its bf16 copy (made once per pass; the
  // images' fp32 copy likewise), or the scratch a contribution to it is computed in.
  std::uint64_t resident(Code& out, const Operand& o, std::uint32_t n) {
    const bool images = o.t.op == kGraphInput;
    switch (o.use) {
      case Use::Read:
        if (images) {
          const std::uint64_t copy = value_ub_.at(kGraphInput);
          if (ready_.insert({o.t, DType::Fp32}).second)
            map(out, images_ub_, copy, std::uint64_t{n} * g_.input.size(), Act::Linear, DType::Bf16,
                DType::Fp32);
          return copy;
        }
        return resident_fp32(o.t);
      case Use::Write:
      case Use::Scratch: return images ? images_ub_ : resident_fp32(o.t);
      case Use::Accumulate: return scratch_ub_;
      case Use::ReadBf16: {
        if (images) return images_ub_;
        const std::uint64_t copy = o.t.grad ? grad_bf_.at(o.t.op) : value_bf_.at(o.t.op);
        if (ready_.insert({o.t, DType::Bf16}).second)
          to_bf16(out, resident_fp32(o.t), copy, std::uint64_t{n} * per_image(o.t.op));
        return copy;
      }
    }
    return 0;
  }

  // ---- the MXU -----------------------------------------------------------------------------

  // A matrix product on the MXUs in the documented order: out[r][n] = sum over k < K of
  // input(r, k) * weight(k, n), K in tiles of R rows (consecutive, in order), each tile's rows
  // summed by the array from +0 and added into the accumulators. tile(k0, kr, n0, nc) makes the
  // ReadWeights of a tile; feed(mm, r0, k0) fills the MatMul's input fields; drain(r0, rows, n0,
  // nc, acc) the instructions that take the accumulators out. Column blocks outermost, or, with
  // `rows_outer`, row chunks outermost and finish(r0, rows) after each row chunk's blocks.
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
    bool rows_outer = false;
    std::function<void(Code&, std::uint64_t, std::uint32_t)> finish;
  };
  void gemm(Code& out, const Gemm& gm) {
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols;
    const std::uint64_t chunk =
        gm.max_rows ? std::min<std::uint64_t>(gm.max_rows, acc_slot_) : acc_slot_;
    const auto block = [&](std::uint64_t r0, std::uint32_t rows, std::uint32_t n0) {
      const std::uint32_t nc = std::min(C, gm.N - n0);
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
    };
    const auto rows_at = [&](std::uint64_t r0) {
      return static_cast<std::uint32_t>(std::min(chunk, gm.rows - r0));
    };
    if (gm.rows_outer) {
      for (std::uint64_t r0 = 0; r0 < gm.rows; r0 += chunk) {
        for (std::uint32_t n0 = 0; n0 < gm.N; n0 += C) block(r0, rows_at(r0), n0);
        gm.finish(out, r0, rows_at(r0));
      }
      return;
    }
    for (std::uint32_t n0 = 0; n0 < gm.N; n0 += C)
      for (std::uint64_t r0 = 0; r0 < gm.rows; r0 += chunk) block(r0, rows_at(r0), n0);
  }

  // A tile of the stored matrix at byte offset `at` of operation op's bf16 kernel (in the
  // unified buffer, or off-chip with off-chip tensors).
  isa::ReadWeights kernel_tile(std::size_t op, std::uint64_t at, std::uint32_t rows,
                               std::uint32_t cols, std::uint64_t stride, bool transpose) const {
    isa::ReadWeights rw = ub_tile(0, rows, cols, stride, transpose);
    if (L_.off_chip) {
      rw.source = isa::WeightSource::OffChip;
      rw.addr = kernel_mem_.at(core_).at(op) + at;
    } else {
      rw.addr = kernel_ub_.at(op) + at;
    }
    return rw;
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
    reset_core(core);
    tag(out, 0);
    read_mem(out, zeros_mem_, zeros_ub_, zeros_bytes_);
    read_mem(out, records_mem_, units_ub_, kParamRecord);
    const auto records = [&](std::uint64_t dst, std::uint64_t columns) {
      read_mem(out, records_mem_ + kParamRecord, dst, columns * kParamRecord);
    };
    records(zero_records_, cfg_.mxu.cols);
    for (std::size_t i = 0; i < g_.ops.size(); ++i)
      if (g_.ops[i].has_weights()) records(records_ub_.at(i), g_.ops[i].out.c);
    // Per BatchNormalization: its constants, its moving statistics, and gamma and beta of one
    // (1 and 0) when the layer has no such parameter (the parameters' copies come below).
    for (const auto& [i, s] : bn_) {
      const Op& l = g_.ops[i];
      std::vector<std::uint8_t> bytes;
      const std::uint64_t pixels = std::uint64_t{l.out.h} * l.out.w;
      const std::uint64_t last = L_.share % L_.micro_batch ? L_.share % L_.micro_batch : 0;
      // Distributed: the group's rows (one pass a step).
      const std::uint64_t group = distributed_bn() ? L_.bn_group : 1;
      for (float v : {l.epsilon, static_cast<float>(L_.micro_batch * pixels * group),
                      static_cast<float>(last * pixels), l.momentum, 1.0f, l.epsilon, 0.0f,
                      1.0f - l.momentum})
        put_f32(bytes, v);
      const std::uint64_t at = mem_constants(std::move(bytes));
      read_mem(out, at, s.constants, 8 * kF);
      read_mem(out, moving_mem_.at(i), s.moving, 2 * std::uint64_t{l.out.c} * kF);
      const std::uint64_t c = l.out.c;
      if (!l.scale) {
        std::vector<std::uint8_t> ones;
        for (std::uint64_t k = 0; k < c; ++k) put_f32(ones, 1.0f);
        read_mem(out, mem_constants(std::move(ones)), s.gamma, c * kF);
      }
      if (!l.use_bias) read_mem(out, zeros_mem_, s.beta, c * kF);
    }
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) refresh(out, k, true);
    out.push_back(isa::Halt{});
    return out;
  }

  // A constant block of the memory image (the first replica's setup adds it; the others read the
  // same).
  std::uint64_t mem_constants(std::vector<std::uint8_t> bytes) {
    const auto it = constants_.find(bytes);
    if (it != constants_.end()) return it->second;
    const std::uint64_t at = mem_take(bytes.size());
    check_memory();
    P_.setup.memory_image.push_back({at, bytes});
    constants_[std::move(bytes)] = at;
    return at;
  }

  // Parameter k's step copies from its fp32 master values: the bf16 kernel, the bias slots of
  // the activate records, or a BatchNormalization's gamma or beta; in pieces through the stage.
  void refresh(Code& out, std::size_t k, bool read) {
    const TrainingLayout::Home& h = L_.params[core_][k];
    for (std::uint64_t e0 = 0; e0 < h.elements; e0 += stage_elems_) {
      const std::uint64_t n = std::min(stage_elems_, h.elements - e0);
      if (read) read_mem(out, h.w + e0 * kF, stage_ub_[1], n * kF);
      refresh_from_stage(out, k, e0, n, stage_ub_[1], stage_ub_[0]);
    }
  }

  // Elements e0 .. e0 + n of parameter k's copies from its new fp32 values at `values` (`spare`:
  // a stage buffer the bf16 kernel may pass through on its way to off-chip memory).
  void refresh_from_stage(Code& out, std::size_t k, std::uint64_t e0, std::uint64_t n,
                          std::uint64_t values, std::uint64_t spare) {
    const TensorId& p = t_.parameters[k];
    switch (p.param) {
      case ir::Param::Kernel:
        if (L_.off_chip) {
          to_bf16(out, values, spare, n);
          write_mem(out, spare, kernel_mem_.at(core_).at(p.op) + e0 * kE, n * kE);
        } else {
          to_bf16(out, values, kernel_ub_.at(p.op) + e0 * kE, n);
        }
        return;
      case ir::Param::Bias: {
        isa::Copy c;
        c.src = ub(values);
        c.dst = ub(records_ub_.at(p.op) + e0 * kParamRecord);
        c.rows = static_cast<std::uint32_t>(n);
        c.row_bytes = kF;
        c.src_stride = kF;
        c.dst_stride = kParamRecord;
        out.push_back(c);
        return;
      }
      case ir::Param::Gamma: copy(out, values, bn_.at(p.op).gamma + e0 * kF, n * kF); return;
      case ir::Param::Beta: copy(out, values, bn_.at(p.op).beta + e0 * kF, n * kF); return;
      default: break;
    }
    throw std::logic_error("training lowering: a parameter it does not train");
  }

  // Replica r's program: core r % cores of chip r / cores.
  void reset_core(std::uint32_t replica) {
    replica_ = replica;
    core_ = replica % L_.cores;
    chip_ = replica / L_.cores;
    tag_ = std::numeric_limits<std::uint32_t>::max();
    next_mxu_ = 0;
    half_ = 0;
    parity_.assign(cfg_.mxu.count, 0);
  }

  Code emit_step(std::uint32_t core) {
    Code out;
    reset_core(core);
    tag(out, 0);
    read_host(out, L_.optimizer_addr, optimizer_ub_, L_.optimizer_bytes);
    for (std::size_t k = 0; k < t_.parameters.size(); ++k)
      if (grad_ub_[k] != kNone) zero_fill(out, grad_ub_[k], elements(t_.parameters[k]));
    first_partial_.clear();
    emit_passes(out, replica_, true);
    emit_exchange_and_update(out);
    out.push_back(isa::Halt{});
    return out;
  }

  Code emit_evaluate(std::uint32_t core) {
    Code out;
    reset_core(core);
    emit_passes(out, replica_, false);
    out.push_back(isa::Halt{});
    return out;
  }

  void emit_passes(Code& out, std::uint32_t replica, bool train) {
    const std::uint64_t first = std::uint64_t{replica} * L_.share;
    for (std::uint64_t s = 0; s < L_.share; s += L_.micro_batch) {
      const auto n =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(L_.micro_batch, L_.share - s));
      final_pass_ = s + L_.micro_batch >= L_.share;
      emit_pass(out, first + s, n, train);
    }
  }

  static void read_host(Code& out, std::uint64_t src, std::uint64_t dst, std::uint64_t bytes) {
    out.push_back(isa::ReadHost{HostAddr(src), ub(dst), static_cast<std::uint32_t>(bytes)});
  }

  void emit_pass(Code& out, std::uint64_t image, std::uint32_t n, bool train) {
    train_ = train;
    last_pass_ = n != L_.micro_batch;
    tag(out, 0);
    if (L_.off_chip) {
      // The images into off-chip memory through the arena, a chunk at a time.
      chunked(out, n, {{{false, kGraphInput}, Use::Write}}, [&](Code& o, const Chunk& c) {
        read_host(o, L_.images_addr + (image + c.first) * L_.image_bytes, c.at[0],
                  c.count * L_.image_bytes);
      });
    } else {
      read_host(out, L_.images_addr + image * L_.image_bytes, images_ub_, n * L_.image_bytes);
    }
    read_host(out, L_.labels_addr + image * 4, labels_ub_, n * 4u);
    ready_.clear();
    bn_sums_.clear();
    for (std::size_t i = 0; i < g_.ops.size(); ++i) forward(out, i, n);
    for (std::size_t i = 0; i < t_.ops.size(); ++i) {
      backward(out, t_.ops[i], n);
      if (!train) break;  // evaluation: the loss records only
      if (!final_pass_) continue;
      for (const Bucket& b : buckets_)
        if (b.after == i) emit_bucket(b);
      drip(out, t_.ops.size() - 1 - i);
    }
    drip(out, 0);  // what is left, after the backward pass
    tag(out, 0);
    out.push_back(isa::WriteHost{ub(out_records_ub_),
                                 HostAddr(L_.records_addr + image * kRecordBytes),
                                 static_cast<std::uint32_t>(n * kRecordBytes)});
  }

  static Operand read(std::size_t t) { return {{false, t}, Use::Read}; }
  Operand value(std::size_t t, Use u = Use::Read) const { return {{false, storage_of(t)}, u}; }
  Operand grad(std::size_t t, Use u = Use::Read) const { return {{true, storage_of(t)}, u}; }
  // The operand a GradOp writes its gradient through.
  Operand out_grad(const ir::GradOp& o) const {
    return {*tensor_of(o.output), o.accumulate ? Use::Accumulate : Use::Write};
  }
  Operand in_grad(const TensorId& id, Use u = Use::Read) const { return {*tensor_of(id), u}; }

  // ---- forward -----------------------------------------------------------------------------

  void forward(Code& out, std::size_t i, std::uint32_t n) {
    const Op& l = g_.ops[i];
    if (l.is_view() || group_of_[i] != ir::kNoOp) return;  // a chain's member ran with its head
    tag(out, fwd_tag(i));
    const bool loss = i == t_.loss_op;
    switch (l.kind) {
      case OpKind::Dense:
      case OpKind::Conv2D: forward_weighted(out, i, n); return;
      case OpKind::MaxPooling2D:
      case OpKind::AveragePooling2D:
      case OpKind::GlobalAveragePooling2D:
      case OpKind::GlobalMaxPooling2D:
        chunked(out, n, {value(l.inputs[0]), value(i, Use::Write)}, [&](Code& o, const Chunk& c) {
          const isa::SetWindow w = window_of(l);
          isa::Pool p;
          p.src = ub(c.at[0]);
          p.dst = ub(c.at[1]);
          p.in_h = w.in_h, p.in_w = w.in_w, p.channels = w.in_c;
          p.kernel_h = w.kernel_h, p.kernel_w = w.kernel_w;
          p.stride_h = static_cast<std::uint8_t>(w.stride_h);
          p.stride_w = static_cast<std::uint8_t>(w.stride_w);
          p.pad_top = static_cast<std::uint8_t>(w.pad_top);
          p.pad_left = static_cast<std::uint8_t>(w.pad_left);
          p.out_h = w.out_h, p.out_w = w.out_w;
          p.images = static_cast<std::uint16_t>(c.count);
          p.kind = l.kind == OpKind::MaxPooling2D || l.kind == OpKind::GlobalMaxPooling2D
                       ? isa::PoolKind::Max
                       : isa::PoolKind::Avg;
          p.type = DType::Fp32;
          o.push_back(p);
        });
        return;
      case OpKind::Activation:
        if (loss) return;  // the loss reads the logits
        [[fallthrough]];
      case OpKind::Add:
      case OpKind::BatchNormalization: forward_group(out, i, n); return;
      case OpKind::ZeroPadding2D:
        chunked(out, n, {value(l.inputs[0]), value(i, Use::Write)}, [&](Code& o, const Chunk& c) {
          zero_fill(o, c.at[1], std::uint64_t{c.count} * l.out.size());
          for (std::uint32_t b = 0; b < c.count; ++b)
            o.push_back(padding_copy(l, c.at[0] + b * l.in.size() * kF,
                                     c.at[1] + b * l.out.size() * kF, false));
        });
        return;
      default: fail(l, "fit does not lower this kind of layer yet");
    }
  }

  // ZeroPadding2D's rows of one image: the input's rows into the padded image (crop: back).
  static isa::Copy padding_copy(const Op& l, std::uint64_t in, std::uint64_t padded, bool crop) {
    const std::uint64_t row = std::uint64_t{l.in.w} * l.in.c * kF;
    const std::uint64_t prow = std::uint64_t{l.out.w} * l.out.c * kF;
    const std::uint64_t inner =
        padded + (std::uint64_t{l.pad_top} * l.out.w + l.pad_left) * l.out.c * kF;
    isa::Copy c;
    c.src = ub(crop ? inner : in);
    c.dst = ub(crop ? in : inner);
    c.rows = l.in.h;
    c.row_bytes = static_cast<std::uint32_t>(row);
    c.src_stride = static_cast<std::uint32_t>(crop ? prow : row);
    c.dst_stride = static_cast<std::uint32_t>(crop ? row : prow);
    return c;
  }

  void forward_weighted(Code& out, std::size_t i, std::uint32_t n) {
    const Op& l = g_.ops[i];
    const bool conv = l.kind == OpKind::Conv2D;
    const bool loss = i == t_.loss_op;
    const std::uint32_t N = l.out.c;
    const auto K = static_cast<std::uint32_t>(conv ? std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c
                                                   : l.in.size());
    const Act act = loss ? Act::Linear : l.activation;
    const std::size_t bn = train_ ? stats_in_[i] : ir::kNoOp;  // its sums here (plan_fusion)
    chunked(
        out, n, {value(l.inputs[0], Use::ReadBf16), value(i, Use::Write)},
        [&](Code& o, const Chunk& c) {
          if (conv) o.push_back(window_of(l));
          const std::uint64_t src = c.at[0], dst = c.at[1];
          Gemm gm;
          gm.rows = conv ? std::uint64_t{c.count} * l.out.h * l.out.w : c.count;
          gm.K = K, gm.N = N;
          gm.tile = [&](std::uint32_t k0, std::uint32_t kr, std::uint32_t n0, std::uint32_t nc) {
            return kernel_tile(i, (std::uint64_t{k0} * N + n0) * kE, kr, nc, std::uint64_t{N} * kE,
                               false);
          };
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
          gm.drain = [&](Code& d, std::uint64_t r0, std::uint32_t rows, std::uint32_t n0,
                         std::uint32_t nc, std::uint32_t acc) {
            d.push_back(drain_fp32(acc, rows, nc, dst + (r0 * N + n0) * kF, std::uint64_t{N} * kF,
                                   records_ub_.at(i) + n0 * kParamRecord, act));
          };
          gemm(o, gm);
          if (bn != ir::kNoOp) {
            tag(o, fwd_tag(bn));
            batch_norm_sums(o, bn, c, dst);
            tag(o, fwd_tag(i));
          }
        },
        bn != ir::kNoOp ? l.out.size() * kF : 0);
  }

  // A chunk's share of BatchNormalization i's sums over the pass: Σx and Σx·x down each channel
  // of the chunk's x (at `x`), accumulating after the pass's first chunk.
  void batch_norm_sums(Code& o, std::size_t i, const Chunk& c, std::uint64_t x) {
    const Op& l = g_.ops[i];
    const std::uint32_t C = l.out.c;
    const std::uint64_t count = std::uint64_t{c.count} * l.out.size();
    o.push_back(column_sum(x, bn_temp_[0], count / C, C, c.first > 0));
    eltwise(o, isa::EltOp::Mul, x, x, c.temp, count);
    o.push_back(column_sum(c.temp, bn_temp_[1], count / C, C, c.first > 0));
  }

  // An elementwise chain (plan_fusion; one operation when nothing fuses with it) in one pass of
  // chunks: every member computes in place in the chain's output, in the unified buffer, which
  // only the last one's result leaves. A BatchNormalization heads its chain: its statistics (or, in
  // validation, its moving statistics' scale and shift) come first.
  void forward_group(Code& out, std::size_t head, std::uint32_t n) {
    std::vector<std::size_t> members = {head};
    while (fused_next_[members.back()] != ir::kNoOp) members.push_back(fused_next_[members.back()]);
    if (g_.ops[head].kind == OpKind::BatchNormalization) {
      if (train_)
        batch_norm_statistics(out, head, n);
      else
        batch_norm_inference(out, head);
    }
    // Operands: every member's inputs from outside the chain, then the last output.
    constexpr std::size_t kPrevious = ir::kNoOp;
    std::vector<Operand> ops;
    std::vector<std::vector<std::size_t>> in(members.size());
    for (std::size_t k = 0; k < members.size(); ++k)
      for (std::size_t x : g_.ops[members[k]].inputs)
        if (k > 0 && x == members[k - 1]) {
          in[k].push_back(kPrevious);
        } else {
          in[k].push_back(ops.size());
          ops.push_back(value(x));
        }
    ops.push_back(value(members.back(), Use::Write));
    const std::uint64_t size = g_.ops[head].out.size();
    chunked(out, n, ops, [&](Code& o, const Chunk& c) {
      const std::uint64_t count = std::uint64_t{c.count} * size;
      std::uint64_t previous = 0;
      for (std::size_t k = 0; k < members.size(); ++k) {
        const std::size_t m = members[k];
        const Op& l = g_.ops[m];
        tag(o, fwd_tag(m));
        std::vector<std::uint64_t> x;
        for (std::size_t q : in[k]) x.push_back(q == kPrevious ? previous : c.at[q]);
        const std::uint64_t y = c.at.back();  // every member in place in the output
        switch (l.kind) {
          case OpKind::BatchNormalization: batch_norm_apply(o, m, x[0], y, count); break;
          case OpKind::Activation:
            map(o, x[0], y, count, l.activation, DType::Fp32, DType::Fp32);
            break;
          default:  // Add: its operands in order
            eltwise(o, isa::EltOp::Add, x[0], x[1], y, count);
            for (std::size_t q = 2; q < x.size(); ++q)
              eltwise(o, isa::EltOp::Add, y, x[q], y, count);
            break;
        }
        previous = y;
      }
      tag(o, fwd_tag(head));
    });
  }

  // BatchNormalization in training mode (numerics/batch_norm.h): each channel's sums over the
  // pass's rows (unless the convolution before it took them, plan_fusion), its statistics (kept
  // for the backward) and the replica's moving statistics; batch_norm_apply then gives y.
  void batch_norm_statistics(Code& out, std::size_t i, std::uint32_t n) {
    const Op& l = g_.ops[i];
    const BatchNormState& s = bn_.at(i);
    const std::uint32_t C = l.out.c;
    const std::uint64_t sum = bn_temp_[0], squares = bn_temp_[1];
    if (l.inputs[0] == kGraphInput || stats_in_[l.inputs[0]] != i)
      chunked(
          out, n, {value(l.inputs[0])},
          [&](Code& o, const Chunk& c) { batch_norm_sums(o, i, c, c.at[0]); }, l.out.size() * kF);
    if (distributed_bn()) bn_all_reduce(out, i, 0, sum, squares, sum, squares);
    // mean = Σx / M; variance = Σx² / M − mean²; rsqrt(variance + ε); variance + ε.
    const std::uint64_t rows = rows_constant(s), eps = s.constants;
    broadcast(out, isa::EltOp::Div, sum, rows, s.mean, C, 1);
    broadcast(out, isa::EltOp::Div, squares, rows, squares, C, 1);
    eltwise(out, isa::EltOp::Mul, s.mean, s.mean, sum, C);
    eltwise(out, isa::EltOp::Sub, squares, sum, squares, C);
    rsqrt(out, squares, s.rsqrt, C, s);
    broadcast(out, isa::EltOp::Add, squares, eps, s.var_eps, C, 1);
    // The replica's moving statistics: moving * momentum + statistic * (1 - momentum).
    const std::uint64_t momentum = s.constants + 3 * kF, rest = s.constants + 7 * kF;
    for (const auto& [moving, stat] :
         {std::pair{s.moving, s.mean}, std::pair{s.moving + std::uint64_t{C} * kF, squares}}) {
      broadcast(out, isa::EltOp::Mul, moving, momentum, moving, C, 1);
      broadcast(out, isa::EltOp::Mul, stat, rest, sum, C, 1);
      eltwise(out, isa::EltOp::Add, moving, sum, moving, C);
    }
  }

  // Validation: the moving statistics, as Keras's inference: s = gamma * rsqrt(moving_variance
  // + epsilon) and beta - moving_mean * s, for batch_norm_apply's y = x * s + (beta - mean * s).
  void batch_norm_inference(Code& out, std::size_t i) {
    const Op& l = g_.ops[i];
    const BatchNormState& s = bn_.at(i);
    const std::uint32_t C = l.out.c;
    const std::uint64_t scale = bn_temp_[0], shift = bn_temp_[1];
    rsqrt(out, s.moving + std::uint64_t{C} * kF, scale, C, s);
    eltwise(out, isa::EltOp::Mul, s.gamma, scale, scale, C);
    eltwise(out, isa::EltOp::Mul, s.moving, scale, shift, C);
    eltwise(out, isa::EltOp::Sub, s.beta, shift, shift, C);
  }

  // y from x, `count` elements: ((x - mean) * rsqrt) * gamma + beta in training, x * s + shift
  // in validation, per-channel operands broadcast.
  void batch_norm_apply(Code& o, std::size_t i, std::uint64_t x, std::uint64_t y,
                        std::uint64_t count) const {
    const BatchNormState& s = bn_.at(i);
    const std::uint32_t C = g_.ops[i].out.c;
    if (!train_) {
      broadcast(o, isa::EltOp::Mul, x, bn_temp_[0], y, count, C);
      broadcast(o, isa::EltOp::Add, y, bn_temp_[1], y, count, C);
      return;
    }
    broadcast(o, isa::EltOp::Sub, x, s.mean, y, count, C);
    broadcast(o, isa::EltOp::Mul, y, s.rsqrt, y, count, C);
    broadcast(o, isa::EltOp::Mul, y, s.gamma, y, count, C);
    broadcast(o, isa::EltOp::Add, y, s.beta, y, count, C);
  }

  // The pass's rows per channel of BatchNormalization s, as an fp32 constant.
  std::uint64_t rows_constant(const BatchNormState& s) const {
    return s.constants + (last_pass_ ? 2 : 1) * kF;
  }
  // dst = rsqrt(src * 1 + epsilon) per channel (map rsqrt with the record {1, epsilon, 0}).
  void rsqrt(Code& out, std::uint64_t src, std::uint64_t dst, std::uint32_t count,
             const BatchNormState& s) const {
    isa::Map m;
    m.src = ub(src);
    m.dst = ub(dst);
    m.params = ub(s.constants + 4 * kF);
    m.count = count;
    m.channels = 1;
    m.func = isa::MapFunc::Rsqrt;
    m.in_type = DType::Fp32;
    m.out_type = DType::Fp32;
    out.push_back(m);
  }
  static isa::Reduce column_sum(std::uint64_t src, std::uint64_t dst, std::uint64_t rows,
                                std::uint32_t cols, bool accumulate,
                                isa::ReduceOp op = isa::ReduceOp::Sum) {
    isa::Reduce r;
    r.accumulate = accumulate;
    r.op = op;
    r.src = ub(src);
    r.dst = ub(dst);
    r.rows = static_cast<std::uint32_t>(rows);
    r.cols = static_cast<std::uint16_t>(cols);
    r.stride = cols * static_cast<std::uint32_t>(kF);
    return r;
  }

  // The logits: the value of the loss operation's input (an Activation softmax), or the loss
  // operation's own output before its softmax.
  std::size_t logits_op() const {
    const Op& l = g_.ops[t_.loss_op];
    return l.kind == OpKind::Activation ? storage_of(l.inputs[0]) : storage_of(t_.loss_op);
  }

  // ---- backward ----------------------------------------------------------------------------

  void backward(Code& out, const ir::GradOp& o, std::uint32_t n) {
    const Op& l = g_.ops[o.op];
    tag(out, o.kind == GradKind::SoftmaxCrossEntropy ? loss_tag() : bwd_tag(o.op));
    switch (o.kind) {
      case GradKind::SoftmaxCrossEntropy: {
        Operand dz = out_grad(o);
        if (!train_) dz.use = Use::Scratch;  // evaluation keeps the records only
        chunked(out, n, {read(logits_op()), dz}, [&](Code& oc, const Chunk& c) {
          isa::Xent x;
          x.src = ub(c.at[0]);
          x.labels = ub(labels_ub_ + c.first * 4);
          x.dst = ub(c.at[1]);
          x.out = ub(out_records_ub_ + c.first * kRecordBytes);
          x.rows = c.count;
          x.cols = static_cast<std::uint16_t>(g_.output().size());
          x.scale = 1.0f / static_cast<float>(global_);
          x.smoothing = L_.label_smoothing;
          oc.push_back(x);
        });
        return;
      }
      case GradKind::Activation:
        chunked(out, n, {in_grad(o.inputs[0]), in_grad(o.inputs[1]), out_grad(o)},
                [&](Code& oc, const Chunk& c) {
                  eltwise(oc, grad_op(o.act), c.at[0], c.at[1], c.at[2],
                          std::uint64_t{c.count} * per_image(o.output.op));
                });
        return;
      case GradKind::Pass: pass(out, o, n); return;
      case GradKind::Pool: {
        const bool max = l.kind == OpKind::MaxPooling2D || l.kind == OpKind::GlobalMaxPooling2D;
        std::vector<Operand> ops = {in_grad(o.inputs[1]), out_grad(o)};
        if (max) ops.push_back(in_grad(o.inputs[0]));  // average pooling does not read x
        chunked(out, n, ops, [&](Code& oc, const Chunk& c) {
          oc.push_back(window_of(l));
          isa::PoolGrad p;
          p.kind = max ? isa::PoolKind::Max : isa::PoolKind::Avg;
          p.type = DType::Fp32;
          p.x = ub(max ? c.at[2] : 0);
          p.dy = ub(c.at[0]);
          p.dst = ub(c.at[1]);
          p.images = c.count;
          oc.push_back(p);
        });
        return;
      }
      case GradKind::DenseInput: dense_input(out, o, n); return;
      case GradKind::DenseKernel:
      case GradKind::ConvKernel: kernel_grad(out, o, n); return;
      case GradKind::Bias:
        if (l.kind == OpKind::BatchNormalization && L_.micro_batch == L_.share) {
          // One pass a step: beta's running sum from +0 is the pass's Σdy (the sum the backward
          // takes anyway, row order from +0, never -0), added once.
          batch_norm_grad_sums(out, o.op, in_grad(o.inputs[0]), n);
          const std::uint64_t g = grad_ub_[param_index(o.output)];
          eltwise(out, isa::EltOp::Add, g, bn_temp_[2], g, l.out.c);
          return;
        }
        chunked(out, n, {in_grad(o.inputs[0])}, [&](Code& oc, const Chunk& c) {
          oc.push_back(column_sum(c.at[0], grad_ub_[param_index(o.output)],
                                  std::uint64_t{c.count} * l.out.h * l.out.w, l.out.c, true));
        });
        return;
      case GradKind::ConvInput: conv_input(out, o, n); return;
      case GradKind::BatchNormGamma:
      case GradKind::BatchNormInput: batch_norm_backward(out, o, n); return;
      case GradKind::Crop:
        chunked(out, n, {in_grad(o.inputs[0]), out_grad(o)}, [&](Code& oc, const Chunk& c) {
          for (std::uint32_t b = 0; b < c.count; ++b)
            oc.push_back(padding_copy(l, c.at[1] + b * l.in.size() * kF,
                                      c.at[0] + b * l.out.size() * kF, true));
        });
        return;
    }
  }

  // A gradient passed on unchanged (a view, an Add's operand): added to a sum, or copied.
  void pass(Code& out, const ir::GradOp& o, std::uint32_t n) {
    const Tensor src = *tensor_of(o.inputs[0]), dst = *tensor_of(o.output);
    const std::uint64_t count = std::uint64_t{n} * per_image(dst.op);
    if (!L_.off_chip) {
      const std::uint64_t s = resident_fp32(src), d = resident_fp32(dst);
      if (o.accumulate)
        eltwise(out, isa::EltOp::Add, d, s, d, count);
      else if (s != d)
        eltwise(out, isa::EltOp::Max, s, s, d, count);  // a copy
      return;
    }
    if (o.accumulate) {
      chunked(out, n, {{src, Use::Read}, {dst, Use::Read}, {dst, Use::Write}},
              [&](Code& oc, const Chunk& c) {
                eltwise(oc, isa::EltOp::Add, c.at[1], c.at[0], c.at[2],
                        std::uint64_t{c.count} * per_image(dst.op));
              });
      return;
    }
    if (home_of(src) == home_of(dst)) return;  // one home (plan_off_chip)
    // Through the arena unchanged: each chunk read from the one home and written to the other.
    chunked(out, n, {{src, Use::Read}}, [&](Code& oc, const Chunk& c) {
      write_mem(oc, c.at[0], home_of(dst) + c.first * bytes_of(dst), c.count * bytes_of(dst));
    });
  }

  void dense_input(Code& out, const ir::GradOp& o, std::uint32_t n) {
    // dx[b][k] = sum over c of dz[b][c] W[k][c]: tiles of W transposed (rows c, columns k).
    const Op& l = g_.ops[o.op];
    const auto K = static_cast<std::uint32_t>(l.in.size());
    const std::uint32_t N = l.out.c;
    chunked(
        out, n, {in_grad(o.inputs[0], Use::ReadBf16), out_grad(o)}, [&](Code& oc, const Chunk& c) {
          const std::uint64_t dzb = c.at[0], dst = c.at[1];
          Gemm gm;
          gm.rows = c.count, gm.K = N, gm.N = K;
          gm.tile = [&](std::uint32_t c0, std::uint32_t cr, std::uint32_t k0, std::uint32_t kc) {
            // The stored block W[k0 .. k0+kc)[c0 .. c0+cr), transposed to cr x kc.
            return kernel_tile(o.op, (std::uint64_t{k0} * N + c0) * kE, kc, cr,
                               std::uint64_t{N} * kE, true);
          };
          gm.feed = [&](isa::MatMul& mm, std::uint64_t r0, std::uint32_t c0) {
            mm.src = ub(dzb + (r0 * N + c0) * kE);
            mm.src_stride = static_cast<std::uint32_t>(std::uint64_t{N} * kE);
          };
          gm.drain = [&](Code& d, std::uint64_t r0, std::uint32_t rows, std::uint32_t k0,
                         std::uint32_t kc, std::uint32_t acc) {
            d.push_back(drain_fp32(acc, rows, kc, dst + (r0 * K + k0) * kF, std::uint64_t{K} * kF,
                                   zero_records_, Act::Linear));
          };
          gemm(oc, gm);
        });
  }

  // dW[k][c] = sum over the chunk's rows j (images, or output pixels) of x(j, k) dz[j][c]: tiles
  // of dz (rows j, columns c), inputs the columns of x (transposed MatMul). Each chunk's sum is
  // added to the running sum (nn::reference_step's kernel_chunk): in the unified buffer, or
  // off-chip, where the step's first chunk writes it.
  void kernel_grad(Code& out, const ir::GradOp& o, std::uint32_t n) {
    const Op& l = g_.ops[o.op];
    const bool conv = o.kind == GradKind::ConvKernel;
    const std::uint32_t N = l.out.c;
    const auto K = static_cast<std::uint32_t>(conv ? std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c
                                                   : l.in.size());
    const std::size_t k = param_index(o.output);
    // The partial's rows: off-chip, a quarter of an arena half (two buffers: the partial and the
    // running sum read back); in the unified buffer, a stage buffer.
    const std::uint64_t part_rows =
        L_.off_chip ? std::max<std::uint64_t>(1, arena_bytes_ / 8 / 2 / (std::uint64_t{N} * kF))
                    : std::max<std::uint64_t>(1, stage_elems_ / N);
    const std::uint64_t part_bytes = L_.off_chip ? align(part_rows * N * kF) : 0;
    const std::uint32_t size = chunked(
        out, n, {value(o.inputs[0].op, Use::ReadBf16), in_grad(o.inputs[1], Use::ReadBf16)},
        [&](Code& oc, const Chunk& c) {
          const std::uint64_t xb = c.at[0], dzb = c.at[1];
          const std::uint64_t J = conv ? std::uint64_t{c.count} * l.out.h * l.out.w : c.count;
          if (conv) oc.push_back(window_of(l));
          const std::uint64_t part = L_.off_chip ? fixed_ : stage_ub_[1];
          const std::uint64_t sum = fixed_ + part_bytes;  // off-chip: the running sum read back
          const bool first = first_partial_.insert(k).second;
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
          gm.drain = [&](Code& d, std::uint64_t, std::uint32_t rows, std::uint32_t c0,
                         std::uint32_t cc, std::uint32_t acc) {
            d.push_back(drain_fp32(acc, rows, cc, part + c0 * kF, std::uint64_t{N} * kF,
                                   zero_records_, Act::Linear));
          };
          // The chunk's rows of the partial, all columns, into the running sum.
          gm.finish = [&](Code& d, std::uint64_t r0, std::uint32_t rows) {
            const std::uint64_t count = std::uint64_t{rows} * N;
            if (!L_.off_chip) {
              const std::uint64_t g0 = grad_ub_[k] + r0 * N * kF;
              eltwise(d, isa::EltOp::Add, g0, part, g0, count);
              return;
            }
            const std::uint64_t home = L_.exchange[core_] + slot_offset_[k] + r0 * N * kF;
            if (!first) {
              read_mem(d, home, sum, count * kF);
              eltwise(d, isa::EltOp::Add, sum, part, part, count);
            }
            write_mem(d, part, home, count * kF);
          };
          gm.rows_outer = true;
          gm.max_rows = part_rows;
          gemm(oc, gm);
        },
        0, 2 * part_bytes);
    if (size < n) L_.kernel_chunk[o.op] = size;
  }

  // dX of a convolution (docs/isa.md §1.1): a windowed product over dY dilated by the forward
  // stride with the flipped kernel. Per dX pixel, the window's positions (fy, fx) in row-major
  // order, each position's contraction over the output channels in tiles of R rows, all adding
  // into the same accumulators (nn::reference_step's conv_input_grad). Tiles never straddle two
  // positions, so this loop is written out instead of `gemm`'s, which tiles K as one run.
  void conv_input(Code& out, const ir::GradOp& o, std::uint32_t n) {
    const Op& l = g_.ops[o.op];
    const std::uint32_t co = l.out.c, ci = l.in.c, kh = l.kernel_h, kw = l.kernel_w;
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
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols;
    chunked(out, n, {in_grad(o.inputs[0], Use::ReadBf16), out_grad(o)},
            [&](Code& oc, const Chunk& c) {
              const std::uint64_t dzb = c.at[0], dst = c.at[1];
              oc.push_back(w);
              const std::uint64_t rows = std::uint64_t{c.count} * l.in.h * l.in.w;
              for (std::uint32_t n0 = 0; n0 < ci; n0 += C) {
                const std::uint32_t nc = std::min(C, ci - n0);
                for (std::uint64_t r0 = 0; r0 < rows; r0 += acc_slot_) {
                  const auto rr =
                      static_cast<std::uint32_t>(std::min<std::uint64_t>(acc_slot_, rows - r0));
                  const auto [m, acc] = next_slot();
                  bool first = true;
                  for (std::uint32_t fy = 0; fy < kh; ++fy)
                    for (std::uint32_t fx = 0; fx < kw; ++fx) {
                      // Window position (fy, fx) reads the forward kernel's position (ky, kx).
                      const std::uint64_t pos = std::uint64_t{kh - 1 - fy} * kw + (kw - 1 - fx);
                      for (std::uint32_t c0 = 0; c0 < co; c0 += R) {
                        const std::uint32_t cr = std::min(R, co - c0);
                        // The stored block W[ky][kx][n0 .. n0+nc)[c0 .. c0+cr), transposed.
                        isa::ReadWeights rw = kernel_tile(o.op, ((pos * ci + n0) * co + c0) * kE,
                                                          nc, cr, std::uint64_t{co} * kE, true);
                        rw.mxu = static_cast<std::uint8_t>(m);
                        oc.push_back(rw);
                        isa::MatMul mm;
                        mm.mxu = static_cast<std::uint8_t>(m);
                        mm.accumulate = !first;
                        mm.swap_weights = true;
                        mm.window = true;
                        mm.src = ub(dzb);
                        mm.dst = AccAddr(acc);
                        mm.rows = rr;
                        mm.first_pixel = static_cast<std::uint32_t>(r0);
                        mm.k_first =
                            static_cast<std::uint16_t>((std::uint64_t{fy} * kw + fx) * co + c0);
                        oc.push_back(mm);
                        first = false;
                      }
                    }
                  oc.push_back(drain_fp32(acc, rr, nc, dst + (r0 * ci + n0) * kF,
                                          std::uint64_t{ci} * kF, zero_records_, Act::Linear));
                }
              }
            });
  }

  // The sums BatchNormalization i's backward needs over the pass's rows, once a pass: Σdy and
  // Σdy·(x - mean) per channel, in row order from +0, into the backward temporaries.
  void batch_norm_grad_sums(Code& out, std::size_t i, const Operand& dy, std::uint32_t n) {
    if (!bn_sums_.insert(i).second) return;
    const Op& l = g_.ops[i];
    const BatchNormState& s = bn_.at(i);
    const std::uint32_t C = l.out.c;
    chunked(
        out, n, {value(l.inputs[0]), dy},
        [&](Code& oc, const Chunk& c) {
          const std::uint64_t count = std::uint64_t{c.count} * l.out.size();
          oc.push_back(column_sum(c.at[1], bn_temp_[2], count / C, C, c.first > 0));
          broadcast(oc, isa::EltOp::Sub, c.at[0], s.mean, c.temp, count, C);
          eltwise(oc, isa::EltOp::Mul, c.at[1], c.temp, c.temp, count);
          oc.push_back(column_sum(c.temp, bn_temp_[3], count / C, C, c.first > 0));
        },
        l.out.size() * kF);
    // Distributed: the group's sums for dx beside the replica's own, which its dgamma and dbeta
    // take (the gradient all-reduce sums those over every replica).
    if (distributed_bn())
      bn_all_reduce(out, i, 1, bn_temp_[2], bn_temp_[3], bn_group_sums_[0], bn_group_sums_[1]);
  }

  // A distributed BatchNormalization's two sums (C fp32 values each at a and b, this replica's
  // over its rows) all-reduced over the group (collectives.h, over its box of chips; exchange
  // `which`: 0 the forward's, 1 the backward's), the totals into da and db: each core's pair into
  // its slot, a barrier, the all-reduce, a barrier (the total is in the area), the total read.
  void bn_all_reduce(Code& out, std::size_t i, int which, std::uint64_t a, std::uint64_t b,
                     std::uint64_t da, std::uint64_t db) {
    const std::uint64_t C = g_.ops[i].out.c, bytes = C * kF;
    const BnExchange& x = bn_exchange_.at(i)[which];
    const std::uint32_t layer = tag_;  // the layer's work goes on under its tag afterwards
    tag(out, bn_exchange_tag());
    write_mem(out, a, x.slots[core_], bytes);
    write_mem(out, b, x.slots[core_] + bytes, bytes);
    out.push_back(isa::Sync{true});
    AllReduceLayout l = bn_layout(x);
    l.elements = 2 * C;
    compiler::emit_all_reduce(l, chip_, core_, out);
    out.push_back(isa::Sync{true});
    read_mem(out, x.area, da, bytes);
    read_mem(out, x.area + bytes, db, bytes);
    tag(out, layer);
  }

  // The chips' box a group takes (its extents along the torus's dimensions; all 1: one chip).
  std::vector<std::uint32_t> bn_box() const {
    return L_.bn_dims.empty() ? std::vector<std::uint32_t>(dims_.size(), 1) : L_.bn_dims;
  }
  AllReduceLayout bn_layout(const BnExchange& x) const {
    AllReduceLayout l;
    l.dims = bn_box();
    l.torus = dims_;
    l.cores = L_.cores;
    l.elements = 2 * std::uint64_t{widest_bn_};
    l.slots = x.slots;
    l.area = x.area;
    l.landing = x.landing;
    std::copy(std::begin(bn_stage_), std::end(bn_stage_), l.stage.begin());
    l.stage_elements = bn_stage_elems_;
    l.first_semaphore = static_cast<std::uint32_t>(gradient_semaphores());
    return l;
  }
  // The semaphores the gradient's all-reduce takes (several chips), before the groups'.
  std::uint64_t gradient_semaphores() const {
    if (chips_ == 1) return 0;
    AllReduceLayout l;
    l.dims = dims_;
    l.cores = L_.cores;
    return all_reduce_semaphores(l);
  }
  void check_semaphores() const {
    const std::uint64_t grad = gradient_semaphores(), bn = all_reduce_semaphores(bn_layout({}));
    if (grad + bn > isa::kIciSemaphores)
      fail(
          fmt::format("the gradient's all-reduce takes {} of a chip's {} ICI semaphores and "
                      "distributed BatchNormalization's {} more",
                      grad, isa::kIciSemaphores, bn));
  }

  // BatchNormalization's gamma and input gradients (numerics/batch_norm.h): the sums over the
  // pass's rows (once for both), then dgamma, or dx per element.
  void batch_norm_backward(Code& out, const ir::GradOp& o, std::uint32_t n) {
    const Op& l = g_.ops[o.op];
    const BatchNormState& s = bn_.at(o.op);
    const std::uint32_t C = l.out.c;
    const std::uint64_t k = bn_temp_[4];
    const Operand x = value(o.inputs[0].op), dy = in_grad(o.inputs[1]);
    batch_norm_grad_sums(out, o.op, dy, n);
    if (o.kind == GradKind::BatchNormGamma) {
      // dgamma = dot * rsqrt (the replica's own dot), added to the running sum.
      const std::uint64_t g = grad_ub_[param_index(o.output)];
      eltwise(out, isa::EltOp::Mul, bn_temp_[3], s.rsqrt, k, C);
      eltwise(out, isa::EltOp::Add, g, k, g, C);
      return;
    }
    // dx from the group's sums (distributed) or the replica's.
    const bool group = distributed_bn();
    const std::uint64_t dsum = group ? bn_group_sums_[0] : bn_temp_[2];
    const std::uint64_t dot = group ? bn_group_sums_[1] : bn_temp_[3];
    // k = (gamma * rsqrt) / M; dx = k * ((dy * M - dsum) - ((x - mean) * dot) / (variance + eps)).
    const std::uint64_t rows = rows_constant(s);
    eltwise(out, isa::EltOp::Mul, s.gamma, s.rsqrt, k, C);
    broadcast(out, isa::EltOp::Div, k, rows, k, C, 1);
    chunked(
        out, n, {x, dy, out_grad(o)},
        [&](Code& oc, const Chunk& c) {
          const std::uint64_t count = std::uint64_t{c.count} * l.out.size();
          const std::uint64_t dx = c.at[2], t = c.temp;
          broadcast(oc, isa::EltOp::Mul, c.at[1], rows, dx, count, 1);
          broadcast(oc, isa::EltOp::Sub, dx, dsum, dx, count, C);
          broadcast(oc, isa::EltOp::Sub, c.at[0], s.mean, t, count, C);
          broadcast(oc, isa::EltOp::Mul, t, dot, t, count, C);
          broadcast(oc, isa::EltOp::Div, t, s.var_eps, t, count, C);
          eltwise(oc, isa::EltOp::Sub, dx, t, dx, count);
          broadcast(oc, isa::EltOp::Mul, dx, k, dx, count, C);
        },
        l.out.size() * kF);
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

  // ---- the exchange and the update ---------------------------------------------------------

  // Every replica's sums into its slot (a kernel's off-chip sum is there already), a barrier;
  // then, per parameter and piece, the slots added in replica order (its own included, so every
  // replica holds ((g0 + g1) + g2) + ... bit for bit) and the optimizer's step on the replica's
  // master weights with that sum; a last barrier keeps a fast replica from overwriting its slot
  // in the next step while another still reads it. With several chips, each core first sums its
  // part of the gradient over the chip's cores and all-reduces it over the chips (below); the
  // update then reads the total.
  void emit_exchange_and_update(Code& out) {
    const bool cores = L_.cores > 1, chips = chips_ > 1;
    tag(out, buckets_.empty() || !chips ? exchange_tag() : update_tag());
    // With buckets the all-reduce went on during the backward pass (emit_bucket): the update's
    // reads of the area wait for the last barrier over their bucket.
    if (buckets_.empty() && (cores || chips)) {
      for (std::size_t k = 0; k < t_.parameters.size(); ++k)
        if (grad_ub_[k] != kNone)
          write_mem(out, grad_ub_[k], L_.exchange[core_] + slot_offset_[k],
                    elements(t_.parameters[k]) * kF);
      if (cores) out.push_back(isa::Sync{true});
    }
    if (chips && buckets_.empty()) emit_all_reduce(out);  // every core's part in the area
    const std::uint64_t g = stage_ub_[0], w = stage_ub_[1], m = stage_ub_[2], v = stage_ub_[3];
    // The step's gradient of a piece: the chips' total, the replicas' sum, or the replica's own;
    // where it lies in the unified buffer.
    const auto gradient = [&](std::size_t k, std::uint64_t e0, std::uint64_t n) {
      const std::uint64_t bytes = n * kF, at = slot_offset_[k] + e0 * kF;
      // Several chips: the all-reduce has ended with the total in this chip's area, and reading
      // it is the update's, as reading its own sums is on one core.
      tag(out, chips ? update_tag() : exchange_tag());
      if (chips) {
        read_mem(out, L_.all_reduce + at, g, bytes);
      } else if (cores) {
        read_mem(out, L_.exchange[0] + at, g, bytes);
        for (std::uint32_t r = 1; r < L_.cores; ++r) {
          read_mem(out, L_.exchange[r] + at, w, bytes);
          eltwise(out, isa::EltOp::Add, g, w, g, n);
        }
      } else if (grad_ub_[k] != kNone) {
        return grad_ub_[k] + e0 * kF;
      } else {
        read_mem(out, L_.exchange[0] + at, g, bytes);
      }
      return g;
    };
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
      const TrainingLayout::Home& h = L_.params[core_][k];
      const bool lars = opt_.kind == nn::OptimizerKind::Lars;
      const bool scaled = lars && nn::lars_scales(t_.parameters[k].param);
      // LARS's norms need the whole tensor before its first piece's step: a tensor of several
      // pieces is read once more for them, one of one piece is reduced as it lies staged for
      // the step. On one chip of several cores the norm pass writes each piece's sum of the
      // replicas' slots to the core's LARS area and the step pass reads it back from there,
      // so the slots are read and added once (the exchange); the write and the read back are
      // the update's.
      const bool one_piece = h.elements <= stage_elems_;
      const bool saved = scaled && !one_piece && !lars_sums_.empty();
      if (scaled && !one_piece) {
        for (std::uint64_t e0 = 0; e0 < h.elements; e0 += stage_elems_) {
          const std::uint64_t n = std::min(stage_elems_, h.elements - e0);
          const std::uint64_t grad = gradient(k, e0, n);
          tag(out, update_tag());
          if (saved) write_mem(out, grad, lars_sums_[core_] + slot_offset_[k] + e0 * kF, n * kF);
          read_mem(out, h.w + e0 * kF, w, n * kF);
          lars_lane_sums(out, w, grad, n, e0 > 0);
        }
        lars_norms(out, h.elements);
      }
      for (std::uint64_t e0 = 0; e0 < h.elements; e0 += stage_elems_) {
        const std::uint64_t n = std::min(stage_elems_, h.elements - e0);
        const std::uint64_t bytes = n * kF;
        std::uint64_t grad = g;
        if (saved) {  // LARS's own work, not the exchange's
          tag(out, update_tag());
          read_mem(out, lars_sums_[core_] + slot_offset_[k] + e0 * kF, g, bytes);
        } else {
          grad = gradient(k, e0, n);
        }
        tag(out, update_tag());
        read_mem(out, h.w + e0 * kF, w, bytes);
        if (h.m) read_mem(out, h.m + e0 * kF, m, bytes);
        if (h.v) read_mem(out, h.v + e0 * kF, v, bytes);
        if (scaled && one_piece) {
          lars_lane_sums(out, w, grad, n, false);
          lars_norms(out, h.elements);
        }
        isa::Update u;
        // LARS's unscaled tensors take momentum's step with the same record's lr and momentum.
        u.kind = opt_.kind == nn::OptimizerKind::Sgd ? isa::UpdateKind::Sgd
                 : opt_.kind == nn::OptimizerKind::Momentum || (lars && !scaled)
                     ? isa::UpdateKind::Momentum
                 : lars ? isa::UpdateKind::Lars
                        : isa::UpdateKind::Adam;
        u.w = ub(w);
        u.g = ub(grad);
        u.m = ub(h.m ? m : 0);
        u.v = ub(h.v ? v : 0);
        u.params = ub(optimizer_ub_);
        u.count = static_cast<std::uint32_t>(n);
        out.push_back(u);
        write_mem(out, w, h.w + e0 * kF, bytes);
        if (h.m) write_mem(out, m, h.m + e0 * kF, bytes);
        if (h.v) write_mem(out, v, h.v + e0 * kF, bytes);
        // The next step's copies (bf16 kernel, bias records, gamma, beta) from the new values.
        refresh_from_stage(out, k, e0, n, w, g);
      }
    }
    if (cores) {
      tag(out, chips ? update_tag() : exchange_tag());
      out.push_back(isa::Sync{true});
    }
  }

  // LARS's sums of squares of one piece of a tensor's weights (at w) and gradient (at grad), n
  // values, into the lane sums (numerics::lars_sum_squares): its whole rows of lanes, then the
  // last, short row; the lanes start from +0 with the tensor's first piece.
  void lars_lane_sums(Code& out, std::uint64_t w, std::uint64_t grad, std::uint64_t n,
                      bool continued) const {
    const std::uint64_t rows = n / kLanes, rest = n % kLanes;
    for (std::uint64_t t = 0; t < 2; ++t) {
      const std::uint64_t src = t == 0 ? w : grad, lanes = lars_lanes_ub_ + t * kLanes * kF;
      if (rows > 0)
        out.push_back(column_sum(src, lanes, rows, static_cast<std::uint32_t>(kLanes), continued,
                                 isa::ReduceOp::SumSquares));
      if (rest > 0)
        out.push_back(column_sum(src + rows * kLanes * kF, lanes, 1,
                                 static_cast<std::uint32_t>(rest), continued || rows > 0,
                                 isa::ReduceOp::SumSquares));
    }
  }
  // The lanes that hold a tensor of `elements` values' sums added in lane order, into the
  // optimizer record's w_sumsq and g_sumsq (update lars reads them there).
  void lars_norms(Code& out, std::uint64_t elements) const {
    const std::uint64_t used = std::min<std::uint64_t>(elements, kLanes);
    for (std::uint64_t t = 0; t < 2; ++t) {
      isa::Reduce r = column_sum(lars_lanes_ub_ + t * kLanes * kF, optimizer_ub_ + (4 + t) * kF,
                                 used, 1, false);
      r.stride = static_cast<std::uint32_t>(kF);
      out.push_back(r);
    }
  }
  static constexpr std::uint64_t kLanes = numerics::kLarsNormLanes;

  // The buckets (docs/systems.md, "Overlap"): the parameters taken in the order the backward
  // pass finishes their gradients (the last GradOp that writes each), from the last parameter
  // to the first, a bucket closing once it holds at least bucket_bytes_; each bucket is a run of
  // parameters, so its gradients lie together in the slots. A bucket is issued after the GradOp
  // that finishes the last of its gradients. One bucket is the plain all-reduce: none.
  void plan_buckets() {
    if (chips_ == 1 || bucket_bytes_ == 0 || t_.parameters.empty()) return;
    std::vector<std::size_t> done(t_.parameters.size(), 0);
    for (std::size_t i = 0; i < t_.ops.size(); ++i) {
      const TensorId& o = t_.ops[i].output;
      if (o.role != Role::ParameterGradient) continue;
      for (std::size_t k = 0; k < t_.parameters.size(); ++k)
        if (t_.parameters[k].op == o.op && t_.parameters[k].param == o.param) done[k] = i;
    }
    std::vector<Bucket> b;
    std::uint64_t bytes = 0;
    for (std::size_t k = t_.parameters.size(); k-- > 0;) {
      if (b.empty() || bytes >= bucket_bytes_) {
        b.push_back({k, k + 1, done[k]});
        bytes = 0;
      }
      b.back().first = k;
      b.back().after = std::max(b.back().after, done[k]);
      bytes += elements(t_.parameters[k]) * kF;
    }
    if (b.size() < 2) return;
    buckets_ = b;
    for (std::size_t j = buckets_.size(); j-- > 0;)
      L_.buckets.push_back(
          (slot_offset_[buckets_[j].end - 1] + elements(t_.parameters[buckets_[j].end - 1]) * kF) /
          kF);
  }

  // A bucket's gradients into the core's slot (those the unified buffer holds; a kernel's
  // off-chip sum is there already) and its all-reduce, queued: the ICI engine takes its waits
  // and barriers while the sequencer issues the rest of the backward pass.
  // The bucket's instructions go to pending_, which drip() hands out among the backward pass's.
  void emit_bucket(const Bucket& b) {
    Code code;
    for (std::size_t k = b.first; k < b.end; ++k)
      if (grad_ub_[k] != kNone)
        write_mem(code, grad_ub_[k], L_.exchange[core_] + slot_offset_[k],
                  elements(t_.parameters[k]) * kF);
    const std::uint64_t at = slot_offset_[b.first];
    const std::uint64_t end = slot_offset_[b.end - 1] + elements(t_.parameters[b.end - 1]) * kF;
    emit_all_reduce(code, at / kF, end / kF);
    for (isa::Instruction& i : code) {
      pending_adds_ += std::holds_alternative<isa::Eltwise>(i) ? 1 : 0;
      pending_.push_back(std::move(i));
    }
  }

  // After a backward operation with `left` more to come: the pending buckets' instructions up
  // to their next ⌈2 · adds / left⌉ eltwise adds (all of them when none is left), so that their
  // adds reach the vector unit spread over the first half of the backward pass's rest instead of
  // all at once. The vector unit runs in order, and an add waits there for the arrival it adds:
  // a bucket's adds issued together would hold the backward pass's vector work behind them for
  // the whole all-reduce. The bucket's own order is kept; only the backward pass's instructions
  // come between.
  void drip(Code& out, std::size_t left) {
    if (pending_.empty()) return;
    tag(out, exchange_tag());
    std::uint64_t adds = left == 0 ? pending_adds_ : (2 * pending_adds_ + left - 1) / left;
    while (!pending_.empty()) {
      const bool add = std::holds_alternative<isa::Eltwise>(pending_.front());
      if (add && adds == 0) break;
      if (add) --adds, --pending_adds_;
      out.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
  }

  // The all-reduce over the chips (sw/compiler/collectives.h): every core's slot in, the chips'
  // total in the all-reduce area out. A bucket: the elements [first, end) only, as a vector of
  // their own (its addresses offset), queued.
  void emit_all_reduce(Code& out, std::uint64_t first = 0, std::uint64_t end = 0) {
    const bool bucket = end > first;
    const std::uint64_t off = first * kF;
    AllReduceLayout l;
    l.dims = dims_;
    l.cores = L_.cores;
    l.elements = bucket ? end - first : grad_bytes_ / kF;
    for (std::uint32_t r = 0; r < L_.cores; ++r) l.slots.push_back(L_.exchange[r] + off);
    l.area = L_.all_reduce + off;
    for (std::uint64_t a : landing_) l.landing.push_back(a ? a + off : 0);
    l.queued = bucket;
    std::copy(std::begin(stage_ub_), std::end(stage_ub_), l.stage.begin());
    l.stage_elements = stage_elems_;
    if (const std::uint64_t sems = all_reduce_semaphores(l); sems > isa::kIciSemaphores) {
      std::size_t used = 0;
      for (std::uint32_t d : dims_) used += d > 1 ? 1 : 0;
      fail(
          fmt::format("an all-reduce over {} dimensions by {} cores needs {} of a chip's {} ICI "
                      "semaphores",
                      used, L_.cores, sems, isa::kIciSemaphores));
    }
    compiler::emit_all_reduce(l, chip_, core_, out);
  }

  // Whether a tensor LARS scales has several pieces (elements > the staging buffers', which are
  // kStageElements once any tensor is larger): the norm pass reads its gradient too.
  bool lars_resums() const {
    if (opt_.kind != nn::OptimizerKind::Lars) return false;
    for (const TensorId& p : t_.parameters)
      if (nn::lars_scales(p.param) && elements(p) > kStageElements) return true;
    return false;
  }

  static constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

  const ir::Graph& g_;
  const ir::TrainingGraph& t_;
  const nn::Weights& w_;
  const nn::Optimizer& opt_;
  const ChipConfig& cfg_;
  const std::uint32_t global_;
  std::uint32_t programmed_ = 1;  // chips with programs (0 .. programmed_ - 1)
  const ActivationHome home_;
  const std::vector<std::uint32_t> dims_;  // the chips' torus; empty: one chip
  const std::uint64_t bucket_bytes_;       // 0: no buckets
  // The all-reduce's buckets (plan_buckets). Empty: one all-reduce after the backward pass.
  std::vector<Bucket> buckets_;
  std::deque<isa::Instruction> pending_;  // issued buckets' instructions not yet emitted
  std::uint64_t pending_adds_ = 0;        // their eltwise adds
  std::uint32_t chips_ = 1;
  std::vector<std::uint64_t> landing_;    // per dimension: its reduce-scatter's landing area
  std::vector<std::uint64_t> lars_sums_;  // per core: LARS's saved sums (see the update)
  TrainingLayout L_;
  TrainingProgram P_;
  std::string resident_failure_;

  std::uint32_t acc_slot_ = 0;
  std::uint64_t mem_high_ = 0;  // off-chip memory taken
  std::uint64_t ub_high_ = 0, zeros_bytes_ = 0, zeros_mem_ = 0, zeros_ub_ = 0;
  std::uint64_t units_ub_ = 0, records_mem_ = 0;
  std::uint32_t widest_ = 0;
  std::uint64_t zero_records_ = 0, optimizer_ub_ = 0, grad_bytes_ = 0, stage_elems_ = 0;
  std::uint64_t lars_lanes_ub_ = 0;
  std::uint64_t stage_ub_[4] = {0, 0, 0, 0};
  std::uint64_t images_ub_ = 0, labels_ub_ = 0, out_records_ub_ = 0, scratch_ub_ = 0, temp_ub_ = 0;
  std::map<std::size_t, std::uint64_t> kernel_ub_, records_ub_, moving_mem_;
  std::vector<std::uint64_t> grad_ub_;      // per parameter: its gradient sums (kNone: off-chip)
  std::vector<std::uint64_t> slot_offset_;  // per parameter: its sums' offset in a slot
  std::map<std::size_t, std::uint64_t> value_ub_, grad_ub_t_, value_bf_, grad_bf_;
  std::map<std::size_t, BatchNormState> bn_;
  std::uint64_t bn_temp_[5] = {0, 0, 0, 0, 0};
  // Distributed BatchNormalization (bn_all_reduce): per layer its two exchanges; the backward's
  // group sums; the all-reduce's staging buffers; the widest layer's channels.
  std::map<std::size_t, std::array<BnExchange, 2>> bn_exchange_;
  std::uint64_t bn_group_sums_[2] = {0, 0};
  std::uint64_t bn_stage_[4] = {0, 0, 0, 0};
  std::uint64_t bn_stage_elems_ = 0;
  std::uint32_t widest_bn_ = 0;
  std::map<std::vector<std::uint8_t>, std::uint64_t> constants_;
  // Off-chip tensors: the arena; per replica the bf16 kernels and the pass's tensors' homes.
  std::uint64_t arena_ = 0, arena_bytes_ = 0, fixed_ = 0;
  std::vector<std::map<std::size_t, std::uint64_t>> kernel_mem_;
  std::vector<std::map<Tensor, std::uint64_t>> home_mem_;

  // While a program is emitted.
  std::uint32_t replica_ = 0, core_ = 0, chip_ = 0, tag_ = 0, next_mxu_ = 0, half_ = 0;
  bool train_ = true, last_pass_ = false, final_pass_ = false;
  std::vector<std::uint32_t> parity_;
  std::set<std::pair<Tensor, DType>> ready_;  // copies made in this pass
  // Forward fusion (plan_fusion): per operation, whether its output stays in the unified buffer,
  // the operation that runs in its chunks after it, the first operation of the chain it runs in
  // (kNoOp: none), and the BatchNormalization whose sums it computes.
  std::vector<bool> fused_away_;
  std::vector<std::size_t> fused_next_, group_of_, stats_in_;
  std::set<std::size_t> bn_sums_, first_partial_;
};

}  // namespace

TrainingProgram compile_training(const ir::Graph& g, const ir::TrainingGraph& t,
                                 const nn::Weights& w, const nn::Optimizer& opt,
                                 const ChipConfig& cfg, std::uint32_t global_batch,
                                 ActivationHome home, const std::vector<std::uint32_t>& chip_dims,
                                 std::uint32_t programmed_chips, std::uint64_t bucket_bytes,
                                 float label_smoothing, std::uint32_t bn_group) {
  return TrainingCompiler(g, t, w, opt, cfg, global_batch, home, chip_dims, programmed_chips,
                          bucket_bytes, label_smoothing, bn_group)
      .run();
}

}  // namespace tpu::compiler
