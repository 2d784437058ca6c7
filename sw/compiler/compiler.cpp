#include "sw/compiler/compiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "hw/common/error.h"

namespace tpu::compiler {
namespace {

using nn::Layer;
using nn::LayerKind;

constexpr std::uint64_t kAlign = 64;             // region alignment in the UB and memories
constexpr std::uint64_t kParamRecordBytes = 12;  // isa::Activate: {bias, scale, shift}

std::uint64_t align(std::uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

template <class T>
void put(std::vector<std::uint8_t>& v, T x) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&x);
  v.insert(v.end(), p, p + sizeof x);
}

isa::ActFunc act_func(nn::Act a) {
  switch (a) {
    case nn::Act::Linear: return isa::ActFunc::None;
    case nn::Act::Relu: return isa::ActFunc::Relu;
    case nn::Act::Relu6: return isa::ActFunc::Relu6;
    case nn::Act::Sigmoid: return isa::ActFunc::Sigmoid;
    case nn::Act::Tanh: return isa::ActFunc::Tanh;
    case nn::Act::Softmax: return isa::ActFunc::Softmax;
  }
  return isa::ActFunc::None;
}

std::uint32_t pad_before(std::uint32_t in, std::uint32_t out, std::uint32_t k, std::uint32_t s,
                         nn::Padding p) {
  if (p == nn::Padding::Valid) return 0;
  const std::int64_t total = std::int64_t{out - 1} * s + k - in;
  return static_cast<std::uint32_t>(std::max<std::int64_t>(total, 0) / 2);
}

// How one weighted layer is tiled: K rows x N columns in tiles of the array's size.
struct WeightedPlan {
  std::uint32_t K = 0, N = 0;
  std::uint32_t k_tiles = 0, n_tiles = 0;
  std::uint64_t weights_off = 0;        // first tile in the weights blob
  std::uint64_t params_off = 0;         // first record in the params blob
  std::vector<std::uint64_t> tile_off;  // [j * k_tiles + kt] -> offset in the weights blob
};

struct TileId {
  std::size_t layer = std::numeric_limits<std::size_t>::max();
  std::uint32_t j = 0, kt = 0;
  bool operator==(const TileId& o) const { return layer == o.layer && j == o.j && kt == o.kt; }
};

class Compiler {
 public:
  Compiler(const nn::QuantizedModel& q, const ChipConfig& cfg, const Options& opt)
      : q_(q), m_(*q.model), cfg_(cfg), opt_(opt), e_(size_of(q.act_type)) {}

  Program run() {
    if (opt_.images == 0) throw InputError("compile: no images to run");
    if (opt_.batch == 0) throw InputError("compile: --batch must be >= 1");
    plan_weights();
    layout_host();
    layout_ub();
    for (std::uint32_t c = 0; c < cfg_.tensor_cores; ++c) emit_core(c);
    p_.layers.push_back({"setup", "host I/O and parameter loads", 0});
    for (const Layer& l : m_.layers)
      p_.layers.push_back({l.name, std::string(nn::name_of(l.kind)), l.macs()});
    return std::move(p_);
  }

 private:
  [[noreturn]] void fail(const Layer& l, const std::string& what) const {
    throw InputError(
        fmt::format("{}: layer {} ({}): {}", m_.file, l.name, nn::name_of(l.kind), what));
  }

  // Bytes per image of layer i's output tensor as it sits in the unified buffer.
  [[nodiscard]] std::uint64_t out_bytes(std::size_t i) const {
    return m_.layers[i].out.size() * size_of(q_.layers[i].out_type);
  }
  // Whether layer i writes a tensor of its own (others alias their input).
  [[nodiscard]] bool materialises(std::size_t i) const {
    const Layer& l = m_.layers[i];
    if (l.kind == LayerKind::Flatten) return false;
    if (l.kind == LayerKind::Activation)
      return !q_.layers[i].fused_into_previous && l.activation != nn::Act::Linear;
    return true;
  }

  // The pooling layer that reads layer i's tensor next, if nothing else comes between (fused
  // activations and flattens do not materialise), or m_.layers.size().
  [[nodiscard]] std::size_t pool_after(std::size_t i) const {
    for (std::size_t p = i + 1; p < m_.layers.size(); ++p) {
      if (!materialises(p)) continue;
      const LayerKind k = m_.layers[p].kind;
      return k == LayerKind::MaxPooling2D || k == LayerKind::AveragePooling2D ? p
                                                                              : m_.layers.size();
    }
    return m_.layers.size();
  }

  // 1. Weight tiles and parameter records, laid out in off-chip memory.
  void plan_weights() {
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols;
    plans_.resize(m_.layers.size());
    for (std::size_t i = 0; i < m_.layers.size(); ++i) {
      const Layer& l = m_.layers[i];
      if (!l.has_weights()) continue;
      const nn::QuantizedLayer& ql = q_.layers[i];
      WeightedPlan& p = plans_[i];
      const std::uint64_t K = l.kind == LayerKind::Dense
                                  ? l.in.size()
                                  : std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c;
      if (K > std::numeric_limits<std::uint32_t>::max() || l.out.c > 65535)
        fail(l, fmt::format("K = {} and N = {} must fit 32 and 16 bits", K, l.out.c));
      if (l.kind == LayerKind::Conv2D && K > 65535u + R)
        fail(l, fmt::format("a window of {} values exceeds the 16-bit k_first field", K));
      p.K = static_cast<std::uint32_t>(K);
      p.N = l.out.c;
      p.k_tiles = static_cast<std::uint32_t>(ceil_div(p.K, R));
      p.n_tiles = static_cast<std::uint32_t>(ceil_div(p.N, C));
      p.weights_off = weights_.size();
      for (std::uint32_t j = 0; j < p.n_tiles; ++j)
        for (std::uint32_t kt = 0; kt < p.k_tiles; ++kt) {
          const std::uint32_t kr = std::min(R, p.K - kt * R), nc = std::min(C, p.N - j * C);
          p.tile_off.push_back(weights_.size());
          for (std::uint32_t k = 0; k < kr; ++k)
            for (std::uint32_t n = 0; n < nc; ++n) {
              const std::size_t src = (std::size_t{kt} * R + k) * p.N + j * C + n;
              if (q_.act_type == DType::Int8)
                put(weights_, ql.kernel_i8[src]);
              else
                put(weights_, ql.kernel_bf16[src]);
            }
          weights_.resize(align(weights_.size()));
        }
      p.params_off = params_.size();
      for (std::uint32_t c = 0; c < p.N; ++c) {
        if (q_.act_type == DType::Bf16) {
          put(params_, ql.bias_f32[c]);
          put(params_, ql.scale_f32[c]);
          put(params_, std::int32_t{0});
        } else if (ql.out_type == DType::Int8) {
          put(params_, ql.bias_i32[c]);
          put(params_, ql.multiplier[c]);
          put(params_, ql.shift[c]);
        } else {
          put(params_, ql.bias_i32[c]);
          put(params_, ql.scale_f32[c]);
          put(params_, std::int32_t{0});
        }
      }
      params_.resize(align(params_.size()));
    }
    weights_addr_ = 0;
    params_addr_ = align(weights_.size());
    if (params_addr_ + params_.size() > cfg_.off_chip_memory.bytes)
      throw InputError(fmt::format(
          "{}: weights and parameters need {} bytes of off-chip memory; "
          "{} has {}",
          m_.file, params_addr_ + params_.size(), cfg_.name, cfg_.off_chip_memory.bytes));
    p_.memory_image.push_back({weights_addr_, weights_});
    p_.memory_image.push_back({params_addr_, params_});
  }

  // 2. Host memory: all input images, then all outputs.
  void layout_host() {
    p_.images = opt_.images;
    p_.input_bytes_per_image = m_.input.size() * e_;
    p_.input_addr = 0;
    p_.output_addr = align(opt_.images * p_.input_bytes_per_image);
    const std::size_t last = m_.layers.size() - 1;
    p_.output_type = m_.layers.empty() ? q_.act_type : q_.layers[last].out_type;
    p_.output_scale = m_.layers.empty() ? q_.input_scale : q_.layers[last].out_scale;
    p_.output_elements = m_.output().size();
    p_.output_bytes_per_image = p_.output_elements * size_of(p_.output_type);
    p_.host_bytes = p_.output_addr + opt_.images * p_.output_bytes_per_image;
  }

  // 3. Unified buffer: parameters, (weights), zeros, then per micro-batch two input buffers and
  //    one tensor per materialised layer; the micro-batch is as large as fits.
  void layout_ub() {
    const std::uint64_t ub = cfg_.unified_buffer.bytes;
    params_ub_ = 0;
    std::uint64_t fixed = align(params_.size());
    std::uint64_t per_image = 2 * align(p_.input_bytes_per_image);
    std::uint64_t zeros_per_image = 0;
    for (std::size_t i = 0; i < m_.layers.size(); ++i) {
      if (!materialises(i)) continue;
      per_image += out_bytes(i);
      if (m_.layers[i].kind == LayerKind::Activation)
        zeros_per_image = std::max(zeros_per_image, out_bytes(i));
    }
    per_image += zeros_per_image;
    // Edge keeps its parameters in its SRAM when they fit: streaming them over USB for every
    // micro-batch would dominate (CORAL: parameters beyond the cache stream from the host).
    if (cfg_.off_chip_memory.kind == MemoryKind::HostLink &&
        fixed + align(weights_.size()) + per_image <= ub) {
      weights_ub_ = fixed;
      fixed += align(weights_.size());
      p_.weights_in_ub = true;
    }
    const std::uint64_t per_core =
        ceil_div(std::min<std::uint64_t>(opt_.batch, opt_.images), cfg_.tensor_cores);
    const std::uint64_t room = ub > fixed ? ub - fixed : 0;
    std::uint64_t mb =
        std::min<std::uint64_t>({per_core, room / std::max<std::uint64_t>(per_image, 1), 65535});
    if (mb == 0) {
      std::size_t big = 0;
      for (std::size_t i = 0; i < m_.layers.size(); ++i)
        if (materialises(i) && out_bytes(i) > out_bytes(big)) big = i;
      throw InputError(fmt::format(
          "{}: one image needs {} bytes of unified buffer (largest tensor: layer {}, {} bytes) "
          "after {} bytes of parameters; {} has {} bytes per core",
          m_.file, per_image, m_.layers[big].name, out_bytes(big), fixed, cfg_.name, ub));
    }
    p_.micro_batch = static_cast<std::uint32_t>(mb);
    std::uint64_t at = fixed;
    zeros_ub_ = at;
    at += align(zeros_per_image * mb);
    in_ub_[0] = at;
    at += align(p_.input_bytes_per_image * mb);
    in_ub_[1] = at;
    at += align(p_.input_bytes_per_image * mb);
    tensor_ub_.assign(m_.layers.size(), 0);
    for (std::size_t i = 0; i < m_.layers.size(); ++i) {
      if (!materialises(i)) continue;
      tensor_ub_[i] = at;
      at += align(out_bytes(i) * mb);
    }
    p_.ub_bytes_used = at;
    slot_ = cfg_.accumulators.entries / (2 * cfg_.mxu.count);
    if (slot_ == 0)
      throw InputError(
          fmt::format("{}: {} accumulator entries cannot give each of {} MXUs two "
                      "slots",
                      cfg_.name, cfg_.accumulators.entries, cfg_.mxu.count));
  }

  void tag(std::vector<isa::Instruction>& out, std::uint32_t id) {
    if (id == current_tag_) return;
    out.push_back(isa::Tag{id});
    current_tag_ = id;
  }

  // 4. One core's stream: its share of the images, micro-batch by micro-batch.
  void emit_core(std::uint32_t core) {
    std::vector<isa::Instruction> out;
    current_tag_ = std::numeric_limits<std::uint32_t>::max();
    resident_.assign(cfg_.mxu.count, TileId{});
    parity_.assign(cfg_.mxu.count, 0);
    next_mxu_ = 0;
    const std::uint64_t first = opt_.images * core / cfg_.tensor_cores;
    const std::uint64_t last = opt_.images * (core + 1) / cfg_.tensor_cores;
    tag(out, 0);
    out.push_back(isa::ReadMem{MemAddr(params_addr_),
                               UbAddr(static_cast<std::uint32_t>(params_ub_)),
                               static_cast<std::uint32_t>(params_.size())});
    if (p_.weights_in_ub)
      out.push_back(isa::ReadMem{MemAddr(weights_addr_),
                                 UbAddr(static_cast<std::uint32_t>(weights_ub_)),
                                 static_cast<std::uint32_t>(weights_.size())});
    if (first < last) {
      const std::uint64_t mb = p_.micro_batch;
      const std::uint64_t passes = ceil_div(last - first, mb);
      auto read_input = [&](std::uint64_t pass) {
        const std::uint64_t s = first + pass * mb, n = std::min(mb, last - s);
        out.push_back(isa::ReadHost{HostAddr(p_.input_addr + s * p_.input_bytes_per_image),
                                    UbAddr(static_cast<std::uint32_t>(in_ub_[pass % 2])),
                                    static_cast<std::uint32_t>(n * p_.input_bytes_per_image)});
      };
      read_input(0);
      for (std::uint64_t pass = 0; pass < passes; ++pass) {
        const std::uint64_t s = first + pass * mb, n = std::min(mb, last - s);
        tag(out, 0);
        if (pass + 1 < passes) read_input(pass + 1);  // one micro-batch ahead
        std::uint64_t cur = in_ub_[pass % 2];
        pooled_.assign(m_.layers.size(), false);
        for (std::size_t i = 0; i < m_.layers.size(); ++i) {
          if (!materialises(i)) continue;
          tag(out, static_cast<std::uint32_t>(i + 1));
          if (!pooled_[i]) emit_layer(out, i, cur, static_cast<std::uint32_t>(n));
          cur = tensor_ub_[i];
        }
        tag(out, 0);
        out.push_back(isa::WriteHost{UbAddr(static_cast<std::uint32_t>(cur)),
                                     HostAddr(p_.output_addr + s * p_.output_bytes_per_image),
                                     static_cast<std::uint32_t>(n * p_.output_bytes_per_image)});
      }
    }
    out.push_back(isa::Halt{});
    p_.cores.push_back(std::move(out));
  }

  void emit_layer(std::vector<isa::Instruction>& out, std::size_t i, std::uint64_t src,
                  std::uint32_t n) {
    const Layer& l = m_.layers[i];
    const nn::QuantizedLayer& ql = q_.layers[i];
    const std::uint64_t dst = tensor_ub_[i];
    auto ub = [](std::uint64_t a) { return UbAddr(static_cast<std::uint32_t>(a)); };
    switch (l.kind) {
      case LayerKind::Conv2D:
      case LayerKind::Dense: emit_weighted(out, i, src, n); return;
      case LayerKind::MaxPooling2D:
      case LayerKind::AveragePooling2D: emit_pool(out, i, src, dst, n); return;
      case LayerKind::Activation: {
        isa::Eltwise e;  // a standalone ReLU: max(x, 0) against a zero region
        e.a = ub(src), e.b = ub(zeros_ub_), e.dst = ub(dst);
        e.count = static_cast<std::uint32_t>(l.out.size() * n);
        e.op = isa::EltOp::Max;
        e.type = ql.out_type;
        out.push_back(e);
        return;
      }
      case LayerKind::Flatten: return;
    }
  }

  void emit_pool(std::vector<isa::Instruction>& out, std::size_t i, std::uint64_t src,
                 std::uint64_t dst, std::uint32_t n) {
    const Layer& l = m_.layers[i];
    const nn::QuantizedLayer& ql = q_.layers[i];
    auto ub = [](std::uint64_t a) { return UbAddr(static_cast<std::uint32_t>(a)); };
    isa::Pool p;
    p.src = ub(src), p.dst = ub(dst);
    p.in_h = static_cast<std::uint16_t>(l.in.h), p.in_w = static_cast<std::uint16_t>(l.in.w);
    p.channels = static_cast<std::uint16_t>(l.in.c);
    p.kernel_h = static_cast<std::uint16_t>(l.kernel_h),
    p.kernel_w = static_cast<std::uint16_t>(l.kernel_w);
    p.stride_h = static_cast<std::uint16_t>(l.stride_h),
    p.stride_w = static_cast<std::uint16_t>(l.stride_w);
    p.images = static_cast<std::uint16_t>(n);
    p.kind = l.kind == LayerKind::MaxPooling2D ? isa::PoolKind::Max : isa::PoolKind::Avg;
    p.type = ql.out_type;
    if (l.in.h > 65535 || l.in.w > 65535 || l.in.c > 65535)
      fail(l, "pooling dimensions must fit 16 bits");
    out.push_back(p);
  }

  void emit_weighted(std::vector<isa::Instruction>& out, std::size_t i, std::uint64_t src,
                     std::uint32_t n) {
    const Layer& l = m_.layers[i];
    const nn::QuantizedLayer& ql = q_.layers[i];
    const WeightedPlan& p = plans_[i];
    const std::uint32_t R = cfg_.mxu.rows, C = cfg_.mxu.cols, M = cfg_.mxu.count;
    const bool conv = l.kind == LayerKind::Conv2D;
    const std::uint32_t e_out = size_of(ql.out_type);
    if (conv) {
      isa::SetWindow w;
      for (std::uint32_t v : {l.in.h, l.in.w, l.in.c, l.out.h, l.out.w})
        if (v > 65535) fail(l, "image dimensions must fit 16 bits");
      w.in_h = static_cast<std::uint16_t>(l.in.h), w.in_w = static_cast<std::uint16_t>(l.in.w);
      w.in_c = static_cast<std::uint16_t>(l.in.c);
      w.kernel_h = static_cast<std::uint16_t>(l.kernel_h),
      w.kernel_w = static_cast<std::uint16_t>(l.kernel_w);
      w.stride_h = static_cast<std::uint16_t>(l.stride_h),
      w.stride_w = static_cast<std::uint16_t>(l.stride_w);
      w.pad_top = static_cast<std::uint16_t>(
          pad_before(l.in.h, l.out.h, l.kernel_h, l.stride_h, l.padding));
      w.pad_left = static_cast<std::uint16_t>(
          pad_before(l.in.w, l.out.w, l.kernel_w, l.stride_w, l.padding));
      w.out_h = static_cast<std::uint16_t>(l.out.h), w.out_w = static_cast<std::uint16_t>(l.out.w);
      out.push_back(w);
    }
    const std::uint64_t rows_total = conv ? std::uint64_t{n} * l.out.h * l.out.w : n;
    // Rows per work item: at most an accumulator slot, and split over the MXUs, but no fewer
    // than the array's rows (a shorter feed cannot hide the next tile's shift).
    std::uint64_t chunk =
        std::min<std::uint64_t>(slot_, std::max<std::uint64_t>(R, ceil_div(rows_total, M)));
    // A pooling layer right after a convolution pools each chunk as soon as it is activated, so
    // the next layer does not wait for the whole micro-batch: chunks then hold whole images.
    const std::uint64_t pixels = std::uint64_t{l.out.h} * l.out.w;
    const std::size_t pool = conv && p.n_tiles == 1 ? pool_after(i) : m_.layers.size();
    const bool fuse_pool = pool < m_.layers.size() && chunk >= pixels;
    if (fuse_pool) {
      chunk = chunk / pixels * pixels;
      pooled_[pool] = true;
    }
    for (std::uint32_t j = 0; j < p.n_tiles; ++j) {
      const std::uint32_t nc = std::min(C, p.N - j * C);
      for (std::uint64_t r0 = 0; r0 < rows_total; r0 += chunk) {
        const auto rows = static_cast<std::uint32_t>(std::min(chunk, rows_total - r0));
        const std::uint32_t m = next_mxu_;
        next_mxu_ = (next_mxu_ + 1) % M;
        const std::uint32_t acc = (2 * m + parity_[m]) * slot_;
        parity_[m] ^= 1;
        for (std::uint32_t kt = 0; kt < p.k_tiles; ++kt) {
          const std::uint32_t kr = std::min(R, p.K - kt * R);
          const TileId t{i, j, kt};
          const bool swap = !(resident_[m] == t);
          if (swap) {
            const std::uint64_t off = p.tile_off[std::size_t{j} * p.k_tiles + kt];
            isa::ReadWeights rw;
            rw.mxu = static_cast<std::uint8_t>(m);
            rw.source =
                p_.weights_in_ub ? isa::WeightSource::UnifiedBuffer : isa::WeightSource::OffChip;
            rw.addr = (p_.weights_in_ub ? weights_ub_ : weights_addr_) + off;
            rw.rows = static_cast<std::uint16_t>(kr), rw.cols = static_cast<std::uint16_t>(nc);
            out.push_back(rw);
            resident_[m] = t;
          }
          isa::MatMul mm;
          mm.mxu = static_cast<std::uint8_t>(m);
          mm.accumulate = kt > 0;
          mm.swap_weights = swap;
          mm.window = conv;
          mm.dst = AccAddr(acc);
          mm.rows = rows;
          if (conv) {
            mm.src = UbAddr(static_cast<std::uint32_t>(src));
            mm.first_pixel = static_cast<std::uint32_t>(r0);
            mm.k_first = static_cast<std::uint16_t>(kt * R);
          } else {
            mm.src =
                UbAddr(static_cast<std::uint32_t>(src + (r0 * p.K + std::uint64_t{kt} * R) * e_));
            mm.src_stride = static_cast<std::uint32_t>(std::uint64_t{p.K} * e_);
          }
          out.push_back(mm);
        }
        isa::Activate a;
        a.src = AccAddr(acc);
        a.dst = UbAddr(
            static_cast<std::uint32_t>(tensor_ub_[i] + (r0 * p.N + std::uint64_t{j} * C) * e_out));
        a.params = UbAddr(static_cast<std::uint32_t>(params_ub_ + p.params_off +
                                                     std::uint64_t{j} * C * kParamRecordBytes));
        a.rows = rows;
        a.cols = static_cast<std::uint16_t>(nc);
        a.dst_stride = p.N * e_out;
        a.func = act_func(ql.fused_activation);
        a.out_type = ql.out_type;
        out.push_back(a);
        if (fuse_pool) {
          const std::uint64_t img0 = r0 / pixels;
          tag(out, static_cast<std::uint32_t>(pool + 1));
          emit_pool(out, pool, tensor_ub_[i] + img0 * out_bytes(i),
                    tensor_ub_[pool] + img0 * out_bytes(pool),
                    static_cast<std::uint32_t>(rows / pixels));
          tag(out, static_cast<std::uint32_t>(i + 1));
        }
      }
    }
  }

  const nn::QuantizedModel& q_;
  const nn::Model& m_;
  const ChipConfig& cfg_;
  const Options& opt_;
  const std::uint32_t e_;  // bytes per activation element
  Program p_;

  std::vector<WeightedPlan> plans_;
  std::vector<std::uint8_t> weights_, params_;
  std::uint64_t weights_addr_ = 0, params_addr_ = 0;
  std::uint64_t params_ub_ = 0, weights_ub_ = 0, zeros_ub_ = 0;
  std::uint64_t in_ub_[2] = {0, 0};
  std::vector<std::uint64_t> tensor_ub_;
  std::uint32_t slot_ = 0;

  std::uint32_t current_tag_ = 0;
  std::vector<TileId> resident_;
  std::vector<std::uint32_t> parity_;
  std::vector<bool> pooled_;  // pooling layers already emitted chunk by chunk this micro-batch
  std::uint32_t next_mxu_ = 0;
};

}  // namespace

Program compile(const nn::QuantizedModel& q, const ChipConfig& cfg, const Options& opt) {
  if (q.act_type != cfg.mxu.input_type)
    throw InputError(fmt::format("compile: the model was quantized for {} but {} takes {}",
                                 name_of(q.act_type), cfg.name, name_of(cfg.mxu.input_type)));
  if (q.tile_rows != cfg.mxu.rows)
    throw InputError(
        fmt::format("compile: the model was quantized for {}-row tiles but {} has "
                    "{} rows",
                    q.tile_rows, cfg.name, cfg.mxu.rows));
  return Compiler(q, cfg, opt).run();
}

}  // namespace tpu::compiler
