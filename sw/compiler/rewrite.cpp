#include "sw/compiler/rewrite.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <stdexcept>
#include <utility>

#include "hw/common/error.h"
#include "sw/ir/ops.h"

namespace tpu::compiler {
namespace {

using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::kNoOp;
using ir::Op;
using ir::OpKind;

// Where removed operations' readers read instead: an operation before it, or kGraphInput.
using Forward = std::vector<std::optional<std::size_t>>;

// Removes each operation i with forward[i] set; its readers read *forward[i] instead. `weights`,
// when given, follows the graph.
void drop(Graph& g, nn::Weights* weights, const Forward& forward) {
  std::vector<std::size_t> index(g.ops.size(), kNoOp);
  auto remap = [&](std::size_t p) { return p == kGraphInput ? p : index[p]; };
  std::vector<Op> kept;
  std::vector<nn::LayerWeights> kept_weights;
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    if (forward[i]) {
      index[i] = remap(*forward[i]);
      continue;
    }
    Op& op = g.ops[i];
    for (std::size_t& p : op.inputs) p = remap(p);
    index[i] = kept.size();
    kept.push_back(std::move(op));
    if (weights) kept_weights.push_back(std::move(weights->layers[i]));
  }
  if (!kept.empty() && index.back() != kept.size() - 1)
    throw std::logic_error(fmt::format("{}: a rewrite moved the output of the graph", g.file));
  g.ops = std::move(kept);
  if (weights) weights->layers = std::move(kept_weights);
}

// Whether c is the only reader of p's tensor.
bool only_reader(const std::vector<std::vector<std::size_t>>& readers, std::size_t p,
                 std::size_t c) {
  return p != kGraphInput && readers[p].size() == 1 && readers[p][0] == c;
}

// Whether removing operation i, its readers reading `replacement`, keeps the graph's output
// where it is: the output is the last operation.
bool keeps_output(const Graph& g, std::size_t i, std::size_t replacement) {
  return i + 1 != g.ops.size() || replacement + 1 == i;
}

bool monotonic(Act a) { return a == Act::Relu || a == Act::Relu6 || a == Act::Linear; }

// The functions Activate applies (isa::ActFunc); LeakyReLU and ELU run on their own.
bool activate_has(Act a) {
  return a == Act::Relu || a == Act::Relu6 || a == Act::Sigmoid || a == Act::Tanh ||
         a == Act::Softmax;
}

}  // namespace

Graph remove_identities(Graph g) {
  Forward forward(g.ops.size());
  std::vector<std::size_t> source(g.ops.size());  // where each operation's tensor comes from
  std::size_t last_kept = kNoOp;
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    if (op.kind == OpKind::Dropout) {
      forward[i] = op.inputs[0];
      source[i] = op.inputs[0] == kGraphInput ? kGraphInput : source[op.inputs[0]];
    } else {
      source[i] = last_kept = i;
    }
  }
  if (last_kept == kNoOp)
    throw InputError(
        fmt::format("{}: the model computes nothing at inference: every layer is "
                    "the identity (Dropout and its kin)",
                    g.file));
  if (const std::size_t out = source.back(); out != last_kept)
    throw InputError(fmt::format(
        "{}: layer {} ({}), the model's output, is the identity at inference and reads {}, which "
        "is not the last layer that remains; tpusim's output is the last layer",
        g.file, g.ops.back().name, ir::name_of(OpKind::Dropout),
        out == kGraphInput ? std::string("the model's input") : g.ops[out].name));
  drop(g, nullptr, forward);
  return g;
}

Module start(const Graph& g, const nn::Weights& w) {
  Module m{g, w};
  for (std::size_t i = 0; i < m.graph.ops.size(); ++i)
    m.graph.ops[i].origin = m.graph.ops[i].value_of = i;
  return m;
}

void split_separable(Module& m) {
  Graph& g = m.graph;
  std::vector<Op> ops;
  std::vector<nn::LayerWeights> weights;
  std::vector<std::size_t> index(g.ops.size());
  auto remap = [&](std::size_t p) { return p == kGraphInput ? p : index[p]; };
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    Op op = std::move(g.ops[i]);
    nn::LayerWeights w = std::move(m.weights.layers[i]);
    for (std::size_t& p : op.inputs) p = remap(p);
    if (op.kind == OpKind::SeparableConv2D) {
      Op dw = op;
      dw.kind = OpKind::DepthwiseConv2D;
      dw.name = op.name + "/depthwise";
      dw.out.c = op.in.c * op.depth_multiplier;
      dw.filters = 0;
      dw.activation = Act::Linear;
      dw.use_bias = false;
      dw.value_of = kNoOp;  // a tensor the imported graph never had
      nn::LayerWeights dww;
      dww.kernel = std::move(w.kernel);
      ops.push_back(std::move(dw));
      weights.push_back(std::move(dww));
      Op pw = std::move(op);
      pw.kind = OpKind::Conv2D;
      pw.inputs = {ops.size() - 1};
      pw.in = ops.back().out;
      pw.kernel_h = pw.kernel_w = pw.stride_h = pw.stride_w = 1;
      pw.dilation_h = pw.dilation_w = 1;
      pw.padding = ir::Padding::Valid;
      w.kernel = std::move(w.pointwise);
      w.pointwise.clear();
      op = std::move(pw);
    }
    index[i] = ops.size();
    ops.push_back(std::move(op));
    weights.push_back(std::move(w));
  }
  g.ops = std::move(ops);
  m.weights.layers = std::move(weights);
}

void fold_batch_norm(Module& m) {
  Graph& g = m.graph;
  const auto readers = ir::consumers(g);
  Forward forward(g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const Op& bn = g.ops[i];
    if (bn.kind != OpKind::BatchNormalization) continue;
    const std::size_t p = bn.inputs[0];
    // Anywhere else it stays: a per-channel scale and shift on the vector unit.
    if (p == kGraphInput || !g.ops[p].has_weights() || !only_reader(readers, p, i) ||
        g.ops[p].activation != Act::Linear || !keeps_output(g, i, p))
      continue;
    Op& producer = g.ops[p];
    const nn::LayerWeights& bw = m.weights.layers[i];
    nn::LayerWeights& w = m.weights.layers[p];
    const std::uint32_t cout = producer.out.c;
    w.bias.resize(cout, 0.0f);
    for (std::uint32_t c = 0; c < cout; ++c) {
      const float inv = bw.gamma[c] / std::sqrt(bw.moving_variance[c] + bn.epsilon);
      w.bias[c] = w.bias[c] * inv + (bw.beta[c] - bw.moving_mean[c] * inv);
      for (std::size_t k = c; k < w.kernel.size(); k += cout) w.kernel[k] *= inv;
    }
    producer.use_bias = true;
    producer.value_of = bn.value_of;
    forward[i] = p;
  }
  drop(g, &m.weights, forward);
}

void fuse_activations(Module& m) {
  Graph& g = m.graph;
  const auto readers = ir::consumers(g);
  Forward forward(g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const Op& act = g.ops[i];
    if (act.kind != OpKind::Activation || !activate_has(act.activation)) continue;
    // Walk up through what commutes with the function, each step read by nothing else; an
    // activation fused already passes its input on.
    std::size_t j = act.inputs[0], reader = i;
    bool through_pool = false;
    while (j != kGraphInput && only_reader(readers, j, reader)) {
      const Op& k = g.ops[j];
      if (k.is_view() || forward[j] || k.kind == OpKind::MaxPooling2D) {
        through_pool = through_pool || k.kind == OpKind::MaxPooling2D;
        reader = j;
        j = k.inputs[0];
        continue;
      }
      break;
    }
    if (j == kGraphInput || !only_reader(readers, j, reader) || !g.ops[j].has_weights()) continue;
    if (g.ops[j].activation != Act::Linear) continue;
    if (through_pool && !monotonic(act.activation)) continue;
    if (!keeps_output(g, i, act.inputs[0])) continue;
    g.ops[j].activation = act.activation;
    forward[i] = act.inputs[0];
  }
  drop(g, &m.weights, forward);
}

void remove_linear_activations(Module& m) {
  Graph& g = m.graph;
  Forward forward(g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    if (op.kind == OpKind::Activation && op.activation == Act::Linear &&
        keeps_output(g, i, op.inputs[0]))
      forward[i] = op.inputs[0];
  }
  drop(g, &m.weights, forward);
}

void fold_zero_padding(Module& m) {
  Graph& g = m.graph;
  const auto readers = ir::consumers(g);
  Forward forward(g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const Op& zp = g.ops[i];
    if (zp.kind != OpKind::ZeroPadding2D || readers[i].empty()) continue;
    bool convs = true;
    for (std::size_t r : readers[i])
      convs =
          convs && (g.ops[r].kind == OpKind::Conv2D || g.ops[r].kind == OpKind::DepthwiseConv2D);
    if (!convs) continue;
    for (std::size_t r : readers[i]) {
      Op& conv = g.ops[r];
      const ir::Pads own = ir::window_pads(conv);
      conv.padding = ir::Padding::Explicit;
      conv.pad_top = zp.pad_top + own.top, conv.pad_bottom = zp.pad_bottom + own.bottom;
      conv.pad_left = zp.pad_left + own.left, conv.pad_right = zp.pad_right + own.right;
      conv.in = zp.in;
    }
    forward[i] = zp.inputs[0];
  }
  drop(g, &m.weights, forward);
}

const std::vector<RewritePass>& rewrite_passes() {
  static const std::vector<RewritePass> passes = {
      {"split-separable", split_separable},
      {"fold-batch-norm", fold_batch_norm},
      {"fuse-activations", fuse_activations},
      {"remove-linear-activations", remove_linear_activations},
      {"fold-zero-padding", fold_zero_padding},
  };
  return passes;
}

void split_int8_activations(Module& m) {
  Graph& g = m.graph;
  // The last weighted operation gives fp32 when only views of it follow (nn::quantize).
  std::size_t last = g.ops.size();
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].has_weights()) last = i;
  bool ends = last < g.ops.size();
  for (std::size_t i = last + 1; i < g.ops.size() && ends; ++i) ends = g.ops[i].is_view();
  std::vector<Op> ops;
  std::vector<nn::LayerWeights> weights;
  std::vector<std::size_t> index(g.ops.size());
  auto remap = [&](std::size_t p) { return p == kGraphInput ? p : index[p]; };
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    Op op = std::move(g.ops[i]);
    for (std::size_t& p : op.inputs) p = remap(p);
    const bool split = op.has_weights() && !(ends && i == last) && op.activation != Act::Linear &&
                       op.activation != Act::Relu && op.activation != Act::Relu6;
    if (!split) {
      index[i] = ops.size();
      ops.push_back(std::move(op));
      weights.push_back(std::move(m.weights.layers[i]));
      continue;
    }
    Op act;
    act.kind = OpKind::Activation;
    act.name = op.name + "/activation";
    act.activation = op.activation;
    act.alpha = op.alpha;
    act.in = act.out = op.out;
    act.origin = op.origin;
    act.value_of = op.value_of;  // the activated value is the imported operation's
    op.activation = Act::Linear;
    op.value_of = kNoOp;  // the value before it was never observed: calibrate on this graph
    ops.push_back(std::move(op));
    weights.push_back(std::move(m.weights.layers[i]));
    act.inputs = {ops.size() - 1};
    index[i] = ops.size();
    ops.push_back(std::move(act));
    weights.emplace_back();
  }
  g.ops = std::move(ops);
  m.weights.layers = std::move(weights);
}

Module rewrite(const Graph& g, const nn::Weights& w, DType input_type,
               const PassObserver& observe) {
  Module m = start(g, w);
  for (const RewritePass& pass : rewrite_passes()) {
    pass.run(m);
    if (observe) observe(pass.name, m);
  }
  if (input_type == DType::Int8) {
    split_int8_activations(m);
    if (observe) observe("split-int8-activations", m);
  }
  return m;
}

}  // namespace tpu::compiler
