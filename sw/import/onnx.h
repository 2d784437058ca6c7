// The ONNX importer (docs/onnx.md): an ONNX ModelProto (protobuf, read with Debian's libonnx's
// generated classes) becomes an ir::Graph and its parameters, taken from the model's initializers
// and rearranged into the IR's layouts. Every node the IR cannot express is named in one message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sw/import/import.h"
#include "sw/ir/graph.h"

namespace tpu::importers {

// Where one sample's ONNX tensor sits in the IR tensor (NHWC per image) that holds it. ONNX
// element k (row-major over `dims`, the batch axis left out) is IR element
// Σ digit_i · stride_i over `runs`, the strided runs in ONNX order (major first) whose extents
// multiply to the element count. An ONNX image tensor N x C x H x W is the IR's H x W x C:
// runs (stride 1, extent C), (W·C, H), (C, W).
struct OnnxLayout {
  struct Run {
    std::uint64_t stride = 1, extent = 1;
  };
  std::vector<std::int64_t> dims;  // per sample: the ONNX dims after the batch axis
  std::vector<Run> runs;
  // The IR index of every ONNX element of one sample, in ONNX order.
  [[nodiscard]] std::vector<std::uint64_t> ir_index() const;
};

struct OnnxModel {
  ir::Graph graph;
  std::vector<Parameter> parameters;  // "<op>/<suffix>" in the operation table's layouts
  std::string input_name, output_name;
  std::int64_t batch = -1;  // the graph input's first dimension (-1: symbolic)
  OnnxLayout input, output;
};

// Whether `bytes` is a binary protobuf rather than text: importers::load_model's test.
bool looks_like_protobuf(std::string_view bytes);

// Parses a serialized onnx.ModelProto. Throws InputError naming `origin` and the place (the
// initializer, the node, the attribute) when the file is not a model tpusim can run.
OnnxModel parse_onnx(const std::string& bytes, const std::string& origin);
OnnxModel load_onnx(const std::string& path);

// A serialized onnx.TensorProto (the test data's input_*.pb and output_*.pb), as floats.
struct OnnxTensor {
  std::vector<std::int64_t> dims;
  std::vector<float> values;
};
OnnxTensor load_onnx_tensor(const std::string& path);

}  // namespace tpu::importers
