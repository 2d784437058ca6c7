// Importers: every model file tpusim reads becomes an ir::Graph here. They read arguments only;
// every shape comes from the operation table (sw/ir/ops.h).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sw/ir/graph.h"

namespace tpu::importers {

// Reads a model file of any form it recognises: tpusim's JSON (docs/models.md), the JSON Keras's
// model.to_json() writes (Sequential or Functional), or a SCALE-Sim topology CSV (convolution or
// GEMM). Throws InputError naming the file, the place, the value and what is allowed (unknown
// layer class or argument, bad shape, shapes that do not chain).
ir::Graph load_model(const std::string& path);
ir::Graph parse_model(const nlohmann::json& doc, const std::string& origin);
// SCALE-Sim topology CSV text (docs/models.md): every row an independent layer.
ir::Graph parse_topology(const std::string& text, const std::string& origin);

}  // namespace tpu::importers
