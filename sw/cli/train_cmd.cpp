#include "sw/cli/train_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "hw/common/error.h"
#include "sw/data/idx.h"
#include "sw/nn/metrics.h"
#include "sw/nn/quantized.h"
#include "sw/nn/reference.h"

namespace tpu::cli {
namespace {

constexpr std::uint32_t kBf16TileRows = 128;  // v2, v3, v4 MXUs (configs/chips)
constexpr std::uint32_t kInt8TileRows = 256;  // v1; int8 sums are exact, so any height agrees

}  // namespace

void run_train(const TrainCommand& cmd) {
  const nn::Model model = nn::load_model(cmd.model);
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
    const auto q =
        nn::quantize(model, r.weights, t, tile_rows, images.data(), nn::kCalibrationImages);
    return nn::top1(nn::forward_quantized(q, images.data(), n), k, test_set.labels);
  };
  const double int8_top1 = quantized_top1(DType::Int8, kInt8TileRows);
  const double bf16_top1 = quantized_top1(DType::Bf16, kBf16TileRows);

  nn::save_weights(cmd.out, model, r.weights);

  const auto& o = cmd.options;
  nlohmann::ordered_json meta;
  meta["weights"] = std::filesystem::path(cmd.out).filename().string();
  meta["model"] = cmd.model;
  meta["data"] = fmt::format("Fashion-MNIST train (60,000 images) from {}; test set t10k", dir);
  meta["regenerate"] = fmt::format(
      "build/tpusim train --model {} --out {} --epochs {} --batch {} --seed {} --lr {} "
      "--input-scale {}",
      cmd.model, cmd.out, o.epochs, o.batch, o.seed, o.learning_rate, o.input_scale);
  meta["optimizer"] = {{"name", "Adam"},
                       {"learning_rate", o.learning_rate},
                       {"beta1", o.beta1},
                       {"beta2", o.beta2},
                       {"epsilon", o.epsilon}};
  meta["loss"] = "sparse categorical cross-entropy";
  meta["epochs"] = o.epochs;
  meta["batch"] = o.batch;
  meta["seed"] = o.seed;
  meta["train_input_scale"] = o.input_scale;
  nlohmann::ordered_json hist = nlohmann::ordered_json::array();
  for (const auto& e : r.epochs)
    hist.push_back({{"epoch", e.epoch},
                    {"loss", e.loss},
                    {"accuracy", e.accuracy},
                    {"val_loss", e.val_loss.value_or(0)},
                    {"val_accuracy", e.val_accuracy.value_or(0)},
                    {"seconds", e.seconds}});
  meta["history"] = hist;
  meta["test_top1"] = {{"float", float_top1},
                       {"int8", int8_top1},
                       {"bf16_128_row_tiles", bf16_top1},
                       {"note",
                        "int8: v1 and Edge arithmetic; bf16: v2, v3, v4 (docs/quantization.md); "
                        "int8 activation scales calibrated on the first 256 test images"}};
  std::filesystem::path meta_path = cmd.out;
  meta_path.replace_extension(".json");
  const std::string tmp = meta_path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << meta.dump(2) << "\n";
    if (!f) throw InputError(meta_path.string() + ": write failed");
  }
  std::filesystem::rename(tmp, meta_path);
  std::cout << fmt::format(
      "wrote {} and {}\ntest top-1: float {:.2f}%, int8 {:.2f}%, bf16 {:.2f}%\n", cmd.out,
      meta_path.string(), 100 * float_top1, 100 * int8_top1, 100 * bf16_top1);
}

}  // namespace tpu::cli
