#include "sw/compiler/tiling.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "hw/common/error.h"
#include "sw/compiler/memory.h"
#include "sw/ir/ops.h"

namespace tpu::compiler {
namespace {

template <class T>
void put(std::vector<std::uint8_t>& v, T x) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&x);
  v.insert(v.end(), p, p + sizeof x);
}

// Activate's record per column: {bias, scale, 0} (int32 bias and fp32 scale from an int
// accumulator, fp32 both from a float one).
void put_records(const nn::QuantizedModel& q, const std::vector<std::int32_t>* bias_i32,
                 const std::vector<float>* bias_f32, const std::vector<float>& scale,
                 std::vector<std::uint8_t>& params) {
  for (std::size_t c = 0; c < scale.size(); ++c) {
    if (q.act_type == DType::Int8)
      put(params, bias_i32 ? (*bias_i32)[c] : std::int32_t{0});
    else
      put(params, bias_f32 ? (*bias_f32)[c] : 0.0f);
    put(params, scale[c]);
    put(params, std::int32_t{0});
  }
  params.resize(align(params.size()));
}

LstmPlan tile_lstm(const nn::QuantizedModel& q, std::size_t i, std::uint32_t R, std::uint32_t C,
                   Tiling& t) {
  const ir::Op& l = q.graph.ops[i];
  const nn::QuantizedLayer& ql = q.layers[i];
  const std::uint32_t U = l.filters, G = 4 * U;
  LstmPlan p;
  p.col_tiles = static_cast<std::uint32_t>(ceil_div(U, C));
  auto tiles = [&](std::uint32_t K, const std::vector<std::int8_t>& w8,
                   const std::vector<std::uint16_t>& wbf, std::vector<std::uint64_t>& off) {
    const auto k_tiles = static_cast<std::uint32_t>(ceil_div(K, R));
    for (std::uint32_t gate = 0; gate < 4; ++gate)
      for (std::uint32_t jt = 0; jt < p.col_tiles; ++jt)
        for (std::uint32_t kt = 0; kt < k_tiles; ++kt) {
          const std::uint32_t kr = std::min(R, K - kt * R), nc = std::min(C, U - jt * C);
          off.push_back(t.weights.size());
          for (std::uint32_t k = 0; k < kr; ++k)
            for (std::uint32_t n = 0; n < nc; ++n) {
              const std::size_t src = std::size_t{kt * R + k} * G + gate * U + jt * C + n;
              if (q.act_type == DType::Int8)
                put(t.weights, w8[src]);
              else
                put(t.weights, wbf[src]);
            }
          t.weights.resize(align(t.weights.size()));
        }
    return k_tiles;
  };
  p.x_k_tiles = tiles(l.in.c, ql.kernel_i8, ql.kernel_bf16, p.x_off);
  p.h_k_tiles = tiles(U, ql.recurrent_i8, ql.recurrent_bf16, p.h_off);
  p.x_params = t.params.size();
  put_records(q, &ql.bias_i32, &ql.bias_f32, ql.scale_f32, t.params);
  p.h_params = t.params.size();
  put_records(q, nullptr, nullptr, ql.recurrent_scale_f32, t.params);
  p.map_params = t.params.size();
  for (const float alpha : {0.0f, l.alpha}) {
    put(t.params, 1.0f);
    put(t.params, 0.0f);
    put(t.params, alpha);
  }
  t.params.resize(align(t.params.size()));
  return p;
}

}  // namespace

Tiling tile(const nn::QuantizedModel& q, const ChipConfig& cfg) {
  const ir::Graph& g = q.graph;
  const std::uint32_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  Tiling t;
  t.plans.resize(g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const ir::Op& l = g.ops[i];
    if (!l.has_weights()) continue;
    const nn::QuantizedLayer& ql = q.layers[i];
    WeightedPlan& p = t.plans[i];
    const std::uint64_t K =
        l.kind == ir::OpKind::Dense ? l.in.size() : std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c;
    if (K > std::numeric_limits<std::uint32_t>::max() || l.out.c > 65535)
      ir::refuse(g, l, fmt::format("K = {} and N = {} must fit 32 and 16 bits", K, l.out.c));
    const bool depthwise = l.kind == ir::OpKind::DepthwiseConv2D;
    if (l.kind != ir::OpKind::Dense && K > 65535u + R)
      ir::refuse(g, l, fmt::format("a window of {} values exceeds the 16-bit k_first field", K));
    p.K = static_cast<std::uint32_t>(K);
    p.N = l.out.c;
    p.k_tiles = static_cast<std::uint32_t>(ceil_div(p.K, R));
    p.n_tiles = static_cast<std::uint32_t>(ceil_div(p.N, C));
    // Element (k, n) of the K x N matrix the array multiplies by: the kernel's, or for a
    // depthwise convolution its block-diagonal expansion (the kernel is [taps][cin * m]).
    const std::uint32_t cin = l.in.c, m = l.depth_multiplier;
    auto element = [&](std::uint32_t k, std::uint32_t n) -> std::optional<std::size_t> {
      if (!depthwise) return std::size_t{k} * p.N + n;
      if (n / m != k % cin) return std::nullopt;
      return std::size_t{k / cin} * p.N + n;
    };
    // Stored in the order the MXUs stream them when each column tile is one work item (a small
    // batch, where the layer is bound by the weights): the column tiles in groups of
    // `mxu.count`, one per MXU, and within a group K tile by K tile, each K tile's tiles of the
    // group side by side (docs/compiler.md, "Memory"). The MXUs' concurrent streams are then one
    // sequential stream, so they never take turns at one DRAM bank's rows.
    p.tile_off.assign(std::size_t{p.n_tiles} * p.k_tiles, kNoTile);
    for (std::uint32_t j0 = 0; j0 < p.n_tiles; j0 += cfg.mxu.count)
      for (std::uint32_t kt = 0; kt < p.k_tiles; ++kt)
        for (std::uint32_t j = j0; j < std::min(p.n_tiles, j0 + cfg.mxu.count); ++j) {
          const std::uint32_t kr = std::min(R, p.K - kt * R), nc = std::min(C, p.N - j * C);
          bool any = !depthwise;
          for (std::uint32_t k = 0; k < kr && !any; ++k)
            for (std::uint32_t n = 0; n < nc && !any; ++n)
              any = element(kt * R + k, j * C + n).has_value();
          if (!any) continue;
          p.tile_off[std::size_t{j} * p.k_tiles + kt] = t.weights.size();
          for (std::uint32_t k = 0; k < kr; ++k)
            for (std::uint32_t n = 0; n < nc; ++n) {
              const auto src = element(kt * R + k, j * C + n);
              if (q.act_type == DType::Int8)
                put(t.weights, src ? ql.kernel_i8[*src] : std::int8_t{0});
              else
                put(t.weights, src ? ql.kernel_bf16[*src] : std::uint16_t{0});
            }
          t.weights.resize(align(t.weights.size()));
        }
    // Activate's record per output channel: {bias, scale, shift} (isa::Activate).
    p.params_off = t.params.size();
    for (std::uint32_t c = 0; c < p.N; ++c) {
      if (q.act_type == DType::Bf16) {
        put(t.params, ql.bias_f32[c]);
        put(t.params, ql.scale_f32[c]);
        put(t.params, std::int32_t{0});
      } else if (ql.out_type == DType::Int8) {
        put(t.params, ql.bias_i32[c]);
        put(t.params, ql.multiplier[c]);
        put(t.params, ql.shift[c]);
      } else {
        put(t.params, ql.bias_i32[c]);
        put(t.params, ql.scale_f32[c]);
        put(t.params, std::int32_t{0});
      }
    }
    t.params.resize(align(t.params.size()));
  }
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == ir::OpKind::LSTM) t.lstm[i] = tile_lstm(q, i, R, C, t);
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const nn::QuantizedLayer& ql = q.layers[i];
    if (ql.map_a.empty()) continue;
    t.map_params_off[i] = t.params.size();
    for (std::size_t c = 0; c < ql.map_a.size(); ++c) {
      put(t.params, ql.map_a[c]);
      put(t.params, ql.map_b[c]);
      put(t.params, ql.map_alpha[c]);
    }
    t.params.resize(align(t.params.size()));
  }
  t.weights_addr = 0;
  t.params_addr = align(t.weights.size());
  t.end = align(t.params_addr + t.params.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].kind == ir::OpKind::Constant) {
      t.constant_addr[i] = t.end;
      t.end = align(t.end + q.layers[i].constant.size());
    }
    if (g.ops[i].kind == ir::OpKind::Embedding) {
      t.table_addr[i] = t.end;
      t.end = align(t.end + table_bytes(q, i).size());
    }
  }
  if (t.end > cfg.off_chip_memory.bytes)
    throw InputError(fmt::format(
        "{}: weights, parameters, constants and tables need {} bytes of off-chip memory; "
        "{} has {}",
        g.file, t.end, cfg.name, cfg.off_chip_memory.bytes));
  return t;
}

std::vector<std::uint8_t> table_bytes(const nn::QuantizedModel& q, std::size_t op) {
  const nn::QuantizedLayer& ql = q.layers[op];
  std::vector<std::uint8_t> b;
  if (q.act_type == DType::Int8)
    for (std::int8_t v : ql.kernel_i8) put(b, v);
  else
    for (std::uint16_t v : ql.kernel_bf16) put(b, v);
  return b;
}

}  // namespace tpu::compiler
