#include "sw/compiler/compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#include "hw/common/error.h"
#include "hw/isa/isa.h"
#include "sw/compiler/emit.h"
#include "sw/compiler/lifetimes.h"
#include "sw/compiler/memory.h"
#include "sw/compiler/rewrite.h"
#include "sw/compiler/tiling.h"
#include "sw/ir/ops.h"

namespace tpu::compiler {
namespace {

using ir::kGraphInput;
using ir::Op;
using ir::OpKind;

// Zero region when activations spill: large enough that a ReLU or a padding border takes few
// eltwise instructions, small beside any unified buffer (docs/compiler.md).
constexpr std::uint64_t kSpillZeroBytes = 64 * 1024;
// Parts of an operation's scratch region, each aligned (an LSTM's zx, zh, c, a temporary, h).
constexpr std::uint64_t kScratchParts = 5;

isa::ActFunc act_func(ir::Act a) {
  switch (a) {
    case ir::Act::Linear: return isa::ActFunc::None;
    case ir::Act::Relu: return isa::ActFunc::Relu;
    case ir::Act::Relu6: return isa::ActFunc::Relu6;
    case ir::Act::Sigmoid: return isa::ActFunc::Sigmoid;
    case ir::Act::Tanh: return isa::ActFunc::Tanh;
    case ir::Act::Softmax: return isa::ActFunc::Softmax;
    case ir::Act::LeakyRelu:
    case ir::Act::Elu: break;  // not Activate's (fuse_activations leaves them standalone)
  }
  return isa::ActFunc::None;
}

UbAddr ub(std::uint64_t a) { return UbAddr(static_cast<std::uint32_t>(a)); }

// The map function that applies activation a.
isa::MapFunc act_map_func(ir::Act a) {
  switch (a) {
    case ir::Act::Relu: return isa::MapFunc::Relu;
    case ir::Act::Relu6: return isa::MapFunc::Relu6;
    case ir::Act::Sigmoid: return isa::MapFunc::Sigmoid;
    case ir::Act::Tanh: return isa::MapFunc::Tanh;
    case ir::Act::LeakyRelu: return isa::MapFunc::LeakyRelu;
    case ir::Act::Elu: return isa::MapFunc::Elu;
    case ir::Act::Linear:
    case ir::Act::Softmax: break;  // removed, or refused standalone (quantize)
  }
  return isa::MapFunc::Identity;
}

// The map function an operation applies: a normalisation is the affine x * a + b alone.
isa::MapFunc map_func(const ir::Op& l) {
  if (l.kind == ir::OpKind::PReLU) return isa::MapFunc::Prelu;
  if (l.kind != ir::OpKind::Activation) return isa::MapFunc::Identity;
  return act_map_func(l.activation);
}

struct TileId {
  std::size_t layer = std::numeric_limits<std::size_t>::max();
  std::uint32_t j = 0, kt = 0;
  bool operator==(const TileId& o) const { return layer == o.layer && j == o.j && kt == o.kt; }
};

// Code generation: the passes' results (tiling, partition, lifetimes) become one instruction
// stream per core, with the memory plan (every tensor of a micro-batch resident in the unified
// buffer, or homed in off-chip memory) and the host-memory layout.
class Compiler {
 public:
  Compiler(const nn::QuantizedModel& q, const ir::Graph& source, const ChipConfig& cfg,
           const Options& opt, const Tiling& tiling, const Partition& part, const Lifetimes& life)
      : q_(q),
        m_(q.graph),
        source_(source),
        cfg_(cfg),
        opt_(opt),
        tiling_(tiling),
        part_(part),
        life_(life),
        e_(size_of(q.act_type)) {}

  Program run() {
    check_layers();
    layout_host();
    if (!has_constants() && layout_resident()) {
      p_.activations_off_chip = false;
    } else {
      layout_spill();
      p_.activations_off_chip = true;
    }
    p_.memory_image.push_back({tiling_.weights_addr, tiling_.weights});
    p_.memory_image.push_back({tiling_.params_addr, tiling_.params});
    for (const auto& [layer, addr] : tiling_.constant_addr)
      p_.memory_image.push_back({addr, q_.layers[layer].constant});
    for (const auto& [layer, addr] : tiling_.table_addr)
      p_.memory_image.push_back({addr, table_bytes(q_, layer)});
    for (std::uint32_t c = 0; c < cfg_.tensor_cores; ++c) emit_core(c);
    p_.layers.push_back({"setup", "host I/O and parameter loads", 0});
    for (const Op& l : source_.ops)
      p_.layers.push_back({l.name, std::string(ir::name_of(l.kind)), l.macs()});
    return std::move(p_);
  }

 private:
  [[noreturn]] void fail(const Op& l, const std::string& what) const {
    throw InputError(
        fmt::format("{}: layer {} ({}): {}", m_.file, l.name, ir::name_of(l.kind), what));
  }

  // Bytes per image of layer i's output tensor (or the model input's) in the unified buffer.
  [[nodiscard]] std::uint64_t out_bytes(std::size_t i) const {
    if (i == kGraphInput) return p_.input_bytes_per_image;
    return m_.ops[i].out.size() * size_of(q_.layers[i].out_type);
  }
  // The tensors operation i reads, in operand order.
  [[nodiscard]] std::vector<std::size_t> reads(std::size_t i) const {
    return Lifetimes::reads(q_, i);
  }
  [[nodiscard]] bool has_constants() const {
    return std::any_of(m_.ops.begin(), m_.ops.end(),
                       [](const Op& l) { return l.kind == OpKind::Constant; });
  }

  // What the ISA's fields cannot express, named before anything is emitted.
  void check_layers() const {
    for (std::size_t i = 0; i < m_.ops.size(); ++i) {
      if (!q_.computes(i)) continue;
      const Op& l = m_.ops[i];
      for (std::uint32_t v : {l.in.h, l.in.w, l.in.c, l.out.h, l.out.w})
        if (v > 65535 && l.kind != OpKind::Dense && l.kind != OpKind::Constant)
          fail(l, "image dimensions and channels must fit the ISA's 16-bit fields");
      for (std::size_t t : reads(i))
        if (t != kGraphInput && q_.layers[t].out_type != q_.act_type && !l.has_weights())
          fail(l, fmt::format("reads a {} tensor; the vector unit takes {}",
                              name_of(q_.layers[t].out_type), name_of(q_.act_type)));
    }
  }

  // 1. Host memory: all input images, then all outputs.
  void layout_host() {
    p_.images = opt_.images;
    p_.input_bytes_per_image = m_.input.size() * size_of(q_.input_type());
    p_.input_addr = 0;
    p_.output_addr = align(opt_.images * p_.input_bytes_per_image);
    const std::size_t last = m_.ops.size() - 1;
    p_.output_type = q_.layers[last].out_type;
    p_.output_scale = q_.layers[last].out_scale;
    p_.output_elements = m_.output().size();
    p_.output_bytes_per_image = p_.output_elements * size_of(p_.output_type);
    p_.host_bytes = p_.output_addr + opt_.images * p_.output_bytes_per_image;
  }

  // Parameters (and on Edge the weights, when they fit beside `per_image` bytes) at the bottom
  // of the unified buffer; returns the first free byte.
  std::uint64_t layout_fixed(std::uint64_t per_image) {
    params_ub_ = 0;
    std::uint64_t fixed = align(tiling_.params.size());
    // Edge keeps its parameters in its SRAM when they fit: streaming them over USB for every
    // micro-batch would dominate (CORAL: parameters beyond the cache stream from the host).
    p_.weights_in_ub = false;
    if (cfg_.off_chip_memory.kind == MemoryKind::HostLink &&
        fixed + align(tiling_.weights.size()) + per_image <= cfg_.unified_buffer.bytes) {
      weights_ub_ = fixed;
      fixed += align(tiling_.weights.size());
      p_.weights_in_ub = true;
    }
    return fixed;
  }

  // 2. The micro-batch of the resident schedule (docs/compiler.md, "Schedule" item 2): of every
  //    size up to the most that fits, the one of least estimated cycles for the busiest core's
  //    images, the larger on a tie. The candidates only grow with the buffer, so a larger buffer
  //    never takes a schedule of a higher estimate.
  [[nodiscard]] std::uint64_t choose_micro_batch(std::uint64_t fits) const {
    std::uint64_t images = 0;  // the busiest core's images of the run
    for (const auto& [first, last] : part_.images) images = std::max(images, last - first);
    std::uint64_t best = fits;
    double best_cost = resident_cycles(images, fits);
    for (std::uint64_t mb = fits - 1; mb >= 1; --mb) {
      const double cost = resident_cycles(images, mb);
      if (cost < best_cost) best = mb, best_cost = cost;
    }
    return best;
  }

  // Cycles of a host-link transfer of `bytes` per core while every core moves as many: the
  // link's latency, then the cores share its bandwidth (docs/timing-model.md, "Transfers").
  [[nodiscard]] double host_cycles(double bytes) const {
    if (bytes <= 0) return 0;
    return host_latency() +
           bytes * cfg_.tensor_cores / (cfg_.host_link_bytes_per_s() / cfg_.clock_hz());
  }
  // An instruction's share of the host link when the stream alone is what a core waits for:
  // its bytes, and a write's latency per kInstructionsPerWrite instructions.
  [[nodiscard]] double stream_cycles_per_instruction() const {
    return static_cast<double>(isa::kInstructionBytes) * cfg_.tensor_cores /
               (cfg_.host_link_bytes_per_s() / cfg_.clock_hz()) +
           host_latency() / kInstructionsPerWrite;
  }
  [[nodiscard]] double host_latency() const {
    return std::ceil(cfg_.host_link.latency_ns * 1e-9 * cfg_.clock_hz());
  }

  // Estimated cycles of the resident schedule for `images` images of one core in micro-batches
  // of `mb` (the last one shorter when mb does not divide them): the first micro-batch's input
  // read, then per micro-batch the longest of its MXU work, its weights' traffic and the next
  // micro-batch's input read (which overlap), then the last one's output write.
  [[nodiscard]] double resident_cycles(std::uint64_t images, std::uint64_t mb) const {
    const std::uint64_t passes = ceil_div(images, mb), last = images - (passes - 1) * mb;
    const double in = static_cast<double>(p_.input_bytes_per_image);
    auto step = [&](std::uint64_t b, std::uint64_t next) {
      const MicroBatchWork w = micro_batch_work(b);
      // Into the chip over the host link: the next micro-batch's input, this one's
      // instructions (a write per kInstructionsPerWrite, each paying the link's latency) and on
      // Edge the weights beyond its SRAM, which come from the host as the inputs do.
      double link = in * static_cast<double>(next) + w.instructions * isa::kInstructionBytes;
      double mem = 0;
      if (cfg_.off_chip_memory.kind == MemoryKind::HostLink)
        link += w.weight_bytes;
      else
        mem = w.weight_bytes * cfg_.tensor_cores / (cfg_.off_chip_bytes_per_s() / cfg_.clock_hz());
      const double writes = std::ceil(w.instructions / kInstructionsPerWrite);
      return std::max({w.mxu, mem, host_cycles(link) + (writes - 1) * host_latency()});
    };
    double cycles = host_cycles(in * static_cast<double>(std::min(mb, images)));
    if (passes == 1) {
      cycles += step(last, 0);
    } else {
      cycles += static_cast<double>(passes - 2) * step(mb, mb) + step(mb, last) + step(last, 0);
    }
    return cycles + host_cycles(static_cast<double>(p_.output_bytes_per_image * last));
  }

  // One micro-batch of b images: the busiest MXU's cycles over the weighted layers and the
  // weight bytes read from off-chip memory (0 when they sit in the unified buffer). Per layer:
  // its work items (chunks of output rows per column tile, as emit_weighted cuts them) spread
  // over the MXUs, each multiply max(F, R) when it swaps in a tile (a shift hides only behind
  // a feed of at least R rows), then R + C - 1 until its last results are in the accumulators,
  // which the next layer waits for.
  struct MicroBatchWork {
    double mxu = 0;           // cycles of the busiest MXU
    double weight_bytes = 0;  // read from off-chip memory
    double instructions = 0;  // in the core's stream
  };
  [[nodiscard]] MicroBatchWork micro_batch_work(std::uint64_t b) const {
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols, M = cfg_.mxu.count;
    const double P = cfg_.unified_buffer.bytes_per_cycle;
    // A tag, read_host, tag and write_host per micro-batch.
    double mxu = 0, bytes = 0, instructions = 4;
    for (std::size_t i = 0; i < m_.ops.size(); ++i) {
      if (!q_.computes(i)) continue;
      ++instructions;  // its tag (or set_window), or its vector instruction
      if (!is_weighted(m_.ops[i].kind)) {
        ++instructions;
        continue;
      }
      const bool fuses = fused_pool(i, weighted_rows(i, b), true) < m_.ops.size();
      const double before = instructions;
      const WeightedPlan& p = tiling_.plans[i];
      const std::uint64_t rows_total = weighted_rows(i, b);
      const std::uint64_t chunk = chunk_rows(i, rows_total, true);
      const std::uint64_t chunks = ceil_div(rows_total, chunk);
      const std::uint64_t tail = rows_total - (chunks - 1) * chunk;
      double work = 0, longest = 0;
      for (std::uint32_t j = 0; j < p.n_tiles; ++j) {
        const std::uint32_t nc = std::min(C, p.N - j * C);
        // Feeds of a full and of the last chunk: as they are, and each at least R cycles.
        double full = 0, part = 0, full_swap = 0, part_swap = 0, tile_bytes = 0;
        std::uint32_t tiles = 0;
        for (std::uint32_t kt = 0; kt < p.k_tiles; ++kt) {
          if (p.tile_off[std::size_t{j} * p.k_tiles + kt] == kNoTile) continue;
          const std::uint32_t kr = std::min(R, p.K - kt * R);
          auto feed = [&](std::uint64_t rows) {
            return std::max(static_cast<double>(rows),
                            std::ceil(static_cast<double>(rows) * kr * e_ / P));
          };
          full += feed(chunk), part += feed(tail);
          full_swap += std::max(feed(chunk), static_cast<double>(R));
          part_swap += std::max(feed(tail), static_cast<double>(R));
          tile_bytes += static_cast<double>(kr) * nc * e_;
          ++tiles;
        }
        // A column of several K tiles swaps at every multiply; a single tile stays in its MXUs.
        if (tiles > 1) {
          full = full_swap, part = part_swap;
          bytes += tile_bytes * static_cast<double>(chunks);
        } else {
          bytes += tile_bytes * static_cast<double>(std::min<std::uint64_t>(chunks, M));
        }
        // Per item: a read_weights (when its tiles change) and a matmul per tile, an activate,
        // and a fused pool between its two tags.
        instructions +=
            static_cast<double>(chunks) * ((tiles > 1 ? 2 * tiles : tiles) + 1 + (fuses ? 3 : 0));
        work += full * static_cast<double>(chunks - 1) + part;
        longest = std::max(longest, full);
      }
      // The driver keeps the core's queue only a little ahead, so a layer whose instructions
      // stream in slower than its MXU work runs at the stream's pace.
      mxu += std::max(std::max(work / M, longest) + R + C - 1,
                      (instructions - before) * stream_cycles_per_instruction());
    }
    return {mxu, p_.weights_in_ub ? 0.0 : bytes, instructions};
  }

  // 2a. Every tensor of a micro-batch in the unified buffer: parameters, (weights), zeros, two
  //     input buffers and one tensor per computing layer; the micro-batch is as large as fits.
  //     False when not even one image fits.
  bool layout_resident() {
    const std::uint64_t ub_bytes = cfg_.unified_buffer.bytes;
    std::uint64_t per_image = 2 * align(p_.input_bytes_per_image);
    std::uint64_t zeros_per_image = 0, scratch_per_image = 0;
    for (std::size_t i = 0; i < m_.ops.size(); ++i) {
      if (!q_.computes(i)) continue;
      per_image += out_bytes(i);
      if (ir::entry_for(lowerings(), m_.ops[i].kind, "lowering").zeros)
        zeros_per_image = std::max(zeros_per_image, out_bytes(i));
      scratch_per_image = std::max(scratch_per_image, scratch_bytes(i, 1));
    }
    per_image += zeros_per_image + scratch_per_image;
    // A scratch region's parts each start aligned: room for their padding.
    const std::uint64_t scratch_slack = scratch_per_image ? kScratchParts * kAlign : 0;
    const std::uint64_t fixed = layout_fixed(per_image) + scratch_slack;
    const std::uint64_t room = ub_bytes > fixed ? ub_bytes - fixed : 0;
    const std::uint64_t fits = std::min<std::uint64_t>(
        {part_.per_core, room / std::max<std::uint64_t>(per_image, 1), 65535});
    if (fits == 0) return false;
    const std::uint64_t mb = choose_micro_batch(fits);
    p_.micro_batch = static_cast<std::uint32_t>(mb);
    std::uint64_t at = fixed;
    zeros_ub_ = at;
    zeros_bytes_ = zeros_per_image * mb;
    at += align(zeros_bytes_);
    in_ub_[0] = at;
    at += align(p_.input_bytes_per_image * mb);
    in_ub_[1] = at;
    at += align(p_.input_bytes_per_image * mb);
    tensor_ub_.assign(m_.ops.size(), 0);
    for (std::size_t i = 0; i < m_.ops.size(); ++i) {
      if (!q_.computes(i)) continue;
      tensor_ub_[i] = at;
      at += align(out_bytes(i) * mb);
    }
    scratch_ub_ = at;
    for (std::size_t i = 0; i < m_.ops.size(); ++i)
      if (q_.computes(i)) at = std::max(at, scratch_ub_ + scratch_bytes(i, mb));
    p_.ub_bytes_used = at;
    return true;
  }

  // 2b. Tensors homed in off-chip memory: each layer reads its inputs from there (or the host,
  //     or a constant) in groups of images and writes its output back; a home lives from its
  //     layer to its last reader, first-fit. A pass is the core's share of a batch.
  void layout_spill() {
    const std::uint64_t fixed = layout_fixed(0);
    zeros_ub_ = fixed;
    zeros_bytes_ = std::min<std::uint64_t>(kSpillZeroBytes, cfg_.unified_buffer.bytes / 16);
    work_ub_ = fixed + align(zeros_bytes_);
    if (work_ub_ >= cfg_.unified_buffer.bytes)
      throw InputError(fmt::format("{}: parameters need {} bytes of unified buffer; {} has {}",
                                   m_.file, work_ub_, cfg_.name, cfg_.unified_buffer.bytes));
    p_.micro_batch = static_cast<std::uint32_t>(std::min<std::uint64_t>(part_.per_core, 65535));
    p_.ub_bytes_used = work_ub_;
    const std::uint64_t mb = p_.micro_batch;
    const Homes homes = spill_homes(q_, life_, [&](std::size_t i) { return out_bytes(i) * mb; });
    home_ = homes.offset;
    act_addr_ = align(tiling_.end);
    act_bytes_per_core_ = homes.bytes;
    const std::uint64_t need = act_addr_ + act_bytes_per_core_ * cfg_.tensor_cores;
    if (need > cfg_.off_chip_memory.bytes)
      throw InputError(fmt::format(
          "{}: weights, parameters and {} cores' spilled activations of {} images each need {} "
          "bytes of off-chip memory; {} has {}",
          m_.file, cfg_.tensor_cores, mb, need, cfg_.name, cfg_.off_chip_memory.bytes));
    p_.off_chip_activation_bytes = act_bytes_per_core_ * cfg_.tensor_cores;
  }

  // The Tag id of operation i's work: its origin's row of the report (0 is setup).
  [[nodiscard]] std::uint32_t row_of(std::size_t i) const {
    return static_cast<std::uint32_t>(m_.ops[i].origin + 1);
  }

  void tag(std::vector<isa::Instruction>& out, std::uint32_t id) {
    if (id == current_tag_) return;
    out.push_back(isa::Tag{id});
    current_tag_ = id;
  }

  // 3. One core's stream: its share of the images, micro-batch (or pass) by micro-batch.
  void emit_core(std::uint32_t core) {
    std::vector<isa::Instruction> out;
    current_tag_ = std::numeric_limits<std::uint32_t>::max();
    resident_.assign(cfg_.mxu.count, TileId{});
    parity_.assign(cfg_.mxu.count, 0);
    next_mxu_ = 0;
    core_ = core;
    const auto [first, last] = part_.images[core];
    tag(out, 0);
    out.push_back(isa::ReadMem{MemAddr(tiling_.params_addr), ub(params_ub_),
                               static_cast<std::uint32_t>(tiling_.params.size())});
    if (p_.weights_in_ub)
      out.push_back(isa::ReadMem{MemAddr(tiling_.weights_addr), ub(weights_ub_),
                                 static_cast<std::uint32_t>(tiling_.weights.size())});
    if (first < last) {
      if (p_.activations_off_chip)
        emit_spilled(out, first, last);
      else
        emit_resident(out, first, last);
    }
    out.push_back(isa::Halt{});
    p_.cores.push_back(std::move(out));
  }

  void emit_resident(std::vector<isa::Instruction>& out, std::uint64_t first, std::uint64_t last) {
    const std::uint64_t mb = p_.micro_batch;
    const std::uint64_t passes = ceil_div(last - first, mb);
    auto read_input = [&](std::uint64_t pass) {
      const std::uint64_t s = first + pass * mb, n = std::min(mb, last - s);
      out.push_back(isa::ReadHost{HostAddr(p_.input_addr + s * p_.input_bytes_per_image),
                                  ub(in_ub_[pass % 2]),
                                  static_cast<std::uint32_t>(n * p_.input_bytes_per_image)});
    };
    read_input(0);
    for (std::uint64_t pass = 0; pass < passes; ++pass) {
      const std::uint64_t s = first + pass * mb, n = std::min(mb, last - s);
      tag(out, 0);
      if (pass + 1 < passes) read_input(pass + 1);  // one micro-batch ahead
      input_ub_ = in_ub_[pass % 2];
      pooled_.assign(m_.ops.size(), false);
      for (std::size_t i = 0; i < m_.ops.size(); ++i) {
        if (!q_.computes(i)) continue;
        tag(out, row_of(i));
        if (pooled_[i]) continue;
        std::vector<std::uint64_t> src;
        for (std::size_t t : reads(i)) src.push_back(t == kGraphInput ? input_ub_ : tensor_ub_[t]);
        emit_compute(out, i, src, tensor_ub_[i], static_cast<std::uint32_t>(n), true);
      }
      tag(out, 0);
      const std::uint64_t res = tensor_ub_[life_.output];
      out.push_back(isa::WriteHost{ub(res),
                                   HostAddr(p_.output_addr + s * p_.output_bytes_per_image),
                                   static_cast<std::uint32_t>(n * p_.output_bytes_per_image)});
    }
  }

  void emit_spilled(std::vector<isa::Instruction>& out, std::uint64_t first, std::uint64_t last) {
    const std::uint64_t mb = p_.micro_batch;
    for (std::uint64_t s = first; s < last; s += mb) {
      const std::uint64_t n = std::min(mb, last - s);
      for (std::size_t i = 0; i < m_.ops.size(); ++i) {
        if (!q_.computes(i) || m_.ops[i].kind == OpKind::Constant) continue;
        tag(out, row_of(i));
        emit_spilled_layer(out, i, s, n);
      }
    }
  }

  // One layer of one pass: groups of g images, inputs read one group ahead into the other of
  // two buffer sets, each group's output written back while the next computes.
  void emit_spilled_layer(std::vector<isa::Instruction>& out, std::size_t i, std::uint64_t s,
                          std::uint64_t n) {
    const Op& l = m_.ops[i];
    const std::vector<std::size_t> in = reads(i);
    std::uint64_t per_image = align(out_bytes(i));
    for (std::size_t t : in) per_image += align(out_bytes(t));
    // Scratch (an LSTM's gates and state) once, beside the buffer sets.
    const std::uint64_t scratch_slack = scratch_bytes(i, 1) ? kScratchParts * kAlign : 0;
    const std::uint64_t room_all = cfg_.unified_buffer.bytes - work_ub_;
    const std::uint64_t room = room_all > scratch_slack ? room_all - scratch_slack : 0;
    std::uint64_t sets = 2;
    const std::uint64_t scratch = scratch_bytes(i, 1);
    std::uint64_t g = std::min<std::uint64_t>(n, room / (2 * per_image + scratch));
    if (g == 0) {
      sets = 1;
      g = std::min<std::uint64_t>(n, room / (per_image + scratch));
    }
    if (g == 0)
      fail(l, fmt::format("one image needs {} bytes of input and {} bytes of output in the unified "
                          "buffer; {} has {} bytes, {} of them taken by parameters and zeros",
                          per_image - align(out_bytes(i)), out_bytes(i), cfg_.name,
                          cfg_.unified_buffer.bytes, work_ub_));
    g = std::min<std::uint64_t>(g, 65535);
    std::vector<std::vector<std::uint64_t>> in_slot(sets);
    std::vector<std::uint64_t> out_slot(sets);
    std::uint64_t at = work_ub_;
    for (std::uint64_t b = 0; b < sets; ++b) {
      for (std::size_t t : in) {
        in_slot[b].push_back(at);
        at += align(g * out_bytes(t));
      }
      out_slot[b] = at;
      at += align(g * out_bytes(i));
    }
    scratch_ub_ = at;
    at += scratch_bytes(i, g);
    p_.ub_bytes_used = std::max(p_.ub_bytes_used, at);
    const std::uint64_t home_base = act_addr_ + core_ * act_bytes_per_core_;
    const std::uint64_t groups = ceil_div(n, g);
    auto read_group = [&](std::uint64_t t) {
      const std::uint64_t g0 = t * g, cnt = std::min(g, n - g0);
      for (std::size_t k = 0; k < in.size(); ++k) {
        const std::size_t src = in[k];
        const std::uint64_t bytes = out_bytes(src), dst = in_slot[t % sets][k];
        if (src == kGraphInput) {
          out.push_back(isa::ReadHost{HostAddr(p_.input_addr + (s + g0) * bytes), ub(dst),
                                      static_cast<std::uint32_t>(cnt * bytes)});
        } else if (m_.ops[src].kind == OpKind::Constant) {
          for (std::uint64_t j = 0; j < cnt; ++j)
            out.push_back(isa::ReadMem{MemAddr(tiling_.constant_addr.at(src)), ub(dst + j * bytes),
                                       static_cast<std::uint32_t>(bytes)});
        } else {
          out.push_back(isa::ReadMem{MemAddr(home_base + home_[src] + g0 * bytes), ub(dst),
                                     static_cast<std::uint32_t>(cnt * bytes)});
        }
      }
    };
    read_group(0);
    for (std::uint64_t t = 0; t < groups; ++t) {
      const std::uint64_t g0 = t * g, cnt = std::min(g, n - g0);
      if (t > 0 && sets == 1) read_group(t);
      // With one buffer set the next group's reads must wait until this group is computed.
      if (t + 1 < groups && sets == 2) read_group(t + 1);
      emit_compute(out, i, in_slot[t % sets], out_slot[t % sets], static_cast<std::uint32_t>(cnt),
                   false);
      const std::uint64_t bytes = out_bytes(i);
      if (i == life_.output)
        out.push_back(isa::WriteHost{ub(out_slot[t % sets]),
                                     HostAddr(p_.output_addr + (s + g0) * bytes),
                                     static_cast<std::uint32_t>(cnt * bytes)});
      // The output goes off-chip too only if a later layer reads it.
      if (i != life_.output || life_.last_read[i] != ir::kNoOp)
        out.push_back(isa::WriteMem{ub(out_slot[t % sets]),
                                    MemAddr(home_base + home_[i] + g0 * bytes),
                                    static_cast<std::uint32_t>(cnt * bytes)});
    }
  }

  // Op i on n images whose operands sit at `src` (per tensor read) and whose output goes to
  // `dst`, all in the unified buffer.
  void emit_compute(std::vector<isa::Instruction>& out, std::size_t i,
                    const std::vector<std::uint64_t>& src, std::uint64_t dst, std::uint32_t n,
                    bool may_fuse_pool) {
    const Lowering& lowering = ir::entry_for(lowerings(), m_.ops[i].kind, "lowering");
    if (lowering.emit) (this->*lowering.emit)(out, Operands{i, src, dst, n, may_fuse_pool});
  }

  // What one operation's lowering works on: n images whose operands sit at `src` (one address
  // per tensor read) and whose output goes to `dst`, all in the unified buffer; whether a
  // weighted operation may pool each chunk as it is activated (the resident schedule).
  struct Operands {
    std::size_t i;
    const std::vector<std::uint64_t>& src;
    std::uint64_t dst;
    std::uint32_t n;
    bool may_fuse_pool;
  };
  using Emit = void (Compiler::*)(std::vector<isa::Instruction>&, const Operands&);
  // The lowering of each operation kind (docs/compiler.md, "Lowering"): the instructions it
  // becomes (emit: nullptr for a view, which computes nothing), and whether it needs the zero
  // region of the unified buffer.
  struct Lowering {
    OpKind kind;
    Emit emit;
    bool zeros;
  };
  friend bool compiler::has_lowering(ir::OpKind k);
  static const std::vector<Lowering>& lowerings() {
    static const std::vector<Lowering> table = {
        {OpKind::Conv2D, &Compiler::lower_weighted, false},
        {OpKind::Dense, &Compiler::lower_weighted, false},
        {OpKind::MaxPooling2D, &Compiler::lower_pool, false},
        {OpKind::AveragePooling2D, &Compiler::lower_pool, false},
        {OpKind::GlobalAveragePooling2D, &Compiler::lower_pool, false},
        {OpKind::GlobalMaxPooling2D, &Compiler::lower_pool, false},
        {OpKind::Activation, &Compiler::lower_activation, true},
        {OpKind::Flatten, nullptr, false},
        {OpKind::Reshape, nullptr, false},
        {OpKind::BatchNormalization, &Compiler::lower_map, false},
        {OpKind::ZeroPadding2D, &Compiler::lower_zero_padding, true},
        {OpKind::Add, &Compiler::lower_add, false},
        {OpKind::Dropout, &Compiler::lower_unreachable, false},
        {OpKind::Constant, &Compiler::lower_constant, false},
        {OpKind::DepthwiseConv2D, &Compiler::lower_weighted, false},
        {OpKind::SeparableConv2D, &Compiler::lower_unreachable, false},
        {OpKind::Concatenate, &Compiler::lower_concatenate, false},
        {OpKind::Multiply, &Compiler::lower_multiply, false},
        {OpKind::Subtract, &Compiler::lower_subtract, false},
        {OpKind::PReLU, &Compiler::lower_map, false},
        {OpKind::Embedding, &Compiler::lower_embedding, false},
        {OpKind::LSTM, &Compiler::lower_lstm, false},
    };
    return table;
  }

  void lower_weighted(std::vector<isa::Instruction>& out, const Operands& o) {
    emit_weighted(out, o.i, o.src[0], o.dst, o.n, o.may_fuse_pool);
  }
  void lower_pool(std::vector<isa::Instruction>& out, const Operands& o) {
    emit_pool(out, o.i, o.src[0], o.dst, o.n);
  }
  // A ReLU is an eltwise max against the zero region; every other activation maps.
  void lower_activation(std::vector<isa::Instruction>& out, const Operands& o) {
    if (m_.ops[o.i].activation != ir::Act::Relu) return lower_map(out, o);
    emit_relu(out, o.src[0], o.dst, m_.ops[o.i].out.size() * o.n, q_.layers[o.i].out_type);
  }

  // The vector unit's map with the operation's per-channel records (tiling.h), in pieces of at
  // most 2^32 - 1 elements that start on a channel boundary.
  void lower_map(std::vector<isa::Instruction>& out, const Operands& o) {
    const Op& l = m_.ops[o.i];
    const nn::QuantizedLayer& ql = q_.layers[o.i];
    const std::size_t in = q_.tensor_of(l.inputs[0]);
    const DType in_type = in == kGraphInput ? q_.input_type() : q_.layers[in].out_type;
    const std::uint64_t channels = ql.map_a.size();
    if (channels > 65535) fail(l, "a map's channels must fit 16 bits");
    const std::uint64_t count = l.out.size() * o.n;
    const std::uint64_t piece = std::numeric_limits<std::uint32_t>::max() / channels * channels;
    for (std::uint64_t k = 0; k < count; k += piece) {
      isa::Map mp;
      mp.src = ub(o.src[0] + k * size_of(in_type));
      mp.dst = ub(o.dst + k * size_of(ql.out_type));
      mp.params = ub(params_ub_ + tiling_.map_params_off.at(o.i));
      mp.count = static_cast<std::uint32_t>(std::min(piece, count - k));
      mp.channels = static_cast<std::uint16_t>(channels);
      mp.in_type = in_type;
      mp.out_type = ql.out_type;
      mp.in_scale = in_type == DType::Int8 ? q_.scale_of(in) : 0.0f;
      mp.out_scale = ql.out_type == DType::Int8 ? ql.out_scale : 0.0f;
      mp.func = map_func(l);
      out.push_back(mp);
    }
  }

  // Operand after operand: the running result in dst.
  void lower_subtract(std::vector<isa::Instruction>& out, const Operands& o) {
    emit_eltwise(out, isa::EltOp::Sub, o.src[0], o.src[1], o.dst, m_.ops[o.i].out.size() * o.n,
                 q_.layers[o.i].out_type);
  }
  void lower_multiply(std::vector<isa::Instruction>& out, const Operands& o) {
    const nn::QuantizedLayer& ql = q_.layers[o.i];
    for (std::size_t k = 1; k < o.src.size(); ++k) {
      const std::size_t first = out.size();
      emit_eltwise(out, isa::EltOp::Mul, k == 1 ? o.src[0] : o.dst, o.src[k], o.dst,
                   m_.ops[o.i].out.size() * o.n, ql.out_type);
      // int8: each product requantized onto the output's scale (quantize's multipliers).
      if (ql.out_type == DType::Int8)
        for (std::size_t e = first; e < out.size(); ++e) {
          auto& elt = std::get<isa::Eltwise>(out[e]);
          elt.multiplier = ql.multiplier[k - 1];
          elt.shift = static_cast<std::int8_t>(ql.shift[k - 1]);
        }
    }
  }

  // Each input's channels into their place in every pixel of the output: one strided copy each.
  void lower_concatenate(std::vector<isa::Instruction>& out, const Operands& o) {
    const Op& l = m_.ops[o.i];
    const std::uint64_t es = size_of(q_.layers[o.i].out_type);
    const std::uint64_t pixels = std::uint64_t{o.n} * l.out.h * l.out.w;
    std::uint64_t at = 0;
    for (std::size_t k = 0; k < o.src.size(); ++k) {
      const std::size_t p = l.inputs[k];
      const std::uint64_t ck = (p == kGraphInput ? m_.input : m_.ops[p].out).c;
      isa::Copy c;
      c.src = ub(o.src[k]);
      c.dst = ub(o.dst + at * es);
      c.rows = static_cast<std::uint32_t>(pixels);
      c.row_bytes = static_cast<std::uint32_t>(ck * es);
      c.src_stride = c.row_bytes;
      c.dst_stride = static_cast<std::uint32_t>(l.out.c * es);
      out.push_back(c);
      at += ck;
    }
  }
  void lower_zero_padding(std::vector<isa::Instruction>& out, const Operands& o) {
    emit_zero_padding(out, o.i, o.src[0], o.dst, o.n);
  }
  // The chip's eltwise add, operand after operand.
  void lower_add(std::vector<isa::Instruction>& out, const Operands& o) {
    const std::uint64_t count = m_.ops[o.i].out.size() * o.n;
    for (std::size_t k = 1; k < o.src.size(); ++k)
      emit_eltwise(out, isa::EltOp::Add, k == 1 ? o.src[0] : o.dst, o.src[k], o.dst, count,
                   q_.layers[o.i].out_type);
  }
  // Resident schedule only: the constant's copy for each image of the micro-batch.
  void lower_constant(std::vector<isa::Instruction>& out, const Operands& o) {
    for (std::uint32_t j = 0; j < o.n; ++j)
      out.push_back(isa::ReadMem{MemAddr(tiling_.constant_addr.at(o.i)),
                                 ub(o.dst + j * out_bytes(o.i)),
                                 static_cast<std::uint32_t>(out_bytes(o.i))});
  }
  // The DMA gathers each token id's row of the table (off-chip memory) into place.
  void lower_embedding(std::vector<isa::Instruction>& out, const Operands& o) {
    const Op& l = m_.ops[o.i];
    isa::Gather g;
    g.table = MemAddr(tiling_.table_addr.at(o.i));
    g.indices = ub(o.src[0]);
    g.dst = ub(o.dst);
    g.count = static_cast<std::uint32_t>(std::uint64_t{o.n} * l.in.c);
    g.row_bytes = l.filters * e_;
    g.rows = l.input_dim;
    out.push_back(g);
  }
  // The next MXU in turn and the accumulator slot it fills (slots alternate per MXU, so the
  // vector unit drains one while the array fills the other).
  std::pair<std::uint32_t, std::uint32_t> next_mxu_and_slot() {
    const std::uint32_t m = next_mxu_;
    next_mxu_ = (next_mxu_ + 1) % cfg_.mxu.count;
    const std::uint32_t acc = (2 * m + parity_[m]) * part_.acc_slot;
    parity_[m] ^= 1;
    return {m, acc};
  }

  // Makes tile `t` (kr x nc, at `off` in the weights blob) MXU m's next weights unless it already
  // is; returns whether the MatMul must swap them in.
  bool load_tile(std::vector<isa::Instruction>& out, std::uint32_t m, const TileId& t,
                 std::uint64_t off, std::uint32_t kr, std::uint32_t nc) {
    if (resident_[m] == t) return false;
    isa::ReadWeights rw;
    rw.mxu = static_cast<std::uint8_t>(m);
    rw.source = p_.weights_in_ub ? isa::WeightSource::UnifiedBuffer : isa::WeightSource::OffChip;
    rw.addr = (p_.weights_in_ub ? weights_ub_ : tiling_.weights_addr) + off;
    rw.rows = static_cast<std::uint16_t>(kr), rw.cols = static_cast<std::uint16_t>(nc);
    out.push_back(rw);
    resident_[m] = t;
    return true;
  }

  // An LSTM's scratch for n sequences (docs/compiler.md, "LSTM"), fp32 unless said: zx and zh
  // (4 units each, gate-major: gate g's n x units block at g * n * units), the cell state c, a
  // temporary, and the quantized h of the step (the chip's type).
  struct LstmScratch {
    std::uint64_t zx, zh, c, tmp, hq, end;
  };
  [[nodiscard]] LstmScratch lstm_scratch(std::size_t i, std::uint64_t n, std::uint64_t at) const {
    const std::uint64_t U = m_.ops[i].filters;
    LstmScratch s{};
    s.zx = at;
    s.zh = s.zx + align(n * 4 * U * 4);
    s.c = s.zh + align(n * 4 * U * 4);
    s.tmp = s.c + align(n * U * 4);
    s.hq = s.tmp + align(n * U * 4);
    s.end = s.hq + align(n * U * e_);
    return s;
  }
  // Bytes of scratch operation i needs for n images in the unified buffer (0: none).
  [[nodiscard]] std::uint64_t scratch_bytes(std::size_t i, std::uint64_t n) const {
    if (m_.ops[i].kind != OpKind::LSTM) return 0;
    const LstmScratch s = lstm_scratch(i, n, 0);
    return s.end;
  }

  // The MXU's product of `rows` rows (row r of the input at src + r * src_stride) and one column
  // tile of an LSTM kernel (its K-tiles at `tiles`, ids `tile_id`), activated to fp32 at `dst`
  // (row stride units * 4) with the Activate records at `params`.
  void lstm_matmul(std::vector<isa::Instruction>& out, std::size_t i, std::uint32_t K,
                   const std::uint64_t* tiles, std::uint32_t k_tiles, std::uint32_t j_id,
                   std::uint32_t nc, std::uint64_t src, std::uint64_t src_stride,
                   std::uint64_t rows_total, std::uint64_t dst, std::uint64_t params) {
    const std::uint32_t R = cfg_.mxu.rows, U = m_.ops[i].filters;
    for (std::uint64_t r0 = 0; r0 < rows_total; r0 += part_.acc_slot) {
      const auto rows =
          static_cast<std::uint32_t>(std::min<std::uint64_t>(part_.acc_slot, rows_total - r0));
      const auto [m, acc] = next_mxu_and_slot();
      for (std::uint32_t kt = 0; kt < k_tiles; ++kt) {
        const bool swap =
            load_tile(out, m, TileId{i, j_id, kt}, tiles[kt], std::min(R, K - kt * R), nc);
        isa::MatMul mm;
        mm.mxu = static_cast<std::uint8_t>(m);
        mm.accumulate = kt > 0;
        mm.swap_weights = swap;
        mm.dst = AccAddr(acc);
        mm.rows = rows;
        mm.src = ub(src + r0 * src_stride + std::uint64_t{kt} * R * e_);
        mm.src_stride = static_cast<std::uint32_t>(src_stride);
        out.push_back(mm);
      }
      isa::Activate a;
      a.src = AccAddr(acc);
      a.dst = ub(dst + r0 * U * 4);
      a.params = ub(params);
      a.rows = rows;
      a.cols = static_cast<std::uint16_t>(nc);
      a.dst_stride = U * 4;
      a.func = isa::ActFunc::None;
      a.out_type = DType::Fp32;
      out.push_back(a);
    }
  }

  // A map over `count` fp32 values with one of the LSTM's records (0: {1, 0, 0}, 1: {1, 0, alpha}).
  void lstm_map(std::vector<isa::Instruction>& out, std::size_t i, isa::MapFunc f,
                std::uint32_t record, std::uint64_t src, std::uint64_t dst, std::uint64_t count,
                DType out_type) {
    isa::Map mp;
    mp.src = ub(src), mp.dst = ub(dst);
    mp.params = ub(params_ub_ + tiling_.lstm.at(i).map_params + record * kParamRecordBytes);
    mp.count = static_cast<std::uint32_t>(count);
    mp.channels = 1;
    mp.func = f;
    mp.in_type = DType::Fp32;
    mp.out_type = out_type;
    mp.out_scale = out_type == DType::Int8 ? q_.layers[i].out_scale : 0.0f;
    out.push_back(mp);
  }

  // An LSTM over n sequences, step by step (docs/compiler.md, "LSTM"; the quantized reference's
  // run_lstm computes the same operations in the same order).
  void lower_lstm(std::vector<isa::Instruction>& out, const Operands& o) {
    const Op& l = m_.ops[o.i];
    const LstmPlan& p = tiling_.lstm.at(o.i);
    const std::uint32_t C = cfg_.mxu.cols, T = l.in.w, F = l.in.c, U = l.filters;
    const std::uint64_t n = o.n, nU = n * U;
    const LstmScratch s = lstm_scratch(o.i, n, scratch_ub_);
    const isa::MapFunc rec = act_map_func(l.recurrent_activation), act = act_map_func(l.activation);
    const DType type = q_.layers[o.i].out_type;
    auto gate = [&](std::uint64_t base, std::uint32_t g) { return base + g * nU * 4; };
    for (std::uint32_t t = 0; t < T; ++t) {
      // 1. zx = x_t W + b and, after the first step, zh = h U: each gate's column tiles.
      for (std::uint32_t g = 0; g < 4; ++g)
        for (std::uint32_t jt = 0; jt < p.col_tiles; ++jt) {
          const std::uint32_t nc = std::min(C, U - jt * C);
          const std::uint32_t j = g * p.col_tiles + jt;
          const std::uint64_t col = std::uint64_t{g} * U + std::uint64_t{jt} * C;
          lstm_matmul(out, o.i, F, &p.x_off[std::size_t{j} * p.x_k_tiles], p.x_k_tiles, j, nc,
                      o.src[0] + std::uint64_t{t} * F * e_, std::uint64_t{T} * F * e_, n,
                      gate(s.zx, g) + std::uint64_t{jt} * C * 4,
                      params_ub_ + p.x_params + col * kParamRecordBytes);
          if (t > 0)
            lstm_matmul(out, o.i, U, &p.h_off[std::size_t{j} * p.h_k_tiles], p.h_k_tiles,
                        j + 4 * p.col_tiles, nc, s.hq, std::uint64_t{U} * e_, n,
                        gate(s.zh, g) + std::uint64_t{jt} * C * 4,
                        params_ub_ + p.h_params + col * kParamRecordBytes);
        }
      // 2. z = zx + zh; the gates i, f, o = rec(z), g = act(z).
      if (t > 0) emit_eltwise(out, isa::EltOp::Add, s.zx, s.zh, s.zx, 4 * nU, DType::Fp32);
      lstm_map(out, o.i, rec, 0, gate(s.zx, 0), gate(s.zx, 0), 2 * nU, DType::Fp32);
      lstm_map(out, o.i, act, 1, gate(s.zx, 2), gate(s.zx, 2), nU, DType::Fp32);
      lstm_map(out, o.i, rec, 0, gate(s.zx, 3), gate(s.zx, 3), nU, DType::Fp32);
      // 3. c = i * g at the first step, else f * c + i * g.
      if (t == 0) {
        emit_eltwise(out, isa::EltOp::Mul, gate(s.zx, 0), gate(s.zx, 2), s.c, nU, DType::Fp32);
      } else {
        emit_eltwise(out, isa::EltOp::Mul, gate(s.zx, 0), gate(s.zx, 2), s.tmp, nU, DType::Fp32);
        emit_eltwise(out, isa::EltOp::Mul, gate(s.zx, 1), s.c, s.c, nU, DType::Fp32);
        emit_eltwise(out, isa::EltOp::Add, s.c, s.tmp, s.c, nU, DType::Fp32);
      }
      // 4. h = o * act(c), then in the chip's type: the next step's input and the output.
      lstm_map(out, o.i, act, 1, s.c, s.tmp, nU, DType::Fp32);
      emit_eltwise(out, isa::EltOp::Mul, gate(s.zx, 3), s.tmp, s.tmp, nU, DType::Fp32);
      lstm_map(out, o.i, isa::MapFunc::Identity, 0, s.tmp, s.hq, nU, type);
      if (!l.return_sequences && t + 1 < T) continue;
      const std::uint64_t row = std::uint64_t{U} * e_;
      isa::Copy c;
      c.src = ub(s.hq);
      c.dst = ub(o.dst + (l.return_sequences ? t * row : 0));
      c.rows = static_cast<std::uint32_t>(n);
      c.row_bytes = static_cast<std::uint32_t>(row);
      c.src_stride = static_cast<std::uint32_t>(row);
      c.dst_stride = static_cast<std::uint32_t>(l.return_sequences ? T * row : row);
      out.push_back(c);
    }
  }

  void lower_unreachable(std::vector<isa::Instruction>&, const Operands& o) {
    const Op& l = m_.ops[o.i];
    throw std::logic_error(
        fmt::format("{} ({}) reached the code generator; the rewrites fold or "
                    "remove it, or quantize refuses it",
                    l.name, ir::name_of(l.kind)));
  }

  // A standalone ReLU: max(x, +0) against the zero region, in pieces of its size.
  void emit_relu(std::vector<isa::Instruction>& out, std::uint64_t src, std::uint64_t dst,
                 std::uint64_t count, DType type) {
    const std::uint64_t es = size_of(type), piece = zeros_bytes_ / es;
    for (std::uint64_t k = 0; k < count; k += piece)
      emit_eltwise(out, isa::EltOp::Max, src + k * es, zeros_ub_, dst + k * es,
                   std::min(piece, count - k), type);
  }

  void emit_zero_fill(std::vector<isa::Instruction>& out, std::uint64_t dst, std::uint64_t count,
                      DType type) {
    compiler::emit_zero_fill(out, zeros_ub_, zeros_bytes_, dst, count, type);
  }

  // ZeroPadding2D read by something other than a convolution: per image, the border from the
  // zero region and each row copied (max(x, x) is x) into place.
  void emit_zero_padding(std::vector<isa::Instruction>& out, std::size_t i, std::uint64_t src,
                         std::uint64_t dst, std::uint32_t n) {
    const Op& l = m_.ops[i];
    const DType type = q_.layers[i].out_type;
    const std::uint64_t es = size_of(type), c = l.in.c;
    const std::uint64_t row = std::uint64_t{l.in.w} * c;
    for (std::uint32_t b = 0; b < n; ++b) {
      const std::uint64_t s0 = src + b * out_bytes(q_.tensor_of(l.inputs[0]));
      const std::uint64_t d0 = dst + b * out_bytes(i);
      std::uint64_t filled = 0;  // elements of this image written so far
      for (std::uint32_t y = 0; y < l.in.h; ++y) {
        const std::uint64_t at = ((std::uint64_t{y} + l.pad_top) * l.out.w + l.pad_left) * c;
        if (at > filled) emit_zero_fill(out, d0 + filled * es, at - filled, type);
        emit_eltwise(out, isa::EltOp::Max, s0 + y * row * es, s0 + y * row * es, d0 + at * es, row,
                     type);
        filled = at + row;
      }
      if (l.out.size() > filled) emit_zero_fill(out, d0 + filled * es, l.out.size() - filled, type);
    }
  }

  void emit_pool(std::vector<isa::Instruction>& out, std::size_t i, std::uint64_t src,
                 std::uint64_t dst, std::uint32_t n) {
    const Op& l = m_.ops[i];
    const nn::QuantizedLayer& ql = q_.layers[i];
    const bool global =
        l.kind == OpKind::GlobalAveragePooling2D || l.kind == OpKind::GlobalMaxPooling2D;
    isa::Pool p;
    p.src = ub(src), p.dst = ub(dst);
    p.in_h = static_cast<std::uint16_t>(l.in.h), p.in_w = static_cast<std::uint16_t>(l.in.w);
    p.channels = static_cast<std::uint16_t>(l.in.c);
    p.kernel_h = static_cast<std::uint16_t>(global ? l.in.h : l.kernel_h);
    p.kernel_w = static_cast<std::uint16_t>(global ? l.in.w : l.kernel_w);
    if (!global && (l.stride_h > 255 || l.stride_w > 255))
      fail(l, "pooling strides must fit the pool instruction's 8-bit fields");
    p.stride_h = static_cast<std::uint8_t>(global ? 1 : l.stride_h);
    p.stride_w = static_cast<std::uint8_t>(global ? 1 : l.stride_w);
    // "same" pooling: the instruction skips window positions outside the image.
    if (!global && l.padding != ir::Padding::Valid) {
      const ir::Pads pads = ir::window_pads(l);
      if (pads.top > 255 || pads.left > 255)
        fail(l, "pooling padding must fit the pool instruction's 8-bit fields");
      p.pad_top = static_cast<std::uint8_t>(pads.top);
      p.pad_left = static_cast<std::uint8_t>(pads.left);
      p.out_h = static_cast<std::uint16_t>(l.out.h);
      p.out_w = static_cast<std::uint16_t>(l.out.w);
    }
    p.images = static_cast<std::uint16_t>(n);
    p.kind = l.kind == OpKind::MaxPooling2D || l.kind == OpKind::GlobalMaxPooling2D
                 ? isa::PoolKind::Max
                 : isa::PoolKind::Avg;
    p.type = ql.out_type;
    out.push_back(p);
  }

  // The pooling layer that computes next, if it reads layer i's tensor, or m_.ops.size().
  [[nodiscard]] std::size_t pool_after(std::size_t i) const {
    for (std::size_t p = i + 1; p < m_.ops.size(); ++p) {
      if (!q_.computes(p)) continue;
      const Op& l = m_.ops[p];
      const bool pool = l.kind == OpKind::MaxPooling2D || l.kind == OpKind::AveragePooling2D;
      return pool && q_.tensor_of(l.inputs[0]) == i ? p : m_.ops.size();
    }
    return m_.ops.size();
  }

  // One MXU's work item of a weighted layer: per K tile its read_weights (when the tile is not
  // resident) and matmul, then what drains its accumulators (activate, a fused pool).
  struct WorkItem {
    std::vector<std::vector<isa::Instruction>> steps;
    std::vector<isa::Instruction> tail;
  };
  // Issues a round of items (one per MXU) step by step across the items, then their tails in
  // item order, and empties the round.
  static void issue_round(std::vector<isa::Instruction>& out, std::vector<WorkItem>& round) {
    std::size_t steps = 0;
    for (const WorkItem& w : round) steps = std::max(steps, w.steps.size());
    for (std::size_t s = 0; s < steps; ++s)
      for (const WorkItem& w : round)
        if (s < w.steps.size()) out.insert(out.end(), w.steps[s].begin(), w.steps[s].end());
    for (const WorkItem& w : round) out.insert(out.end(), w.tail.begin(), w.tail.end());
    round.clear();
  }

  static bool is_weighted(OpKind k) {
    return k == OpKind::Conv2D || k == OpKind::DepthwiseConv2D || k == OpKind::Dense;
  }
  // Output rows of weighted operation i over n images: pixels for a convolution, images else.
  [[nodiscard]] std::uint64_t weighted_rows(std::size_t i, std::uint64_t n) const {
    const Op& l = m_.ops[i];
    const bool conv = l.kind == OpKind::Conv2D || l.kind == OpKind::DepthwiseConv2D;
    return conv ? n * l.out.h * l.out.w : n;
  }
  // The pooling operation pooled chunk by chunk right after weighted operation i's activate, or
  // m_.ops.size(): one right after a convolution of one column tile, when a chunk holds an image.
  [[nodiscard]] std::size_t fused_pool(std::size_t i, std::uint64_t rows_total,
                                       bool may_fuse_pool) const {
    const Op& l = m_.ops[i];
    const bool conv = l.kind == OpKind::Conv2D || l.kind == OpKind::DepthwiseConv2D;
    if (!conv || !may_fuse_pool || tiling_.plans[i].n_tiles != 1) return m_.ops.size();
    const std::uint64_t pixels = std::uint64_t{l.out.h} * l.out.w;
    return raw_chunk(rows_total) >= pixels ? pool_after(i) : m_.ops.size();
  }
  // Rows per work item: at most an accumulator slot, and split over the MXUs, but no fewer
  // than the array's rows (a shorter feed cannot hide the next tile's shift).
  [[nodiscard]] std::uint64_t raw_chunk(std::uint64_t rows_total) const {
    return std::min<std::uint64_t>(
        part_.acc_slot,
        std::max<std::uint64_t>(cfg_.mxu.rows, ceil_div(rows_total, cfg_.mxu.count)));
  }
  // A pooling layer right after a convolution pools each chunk as soon as it is activated, so
  // the next layer does not wait for the whole micro-batch: chunks then hold whole images.
  [[nodiscard]] std::uint64_t chunk_rows(std::size_t i, std::uint64_t rows_total,
                                         bool may_fuse_pool) const {
    const std::uint64_t chunk = raw_chunk(rows_total);
    if (fused_pool(i, rows_total, may_fuse_pool) == m_.ops.size()) return chunk;
    const std::uint64_t pixels = std::uint64_t{m_.ops[i].out.h} * m_.ops[i].out.w;
    return chunk / pixels * pixels;
  }

  void emit_weighted(std::vector<isa::Instruction>& out, std::size_t i, std::uint64_t src,
                     std::uint64_t dst, std::uint32_t n, bool may_fuse_pool) {
    const Op& l = m_.ops[i];
    const nn::QuantizedLayer& ql = q_.layers[i];
    const WeightedPlan& p = tiling_.plans[i];
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols;
    const bool conv = l.kind == OpKind::Conv2D || l.kind == OpKind::DepthwiseConv2D;
    const std::uint32_t e_out = size_of(ql.out_type);
    if (conv) {
      const nn::ConvInput ci = q_.conv_input(i);
      isa::SetWindow w;
      for (std::uint32_t v : {ci.shape.h, ci.shape.w, ci.shape.c, ci.pad_top, ci.pad_left})
        if (v > 65535) fail(l, "image dimensions and padding must fit 16 bits");
      w.in_h = static_cast<std::uint16_t>(ci.shape.h);
      w.in_w = static_cast<std::uint16_t>(ci.shape.w);
      w.in_c = static_cast<std::uint16_t>(ci.shape.c);
      w.kernel_h = static_cast<std::uint16_t>(l.kernel_h),
      w.kernel_w = static_cast<std::uint16_t>(l.kernel_w);
      w.stride_h = static_cast<std::uint16_t>(l.stride_h),
      w.stride_w = static_cast<std::uint16_t>(l.stride_w);
      w.pad_top = static_cast<std::uint16_t>(ci.pad_top);
      w.pad_left = static_cast<std::uint16_t>(ci.pad_left);
      w.out_h = static_cast<std::uint16_t>(l.out.h), w.out_w = static_cast<std::uint16_t>(l.out.w);
      w.dilation_h = static_cast<std::uint16_t>(l.dilation_h);
      w.dilation_w = static_cast<std::uint16_t>(l.dilation_w);
      out.push_back(w);
    }
    const std::uint64_t rows_total = weighted_rows(i, n);
    const std::uint64_t pixels = std::uint64_t{l.out.h} * l.out.w;
    const std::uint64_t chunk = chunk_rows(i, rows_total, may_fuse_pool);
    const std::size_t pool = fused_pool(i, rows_total, may_fuse_pool);
    const bool fuse_pool = pool < m_.ops.size();
    // A softmax across more columns than one MXU tile: each tile is activated to fp32 logits and
    // the whole rows are normalized once every tile is in (Activate sees one tile's columns).
    const bool row_softmax = l.activation == ir::Act::Softmax && p.n_tiles > 1;
    if (row_softmax && p.N > 65535) fail(l, "a softmax across more than 65535 values");
    if (fuse_pool) pooled_[pool] = true;
    // Work items go round-robin to the MXUs, and the items of one round are issued interleaved,
    // tile by tile: the sequencer issues in order into 16-deep unit queues, so an item's whole
    // K loop ahead of the next MXU's would leave that MXU idle while the first one's queue is
    // full (docs/compiler.md, "Schedule" 4).
    const std::uint32_t M = cfg_.mxu.count;
    std::vector<WorkItem> round;
    round.reserve(M);
    for (std::uint32_t j = 0; j < p.n_tiles; ++j) {
      const std::uint32_t nc = std::min(C, p.N - j * C);
      for (std::uint64_t r0 = 0; r0 < rows_total; r0 += chunk) {
        const auto rows = static_cast<std::uint32_t>(std::min(chunk, rows_total - r0));
        const auto [m, acc] = next_mxu_and_slot();
        WorkItem& item = round.emplace_back();
        bool first = true;  // the first tile multiplied overwrites the accumulators
        for (std::uint32_t kt = 0; kt < p.k_tiles; ++kt) {
          const std::uint64_t off = p.tile_off[std::size_t{j} * p.k_tiles + kt];
          if (off == kNoTile) continue;
          const std::uint32_t kr = std::min(R, p.K - kt * R);
          std::vector<isa::Instruction>& step = item.steps.emplace_back();
          const bool swap = load_tile(step, m, TileId{i, j, kt}, off, kr, nc);
          isa::MatMul mm;
          mm.mxu = static_cast<std::uint8_t>(m);
          mm.accumulate = !first;
          first = false;
          mm.swap_weights = swap;
          mm.window = conv;
          mm.dst = AccAddr(acc);
          mm.rows = rows;
          if (conv) {
            mm.src = ub(src);
            mm.first_pixel = static_cast<std::uint32_t>(r0);
            mm.k_first = static_cast<std::uint16_t>(kt * R);
          } else {
            mm.src = ub(src + (r0 * p.K + std::uint64_t{kt} * R) * e_);
            mm.src_stride = static_cast<std::uint32_t>(std::uint64_t{p.K} * e_);
          }
          step.push_back(mm);
        }
        std::vector<isa::Instruction>& tail = item.tail;
        isa::Activate a;
        a.src = AccAddr(acc);
        a.dst = ub(dst + (r0 * p.N + std::uint64_t{j} * C) * e_out);
        a.params = ub(params_ub_ + p.params_off + std::uint64_t{j} * C * kParamRecordBytes);
        a.rows = rows;
        a.cols = static_cast<std::uint16_t>(nc);
        a.dst_stride = p.N * e_out;
        // An int8 ReLU6 is the ReLU (quantize keeps 127 steps within 6, docs/quantization.md).
        const bool int8_relu6 = ql.out_type == DType::Int8 && l.activation == ir::Act::Relu6;
        a.func = row_softmax  ? isa::ActFunc::None
                 : int8_relu6 ? isa::ActFunc::Relu
                              : act_func(l.activation);
        a.out_type = ql.out_type;
        tail.push_back(a);
        if (fuse_pool) {
          const std::uint64_t img0 = r0 / pixels;
          tag(tail, row_of(pool));
          emit_pool(tail, pool, dst + img0 * out_bytes(i),
                    tensor_ub_[pool] + img0 * out_bytes(pool),
                    static_cast<std::uint32_t>(rows / pixels));
          tag(tail, row_of(i));
        }
        if (round.size() == M) issue_round(out, round);
      }
    }
    issue_round(out, round);
    if (row_softmax) {
      isa::Softmax s;
      s.src = s.dst = ub(dst);
      s.rows = static_cast<std::uint32_t>(rows_total);
      s.cols = static_cast<std::uint16_t>(p.N);
      s.src_stride = s.dst_stride = p.N * e_out;
      out.push_back(s);
    }
  }

  const nn::QuantizedModel& q_;
  const ir::Graph& m_;
  const ir::Graph& source_;  // the graph the rewrites started from: one report row per operation
  const ChipConfig& cfg_;
  const Options& opt_;
  const Tiling& tiling_;
  const Partition& part_;
  const Lifetimes& life_;
  const std::uint32_t e_;  // bytes per activation element
  Program p_;

  std::uint64_t params_ub_ = 0, weights_ub_ = 0, zeros_ub_ = 0, zeros_bytes_ = 0;
  std::uint64_t scratch_ub_ = 0;  // the scratch region (an LSTM's gates and state)
  std::uint64_t in_ub_[2] = {0, 0};
  std::uint64_t input_ub_ = 0;
  std::vector<std::uint64_t> tensor_ub_;
  // Spilled schedule: the first UB byte of the group buffers; tensor homes (offsets within a
  // core's region of act_bytes_per_core_ bytes from act_addr_).
  std::uint64_t work_ub_ = 0, act_addr_ = 0, act_bytes_per_core_ = 0;
  std::vector<std::uint64_t> home_;
  std::uint32_t core_ = 0;

  std::uint32_t current_tag_ = 0;
  std::vector<TileId> resident_;
  std::vector<std::uint32_t> parity_;
  std::vector<bool> pooled_;  // pooling layers already emitted chunk by chunk this micro-batch
  std::uint32_t next_mxu_ = 0;
};

}  // namespace

bool has_lowering(ir::OpKind k) { return ir::find_entry(Compiler::lowerings(), k) != nullptr; }

nn::QuantizedModel prepare(const ir::Graph& source, const nn::Weights& w, DType input_type,
                           std::uint32_t tile_rows, const float* calibration, std::size_t n_cal) {
  Module m = rewrite(source, w, input_type);
  nn::Calibration cal;
  if (input_type == DType::Int8) {
    // Each operation's ranges are those of the imported operation it stands for (origin,
    // value_of), calibrated on the graph as the model gives it; one the rewrites made (a
    // SeparableConv2D's depthwise half) calibrates on the rewritten graph.
    const nn::Ranges src = nn::calibrate(source, w, calibration, n_cal);
    const bool fresh = std::any_of(m.graph.ops.begin(), m.graph.ops.end(),
                                   [](const ir::Op& op) { return op.value_of == ir::kNoOp; });
    const nn::Ranges own =
        fresh ? nn::calibrate(m.graph, m.weights, calibration, n_cal) : nn::Ranges{};
    cal.input = src.input;
    for (std::size_t i = 0; i < m.graph.ops.size(); ++i) {
      const ir::Op& op = m.graph.ops[i];
      const bool made = op.value_of == ir::kNoOp;
      cal.value_lo.push_back(made ? own.lo[i] : src.lo[op.value_of]);
      cal.value_hi.push_back(made ? own.hi[i] : src.hi[op.value_of]);
      cal.out_lo.push_back(made ? own.lo[i] : src.lo[op.origin]);
      cal.out_hi.push_back(made ? own.hi[i] : src.hi[op.origin]);
    }
  }
  return nn::quantize(std::move(m.graph), m.weights, input_type, tile_rows, cal);
}

Program compile(const nn::QuantizedModel& q, const ir::Graph& source, const ChipConfig& cfg,
                const Options& opt) {
  if (q.act_type != cfg.mxu.input_type)
    throw InputError(fmt::format("compile: the model was quantized for {} but {} takes {}",
                                 name_of(q.act_type), cfg.name, name_of(cfg.mxu.input_type)));
  if (q.tile_rows != cfg.mxu.rows)
    throw InputError(
        fmt::format("compile: the model was quantized for {}-row tiles but {} has "
                    "{} rows",
                    q.tile_rows, cfg.name, cfg.mxu.rows));
  if (q.graph.ops.empty() || q.tensor.back() == kGraphInput)
    throw InputError(fmt::format("{}: the model computes nothing", q.graph.file));
  const Partition part = partition(cfg, opt);
  const Tiling tiling = tile(q, cfg);
  const Lifetimes life = lifetimes(q);
  return Compiler(q, source, cfg, opt, tiling, part, life).run();
}

}  // namespace tpu::compiler
