// Autodiff as a graph pass (docs/training.md, "The training graph"): from a forward graph that
// ends in a softmax, the loss — sparse categorical cross-entropy on the softmax's logits, as Keras
// computes it for a softmax output — and the backward operations, in the order they run, down
// to every trainable parameter. What each operation kind contributes is its gradient rule, an
// entry of the operation table (ops.h, OpInfo::grad), beside its shape inference and its MACs.
//
// Tensors of the training step are named by what they hold (TensorId): a forward value, the
// gradient of one, or the gradient of a parameter. Per-image tensors (values, their gradients,
// the labels, the loss records) have one entry per image of a batch, NHWC as the forward's;
// parameter gradients are sums over the whole batch in the parameter's Keras layout.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "sw/ir/graph.h"
#include "sw/ir/ops.h"

namespace tpu::ir {

enum class Role {
  Value,          // op's output (op = kGraphInput: the images the host streams in)
  PreActivation,  // op's output before its own activation (Conv2D, Dense with an activation)
  Gradient,       // dLoss / d(op's output)
  PreActivationGradient,  // dLoss / d(op's output before its activation)
  Parameter,              // one of op's parameters (param)
  ParameterGradient,      // dLoss / d(that parameter), summed over the batch
  Labels,                 // the second input: one class id per image
  LossRecord,  // per image: {loss, correct} (correct: 1 if the first argmax is the label)
};

struct TensorId {
  Role role = Role::Value;
  std::size_t op = kNoOp;
  Param param = Param::Kernel;  // Parameter, ParameterGradient
  friend bool operator==(const TensorId& a, const TensorId& b) {
    return a.role == b.role && a.op == b.op && (!has_param(a) || a.param == b.param);
  }
  friend bool operator<(const TensorId& a, const TensorId& b) {
    const auto key = [](const TensorId& t) {
      return std::tuple(int(t.role), t.op, has_param(t) ? int(t.param) : 0);
    };
    return key(a) < key(b);
  }
  static bool has_param(const TensorId& t) {
    return t.role == Role::Parameter || t.role == Role::ParameterGradient;
  }
};

// One operation of the backward pass. Its semantics, per kind, with the forward operation `op`
// supplying the geometry and the activation (docs/training.md, "Backward operations"):
enum class GradKind {
  // inputs {logits, labels}; output the logits' gradient (softmax(z) - onehot(label)) / batch,
  // and the loss records (Backward::loss_records). TensorFlow's
  // SparseSoftmaxCrossEntropyWithLogits.
  SoftmaxCrossEntropy,
  // inputs {y (the activation's output), dy}; output dy * f'(x) written as a function of y:
  // relu y > 0, relu6 0 < y < 6, sigmoid y (1 - y), tanh 1 - y^2. `act` names f.
  Activation,
  // inputs {dy}; output dy: a view (Flatten, Reshape) or an Add operand.
  Pass,
  // inputs {x (the pooling's input), dy}; output dx. Max: dy goes to the first maximum of each
  // window; average: dy / (positions inside the image) to each. Global pools are pools whose
  // window is the whole image.
  Pool,
  // Conv2D: inputs {dz, kernel}; output dx, the convolution of dz dilated by the stride with the
  // spatially flipped kernel, input and output channels swapped.
  ConvInput,
  // Conv2D: inputs {x, dz}; output dW[ky][kx][ci][co] = sum over images and output pixels of
  // x at the tap times dz.
  ConvKernel,
  // Dense: inputs {dz, kernel}; output dx = dz W^T.
  DenseInput,
  // Dense: inputs {x, dz}; output dW = sum over images of x^T dz.
  DenseKernel,
  // inputs {dz}; output db[c] = sum over images and pixels of dz[..][c] (also BatchNormalization's
  // beta).
  Bias,
  // BatchNormalization in training mode, its statistics over the pass's images and pixels per
  // channel (numerics/batch_norm.h): inputs {x, dy}; output dgamma[c] = sum of dy (x - mean) times
  // rsqrt(variance + epsilon).
  BatchNormGamma,
  // inputs {x, dy}; output dx = (gamma rsqrt / M) (M dy - sum dy - (x - mean) sum(dy (x - mean)) /
  // (variance + epsilon)), M the rows per channel. Gamma is 1 for a layer without scale.
  BatchNormInput,
  // ZeroPadding2D: inputs {dy}; output dx, dy without the padded border: dx at input pixel (y, x)
  // is dy at (y + pad_top, x + pad_left).
  Crop,
};

struct GradOp {
  GradKind kind;
  std::size_t op;  // the forward operation it differentiates
  std::vector<TensorId> inputs;
  TensorId output;
  // Add into `output` instead of writing it: a tensor read by several operations gets one
  // contribution from each, the first written, the later ones added, in the order they run.
  bool accumulate = false;
  Act act = Act::Linear;  // GradKind::Activation
};

struct TrainingGraph {
  // The operation whose softmax the loss absorbs (the last one), and the logits it reads: the
  // value of an Activation(softmax)'s input, or the pre-activation of a Dense or Conv2D with a
  // softmax activation.
  std::size_t loss_op = kNoOp;
  TensorId logits;
  std::vector<GradOp> ops;  // the backward pass, in the order it runs (the loss first)
  // The trainable parameters, in the forward's order (op, then the weights file's order).
  std::vector<TensorId> parameters;
};

// Builds the backward pass of `g`. Throws InputError naming the model file and every layer that
// cannot be trained (no gradient rule, or a softmax that is not the last operation) in one
// message, as the importers name every unsupported layer.
TrainingGraph differentiate(const Graph& g);

std::string_view name_of(GradKind k);
// "gradient of conv2d", "conv2d/kernel gradient", ... for messages and reports.
std::string describe(const Graph& g, const TensorId& t);

// What a gradient rule (OpInfo::grad) writes through: it reads which gradient arrives at the
// operation's output and adds backward operations.
class Backward {
 public:
  Backward(const Graph& g, std::size_t loss_op);

  // The gradient at op i's output after its own activation is undone: {Gradient, i} for a
  // linear activation; the loss's output for the operation whose softmax the loss absorbed;
  // otherwise an Activation operation is added and its output returned.
  TensorId pre_activation_gradient(std::size_t i);
  // The Activation operation that undoes op i's activation (output not yet set), or nothing
  // when the activation has no gradient rule (said through cannot()).
  std::optional<GradOp> activation_gradient(std::size_t i);
  // Adds `op` with its output the gradient of forward tensor `t` (an op index, or kGraphInput:
  // then nothing is added, as the images need no gradient, nor anything computed from them alone
  // such as a Flatten or a ZeroPadding2D of the input: no parameter lies behind it). Sets
  // accumulate when the gradient already has a contribution.
  void to_input(std::size_t t, GradOp op);
  // Adds `op` with its output the gradient of op i's parameter p.
  void to_parameter(std::size_t i, Param p, GradOp op);
  // A rule that cannot differentiate its operation says why; differentiate() gathers them.
  void cannot(std::size_t i, std::string why) { problems_.push_back({i, std::move(why)}); }

  [[nodiscard]] const Graph& graph() const { return g_; }
  [[nodiscard]] std::vector<GradOp>& ops() { return ops_; }
  [[nodiscard]] const std::vector<std::pair<std::size_t, std::string>>& problems() const {
    return problems_;
  }
  [[nodiscard]] bool reached(std::size_t i) const;

 private:
  const Graph& g_;
  std::size_t loss_op_;
  std::vector<GradOp> ops_;
  std::vector<std::pair<std::size_t, std::string>> problems_;
  std::vector<bool> depends_;  // per operation: a parameter lies behind its output
};

}  // namespace tpu::ir
