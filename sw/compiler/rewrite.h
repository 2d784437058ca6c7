// The graph rewrites (docs/compiler.md, "Passes"): functions from a graph and its parameters to a
// graph and its parameters that compute the same function with fewer operations for the chip. They
// hold for every chip; the quantization, the quantized reference and the code generator see only
// their result. Each states what it requires and what it guarantees; rewrite() runs them in order.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "hw/common/dtype.h"
#include "sw/ir/graph.h"
#include "sw/nn/weights.h"

namespace tpu::compiler {

// A graph with its parameters: weights.layers[i] belongs to graph.ops[i].
struct Module {
  ir::Graph graph;
  nn::Weights weights;
};

// The graph as inference computes it: every identity at inference (Dropout and its kin) removed,
// its readers reading its input instead. The report's rows are this graph's operations. Throws
// InputError when nothing but identities is left, or when the model's output is an identity whose
// input is not the last operation that remains (the output would move).
ir::Graph remove_identities(ir::Graph g);

// Requires: identities removed. Guarantees: each operation's origin and value_of name itself.
Module start(const ir::Graph& g, const nn::Weights& w);

// Each SeparableConv2D becomes a DepthwiseConv2D "<name>/depthwise" (its depthwise kernel, no
// bias, linear) and a 1x1 Conv2D under its own name (its pointwise kernel, bias and activation).
// The depthwise half's tensor is new: its value_of is kNoOp (it calibrates on the rewritten
// graph).
void split_separable(Module& m);

// Each BatchNormalization that follows a weighted operation with a linear activation, which
// nothing else reads, is folded into its kernel and bias (per output channel c, inv = gamma[c] /
// sqrt(moving_variance[c] + epsilon): W' = W * inv, b' = b * inv + beta[c] - moving_mean[c] * inv,
// in fp32) and removed; the weighted operation's value_of becomes the normalisation's. Any other
// BatchNormalization stays (the chips apply it as a per-channel scale and shift).
void fold_batch_norm(Module& m);

// Each Activation that Activate can apply (ReLU, ReLU6, sigmoid, tanh, softmax) whose input is a
// weighted operation with a linear activation — directly
// or through views and, for monotonic functions (ReLU, ReLU6), max pools, each read by nothing
// else — becomes that operation's activation and is removed (max pooling commutes with a
// non-decreasing function exactly, also after rounding).
void fuse_activations(Module& m);

// Each linear Activation is removed; its readers read its input.
void remove_linear_activations(Module& m);

// Each ZeroPadding2D that only Conv2D and DepthwiseConv2D operations read is removed: they read its
// input with its zeros added to their own (Padding::Explicit).
void fold_zero_padding(Module& m);

struct RewritePass {
  std::string_view name;
  void (*run)(Module&);
};
// The rewrites in the order rewrite() runs them.
const std::vector<RewritePass>& rewrite_passes();

// For int8 chips, whose Activate gives integer outputs only ReLU and ReLU6: a weighted operation
// with any other activation, but the one that ends the network (fp32 out), gives its linear value
// and an Activation "<name>/activation" after it applies the function (a map on the vector unit).
// The linear value is new: its value_of is kNoOp.
void split_int8_activations(Module& m);

// Called after each pass with its name and the module it left.
using PassObserver = std::function<void(std::string_view pass, const Module& m)>;

// start() then every pass of rewrite_passes(), then for an MXU taking int8
// split_int8_activations ("split-int8-activations").
Module rewrite(const ir::Graph& g, const nn::Weights& w, DType input_type,
               const PassObserver& observe = nullptr);

}  // namespace tpu::compiler
