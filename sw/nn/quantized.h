// The quantized networks the chips run, and their reference inference, which the chip's output
// must match bit for bit (docs/quantization.md).
//
// int8 (v1, Edge): symmetric per-tensor activation scales from calibration, symmetric
// per-output-channel int8 weights, int32 biases, fixed-point requantization (numerics/).
// bf16 (v2-v4): bf16 activations and weights, fp32 biases, fp32 accumulation in the MXU's order:
// each tile of `tile_rows` input rows sums its column in row order from +0, then adds into the
// accumulator.
// The last weighted layer (and any softmax after it) produces fp32.
#pragma once

#include <cstdint>
#include <vector>

#include "hw/common/dtype.h"
#include "sw/ir/graph.h"
#include "sw/nn/weights.h"

namespace tpu::nn {

// Images whose activation ranges set the int8 scales: the first 256 of the run's input set
// (docs/quantization.md), whatever the number of images run, so runs of different lengths
// quantize identically; fewer for large models (calibration_images).
inline constexpr std::size_t kCalibrationImages = 256;
// Float multiply-accumulates the calibration may spend: a model of more than
// kCalibrationMacs / kCalibrationImages MACs per image calibrates on fewer images (at least one).
inline constexpr std::uint64_t kCalibrationMacs = std::uint64_t{1} << 32;
std::size_t calibration_images(const ir::Graph& m);

struct QuantizedLayer {
  // Tensor of this operation's output as it sits in the unified buffer.
  DType out_type = DType::Int8;
  float out_scale = 1.0f;  // int8: real = q * out_scale

  // Weighted operations: kernel in Keras order ([kh][kw][cin][cout] / [in][out]) as int8 or bf16
  // bits. Their activation (the operation's own, Op::activation) is applied by Activate.
  std::vector<std::int8_t> kernel_i8;
  std::vector<std::uint16_t> kernel_bf16;
  std::vector<float> weight_scale;  // int8: per output channel
  // Per output channel parameter record for Activate: {bias, scale, shift} as 32-bit words.
  std::vector<std::int32_t> bias_i32;
  // int8 out: Q31 per output channel (Multiply: per step); fp32 out from int acc: unused.
  std::vector<std::int32_t> multiplier;
  std::vector<std::int32_t> shift;
  std::vector<float> bias_f32;   // bf16 chips
  std::vector<float> scale_f32;  // fp32 out: dequantization scale (int) or 1.0 (float)
  // LSTM: kernel_* and weight_scale are its input kernel W [features][4 units] with bias_i32 /
  // bias_f32 and scale_f32 (the fp32 zx = x W + b per column); these its recurrent kernel U
  // [units][4 units] (zh = h U, scale recurrent_scale_f32 per column, no bias).
  std::vector<std::int8_t> recurrent_i8;
  std::vector<std::uint16_t> recurrent_bf16;
  std::vector<float> recurrent_weight_scale, recurrent_scale_f32;
  // Embedding: its table in kernel_i8 / kernel_bf16 ([input_dim][output_dim]).
  // Map (a standalone BatchNormalization, PReLU or activation): per channel {a, b, alpha}.
  std::vector<float> map_a, map_b, map_alpha;
  // Constant: one image's values in the chip's encoding (int8 or bf16 little-endian bytes).
  std::vector<std::uint8_t> constant;
};

// Where a Conv2D reads its input: the tensor (an operation index or ir::kGraphInput) and its
// shape, and the zeros before the first row and column (its padding, a folded ZeroPadding2D's
// included); rows and columns past the end are zeros too.
struct ConvInput {
  std::size_t tensor = ir::kGraphInput;
  ir::Shape shape;
  std::uint32_t pad_top = 0, pad_left = 0;
};

// Float activation ranges over calibration images: per operation of the calibrated graph the
// minimum and maximum of its output, and the largest |x| of the images.
struct Ranges {
  float input = 0.0f;
  std::vector<float> lo, hi;
};

struct QuantizedModel {
  // The graph the chip runs: the model after the compiler's rewrites (sw/compiler/rewrite.h).
  ir::Graph graph;
  DType act_type = DType::Int8;        // int8 or bf16
  std::uint32_t tile_rows = 0;         // K per weight tile (mxu.rows): the bf16 summation order
  float input_scale = 1.0f;            // int8: q = round(x / input_scale)
  std::vector<QuantizedLayer> layers;  // one per operation of `graph`
  // Per operation, the operation whose computed tensor holds its output: itself, or for a view
  // (Flatten, Reshape) the tensor it passes on; ir::kGraphInput for the input. Only operations
  // with tensor[i] == i run.
  std::vector<std::size_t> tensor;

  [[nodiscard]] bool computes(std::size_t i) const { return tensor[i] == i; }
  // The tensor that holds producer p's output (p an operation index or ir::kGraphInput).
  [[nodiscard]] std::size_t tensor_of(std::size_t p) const {
    return p == ir::kGraphInput ? ir::kGraphInput : tensor[p];
  }
  [[nodiscard]] ConvInput conv_input(std::size_t op) const;
  // Tensor t's int8 scale (an operation index or ir::kGraphInput).
  [[nodiscard]] float scale_of(std::size_t t) const {
    return t == ir::kGraphInput ? input_scale : layers[tensor[t]].out_scale;
  }
  // The input's element type: int32 token ids when an Embedding reads it, else act_type.
  [[nodiscard]] DType input_type() const {
    return ir::input_is_token_ids(graph) ? DType::Int32 : act_type;
  }
};

// The ranges of every operation of `g` (the model as imported, identities removed) over the
// first calibration_images(g) of the n images (floats, NHWC): one float pass.
Ranges calibrate(const ir::Graph& g, const Weights& w, const float* images, std::size_t n);

// Per operation of the graph quantize builds: the float range of its value before its activation
// and of its output over the calibration images, and the largest |x| of the images (int8 only).
struct Calibration {
  float input = 0.0f;
  std::vector<float> value_lo, value_hi, out_lo, out_hi;
};

// Builds the quantized model of the rewritten graph `g` with parameters `w` for a chip whose MXU
// takes `input_type` in tiles of `tile_rows`; int8 scales come from `cal` (unused for bf16).
// Throws InputError naming the operation the chip cannot run.
QuantizedModel quantize(ir::Graph g, const Weights& w, DType input_type, std::uint32_t tile_rows,
                        const Calibration& cal);

// How an operation's int8 output scale follows from its operands' (docs/quantization.md): its
// own (weighted operations, constants), one scale shared with all its operands (Add: the vector
// unit adds the integers), or its input's (pooling, padding, ReLU, views).
// Values: fixed by its own values (a constant's, an Embedding's table), never by calibration.
enum class ScaleRule { Own, Joined, Input, Values };

struct ChipTensor;
struct ChipArgs;
struct ParamArgs;
// The chip-numerics semantics of each operation kind: what the chip computes for it, as the
// quantized reference computes it (run: nullptr for a view, which passes its input's tensor on),
// and how its int8 scale is chosen.
struct ChipSemantics {
  ir::OpKind kind;
  void (*run)(const ChipArgs&);
  ScaleRule (*scale)(const ir::Op&);
  void (*params)(const ParamArgs&) = nullptr;  // its parameters for the chip, if it has any
};
const std::vector<ChipSemantics>& chip_semantics();

// Converts float images into the chip's input encoding (int8 or bf16, little-endian bytes).
std::vector<std::uint8_t> encode_input(const QuantizedModel& q, const float* images, std::size_t n);

// How the reference computes. Fast: the int8 convolutions' sums through oneDNN where it is
// exact (sw/nn/fast_kernels.h), vectorised requantization and max pooling; Plain: the plain
// loops, everywhere. Both give the same bits (tb/unit/nn/fast_reference_test.cpp); Fast falls
// back to the plain loops for what it does not cover.
enum class Kernels { Fast, Plain };

// Reference inference: n images in, n x output-size floats out (exactly what the chip returns).
// The images run in chunks (chunk_images), so memory follows a chunk, not n.
std::vector<float> forward_quantized(const QuantizedModel& q, const float* images, std::size_t n,
                                     Kernels kernels = Kernels::Fast);

// Images per chunk of forward_quantized: as many as keep its largest tensor (counted at 4 bytes
// an element, the int32 sums') within kChunkBytes, at most kMaxChunkImages, at least one.
inline constexpr std::size_t kChunkBytes = std::size_t{32} << 20;
inline constexpr std::size_t kMaxChunkImages = 256;
std::size_t chunk_images(const QuantizedModel& q);

}  // namespace tpu::nn
