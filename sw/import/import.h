// Importers: every model file tpusim reads becomes an ir::Graph here. They read arguments only;
// every shape comes from the operation table (sw/ir/ops.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sw/ir/graph.h"

namespace tpu::importers {

// A parameter tensor a model file carries itself (an ONNX initializer), already in the operation
// table's layout (ir::ParamSpec): `name` is "<operation>/<suffix>" as in a weights file.
struct Parameter {
  std::string name;
  std::vector<std::uint32_t> dims;
  std::vector<float> values;
};

// A model and the parameters its file carries (none for JSON and CSV models).
struct Imported {
  ir::Graph graph;
  std::vector<Parameter> parameters;
};

// Reads a model file of any form it recognises by its content: tpusim's JSON (docs/models.md),
// the JSON Keras's model.to_json() writes (Sequential or Functional), an ONNX model (binary
// protobuf, docs/onnx.md) or a SCALE-Sim topology CSV (convolution or GEMM). Throws InputError
// naming the file, the place, the value and what is allowed (unknown layer class or argument,
// bad shape, shapes that do not chain).
Imported import_model(const std::string& path);
// import_model's graph, its parameters left.
ir::Graph load_model(const std::string& path);
// A file named as a SCALE-Sim topology CSV (--topology): read as one whatever its bytes.
ir::Graph load_topology(const std::string& path);
ir::Graph parse_model(const nlohmann::json& doc, const std::string& origin);
// SCALE-Sim topology CSV text (docs/models.md): every row an independent layer.
ir::Graph parse_topology(const std::string& text, const std::string& origin);

}  // namespace tpu::importers
