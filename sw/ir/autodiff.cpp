#include "sw/ir/autodiff.h"

#include <fmt/format.h>

#include <algorithm>

#include "hw/common/error.h"

namespace tpu::ir {

std::optional<GradOp> Backward::activation_gradient(std::size_t i) {
  const Act a = g_.ops[i].activation;
  switch (a) {
    case Act::Relu:
    case Act::Relu6:
    case Act::Sigmoid:
    case Act::Tanh:
      return GradOp{GradKind::Activation, i, {{Role::Value, i}, {Role::Gradient, i}}, {}, false, a};
    case Act::Softmax:
      cannot(i, "a softmax is trained only as the last layer, where the loss absorbs it");
      return std::nullopt;
    case Act::Linear:
    case Act::LeakyRelu:
    case Act::Elu: break;
  }
  cannot(i, fmt::format("fit has no gradient rule for the {} activation yet", name_of(a)));
  return std::nullopt;
}

TensorId Backward::pre_activation_gradient(std::size_t i) {
  const TensorId dy{Role::Gradient, i};
  if (i == loss_op_) return {Role::PreActivationGradient, i};
  if (g_.ops[i].activation == Act::Linear) return dy;
  const TensorId dz{Role::PreActivationGradient, i};
  if (auto op = activation_gradient(i)) {
    op->output = dz;
    ops_.push_back(std::move(*op));
  }
  return dz;
}

Backward::Backward(const Graph& g, std::size_t loss_op) : g_(g), loss_op_(loss_op) {
  for (const Op& l : g.ops) {
    bool d = !op_info(l.kind).params(l).empty();
    for (std::size_t x : l.inputs) d = d || (x != kGraphInput && depends_[x]);
    depends_.push_back(d);
  }
}

void Backward::to_input(std::size_t t, GradOp op) {
  // The images need no gradient, nor does anything computed from them alone (a Flatten or a
  // ZeroPadding2D of the input): no parameter is reached through it.
  if (t == kGraphInput || !depends_[t]) return;
  op.output = {Role::Gradient, t};
  op.accumulate = reached(t);
  ops_.push_back(std::move(op));
}

void Backward::to_parameter(std::size_t i, Param p, GradOp op) {
  op.output = {Role::ParameterGradient, i, p};
  ops_.push_back(std::move(op));
}

bool Backward::reached(std::size_t i) const {
  const TensorId dy{Role::Gradient, i};
  return std::any_of(ops_.begin(), ops_.end(), [&](const GradOp& o) { return o.output == dy; });
}

TrainingGraph differentiate(const Graph& g) {
  if (g.ops.empty()) throw InputError(g.file + ": the model has no layers to train");
  TrainingGraph t;
  t.loss_op = g.ops.size() - 1;
  const Op& last = g.ops[t.loss_op];
  const bool softmax_layer = last.kind == OpKind::Activation && last.activation == Act::Softmax;
  const bool fused_softmax = last.has_weights() && last.activation == Act::Softmax;
  if (!softmax_layer && !fused_softmax)
    throw InputError(fmt::format(
        "{}: fit trains a classifier: the loss is sparse categorical cross-entropy on the "
        "logits of a softmax, so the last layer must be Activation('softmax') or a layer with "
        "activation 'softmax'; {} ({}) is not",
        g.file, last.name, name_of(last.kind)));
  if (last.out.h != 1 || last.out.w != 1)
    throw InputError(
        fmt::format("{}: layer {} ({}): fit needs the softmax over a flat output of "
                    "classes (1x1xN), not {}",
                    g.file, last.name, name_of(last.kind), show_shape(last.out)));
  Backward b(g, t.loss_op);
  GradOp loss{GradKind::SoftmaxCrossEntropy, t.loss_op, {}, {}};
  if (softmax_layer) {
    if (last.inputs[0] == kGraphInput)
      throw InputError(
          fmt::format("{}: layer {} (Activation): the softmax reads the images "
                      "directly; there is nothing to train",
                      g.file, last.name));
    t.logits = {Role::Value, last.inputs[0]};
    loss.inputs = {t.logits, {Role::Labels}};
    b.to_input(last.inputs[0], std::move(loss));
  } else {
    t.logits = {Role::PreActivation, t.loss_op};
    loss.inputs = {t.logits, {Role::Labels}};
    loss.output = {Role::PreActivationGradient, t.loss_op};
    b.ops().push_back(std::move(loss));
  }
  for (std::size_t i = g.ops.size(); i-- > 0;) {
    if (softmax_layer && i == t.loss_op) continue;
    if (i != t.loss_op && !b.reached(i)) continue;
    op_info(g.ops[i].kind).grad(b, i);
  }
  if (!b.problems().empty()) {
    std::vector<std::pair<std::size_t, std::string>> problems = b.problems();
    std::sort(problems.begin(), problems.end());
    std::string list;
    for (const auto& [i, why] : problems)
      list += fmt::format("{}  layer {} ({}): {}", list.empty() ? "" : "\n", g.ops[i].name,
                          name_of(g.ops[i].kind), why);
    throw InputError(fmt::format("{}: fit cannot train {} layer{}:\n{}", g.file, problems.size(),
                                 problems.size() == 1 ? "" : "s", list));
  }
  t.ops = std::move(b.ops());
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    for (const ParamSpec& spec : op_info(g.ops[i].kind).params(g.ops[i])) {
      const TensorId grad{Role::ParameterGradient, i, spec.param};
      if (std::any_of(t.ops.begin(), t.ops.end(),
                      [&](const GradOp& o) { return o.output == grad; }))
        t.parameters.push_back({Role::Parameter, i, spec.param});
    }
  return t;
}

std::string_view name_of(GradKind k) {
  switch (k) {
    case GradKind::SoftmaxCrossEntropy: return "softmax_cross_entropy";
    case GradKind::Activation: return "activation_grad";
    case GradKind::Pass: return "pass";
    case GradKind::Pool: return "pool_grad";
    case GradKind::ConvInput: return "conv_input_grad";
    case GradKind::ConvKernel: return "conv_kernel_grad";
    case GradKind::DenseInput: return "dense_input_grad";
    case GradKind::DenseKernel: return "dense_kernel_grad";
    case GradKind::Bias: return "bias_grad";
    case GradKind::BatchNormGamma: return "batch_norm_gamma_grad";
    case GradKind::BatchNormInput: return "batch_norm_input_grad";
    case GradKind::Crop: return "crop";
  }
  return "?";
}

std::string describe(const Graph& g, const TensorId& t) {
  const std::string op = t.op == kGraphInput   ? std::string("input")
                         : t.op < g.ops.size() ? g.ops[t.op].name
                                               : std::string("?");
  const auto param = [&] {
    for (const ParamSpec& s : op_info(g.ops[t.op].kind).params(g.ops[t.op]))
      if (s.param == t.param) return std::string(s.suffix);
    return std::string("?");
  };
  switch (t.role) {
    case Role::Value: return op;
    case Role::PreActivation: return op + " before its activation";
    case Role::Gradient: return "gradient of " + op;
    case Role::PreActivationGradient: return "gradient of " + op + " before its activation";
    case Role::Parameter: return op + "/" + param();
    case Role::ParameterGradient: return "gradient of " + op + "/" + param();
    case Role::Labels: return "labels";
    case Role::LossRecord: return "loss records";
  }
  return "?";
}

}  // namespace tpu::ir
