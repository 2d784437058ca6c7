// What a run and `tpusim graph` load the same way: a model's weights (given, shipped beside the
// model, or seeded random) and its inputs (the Fashion-MNIST test set, or seeded random inputs
// for other input shapes), with the calibration images quantization uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sw/import/import.h"
#include "sw/ir/graph.h"
#include "sw/nn/weights.h"
#include "sw/sim/session.h"

namespace tpu::sim {

struct Inputs {
  std::vector<float> images;  // n x input size
  std::vector<std::uint8_t> labels;
  std::vector<float> calibration;  // nn::calibration_images x input size
  std::string source;
};

// --weights, else (not with --random-weights or a topology) the parameters the model file carries
// (`embedded`: an ONNX model's initializers) or configs/weights/<model>.bin beside the model's
// folder when it exists, else seeded random weights; `source` says which.
nn::Weights load_weights(const ir::Graph& model, const RunOptions& opt, std::string& source,
                         const std::vector<importers::Parameter>& embedded = {});

Inputs load_inputs(const ir::Graph& m, const RunOptions& opt);

}  // namespace tpu::sim
