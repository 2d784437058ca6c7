#include "sw/import/import.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "hw/common/json_text.h"
#include "sw/import/onnx.h"
#include "sw/ir/ops.h"

namespace tpu::importers {
using ir::Act;
using ir::Graph;
using ir::infer_shapes;
using ir::kClassArgument;
using ir::kGraphInput;
using ir::kInputsArgument;
using ir::kMaxDim;
using ir::kMaxEmbeddingRows;
using ir::kMaxTensorElements;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;
using ir::show_shape;
using nlohmann::json;

namespace {

constexpr std::size_t kMaxNameBytes = 128;

// The keys each layer class reads (Keras's argument names), and the Keras keys it accepts but
// ignores because they only matter for training or serialisation.
struct ClassSpec {
  const char* class_name;
  OpKind kind;
  const char* base_name;  // Keras's default name: the class name in snake case
  std::vector<std::string> keys;
  std::vector<std::string> ignored;
};

const std::vector<std::string> kBaseIgnored = {"trainable", "dtype"};
const std::vector<std::string> kWeightIgnored = {"trainable",
                                                 "dtype",
                                                 "kernel_initializer",
                                                 "bias_initializer",
                                                 "kernel_regularizer",
                                                 "bias_regularizer",
                                                 "activity_regularizer",
                                                 "kernel_constraint",
                                                 "bias_constraint"};
const std::vector<std::string> kNoiseIgnored = {"trainable", "dtype", "noise_shape", "seed"};
// Any class may carry the input shape Keras records on a model's first layer; it is checked
// against the shape the loader resolves.
const std::vector<std::string> kShapeKeys = {"batch_input_shape", "input_shape"};
const std::vector<std::string> kDepthwiseIgnored = {"trainable",
                                                    "dtype",
                                                    "depthwise_initializer",
                                                    "bias_initializer",
                                                    "depthwise_regularizer",
                                                    "bias_regularizer",
                                                    "activity_regularizer",
                                                    "depthwise_constraint",
                                                    "bias_constraint"};

const std::vector<ClassSpec>& class_specs() {
  static const std::vector<ClassSpec> specs = {
      {"Conv2D",
       OpKind::Conv2D,
       "conv2d",
       {"name", "filters", "kernel_size", "strides", "padding", "use_bias", "activation",
        "data_format", "dilation_rate", "groups"},
       kWeightIgnored},
      {"MaxPooling2D",
       OpKind::MaxPooling2D,
       "max_pooling2d",
       {"name", "pool_size", "strides", "padding", "data_format"},
       kBaseIgnored},
      {"AveragePooling2D",
       OpKind::AveragePooling2D,
       "average_pooling2d",
       {"name", "pool_size", "strides", "padding", "data_format"},
       kBaseIgnored},
      {"Activation", OpKind::Activation, "activation", {"name", "activation"}, kBaseIgnored},
      // Keras's activation layers, as the Activation they stand for.
      {"ReLU",
       OpKind::Activation,
       "re_lu",
       {"name", "max_value", "negative_slope", "threshold"},
       kBaseIgnored},
      {"Softmax", OpKind::Activation, "softmax", {"name", "axis"}, kBaseIgnored},
      {"Flatten", OpKind::Flatten, "flatten", {"name", "data_format"}, kBaseIgnored},
      {"Reshape", OpKind::Reshape, "reshape", {"name", "target_shape"}, kBaseIgnored},
      {"Dense",
       OpKind::Dense,
       "dense",
       {"name", "units", "activation", "use_bias"},
       kWeightIgnored},
      {"BatchNormalization",
       OpKind::BatchNormalization,
       "batch_normalization",
       {"name", "axis", "epsilon", "momentum", "center", "scale"},
       {"trainable", "dtype", "beta_initializer", "gamma_initializer", "moving_mean_initializer",
        "moving_variance_initializer", "beta_regularizer", "gamma_regularizer", "beta_constraint",
        "gamma_constraint", "synchronized", "renorm", "renorm_clipping", "renorm_momentum", "fused",
        "virtual_batch_size", "adjustment"}},
      {"ZeroPadding2D",
       OpKind::ZeroPadding2D,
       "zero_padding2d",
       {"name", "padding", "data_format"},
       kBaseIgnored},
      {"GlobalAveragePooling2D",
       OpKind::GlobalAveragePooling2D,
       "global_average_pooling2d",
       {"name", "data_format", "keepdims"},
       kBaseIgnored},
      {"GlobalMaxPooling2D",
       OpKind::GlobalMaxPooling2D,
       "global_max_pooling2d",
       {"name", "data_format", "keepdims"},
       kBaseIgnored},
      {"Add", OpKind::Add, "add", {"name"}, kBaseIgnored},
      // The identity at inference; their randomness (noise_shape, seed) only matters in training.
      {"Dropout", OpKind::Dropout, "dropout", {"name", "rate"}, kNoiseIgnored},
      {"SpatialDropout1D",
       OpKind::Dropout,
       "spatial_dropout1d",
       {"name", "rate", "data_format"},
       kNoiseIgnored},
      {"SpatialDropout2D",
       OpKind::Dropout,
       "spatial_dropout2d",
       {"name", "rate", "data_format"},
       kNoiseIgnored},
      {"SpatialDropout3D",
       OpKind::Dropout,
       "spatial_dropout3d",
       {"name", "rate", "data_format"},
       kNoiseIgnored},
      {"GaussianDropout", OpKind::Dropout, "gaussian_dropout", {"name", "rate"}, kNoiseIgnored},
      {"AlphaDropout", OpKind::Dropout, "alpha_dropout", {"name", "rate"}, kNoiseIgnored},
      {"GaussianNoise", OpKind::Dropout, "gaussian_noise", {"name", "stddev"}, kNoiseIgnored},
      {"DepthwiseConv2D",
       OpKind::DepthwiseConv2D,
       "depthwise_conv2d",
       {"name", "kernel_size", "strides", "padding", "depth_multiplier", "use_bias", "activation",
        "data_format", "dilation_rate"},
       kDepthwiseIgnored},
      {"SeparableConv2D",
       OpKind::SeparableConv2D,
       "separable_conv2d",
       {"name", "filters", "kernel_size", "strides", "padding", "depth_multiplier", "use_bias",
        "activation", "data_format", "dilation_rate"},
       {"trainable", "dtype", "depthwise_initializer", "pointwise_initializer", "bias_initializer",
        "depthwise_regularizer", "pointwise_regularizer", "bias_regularizer",
        "activity_regularizer", "depthwise_constraint", "pointwise_constraint", "bias_constraint"}},
      {"Concatenate", OpKind::Concatenate, "concatenate", {"name", "axis"}, kBaseIgnored},
      {"Multiply", OpKind::Multiply, "multiply", {"name"}, kBaseIgnored},
      {"Subtract", OpKind::Subtract, "subtract", {"name"}, kBaseIgnored},
      // Keras 2 names the slope `alpha`, Keras 3 `negative_slope`.
      {"LeakyReLU",
       OpKind::Activation,
       "leaky_re_lu",
       {"name", "alpha", "negative_slope"},
       kBaseIgnored},
      {"ELU", OpKind::Activation, "elu", {"name", "alpha"}, kBaseIgnored},
      {"PReLU",
       OpKind::PReLU,
       "p_re_lu",
       {"name", "shared_axes"},
       {"trainable", "dtype", "alpha_initializer", "alpha_regularizer", "alpha_constraint"}},
      {"Embedding",
       OpKind::Embedding,
       "embedding",
       {"name", "input_dim", "output_dim", "input_length", "mask_zero"},
       {"trainable", "dtype", "embeddings_initializer", "embeddings_regularizer",
        "activity_regularizer", "embeddings_constraint", "sparse", "lora_rank"}},
      {"LSTM",
       OpKind::LSTM,
       "lstm",
       {"name", "units", "activation", "recurrent_activation", "use_bias", "return_sequences",
        "return_state", "go_backwards", "stateful", "time_major", "dropout", "recurrent_dropout"},
       {"trainable", "dtype", "kernel_initializer", "recurrent_initializer", "bias_initializer",
        "unit_forget_bias", "kernel_regularizer", "recurrent_regularizer", "bias_regularizer",
        "activity_regularizer", "kernel_constraint", "recurrent_constraint", "bias_constraint",
        "implementation", "unroll", "seed"}},
  };
  return specs;
}

const ClassSpec* class_spec(const json& class_name) {
  for (const ClassSpec& s : class_specs())
    if (class_name == s.class_name) return &s;
  return nullptr;
}

std::vector<std::string> class_names() {
  std::vector<std::string> names;
  for (const ClassSpec& s : class_specs()) names.emplace_back(s.class_name);
  return names;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string escape_key(const std::string& k) {
  std::string out;
  for (char ch : k) {
    if (ch == '~')
      out += "~0";
    else if (ch == '/')
      out += "~1";
    else
      out += ch;
  }
  return out;
}

// A value as the message shows it: hostile files may hold huge values, so it is shortened.
std::string show(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// A JSON integer >= 0. Parsed files hold such numbers as unsigned, documents built in C++ as
// signed; fractions (3.0) and strings are not integers.
std::optional<std::uint64_t> natural(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
    return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

class Parser {
 public:
  explicit Parser(std::string origin) : origin_(std::move(origin)) {}

  Graph parse(const json& doc) {
    if (!doc.is_object()) fail("", doc, "the model must be a JSON object");
    if (doc.contains("class_name")) return parse_keras(doc);
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      static const std::vector<std::string> top = {"name", "description", "input", "layers"};
      if (!contains(top, it.key()))
        throw InputError(fmt::format("{}: /{}: unknown key (allowed: {})", origin_,
                                     escape_key(it.key()), join(top)));
    }
    Graph m;
    m.file = origin_;
    m.name = name_value(require(doc, "", "name", "a non-empty string"), "/name");
    if (auto d = doc.find("description"); d != doc.end() && !d->is_string())
      fail("/description", *d, "must be a string");
    input_ = input_shape(require(doc, "", "input", "[h, w, c]"));
    input_given_ = true;
    build(m, require(doc, "", "layers", "an array of layers"), "/layers", nullptr, nullptr);
    return m;
  }

 private:
  // Keras's model.to_json(): {"class_name": "Sequential" | "Functional" | "Model", "config":
  // {"name", "layers", "input_layers", "output_layers"}, "keras_version", "backend"}.
  Graph parse_keras(const json& doc) {
    static const std::vector<std::string> top = {"class_name", "config"};
    static const std::vector<std::string> top_ignored = {
        "keras_version", "backend", "module", "registered_name", "build_config", "compile_config"};
    check_keys(doc, "", top, top_ignored);
    const json& cls = doc["class_name"];
    if (cls != "Sequential" && cls != "Functional" && cls != "Model")
      fail("/class_name", cls,
           "a Keras model's to_json() is \"Sequential\", \"Functional\" or \"Model\"");
    const json& cfg = require(doc, "", "config", "the model's config object");
    if (!cfg.is_object()) fail("/config", cfg, "must be an object");
    static const std::vector<std::string> keys = {"name", "layers", "input_layers",
                                                  "output_layers"};
    static const std::vector<std::string> ignored = {"trainable", "dtype", "build_input_shape"};
    check_keys(cfg, "/config", keys, ignored);
    Graph m;
    m.file = origin_;
    m.name = name_value(require(cfg, "/config", "name", "a non-empty string"), "/config/name");
    const auto in = cfg.find("input_layers");
    const auto out = cfg.find("output_layers");
    build(m, require(cfg, "/config", "layers", "an array of layers"), "/config/layers",
          in == cfg.end() ? nullptr : &*in, out == cfg.end() ? nullptr : &*out);
    return m;
  }

  void check_keys(const json& obj, const std::string& ptr, const std::vector<std::string>& keys,
                  const std::vector<std::string>& ignored) const {
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!contains(keys, it.key()) && !contains(ignored, it.key()))
        throw InputError(
            fmt::format("{}: {}/{}: unknown key (allowed: {}; Keras keys accepted "
                        "and ignored: {})",
                        origin_, ptr, escape_key(it.key()), join(keys), join(ignored)));
  }

  [[noreturn]] void fail(const std::string& ptr, const json& v, const std::string& allowed) const {
    throw InputError(
        fmt::format("{}: {} = {} ({})", origin_, ptr.empty() ? "/" : ptr, show(v), allowed));
  }

  const json& require(const json& obj, const std::string& ptr, const std::string& key,
                      const std::string& allowed) const {
    auto it = obj.find(key);
    if (it == obj.end())
      throw InputError(
          fmt::format("{}: {}/{} is missing (must be {})", origin_, ptr, key, allowed));
    return *it;
  }

  std::uint32_t uint_value(const json& v, const std::string& ptr, std::uint32_t lo,
                           std::uint32_t hi) const {
    if (const auto x = natural(v); x && *x >= lo && *x <= hi) return static_cast<std::uint32_t>(*x);
    fail(ptr, v, fmt::format("must be an integer in [{}, {}]", lo, hi));
  }

  // Keras's kernel_size / strides / pool_size: one integer for both axes or [rows, cols].
  std::pair<std::uint32_t, std::uint32_t> int_or_pair(const json& v, const std::string& ptr) const {
    auto ok = [](const json& x) {
      const auto n = natural(x);
      return n && *n >= 1 && *n <= kMaxDim;
    };
    auto get = [](const json& x) { return static_cast<std::uint32_t>(*natural(x)); };
    if (ok(v)) return {get(v), get(v)};
    if (v.is_array() && v.size() == 2 && ok(v[0]) && ok(v[1])) return {get(v[0]), get(v[1])};
    fail(ptr, v,
         fmt::format("must be an integer in [1, {}] or a pair [rows, cols] of them", kMaxDim));
  }

  bool bool_value(const json& v, const std::string& ptr) const {
    if (!v.is_boolean()) fail(ptr, v, "must be true or false");
    return v.get<bool>();
  }

  std::string name_value(const json& v, const std::string& ptr) const {
    if (!v.is_string()) fail(ptr, v, "must be a non-empty string");
    const std::string s = v.get<std::string>();
    // "/" separates the layer from the tensor in weight names ("conv2d/kernel").
    const bool bad_char = std::any_of(s.begin(), s.end(), [](char ch) {
      return ch == '/' || static_cast<unsigned char>(ch) < 0x20;
    });
    if (s.empty() || s.size() > kMaxNameBytes || bad_char)
      fail(ptr, v,
           fmt::format("must be 1 to {} bytes without '/' or control characters", kMaxNameBytes));
    return s;
  }

  // [h, w, c] (an image), [steps, features] (a sequence, 1 x steps x features) or [n] (1 x 1 x n:
  // flat, or n token ids).
  Shape input_shape(const json& v) const {
    if (!v.is_array() || v.empty() || v.size() > 3)
      fail(
          "/input", v,
          fmt::format("must be [h, w, c], [steps, features] or [n], integers in [1, {}]", kMaxDim));
    std::uint32_t d[3] = {1, 1, 1};
    for (std::size_t k = 0; k < v.size(); ++k)
      d[3 - v.size() + k] = uint_value(v[k], fmt::format("/input/{}", k), 1, kMaxDim);
    const Shape s{d[0], d[1], d[2]};
    if (s.size() > kMaxTensorElements)
      fail("/input", v, fmt::format("at most {} elements per image", kMaxTensorElements));
    return s;
  }

  // Keras's batch shape [null, h, w, c] or [null, n] (with the batch axis) or the same without
  // it, as one image's shape; nullopt when it is neither.
  static std::optional<Shape> keras_shape(const json& v, bool batch) {
    if (!v.is_array() || v.empty()) return std::nullopt;
    std::vector<std::uint64_t> dims;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (batch && i == 0) {
        if (!v[i].is_null() && !natural(v[i])) return std::nullopt;
      } else if (const auto n = natural(v[i]); n && *n >= 1 && *n <= kMaxDim) {
        dims.push_back(*n);
      } else {
        return std::nullopt;
      }
    }
    auto u = [](std::uint64_t x) { return static_cast<std::uint32_t>(x); };
    if (dims.size() == 3) return Shape{u(dims[0]), u(dims[1]), u(dims[2])};
    if (dims.size() == 2) return Shape{1, u(dims[0]), u(dims[1])};  // a sequence [steps, features]
    if (dims.size() == 1) return Shape{1, 1, u(dims[0])};
    return std::nullopt;
  }

  Act activation_value(const json& v, const std::string& ptr) const {
    // Keras serialises activation=None as "linear"; a null is read the same way.
    if (v.is_null()) return Act::Linear;
    static const std::vector<std::pair<std::string, Act>> acts = {
        {"linear", Act::Linear},   {"relu", Act::Relu},           {"relu6", Act::Relu6},
        {"sigmoid", Act::Sigmoid}, {"tanh", Act::Tanh},           {"softmax", Act::Softmax},
        {"elu", Act::Elu},         {"leaky_relu", Act::LeakyRelu}};
    if (v.is_string())
      for (const auto& [name, act] : acts)
        if (v.get<std::string>() == name) return act;
    fail(ptr, v, "must be one of linear, relu, relu6, sigmoid, tanh, softmax, elu, leaky_relu");
  }

  // Keras's ReLU layer: min(max(x, 0), max_value) with slope negative_slope below threshold.
  // The chips' activations are relu (no max_value), relu6 (max_value 6) and the leaky ReLU (no
  // max_value).
  Act relu_layer(Op& l, const json* max_value, const json* negative_slope, const json* threshold,
                 const std::string& cptr) const {
    auto zero = [](const json* v) { return !v || (v->is_number() && v->get<double>() == 0); };
    if (!zero(threshold))
      fail(cptr + "/threshold", *threshold, "must be 0: the chips' ReLU thresholds at 0");
    if (!zero(negative_slope)) {
      if (max_value && !max_value->is_null())
        fail(cptr + "/max_value", *max_value,
             "must be null with a negative_slope: the chips' leaky ReLU has no maximum");
      l.alpha = slope_value(*negative_slope, cptr + "/negative_slope");
      return Act::LeakyRelu;
    }
    if (!zero(threshold))
      fail(cptr + "/threshold", *threshold, "must be 0: the chips' ReLU thresholds at 0");
    if (!max_value || max_value->is_null()) return Act::Relu;
    if (max_value->is_number() && max_value->get<double>() == 6) return Act::Relu6;
    fail(cptr + "/max_value", *max_value, "must be null or 6: the chips' ReLUs are relu and relu6");
  }

  // A leaky ReLU's slope or an ELU's alpha: a finite number.
  float slope_value(const json& v, const std::string& ptr) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || std::fabs(v.get<double>()) > 1e6)
      fail(ptr, v, "must be a finite number of magnitude at most 1e6");
    return v.get<float>();
  }

  // Keras's Softmax layer, over the channels (the last axis).
  Act softmax_layer(const json* axis, const std::string& cptr) const {
    if (axis && !(*axis == -1 || *axis == json::array({-1})))
      fail(cptr + "/axis", *axis, "must be -1: softmax over the last axis");
    return Act::Softmax;
  }

  Padding padding_value(const json& v, const std::string& ptr) const {
    if (v == "valid") return Padding::Valid;
    if (v == "same") return Padding::Same;
    fail(ptr, v, "must be \"valid\" or \"same\"");
  }

  // A layer's name as its entry gives it, before it is parsed (for messages and references).
  static std::optional<std::string> given_name(const json& l) {
    if (!l.is_object()) return std::nullopt;
    if (auto cfg = l.find("config"); cfg != l.end() && cfg->is_object())
      if (auto n = cfg->find("name"); n != cfg->end() && n->is_string())
        return n->get<std::string>();
    if (auto n = l.find("name"); n != l.end() && n->is_string()) return n->get<std::string>();
    return std::nullopt;
  }

  // Names first, so a default name never takes one a later layer gives explicitly.
  void collect_explicit_names(const json& layers, const std::string& lptr) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const json& l = layers[i];
      if (!l.is_object()) continue;
      auto cfg = l.find("config");
      if (cfg == l.end() || !cfg->is_object()) continue;
      auto name = cfg->find("name");
      if (name == cfg->end()) continue;
      const std::string ptr = fmt::format("{}/{}/config/name", lptr, i);
      const std::string s = name_value(*name, ptr);
      if (auto [it, fresh] = explicit_names_.emplace(s, i); !fresh)
        fail(ptr, *name,
             fmt::format("layer names must be unique; {}/{} has it already", lptr, it->second));
    }
  }

  // Keras's backend.unique_object_name: the base name, then base_1, base_2, ...
  std::string default_name(const std::string& base) {
    std::uint32_t& n = name_counters_[base];
    for (;; ++n) {
      std::string candidate = n == 0 ? base : fmt::format("{}_{}", base, n);
      if (!explicit_names_.count(candidate) && !taken_.count(candidate)) {
        ++n;
        return candidate;
      }
    }
  }

  // Every layer whose class tpusim cannot run, in one message, before any is parsed: a user
  // porting a model learns the whole list at once. One such layer keeps parse_layer's message.
  void refuse_unsupported_classes(const json& layers, const std::string& lptr) const {
    std::vector<std::string> refused;
    std::size_t first = 0;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const json& l = layers[i];
      if (!l.is_object()) continue;
      const auto cls = l.find("class_name");
      if (cls == l.end() || !cls->is_string() || *cls == "InputLayer" || class_spec(*cls)) continue;
      if (refused.empty()) first = i;
      const auto name = given_name(l);
      refused.push_back(fmt::format("{}/{} {}{}", lptr, i, cls->get<std::string>(),
                                    name ? fmt::format(" ({})", *name) : std::string()));
    }
    if (refused.size() < 2) return;
    throw InputError(fmt::format(
        "{}: {}/{}/class_name: {} layers cannot run: {} (tpusim supports InputLayer, {})", origin_,
        lptr, first, refused.size(), join(refused), join(class_names())));
  }

  // The layer list, in either form: each entry's inputs are its inbound_nodes or, without them,
  // the entry before it (the model's input for the first), as Sequential chains them.
  void build(Graph& m, const json& layers, const std::string& lptr, const json* input_layers,
             const json* output_layers) {
    if (!layers.is_array() || layers.empty())
      fail(lptr, layers, "must be a non-empty array of {\"class_name\", \"config\"} objects");
    collect_explicit_names(layers, lptr);
    refuse_unsupported_classes(layers, lptr);
    std::map<std::string, std::size_t> index_of;  // layer name -> index or kGraphInput
    std::string input_name;
    std::size_t prev = kGraphInput;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const json& entry = layers[i];
      const std::string ptr = fmt::format("{}/{}", lptr, i);
      if (entry.is_object() && entry.value("class_name", json()) == "InputLayer") {
        if (!input_name.empty())
          fail(ptr + "/class_name", entry["class_name"],
               fmt::format("one input only; InputLayer {} comes first", input_name));
        input_name = parse_input_layer(entry, ptr);
        index_of[input_name] = kGraphInput;
        prev = kGraphInput;
        continue;
      }
      std::vector<std::size_t> inputs = {prev};
      if (entry.is_object())
        if (auto nodes = entry.find("inbound_nodes"); nodes != entry.end())
          inputs = inbound(*nodes, ptr + "/inbound_nodes", index_of, given_name(entry));
      Op l = parse_layer(entry, ptr, inputs, m);
      l.inputs = std::move(inputs);
      index_of[l.name] = m.ops.size();
      prev = m.ops.size();
      m.ops.push_back(std::move(l));
    }
    if (m.ops.empty()) fail(lptr, layers, "must hold at least one layer besides InputLayer");
    m.input = input_;
    if (input_layers) check_io(*input_layers, "/config/input_layers", input_name, "InputLayer");
    if (output_layers)
      check_io(*output_layers, "/config/output_layers", m.ops.back().name, "last layer");
  }

  // [["name", 0, 0], ...] (Keras 2) or ["name", 0, 0] (Keras 3, one tensor): one model input or
  // output, which must be `expected`.
  void check_io(const json& v, const std::string& ptr, const std::string& expected,
                const char* what) const {
    const json* ref = &v;
    if (v.is_array() && v.size() == 1 && v[0].is_array()) ref = &v[0];
    if (!ref->is_array() || ref->empty() || !(*ref)[0].is_string())
      fail(ptr, v,
           fmt::format("must name one tensor, [\"{}\", 0, 0]: tpusim runs models with one input "
                       "and one output",
                       expected));
    if ((*ref)[0] != expected)
      fail(ptr, v,
           fmt::format("tpusim runs models with one input and one output, the {} ({})", what,
                       expected));
  }

  std::string parse_input_layer(const json& entry, const std::string& ptr) {
    static const std::vector<std::string> entry_keys = {"class_name", "config", "inbound_nodes"};
    static const std::vector<std::string> entry_ignored = {"module", "registered_name",
                                                           "build_config", "name"};
    check_keys(entry, ptr, entry_keys, entry_ignored);
    const json& cfg = require(entry, ptr, "config", "the InputLayer's config");
    const std::string cptr = ptr + "/config";
    if (!cfg.is_object()) fail(cptr, cfg, "must be an object");
    static const std::vector<std::string> keys = {"name", "batch_input_shape", "batch_shape"};
    static const std::vector<std::string> ignored = {"dtype", "sparse", "ragged"};
    check_keys(cfg, cptr, keys, ignored);
    std::string name;
    if (auto n = cfg.find("name"); n != cfg.end())
      name = name_value(*n, cptr + "/name");
    else
      name = default_name("input_layer");
    taken_.insert(name);
    const char* key = cfg.contains("batch_input_shape") ? "batch_input_shape" : "batch_shape";
    const json& v = require(cfg, cptr, key, "[null, h, w, c] or [null, n]");
    const auto s = keras_shape(v, true);
    if (!s || s->size() > kMaxTensorElements)
      fail(cptr + "/" + key, v,
           fmt::format("must be [null, h, w, c] or [null, n], integers in [1, {}], at most {} "
                       "elements",
                       kMaxDim, kMaxTensorElements));
    if (input_given_ && !(*s == input_))
      fail(cptr + "/" + key, v, fmt::format("must match the model's input {}", show_shape(input_)));
    input_ = *s;
    input_given_ = true;
    return name;
  }

  // Keras 2: [[["name", node, tensor, {kwargs}], ...]]; Keras 3: [{"args": [...], "kwargs":
  // {...}}] whose args hold {"class_name": "__keras_tensor__", "config": {"keras_history":
  // ["name", node, tensor]}} objects. One call per layer (no shared layers), producers'
  // first outputs only.
  std::vector<std::size_t> inbound(const json& nodes, const std::string& ptr,
                                   const std::map<std::string, std::size_t>& index_of,
                                   const std::optional<std::string>& layer) const {
    const std::string who = layer ? fmt::format("layer {}: ", *layer) : std::string();
    if (!nodes.is_array() || nodes.size() != 1)
      fail(ptr, nodes,
           who + "must hold exactly one node (layers called more than once are not supported)");
    std::vector<json> refs;
    const json& node = nodes[0];
    if (node.is_array()) {
      for (const json& r : node) refs.push_back(r);
    } else if (node.is_object() && node.contains("args")) {
      collect_history(node["args"], refs);
    } else {
      fail(ptr + "/0", node, who + "must be [[name, 0, 0, {}], ...] or {\"args\": [...]}");
    }
    if (refs.empty()) fail(ptr, nodes, who + "names no input tensor");
    std::vector<std::size_t> out;
    for (const json& r : refs) {
      if (!r.is_array() || r.size() < 3 || !r[0].is_string())
        fail(ptr, r, who + "an input must be [\"layer name\", node index, tensor index, ...]");
      if (r[1] != 0 || r[2] != 0)
        fail(ptr, r,
             who +
                 "node and tensor indices must be 0 (shared layers and layers with several "
                 "outputs are not supported)");
      const auto it = index_of.find(r[0].get<std::string>());
      if (it == index_of.end())
        fail(ptr, r, who + "must name the InputLayer or a layer listed before this one");
      out.push_back(it->second);
    }
    return out;
  }

  static void collect_history(const json& v, std::vector<json>& refs) {
    if (v.is_object()) {
      if (v.value("class_name", json()) == "__keras_tensor__") {
        if (auto c = v.find("config");
            c != v.end() && c->is_object() && c->contains("keras_history"))
          refs.push_back((*c)["keras_history"]);
        return;
      }
      for (const auto& x : v) collect_history(x, refs);
    } else if (v.is_array()) {
      for (const auto& x : v) collect_history(x, refs);
    }
  }

  void check_tensor(const Op& l, const std::string& ptr, const json& cfg) const {
    if (l.out.size() > kMaxTensorElements)
      fail(ptr, cfg,
           fmt::format("output {} has more than {} elements", show_shape(l.out),
                       kMaxTensorElements));
    if (l.kind == OpKind::Conv2D || l.kind == OpKind::Dense) {
      const std::uint64_t fan_in =
          l.kind == OpKind::Dense ? l.in.size() : std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c;
      if (fan_in > kMaxTensorElements / l.filters)
        fail(ptr, cfg,
             fmt::format("kernel of {} x {} weights: more than {} elements", fan_in, l.filters,
                         kMaxTensorElements));
      return;
    }
    for (const ir::ParamSpec& spec : ir::op_info(l.kind).params(l)) {
      long double n = 1;  // wide: four 65536s overflow 64 bits
      for (std::uint32_t d : spec.dims) n *= d;
      if (n > static_cast<long double>(kMaxTensorElements))
        fail(ptr, cfg,
             fmt::format("{} of {} weights: more than {} elements", spec.suffix,
                         fmt::join(spec.dims, " x "), kMaxTensorElements));
    }
  }

  void check_shape_key(const json& v, const std::string& ptr, const Shape& in, bool batch) const {
    const auto s = keras_shape(v, batch);
    if (!s || !(*s == in))
      fail(ptr, v,
           fmt::format("must match the layer's input {}: {}[{}, {}, {}]", show_shape(in),
                       batch ? "[null, ...] = " : "", in.h, in.w, in.c));
  }

  // ZeroPadding2D's padding: p, [rows, cols] or [[top, bottom], [left, right]].
  void zero_padding(Op& l, const json& v, const std::string& ptr) const {
    auto n = [](const json& x) {
      const auto k = natural(x);
      return k && *k <= kMaxDim;
    };
    auto g = [](const json& x) { return static_cast<std::uint32_t>(*natural(x)); };
    if (n(v)) {
      l.pad_top = l.pad_bottom = l.pad_left = l.pad_right = g(v);
    } else if (v.is_array() && v.size() == 2 && n(v[0]) && n(v[1])) {
      l.pad_top = l.pad_bottom = g(v[0]);
      l.pad_left = l.pad_right = g(v[1]);
    } else if (v.is_array() && v.size() == 2 && v[0].is_array() && v[1].is_array() &&
               v[0].size() == 2 && v[1].size() == 2 && n(v[0][0]) && n(v[0][1]) && n(v[1][0]) &&
               n(v[1][1])) {
      l.pad_top = g(v[0][0]), l.pad_bottom = g(v[0][1]);
      l.pad_left = g(v[1][0]), l.pad_right = g(v[1][1]);
    } else {
      fail(ptr, v,
           fmt::format("must be an integer in [0, {}], [rows, cols] or [[top, bottom], [left, "
                       "right]] of them",
                       kMaxDim));
    }
  }

  Op parse_layer(const json& entry, const std::string& ptr, const std::vector<std::size_t>& inputs,
                 const Graph& m) {
    if (!entry.is_object())
      fail(ptr, entry, "must be an object {\"class_name\": ..., \"config\": {...}}");
    // Keras 3 adds these beside class_name/config when it serialises a layer; Keras's
    // functional models add the name and inbound_nodes.
    static const std::vector<std::string> entry_keys = {"class_name", "config", "inbound_nodes"};
    static const std::vector<std::string> entry_ignored = {"module", "registered_name",
                                                           "build_config", "name"};
    for (auto it = entry.begin(); it != entry.end(); ++it)
      if (!contains(entry_keys, it.key()) && !contains(entry_ignored, it.key()))
        throw InputError(
            fmt::format("{}: {}/{}: unknown key (allowed: {}; Keras keys accepted "
                        "and ignored: {})",
                        origin_, ptr, escape_key(it.key()), join(entry_keys), join(entry_ignored)));
    const json& cls = require(entry, ptr, "class_name", "a layer class");
    const ClassSpec* spec = class_spec(cls);
    if (!spec) {
      const auto name = given_name(entry);
      fail(ptr + "/class_name", cls,
           fmt::format("{}tpusim supports InputLayer, {}",
                       name ? fmt::format("layer {} cannot run: ", *name) : std::string(),
                       join(class_names())));
    }

    static const json kEmpty = json::object();
    const auto cfg_it = entry.find("config");
    const json& cfg = cfg_it == entry.end() ? kEmpty : *cfg_it;
    const std::string cptr = ptr + "/config";
    if (!cfg.is_object()) fail(cptr, cfg, "must be an object of the layer's arguments");
    for (auto it = cfg.begin(); it != cfg.end(); ++it) {
      if (contains(spec->keys, it.key()) || contains(spec->ignored, it.key()) ||
          contains(kShapeKeys, it.key()))
        continue;
      throw InputError(
          fmt::format("{}: {}/{}: unknown key for {} (allowed: {}, {}; Keras keys "
                      "accepted and ignored: {})",
                      origin_, cptr, escape_key(it.key()), spec->class_name, join(spec->keys),
                      join(kShapeKeys), join(spec->ignored)));
    }
    auto arg = [&](const char* key) -> const json* {
      auto it = cfg.find(key);
      return it == cfg.end() ? nullptr : &*it;
    };
    auto key_ptr = [&](const char* key) { return cptr + "/" + key; };

    Op l;
    l.kind = spec->kind;
    if (const json* v = arg("name"))
      l.name = name_value(*v, key_ptr("name"));
    else
      l.name = default_name(spec->base_name);
    taken_.insert(l.name);

    // A Sequential model's to_json without an InputLayer records the input on its first layer.
    if (!input_given_)
      for (const char* key : {"batch_input_shape", "input_shape"})
        if (const json* v = arg(key); v && !input_given_)
          if (const auto s = keras_shape(*v, key[0] == 'b'); s && s->size() <= kMaxTensorElements) {
            input_ = *s;
            input_given_ = true;
          }
    std::vector<Shape> shapes;
    for (std::size_t p : inputs) {
      if (p == kGraphInput && !input_given_)
        throw InputError(
            fmt::format("{}: {}: layer {} reads the model's input, whose shape no InputLayer, "
                        "batch_input_shape or \"input\" gives",
                        origin_, ptr, l.name));
      shapes.push_back(p == kGraphInput ? input_ : m.ops[p].out);
    }

    // The layer's arguments; its shapes come from the operation table (ops.h) afterwards.
    if (const json* v = arg("data_format"); v && !v->is_null() && *v != "channels_last")
      fail(key_ptr("data_format"), *v, "must be \"channels_last\": activations are NHWC");
    if (const json* v = arg("dilation_rate"))
      std::tie(l.dilation_h, l.dilation_w) = int_or_pair(*v, key_ptr("dilation_rate"));
    if (const json* v = arg("groups"); v && *v != 1)
      fail(key_ptr("groups"), *v, "must be 1: grouped convolutions are not supported");
    if (const json* v = arg("use_bias")) l.use_bias = bool_value(*v, key_ptr("use_bias"));
    if (const json* v = arg("activation"))
      l.activation = activation_value(*v, key_ptr("activation"));
    if (l.kind != OpKind::ZeroPadding2D)
      if (const json* v = arg("padding")) l.padding = padding_value(*v, key_ptr("padding"));

    // Keras's defaults where a message shows an argument the layer leaves out.
    static const json kDefaultPool = 2;  // pool_size=(2, 2)
    static const json kDefaultPad = 1;   // ZeroPadding2D's padding=(1, 1)
    switch (l.kind) {
      case OpKind::Conv2D:
      case OpKind::DepthwiseConv2D:
      case OpKind::SeparableConv2D: {
        if (l.kind != OpKind::DepthwiseConv2D) {
          const json& f =
              require(cfg, cptr, "filters", fmt::format("an integer in [1, {}]", kMaxDim));
          l.filters = uint_value(f, key_ptr("filters"), 1, kMaxDim);
        }
        if (const json* v = arg("depth_multiplier"))
          l.depth_multiplier = uint_value(*v, key_ptr("depth_multiplier"), 1, kMaxDim);
        const json& k = require(cfg, cptr, "kernel_size", "an integer or [rows, cols]");
        std::tie(l.kernel_h, l.kernel_w) = int_or_pair(k, key_ptr("kernel_size"));
        if (const json* v = arg("strides"))
          std::tie(l.stride_h, l.stride_w) = int_or_pair(*v, key_ptr("strides"));
        break;
      }
      case OpKind::MaxPooling2D:
      case OpKind::AveragePooling2D: {
        // Keras: strides=None means strides = pool_size.
        const json* pool = arg("pool_size");
        std::tie(l.kernel_h, l.kernel_w) =
            int_or_pair(pool ? *pool : kDefaultPool, key_ptr("pool_size"));
        std::tie(l.stride_h, l.stride_w) = std::pair{l.kernel_h, l.kernel_w};
        if (const json* v = arg("strides"); v && !v->is_null())
          std::tie(l.stride_h, l.stride_w) = int_or_pair(*v, key_ptr("strides"));
        break;
      }
      case OpKind::Activation:
        if (std::string_view(spec->class_name) == "ReLU") {
          l.activation =
              relu_layer(l, arg("max_value"), arg("negative_slope"), arg("threshold"), cptr);
        } else if (std::string_view(spec->class_name) == "LeakyReLU") {
          // Keras's default slope: 0.3 (Keras 2's alpha), 0.2 (Keras 3's negative_slope).
          l.activation = Act::LeakyRelu;
          l.alpha = 0.3f;
          if (const json* v = arg("alpha")) l.alpha = slope_value(*v, key_ptr("alpha"));
          if (const json* v = arg("negative_slope"))
            l.alpha = slope_value(*v, key_ptr("negative_slope"));
        } else if (std::string_view(spec->class_name) == "ELU") {
          l.activation = Act::Elu;
          l.alpha = 1.0f;
          if (const json* v = arg("alpha")) l.alpha = slope_value(*v, key_ptr("alpha"));
        } else if (std::string_view(spec->class_name) == "Softmax")
          l.activation = softmax_layer(arg("axis"), cptr);
        else if (std::string_view(spec->class_name) == "Activation")
          l.activation = activation_value(require(cfg, cptr, "activation", "an activation name"),
                                          key_ptr("activation"));
        break;
      case OpKind::Dense: {
        const json& u = require(cfg, cptr, "units", fmt::format("an integer in [1, {}]", kMaxDim));
        l.filters = uint_value(u, key_ptr("units"), 1, kMaxDim);
        break;
      }
      case OpKind::BatchNormalization:
        if (const json* v = arg("epsilon")) {
          if (!v->is_number() || !(v->get<double>() > 0) || v->get<double>() > 1)
            fail(key_ptr("epsilon"), *v, "must be a number in (0, 1]");
          l.epsilon = v->get<float>();
        }
        if (const json* v = arg("momentum")) {
          if (!v->is_number() || !(v->get<double>() >= 0) || v->get<double>() > 1)
            fail(key_ptr("momentum"), *v, "must be a number in [0, 1]");
          l.momentum = v->get<float>();
        }
        if (const json* v = arg("center")) l.use_bias = bool_value(*v, key_ptr("center"));
        if (const json* v = arg("scale")) l.scale = bool_value(*v, key_ptr("scale"));
        break;
      case OpKind::ZeroPadding2D: {
        const json* v = arg("padding");
        zero_padding(l, v ? *v : kDefaultPad, key_ptr("padding"));
        break;
      }
      case OpKind::GlobalAveragePooling2D:
      case OpKind::GlobalMaxPooling2D:
        if (const json* v = arg("keepdims")) bool_value(*v, key_ptr("keepdims"));
        break;
      case OpKind::Dropout:
        if (const json* v = arg("rate");
            v && (!v->is_number() || !(v->get<double>() >= 0) || !(v->get<double>() < 1)))
          fail(key_ptr("rate"), *v, "must be a number in [0, 1)");
        if (const json* v = arg("stddev");
            v && (!v->is_number() || !(v->get<double>() >= 0) || !std::isfinite(v->get<double>())))
          fail(key_ptr("stddev"), *v, "must be a finite number >= 0");
        break;
      case OpKind::Reshape: {
        const json& t = require(cfg, cptr, "target_shape", "[n], [w, c] or [h, w, c]");
        const std::string allowed = fmt::format(
            "must be 1 to 3 dimensions per image, each an integer in [1, {}] or one -1", kMaxDim);
        if (!t.is_array() || t.empty() || t.size() > 3) fail(key_ptr("target_shape"), t, allowed);
        for (const json& d : t) {
          if (d == -1 && std::count(l.target_shape.begin(), l.target_shape.end(), -1) == 0) {
            l.target_shape.push_back(-1);
          } else if (const auto n = natural(d); n && *n >= 1 && *n <= kMaxDim) {
            l.target_shape.push_back(static_cast<std::int64_t>(*n));
          } else {
            fail(key_ptr("target_shape"), t, allowed);
          }
        }
        break;
      }
      case OpKind::Concatenate:
        if (const json* v = arg("axis"); v && !(*v == -1 || *v == 3))
          fail(key_ptr("axis"), *v, "must be -1 or 3: tpusim concatenates along the channels");
        break;
      case OpKind::PReLU:
        if (const json* v = arg("shared_axes");
            v && !v->is_null() && *v != json::array({1, 2}) && *v != json::array({2, 1}))
          fail(key_ptr("shared_axes"), *v,
               "must be [1, 2] or null: one alpha per channel (null on a flat input)");
        break;
      case OpKind::Embedding: {
        const json& n = require(cfg, cptr, "input_dim",
                                fmt::format("an integer in [1, {}]", kMaxEmbeddingRows));
        l.input_dim = uint_value(n, key_ptr("input_dim"), 1, kMaxEmbeddingRows);
        const json& d =
            require(cfg, cptr, "output_dim", fmt::format("an integer in [1, {}]", kMaxDim));
        l.filters = uint_value(d, key_ptr("output_dim"), 1, kMaxDim);
        if (const json* v = arg("mask_zero"); v && bool_value(*v, key_ptr("mask_zero")))
          fail(key_ptr("mask_zero"), *v, "must be false: tpusim has no masks");
        break;
      }
      case OpKind::LSTM: {
        const json& u = require(cfg, cptr, "units", fmt::format("an integer in [1, {}]", kMaxDim));
        l.filters = uint_value(u, key_ptr("units"), 1, kMaxDim);
        if (!arg("activation")) l.activation = Act::Tanh;  // Keras's default
        if (const json* v = arg("recurrent_activation"))
          l.recurrent_activation = activation_value(*v, key_ptr("recurrent_activation"));
        if (const json* v = arg("return_sequences"))
          l.return_sequences = bool_value(*v, key_ptr("return_sequences"));
        for (const char* key : {"return_state", "go_backwards", "stateful", "time_major"})
          if (const json* v = arg(key); v && bool_value(*v, key_ptr(key)))
            fail(key_ptr(key), *v, "must be false: tpusim's LSTM runs forward over one sequence");
        // Dropout only acts in training: at inference the LSTM is the same either way.
        for (const char* key : {"dropout", "recurrent_dropout"})
          if (const json* v = arg(key);
              v && (!v->is_number() || !(v->get<double>() >= 0) || !(v->get<double>() < 1)))
            fail(key_ptr(key), *v, "must be a number in [0, 1)");
        break;
      }
      case OpKind::Flatten:
      case OpKind::Add:
      case OpKind::Multiply:
      case OpKind::Subtract:
      case OpKind::Constant: break;
    }

    if (auto problem = infer_shapes(l, shapes)) {
      const std::string& at = problem->argument;
      if (at == kInputsArgument)
        fail(ptr + "/inbound_nodes", entry.value("inbound_nodes", json()), problem->message);
      if (at == kClassArgument) fail(ptr + "/class_name", cls, problem->message);
      const json* v = arg(at.c_str());
      const json& shown = v                   ? *v
                          : at == "pool_size" ? kDefaultPool
                          : at == "padding"   ? kDefaultPad
                                              : json();
      fail(key_ptr(at.c_str()), shown, problem->message);
    }
    const Shape& in = l.in;
    // Checks of arguments against the input's shape.
    if (const json* v = arg("batch_input_shape"))
      check_shape_key(*v, key_ptr("batch_input_shape"), in, true);
    if (const json* v = arg("input_shape")) check_shape_key(*v, key_ptr("input_shape"), in, false);
    if (l.kind == OpKind::BatchNormalization)
      if (const json* v = arg("axis")) {
        // Normalising any axis but the channels would need per-pixel parameters.
        const json& a = v->is_array() && v->size() == 1 ? (*v)[0] : *v;
        const bool flat = in.h == 1 && in.w == 1;
        if (!(a == -1 || a == 3 || (flat && a == 1)))
          fail(key_ptr("axis"), *v, "must be the channel axis: -1 or 3 (1 on a flat input)");
      }
    check_tensor(l, cptr, cfg);
    return l;
  }

  std::string origin_;
  Shape input_;
  bool input_given_ = false;
  std::map<std::string, std::size_t> explicit_names_;
  std::set<std::string> taken_;
  std::map<std::string, std::uint32_t> name_counters_;
};

// Keras's legacy serialisation (SavedModel metadata) wraps tuples and shapes as
// {"class_name": "__tuple__" | "TensorShape", "items": [...]}; they mean the plain list.
json unwrap_tuples(const json& v) {
  if (v.is_object()) {
    if (v.size() == 2 && v.contains("items") &&
        (v.value("class_name", json()) == "__tuple__" ||
         v.value("class_name", json()) == "TensorShape"))
      return unwrap_tuples(v["items"]);
    json out = json::object();
    for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = unwrap_tuples(it.value());
    return out;
  }
  if (v.is_array()) {
    json out = json::array();
    for (const auto& x : v) out.push_back(unwrap_tuples(x));
    return out;
  }
  return v;
}

}  // namespace

Graph parse_model(const json& doc, const std::string& origin) {
  Graph g = Parser(origin).parse(unwrap_tuples(doc));
  // An input an Embedding reads holds token ids: nothing else may read it as values.
  if (ir::input_is_token_ids(g))
    for (const Op& op : g.ops)
      for (std::size_t p : op.inputs)
        if (p == kGraphInput && op.kind != OpKind::Embedding)
          throw InputError(
              fmt::format("{}: layer {} ({}) reads the model's input, which holds the "
                          "token ids an Embedding reads; only Embeddings may read it",
                          origin, op.name, ir::name_of(op.kind)));
  return g;
}

namespace {

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// SCALE-Sim's split: fields between commas, the last (empty after the trailing comma) dropped.
std::vector<std::string> csv_fields(const std::string& row) {
  std::vector<std::string> f;
  std::string cur;
  for (char ch : row) {
    if (ch == ',') {
      f.push_back(trim(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!trim(cur).empty()) f.push_back(trim(cur));
  return f;
}

}  // namespace

Graph parse_topology(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  std::string row;
  std::vector<std::pair<std::size_t, std::vector<std::string>>> rows;
  std::vector<std::string> header;
  for (std::size_t line = 1; std::getline(in, row); ++line) {
    if (trim(row).empty()) continue;
    if (header.empty())
      header = csv_fields(row);
    else
      rows.emplace_back(line, csv_fields(row));
  }
  // SCALE-Sim v2 topology_utils.py: convolution rows "name, IFMAP height, IFMAP width, filter
  // height, filter width, channels, num filter, stride height[, stride width]," (one stride means
  // both); GEMM rows "name, M, N, K," read as an M x K input times a K x N matrix.
  const bool gemm = header.size() >= 4 && lower(header[1]) == "m" && lower(header[2]) == "n" &&
                    lower(header[3]) == "k";
  const bool conv = header.size() >= 8 && lower(header[1]).rfind("ifmap", 0) == 0;
  if (!gemm && !conv)
    throw InputError(fmt::format(
        "{}: line 1: not a SCALE-Sim topology header (expected \"Layer name, IFMAP Height, IFMAP "
        "Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\" or \"Layer, M, N, "
        "K,\")",
        origin));
  if (rows.empty()) throw InputError(fmt::format("{}: no layer rows after the header", origin));
  Graph m;
  m.file = origin;
  {
    std::string stem = origin.substr(origin.find_last_of('/') + 1);
    stem = stem.substr(0, stem.find('.'));
    m.name = stem.empty() ? "topology" : stem;
  }
  std::set<std::string> names;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& [line, f] = rows[r];
    const std::size_t want = gemm ? 4 : 8;
    if (f.size() < want || f.size() > (gemm ? 4u : 9u))
      throw InputError(fmt::format("{}: line {}: {} fields (a {} row has {}{})", origin, line,
                                   f.size(), gemm ? "GEMM" : "convolution", want,
                                   gemm ? "" : " or 9"));
    const std::string& name = f[0];
    if (name.empty() || name.size() > kMaxNameBytes || name.find('/') != std::string::npos ||
        !names.insert(name).second)
      throw InputError(
          fmt::format("{}: line {}: layer name \"{}\" (must be unique, 1 to {} bytes, without '/')",
                      origin, line, name, kMaxNameBytes));
    if (name.find("DP") != std::string::npos && !gemm)
      throw InputError(fmt::format(
          "{}: line {}: layer {} is a depthwise convolution (\"DP\" in its name, as SCALE-Sim "
          "marks them), which tpusim's compiler does not lower",
          origin, line, name));
    std::vector<std::uint32_t> v;
    for (std::size_t k = 1; k < f.size(); ++k) {
      std::uint64_t x = 0;
      const bool digits =
          !f[k].empty() && f[k].size() <= 6 &&
          std::all_of(f[k].begin(), f[k].end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      if (digits) x = std::stoull(f[k]);
      if (!digits || x < 1 || x > kMaxDim)
        throw InputError(fmt::format(
            "{}: line {}: layer {}: {} = \"{}\" (must be an integer in "
            "[1, {}])",
            origin, line, name, header.size() > k ? header[k] : "field", f[k], kMaxDim));
      v.push_back(static_cast<std::uint32_t>(x));
    }
    Op l;
    l.name = name;
    l.kind = OpKind::Conv2D;
    l.use_bias = false;
    if (gemm) {
      l.in = Shape{v[0], 1, v[2]};
      l.filters = v[1];
    } else {
      l.in = Shape{v[0], v[1], v[4]};
      l.kernel_h = v[2], l.kernel_w = v[3];
      l.filters = v[5];
      l.stride_h = v[6];
      l.stride_w = v.size() > 7 ? v[7] : v[6];
      if (l.kernel_h > l.in.h || l.kernel_w > l.in.w)
        throw InputError(
            fmt::format("{}: line {}: layer {}: the {}x{} filter is larger than the "
                        "{}x{} IFMAP",
                        origin, line, name, l.kernel_h, l.kernel_w, l.in.h, l.in.w));
    }
    l.out = Shape{(l.in.h - l.kernel_h) / l.stride_h + 1, (l.in.w - l.kernel_w) / l.stride_w + 1,
                  l.filters};
    const std::uint64_t fan_in = std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c;
    if (l.in.size() > kMaxTensorElements || l.out.size() > kMaxTensorElements ||
        fan_in * l.filters > kMaxTensorElements)
      throw InputError(fmt::format("{}: line {}: layer {}: tensors of more than {} elements",
                                   origin, line, name, kMaxTensorElements));
    // Each row reads its own input, as SCALE-Sim simulates each row alone: the first row the
    // images the host streams in, the others a seeded tensor held in off-chip memory.
    if (r == 0) {
      m.input = l.in;
      l.inputs = {kGraphInput};
    } else {
      Op c;
      c.name = name + "_ifmap";
      c.kind = OpKind::Constant;
      c.seed = r;
      c.out = l.in;
      c.in = l.in;
      if (!names.insert(c.name).second)
        throw InputError(fmt::format("{}: line {}: layer name {} is taken by another row", origin,
                                     line, c.name));
      m.ops.push_back(std::move(c));
      l.inputs = {m.ops.size() - 1};
    }
    m.ops.push_back(std::move(l));
  }
  return m;
}

Imported import_model(const std::string& path) {
  const std::string text = read_input_file(path, "model", kMaxModelBytes);
  // "{" or "[" first is JSON, whatever follows (no ModelProto starts so: they would be group
  // tags); other binary is ONNX's protobuf; other text a topology CSV.
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '['))
    return {parse_model(parse_json_text(text, path), path), {}};
  if (looks_like_protobuf(text)) {
    OnnxModel m = parse_onnx(text, path);
    return {std::move(m.graph), std::move(m.parameters)};
  }
  if (first == std::string::npos)
    throw InputError(fmt::format(
        "{}: file is empty (expected a model JSON, an ONNX model or a SCALE-Sim topology CSV)",
        path));
  return {parse_topology(text, path), {}};
}

Graph load_model(const std::string& path) { return import_model(path).graph; }

Graph load_topology(const std::string& path) {
  const std::string text = read_input_file(path, "model", kMaxModelBytes);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw InputError(fmt::format("{}: file is empty (expected a SCALE-Sim topology CSV)", path));
  return parse_topology(text, path);
}

}  // namespace tpu::importers
