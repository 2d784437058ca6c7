// What each layer kind means, in one table: its name, how many inputs it reads, whether it has
// weights, its output shape and its multiply-accumulates (docs/models.md, "Operation kinds").
// The importers (model.cpp) only read arguments; every shape comes from here, so a new kind is
// an entry in this table rather than a case in each importer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sw/ir/graph.h"

namespace tpu::ir {

// Bounds that keep every size product inside 64 bits and every tensor addressable by 32-bit
// element counts (the weights file and the compiler use 32-bit dimensions).
inline constexpr std::uint32_t kMaxDim = 65536;
inline constexpr std::uint64_t kMaxTensorElements = std::uint64_t{1} << 31;
// Rows of an Embedding table (token ids must fit the chip's int32 indices with room to spare).
inline constexpr std::uint32_t kMaxEmbeddingRows = std::uint32_t{1} << 24;

// Why a layer's output shape cannot be inferred: the argument at fault — a Keras argument name
// ("kernel_size", "padding"), kInputsArgument for the inputs themselves or kClassArgument for
// the class — and what is wrong, in words a user can act on.
struct ShapeProblem {
  std::string argument;
  std::string message;
};
inline constexpr std::string_view kInputsArgument = "inbound_nodes";
inline constexpr std::string_view kClassArgument = "class_name";

using InferredShape = std::variant<Shape, ShapeProblem>;

// A parameter tensor of an operation: the LayerWeights field that holds it (sw/nn/weights.h),
// its name in the weights file (<operation name>/<suffix>, Keras's), its Keras shape, and how
// random weights draw it.
enum class Param {
  Kernel,  // Conv2D / Dense kernel, DepthwiseConv2D's depthwise_kernel, Embedding's table
  Bias,
  Gamma,
  Beta,
  MovingMean,
  MovingVariance,
  PointwiseKernel,  // SeparableConv2D
  RecurrentKernel,  // LSTM
  Alpha,            // PReLU
};
enum class Init {
  Glorot,  // Keras's glorot_uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out))
  Zeros,
  Ones,
  Embedding,  // Keras's Embedding default: U(-0.05, 0.05)
  LstmBias,   // zeros, the forget gate's quarter ones (Keras's unit_forget_bias)
};
struct ParamSpec {
  Param param;
  std::string_view suffix;
  std::vector<std::uint32_t> dims;
  Init init = Init::Zeros;
  double fan_in = 0, fan_out = 0;  // Init::Glorot
  [[nodiscard]] std::uint64_t elements() const {
    std::uint64_t n = 1;
    for (std::uint32_t d : dims) n *= d;
    return n;
  }
};

class Backward;  // autodiff.h

struct OpInfo {
  OpKind kind;
  std::string_view name;  // Keras's class name
  std::size_t min_inputs, max_inputs;
  bool weights;     // a kernel (and bias) the MXU multiplies by
  bool parameters;  // tensors in the weights file (weights.h)
  // The output is the input's elements in the same order under another shape: nothing is
  // computed, the tensor passes on (Flatten, Reshape).
  bool view;
  // The output shape of `l` (its arguments read) for inputs of these shapes, in the order of
  // l.inputs; their count is already within [min_inputs, max_inputs].
  InferredShape (*infer)(const Op& l, const std::vector<Shape>& inputs);
  // Multiply-accumulates per image, shapes resolved.
  std::uint64_t (*macs)(const Op& l);
  // Its parameter tensors, in the weights file's order, shapes resolved.
  std::vector<ParamSpec> (*params)(const Op& l);
  // Its gradient rule (autodiff.h): given the gradient at operation i's output, adds the
  // backward operations that carry it to i's inputs and parameters, or says why it cannot.
  void (*grad)(Backward& b, std::size_t i);
};

const OpInfo& op_info(OpKind k);
const std::vector<OpInfo>& op_infos();

// Sets l.in (the first input's shape; l.out for a kind without inputs) and l.out from the
// inputs' shapes, or returns the problem and leaves l's shapes alone.
std::optional<ShapeProblem> infer_shapes(Op& l, const std::vector<Shape>& inputs);

std::string show_shape(const Shape& s);

// Throws InputError "<file>: layer <name> (<kind>): <why>": an operation the chip cannot run.
[[noreturn]] void refuse(const Graph& g, const Op& op, const std::string& why);

// The per-layer tables keyed by operation kind — the float and chip semantics of sw/nn, the
// lowering of sw/compiler — look their entries up here: an entry is a struct whose first member
// is `OpKind kind`. A kind without an entry is a bug in tpusim (every table is tested complete
// against op_infos()).
template <class Entry>
const Entry* find_entry(const std::vector<Entry>& table, OpKind k) {
  for (const Entry& e : table)
    if (e.kind == k) return &e;
  return nullptr;
}
template <class Entry>
const Entry& entry_for(const std::vector<Entry>& table, OpKind k, std::string_view table_name) {
  if (const Entry* e = find_entry(table, k)) return *e;
  throw std::logic_error(std::string(name_of(k)) + " has no entry in the " +
                         std::string(table_name) + " table");
}

// What the references and the compiler say if an identity reaches them: a bug in tpusim.
inline constexpr const char* kIdentityRemoved =
    "a Dropout layer reached the references or the compiler; compiler::remove_identities removes "
    "them first";

// The zeros a windowed operation (Conv2D, pooling) reads around its input: none for "valid",
// TensorFlow's split for "same" (the total max((out - 1) * stride + kernel - in, 0), the smaller
// half before), the operation's own for Padding::Explicit. Shapes resolved.
struct Pads {
  std::uint32_t top = 0, bottom = 0, left = 0, right = 0;
};
Pads window_pads(const Op& op);
// The window's extent on the input with its dilation: (kernel - 1) * dilation + 1.
std::uint32_t dilated_kernel_h(const Op& op);
std::uint32_t dilated_kernel_w(const Op& op);

}  // namespace tpu::ir
