// `tpusim train`: trains a model on Fashion-MNIST and writes its weights, plus a metadata file
// beside them (same name, .json) with the settings, per-epoch figures and the test-set top-1 in
// float, int8 (v1/Edge arithmetic) and bf16 (v2-v4 arithmetic).
#pragma once

#include <string>

#include "sw/train/trainer.h"

namespace tpu::cli {

struct TrainCommand {
  std::string model = "configs/models/fashion_mnist_cnn.json";
  std::string out = "configs/weights/fashion_mnist_cnn.bin";
  std::string data_dir;
  train::TrainOptions options;
};

void run_train(const TrainCommand& cmd);

}  // namespace tpu::cli
