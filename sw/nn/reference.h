// Float reference inference: the network as Keras computes it, in fp32, one image after another.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sw/ir/graph.h"
#include "sw/nn/weights.h"

namespace tpu::nn {

// `input` holds n images of m.input.size() floats (NHWC); returns n x m.output().size() floats
// (the last layer's output, e.g. softmax probabilities).
std::vector<float> forward_float(const ir::Graph& m, const Weights& w, const float* input,
                                 std::size_t n);

// Called with each layer's output (count floats, NHWC) for each image, in layer order.
using LayerObserver =
    std::function<void(std::size_t layer, const float* values, std::size_t count)>;
std::vector<float> forward_float(const ir::Graph& m, const Weights& w, const float* input,
                                 std::size_t n, const LayerObserver& observe);

// A Constant layer's values: out.size() floats uniform in [-1, 1) from its seed (our own mapping
// of mt19937_64, the same on every platform).
std::vector<float> constant_values(const ir::Op& l);

// Whether the float reference knows operation kind k (its entry in the float semantics table).
bool has_float_semantics(ir::OpKind k);

// Index of the largest of each row of `k` values (ties: the first).
std::vector<std::uint32_t> argmax_rows(const std::vector<float>& v, std::size_t k);

}  // namespace tpu::nn
