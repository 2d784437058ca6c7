// Networks as tpusim reads them: Keras's layer names and arguments ("class_name" + "config"),
// NHWC activations per image (channels last, as Keras), weights in Keras's layouts
// (Conv2D kernel [kh][kw][cin][cout], Dense kernel [in][out]).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tpu::nn {

struct Shape {
  std::uint32_t h = 1, w = 1, c = 1;  // per image
  [[nodiscard]] std::uint64_t size() const { return std::uint64_t{h} * w * c; }
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.h == b.h && a.w == b.w && a.c == b.c;
  }
};

enum class LayerKind { Conv2D, MaxPooling2D, AveragePooling2D, Activation, Flatten, Dense };
enum class Act { Linear, Relu, Relu6, Sigmoid, Tanh, Softmax };
enum class Padding { Valid, Same };

struct Layer {
  std::string name;  // unique within the model (Keras: "conv2d", "dense_1", ...)
  LayerKind kind = LayerKind::Flatten;
  // Conv2D: filters, kernel, strides, padding, use_bias, activation.
  // Pooling: kernel (= pool_size), strides, padding (valid only on the chip).
  // Dense: filters (= units), use_bias, activation. Activation: activation.
  std::uint32_t filters = 0;
  std::uint32_t kernel_h = 1, kernel_w = 1;
  std::uint32_t stride_h = 1, stride_w = 1;
  Padding padding = Padding::Valid;
  bool use_bias = true;
  Act activation = Act::Linear;
  Shape in, out;  // resolved by the loader

  [[nodiscard]] bool has_weights() const {
    return kind == LayerKind::Conv2D || kind == LayerKind::Dense;
  }
  // Multiply-accumulates per image.
  [[nodiscard]] std::uint64_t macs() const;
};

struct Model {
  std::string name;
  std::string file;
  Shape input;
  std::vector<Layer> layers;
  [[nodiscard]] Shape output() const { return layers.empty() ? input : layers.back().out; }
  [[nodiscard]] std::uint64_t macs_per_image() const;
};

// Reads a model file; throws InputError naming the file, the JSON pointer, the value and what is
// allowed (unknown layer class or argument, bad shape, shapes that do not chain).
Model load_model(const std::string& path);
Model parse_model(const nlohmann::json& doc, const std::string& origin);

std::string_view name_of(LayerKind k);
std::string_view name_of(Act a);

}  // namespace tpu::nn
