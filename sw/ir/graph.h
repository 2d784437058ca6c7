// The graph IR every model becomes (docs/compiler.md, "The graph IR"): operations in an order
// where every operand comes first, each producing one tensor; a tensor is named by the index of
// the operation that produces it, or kGraphInput for the images the host streams in. Tensors are
// NHWC per image (channels last, as Keras) with a shape and an element type; operations carry
// Keras's layer names and arguments, and their parameters live beside the graph in Keras's
// layouts (Conv2D kernel [kh][kw][cin][cout], Dense kernel [in][out]; sw/nn/weights.h). What an
// operation kind means — arity, shape inference, MACs — is its entry in the table of ops.h.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tpu::ir {

struct Shape {
  std::uint32_t h = 1, w = 1, c = 1;  // per image
  [[nodiscard]] std::uint64_t size() const { return std::uint64_t{h} * w * c; }
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.h == b.h && a.w == b.w && a.c == b.c;
  }
};

enum class OpKind {
  Conv2D,
  MaxPooling2D,
  AveragePooling2D,
  Activation,
  Flatten,
  // Keras's Reshape: the same elements in the same NHWC order under another shape (a view, as
  // Flatten).
  Reshape,
  Dense,
  BatchNormalization,
  ZeroPadding2D,
  GlobalAveragePooling2D,
  GlobalMaxPooling2D,
  Add,
  // The identity at inference: Keras's Dropout, SpatialDropout1D/2D/3D, GaussianDropout,
  // AlphaDropout and GaussianNoise. Read so a user's model loads as written; removed before a
  // model runs (inference_graph, rewrite.h).
  Dropout,
  // A tensor the chip holds in off-chip memory, the same for every image, with seeded random
  // values: the input of a SCALE-Sim topology row, which does not read the previous row's output.
  Constant,
  // Keras's DepthwiseConv2D: each input channel convolved with its own depth_multiplier filters;
  // output channel c * depth_multiplier + j reads input channel c only.
  DepthwiseConv2D,
  // Keras's SeparableConv2D: a DepthwiseConv2D then a 1x1 Conv2D (pointwise) with the bias and
  // activation; the compiler splits it into the two (rewrite.h).
  SeparableConv2D,
  // Keras's Concatenate along the channels (the last axis).
  Concatenate,
  // Keras's Multiply and Subtract: elementwise, like Add (Subtract takes exactly two inputs).
  Multiply,
  Subtract,
  // Keras's PReLU: x > 0 ? x : alpha * x with a learned alpha per channel.
  PReLU,
  // Keras's Embedding: each of the input's token ids (a sequence of `in.c` ids) looked up in a
  // table of input_dim rows of `filters` values; a 1 x T x filters sequence out.
  Embedding,
  // Keras's LSTM over a 1 x T x F sequence: units = filters, gates i, f, c, o in Keras's order;
  // the last step's state (1 x 1 x units) or every step's (1 x T x units, return_sequences).
  LSTM,
};

// Op::inputs entry for the graph's input (the images the host streams in).
inline constexpr std::size_t kGraphInput = std::numeric_limits<std::size_t>::max();
// LeakyRelu and Elu take Op::alpha (Keras's negative_slope and alpha).
enum class Act { Linear, Relu, Relu6, Sigmoid, Tanh, Softmax, LeakyRelu, Elu };
// Explicit: pad_top/bottom/left/right zeros around the input (a convolution that a ZeroPadding2D
// was folded into; never read from a model file).
enum class Padding { Valid, Same, Explicit };
inline constexpr std::size_t kNoOp = std::numeric_limits<std::size_t>::max();

struct Op {
  std::string name;  // unique within the graph (Keras: "conv2d", "dense_1", ...)
  OpKind kind = OpKind::Flatten;
  // Conv2D (and DepthwiseConv2D, SeparableConv2D): filters, kernel, strides, padding, use_bias,
  // activation.
  // Pooling: kernel (= pool_size), strides, padding (valid only on the chip).
  // Dense: filters (= units), use_bias, activation. Activation: activation.
  std::uint32_t filters = 0;
  std::uint32_t kernel_h = 1, kernel_w = 1;
  std::uint32_t stride_h = 1, stride_w = 1;
  Padding padding = Padding::Valid;
  bool use_bias = true;
  Act activation = Act::Linear;
  // Conv2D, DepthwiseConv2D, SeparableConv2D: the distance between window taps.
  std::uint32_t dilation_h = 1, dilation_w = 1;
  // DepthwiseConv2D, SeparableConv2D: output channels per input channel.
  std::uint32_t depth_multiplier = 1;
  // Act::LeakyRelu's negative slope, Act::Elu's alpha.
  float alpha = 0.0f;
  // Embedding: rows of its table (Keras's input_dim; its output_dim is `filters`).
  std::uint32_t input_dim = 0;
  // LSTM: units = filters; `activation` (tanh) on the cell, recurrent_activation (sigmoid) on
  // the gates; every step's output or the last.
  Act recurrent_activation = Act::Sigmoid;
  bool return_sequences = false;
  // Reshape: Keras's target_shape (per image, 1 to 3 dimensions, at most one -1).
  std::vector<std::int64_t> target_shape;
  // ZeroPadding2D, and Conv2D with Padding::Explicit: rows and columns of zeros added on each
  // side.
  std::uint32_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  // BatchNormalization: y = gamma * (x - moving_mean) / sqrt(moving_variance + epsilon) + beta;
  // use_bias is Keras's `center` (beta), scale its `scale` (gamma). Training updates the moving
  // statistics with `momentum` (Keras's default 0.99).
  float epsilon = 1e-3f;
  float momentum = 0.99f;
  bool scale = true;
  // Constant: the seed of its values (uniform in [-1, 1)).
  std::uint64_t seed = 0;
  // The tensors it reads, in operand order (indices into Graph::ops, or kGraphInput); Add has
  // two or more, Constant none, every other kind one.
  std::vector<std::size_t> inputs;
  Shape in, out;  // resolved by the loader; `in` is the first input's shape
  // Set by the compiler's rewrites (sw/compiler/rewrite.h), which leave every operation standing
  // for one of the graph they started from: `origin`, the operation whose row of the report it
  // counts toward, and `value_of`, the one whose float output this operation's output is before
  // its activation (a BatchNormalization folded into it). kNoOp before the rewrites.
  std::size_t origin = kNoOp, value_of = kNoOp;

  // A kernel (and bias) the MXU multiplies by; tensors in the weights file (weights.h). From the
  // operation table (ops.h), as is everything a kind means.
  [[nodiscard]] bool has_weights() const;
  [[nodiscard]] bool has_parameters() const;
  // The output is the input's elements under another shape (Flatten, Reshape): nothing computed.
  [[nodiscard]] bool is_view() const;
  // Multiply-accumulates per image.
  [[nodiscard]] std::uint64_t macs() const;
};

struct Graph {
  std::string name;
  std::string file;
  Shape input;
  std::vector<Op> ops;
  [[nodiscard]] Shape output() const { return ops.empty() ? input : ops.back().out; }
  [[nodiscard]] std::uint64_t macs_per_image() const;
};

// Whether the graph's input holds token ids (an Embedding reads it) rather than values.
bool input_is_token_ids(const Graph& g);

// For each operation, the operations that read its tensor, in order.
std::vector<std::vector<std::size_t>> consumers(const Graph& g);

std::string_view name_of(OpKind k);
std::string_view name_of(Act a);

}  // namespace tpu::ir
