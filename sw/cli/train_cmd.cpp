#include "sw/cli/train_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "hw/common/error.h"
#include "sw/compiler/compiler.h"
#include "sw/data/idx.h"
#include "sw/import/import.h"
#include "sw/io/output.h"
#include "sw/nn/metrics.h"
#include "sw/nn/quantized.h"
#include "sw/nn/reference.h"
#include "sw/nn/weights.h"

namespace tpu::cli {
namespace {

constexpr std::uint32_t kBf16TileRows = 128;  // v2, v3, v4 MXUs (configs/chips)
constexpr std::uint32_t kInt8TileRows = 256;  // v1; int8 sums are exact, so any height agrees

}  // namespace

void run_train(const TrainCommand& cmd) {
  if (cmd.out == "-")
    throw InputError(
        "--save -: train writes its metadata beside the weights file; give a file name");
  // The weights and their metadata are one set, checked before hours of training and written
  // all or nothing (sw/io/output.h).
  std::filesystem::path meta_path = cmd.out;
  meta_path.replace_extension(".json");
  io::OutputSet out;
  const std::size_t weights_out = out.add(cmd.out, "--save weights file");
  const std::size_t meta_out = out.add(meta_path.string(), "metadata beside --save");
  out.check({{cmd.model, "model"}});
  const ir::Graph model = importers::load_model(cmd.model);
  const std::string dir = cmd.data_dir.empty() ? data::kDefaultFashionMnistDir : cmd.data_dir;
  const data::Dataset train_set = data::load_fashion_mnist(dir, "train");
  const data::Dataset test_set = data::load_fashion_mnist(dir, "t10k");
  const bool tty = isatty(STDERR_FILENO) != 0;

  const train::TrainResult r =
      train::train(model, train_set, cmd.options, &test_set, [&](const train::Progress& p) {
        if (p.epoch_done) {
          const auto& e = *p.epoch_done;
          std::cerr << (tty ? "\r" : "")
                    << fmt::format(
                           "epoch {}/{}: loss {:.4f}, accuracy {:.4f}, val_loss {:.4f}, "
                           "val_accuracy {:.4f} ({:.1f} s)\n",
                           e.epoch, p.epochs, e.loss, e.accuracy, e.val_loss.value_or(0),
                           e.val_accuracy.value_or(0), e.seconds);
        } else if (tty && p.batch % 50 == 0) {
          std::cerr << fmt::format("\repoch {}/{}: {}/{} batches, loss {:.4f}, accuracy {:.4f}",
                                   p.epoch, p.epochs, p.batch, p.batches, p.loss, p.accuracy);
        }
      });

  // Test-set top-1 in the three arithmetics the chips use.
  const std::size_t n = test_set.images.count, per = model.input.size();
  std::vector<float> images(n * per);
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = test_set.images.pixels[i];
  const std::size_t k = model.output().size();
  const double float_top1 =
      nn::top1(nn::forward_float(model, r.weights, images.data(), n), k, test_set.labels);
  auto quantized_top1 = [&](DType t, std::uint32_t tile_rows) {
    const auto q = compiler::prepare(model, r.weights, t, tile_rows, images.data(),
                                     std::min<std::size_t>(n, nn::kCalibrationImages));
    return nn::top1(nn::forward_quantized(q, images.data(), n), k, test_set.labels);
  };
  const double int8_top1 = quantized_top1(DType::Int8, kInt8TileRows);
  const double bf16_top1 = quantized_top1(DType::Bf16, kBf16TileRows);

  const auto& o = cmd.options;
  nlohmann::ordered_json meta;
  meta["description"] = fmt::format(
      "Trained weights of {} and how they were made. docs/weights.md "
      "describes the .bin format and the training.",
      cmd.model);
  meta["generated_by"] =
      "tpusim train (sw/cli/train_cmd.cpp: tpu::train::train, the training reference's step "
      "(tpu::nn::reference_step, the arithmetic tpusim fit checks the chip against) in Keras's "
      "loop, then tpu::nn::weights_bytes)";
  meta["regenerate"] = fmt::format(
      "build/tpusim train --model {} --save {} --epochs {} --batch {} --lr {} --seed {} "
      "--input-scale {}",
      cmd.model, cmd.out, o.epochs, o.batch, o.learning_rate, o.seed, o.input_scale);
  meta["model"] = cmd.model;
  meta["weights"] = cmd.out;
  meta["dataset"] = {{"name", "Fashion-MNIST (Xiao, Rasul & Vollgraf 2017)"},
                     {"source", dir},
                     {"train_images", train_set.images.count},
                     {"test_images", test_set.images.count}};
  meta["training"] = {{"optimizer", "Adam as TensorFlow compiles it for TPUs (docs/training.md)"},
                      {"arithmetic",
                       "bf16 MXU operands summed in fp32 in 128-row tiles, fp32 elsewhere; one "
                       "replica, the whole batch in one pass"},
                      {"learning_rate", o.learning_rate},
                      {"beta1", o.beta1},
                      {"beta2", o.beta2},
                      {"epsilon", o.epsilon},
                      {"loss", "sparse categorical cross-entropy, fused with the final softmax"},
                      {"epochs", o.epochs},
                      {"batch", o.batch},
                      {"seed", o.seed},
                      {"input_scale", o.input_scale},
                      {"input_scale_note",
                       "pixels are multiplied by input_scale during training only; the factor is "
                       "folded into the first weighted layer's kernel, so the weights take raw "
                       "0-255 pixels like the tutorial's network (docs/weights.md)"},
                      {"threads", 1}};
  nlohmann::ordered_json hist = nlohmann::ordered_json::array();
  double wall = 0;
  for (const auto& e : r.epochs) {
    hist.push_back({{"epoch", e.epoch},
                    {"loss", e.loss},
                    {"accuracy", e.accuracy},
                    {"test_loss", e.val_loss.value_or(0)},
                    {"test_accuracy", e.val_accuracy.value_or(0)}});
    wall += e.seconds;
  }
  meta["training"]["wall_seconds"] = wall;
  meta["per_epoch"] = hist;
  meta["per_epoch_note"] =
      "loss and accuracy over each epoch's training batches (as Keras prints "
      "them); test_* on the 10,000 test images after the epoch";
  const auto correct = [&](double top1) {
    return static_cast<std::uint64_t>(std::llround(top1 * static_cast<double>(n)));
  };
  meta["float_reference"] = {
      {"computed_by", "tpu::nn::forward_float on raw 0-255 pixels, argmax of the softmax"},
      {"test_images", n},
      {"test_correct", correct(float_top1)},
      {"test_top1", float_top1}};
  meta["quantized_reference"] = {
      {"computed_by",
       "tpu::nn::forward_quantized (docs/quantization.md), what the chips compute bit for bit"},
      {"int8_test_top1", int8_top1},
      {"int8_chips", "v1, Edge"},
      {"bf16_test_top1", bf16_top1},
      {"bf16_chips", "v2, v3, v4 (128-row tiles)"},
      {"calibration", "int8 activation scales from the first 256 test images"}};
  out.set(weights_out, nn::weights_bytes(model, r.weights));
  out.set(meta_out, meta.dump(2) + "\n");
  out.commit();
  std::cout << fmt::format(
      "wrote {} and {}\ntest top-1: float {:.2f}%, int8 {:.2f}%, bf16 {:.2f}%\n", cmd.out,
      meta_path.string(), 100 * float_top1, 100 * int8_top1, 100 * bf16_top1);
}

}  // namespace tpu::cli
