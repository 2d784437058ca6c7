// Trained or generated parameters of a model: per weighted layer, its kernel (Keras layout) and
// bias, in fp32. The file format (docs/weights.md): little-endian, magic "TPUW", version 1, the
// tensor count, then per tensor its name, rank, dims and fp32 data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sw/ir/graph.h"
#include "sw/ir/ops.h"

namespace tpu::nn {

// One operation's parameters, each in Keras's layout (the operation table's ParamSpec, ir/ops.h).
struct LayerWeights {
  // Conv2D [kh][kw][cin][cout]; Dense [in][out]; DepthwiseConv2D / SeparableConv2D
  // [kh][kw][cin][multiplier]; Embedding [input_dim][output_dim]; LSTM [features][4 units].
  std::vector<float> kernel;
  // [cout] (LSTM [4 units]); zeros when a weighted layer has no bias.
  std::vector<float> bias;
  // BatchNormalization, [channels] each; gamma ones without `scale`, beta zeros without `center`.
  std::vector<float> gamma, beta, moving_mean, moving_variance;
  std::vector<float> pointwise;  // SeparableConv2D [1][1][cin * multiplier][filters]
  std::vector<float> recurrent;  // LSTM [units][4 units]
  std::vector<float> alpha;      // PReLU, per channel
};

// The field of `w` that holds parameter p.
std::vector<float>& tensor_of(LayerWeights& w, ir::Param p);
const std::vector<float>& tensor_of(const LayerWeights& w, ir::Param p);

// One entry per model layer (empty for layers without weights).
struct Weights {
  std::vector<LayerWeights> layers;
};

// Seeded random weights (Glorot-uniform kernels, zero biases; BatchNormalization gamma 1, beta 0,
// moving mean 0, moving variance 1, as Keras initialises), for performance studies of models
// without trained weights.
Weights random_weights(const ir::Graph& m, std::uint64_t seed);
// Throws InputError naming the file and what is wrong (bad magic, truncated, a tensor whose
// name or shape does not match the model's layer).
Weights load_weights(const std::string& path, const ir::Graph& m);
// Throws InputError naming the model file and the layer when `w` does not hold exactly the
// tensors `m`'s layers need (count, kernel and bias sizes, BatchNormalization parameters).
void check_weights(const ir::Graph& m, const Weights& w);
// The file's bytes (docs/weights.md).
std::string weights_bytes(const ir::Graph& m, const Weights& w);
// Writes weights_bytes() through the output writer (sw/io/output.h).
void save_weights(const std::string& path, const ir::Graph& m, const Weights& w);

}  // namespace tpu::nn
