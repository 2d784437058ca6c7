#include "sw/nn/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "hw/common/error.h"

namespace tpu::nn {
using nlohmann::json;

std::uint64_t Layer::macs() const {
  switch (kind) {
    case LayerKind::Conv2D: return out.size() * kernel_h * kernel_w * in.c;
    case LayerKind::Dense: return in.size() * out.c;
    // Pooling, activations and Flatten multiply-accumulate nothing (they run on the vector unit
    // or are a change of view).
    case LayerKind::MaxPooling2D:
    case LayerKind::AveragePooling2D:
    case LayerKind::Activation:
    case LayerKind::Flatten: return 0;
  }
  return 0;
}

std::uint64_t Model::macs_per_image() const {
  std::uint64_t total = 0;
  for (const Layer& l : layers) total += l.macs();
  return total;
}

std::string_view name_of(LayerKind k) {
  switch (k) {
    case LayerKind::Conv2D: return "Conv2D";
    case LayerKind::MaxPooling2D: return "MaxPooling2D";
    case LayerKind::AveragePooling2D: return "AveragePooling2D";
    case LayerKind::Activation: return "Activation";
    case LayerKind::Flatten: return "Flatten";
    case LayerKind::Dense: return "Dense";
  }
  return "?";
}

std::string_view name_of(Act a) {
  switch (a) {
    case Act::Linear: return "linear";
    case Act::Relu: return "relu";
    case Act::Relu6: return "relu6";
    case Act::Sigmoid: return "sigmoid";
    case Act::Tanh: return "tanh";
    case Act::Softmax: return "softmax";
  }
  return "?";
}

namespace {

// Bounds that keep every size product inside 64 bits and every tensor addressable by 32-bit
// element counts (the weights file and the compiler use 32-bit dimensions).
constexpr std::uint32_t kMaxDim = 65536;
constexpr std::uint64_t kMaxTensorElements = std::uint64_t{1} << 31;
constexpr std::size_t kMaxNameBytes = 128;
constexpr int kMaxJsonDepth = 64;

// The keys each layer class reads (Keras's argument names), and the Keras keys it accepts but
// ignores because they only matter for training or serialisation.
struct ClassSpec {
  const char* class_name;
  LayerKind kind;
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
// Any class may carry the input shape Keras records on a model's first layer; it is checked
// against the shape the loader resolves.
const std::vector<std::string> kShapeKeys = {"batch_input_shape", "input_shape"};

const std::vector<ClassSpec>& class_specs() {
  static const std::vector<ClassSpec> specs = {
      {"Conv2D",
       LayerKind::Conv2D,
       "conv2d",
       {"name", "filters", "kernel_size", "strides", "padding", "use_bias", "activation",
        "data_format", "dilation_rate", "groups"},
       kWeightIgnored},
      {"MaxPooling2D",
       LayerKind::MaxPooling2D,
       "max_pooling2d",
       {"name", "pool_size", "strides", "padding", "data_format"},
       kBaseIgnored},
      {"AveragePooling2D",
       LayerKind::AveragePooling2D,
       "average_pooling2d",
       {"name", "pool_size", "strides", "padding", "data_format"},
       kBaseIgnored},
      {"Activation", LayerKind::Activation, "activation", {"name", "activation"}, kBaseIgnored},
      {"Flatten", LayerKind::Flatten, "flatten", {"name", "data_format"}, kBaseIgnored},
      {"Dense",
       LayerKind::Dense,
       "dense",
       {"name", "units", "activation", "use_bias"},
       kWeightIgnored},
  };
  return specs;
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

std::string show_shape(const Shape& s) { return fmt::format("{}x{}x{}", s.h, s.w, s.c); }

class Parser {
 public:
  explicit Parser(std::string origin) : origin_(std::move(origin)) {}

  Model parse(const json& doc) {
    if (!doc.is_object()) fail("", doc, "the model must be a JSON object");
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      static const std::vector<std::string> top = {"name", "description", "input", "layers"};
      if (!contains(top, it.key()))
        throw InputError(fmt::format("{}: /{}: unknown key (allowed: {})", origin_,
                                     escape_key(it.key()), join(top)));
    }
    Model m;
    m.file = origin_;
    m.name = name_value(require(doc, "", "name", "a non-empty string"), "/name");
    if (auto d = doc.find("description"); d != doc.end() && !d->is_string())
      fail("/description", *d, "must be a string");
    m.input = input_shape(require(doc, "", "input", "[h, w, c]"));

    const json& layers = require(doc, "", "layers", "an array of layers");
    if (!layers.is_array() || layers.empty())
      fail("/layers", layers, "must be a non-empty array of {\"class_name\", \"config\"} objects");
    collect_explicit_names(layers);
    Shape in = m.input;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      Layer l = parse_layer(layers[i], fmt::format("/layers/{}", i), in);
      in = l.out;
      m.layers.push_back(std::move(l));
    }
    return m;
  }

 private:
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

  Shape input_shape(const json& v) const {
    if (!v.is_array() || v.size() != 3)
      fail("/input", v, fmt::format("must be [h, w, c], integers in [1, {}]", kMaxDim));
    Shape s{uint_value(v[0], "/input/0", 1, kMaxDim), uint_value(v[1], "/input/1", 1, kMaxDim),
            uint_value(v[2], "/input/2", 1, kMaxDim)};
    if (s.size() > kMaxTensorElements)
      fail("/input", v, fmt::format("at most {} elements per image", kMaxTensorElements));
    return s;
  }

  Act activation_value(const json& v, const std::string& ptr) const {
    // Keras serialises activation=None as "linear"; a null is read the same way.
    if (v.is_null()) return Act::Linear;
    static const std::vector<std::pair<std::string, Act>> acts = {
        {"linear", Act::Linear},   {"relu", Act::Relu}, {"relu6", Act::Relu6},
        {"sigmoid", Act::Sigmoid}, {"tanh", Act::Tanh}, {"softmax", Act::Softmax}};
    if (v.is_string())
      for (const auto& [name, act] : acts)
        if (v.get<std::string>() == name) return act;
    fail(ptr, v, "must be one of linear, relu, relu6, sigmoid, tanh, softmax");
  }

  Padding padding_value(const json& v, const std::string& ptr) const {
    if (v == "valid") return Padding::Valid;
    if (v == "same") return Padding::Same;
    fail(ptr, v, "must be \"valid\" or \"same\"");
  }

  // Names first, so a default name never takes one a later layer gives explicitly.
  void collect_explicit_names(const json& layers) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const json& l = layers[i];
      if (!l.is_object()) continue;
      auto cfg = l.find("config");
      if (cfg == l.end() || !cfg->is_object()) continue;
      auto name = cfg->find("name");
      if (name == cfg->end()) continue;
      const std::string ptr = fmt::format("/layers/{}/config/name", i);
      const std::string s = name_value(*name, ptr);
      if (auto [it, fresh] = explicit_names_.emplace(s, i); !fresh)
        fail(ptr, *name,
             fmt::format("layer names must be unique; /layers/{} has it already", it->second));
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

  void check_tensor(const Layer& l, const std::string& ptr, const json& cfg) const {
    if (l.out.size() > kMaxTensorElements)
      fail(ptr, cfg,
           fmt::format("output {} has more than {} elements", show_shape(l.out),
                       kMaxTensorElements));
    if (l.kind == LayerKind::Conv2D || l.kind == LayerKind::Dense) {
      const std::uint64_t fan_in = l.kind == LayerKind::Dense
                                       ? l.in.size()
                                       : std::uint64_t{l.kernel_h} * l.kernel_w * l.in.c;
      if (fan_in > kMaxTensorElements / l.filters)
        fail(ptr, cfg,
             fmt::format("kernel of {} x {} weights: more than {} elements", fan_in, l.filters,
                         kMaxTensorElements));
    }
  }

  // Keras's conv_output_length: "valid" keeps the windows that fit, "same" ceil(in / stride).
  void resolve_window(Layer& l, const std::string& ptr, const json& v) const {
    if (l.padding == Padding::Same) {
      l.out.h = (l.in.h + l.stride_h - 1) / l.stride_h;
      l.out.w = (l.in.w + l.stride_w - 1) / l.stride_w;
      return;
    }
    if (l.kernel_h > l.in.h || l.kernel_w > l.in.w)
      fail(ptr, v,
           fmt::format("the {}x{} window does not fit the {} input with \"valid\" padding",
                       l.kernel_h, l.kernel_w, show_shape(l.in)));
    l.out.h = (l.in.h - l.kernel_h) / l.stride_h + 1;
    l.out.w = (l.in.w - l.kernel_w) / l.stride_w + 1;
  }

  void check_shape_key(const json& v, const std::string& ptr, const Shape& in, bool batch) const {
    std::vector<std::uint64_t> dims;
    bool ok = v.is_array() && !v.empty();
    for (std::size_t i = 0; ok && i < v.size(); ++i) {
      if (batch && i == 0)
        ok = v[i].is_null() || natural(v[i]).has_value();
      else if (const auto n = natural(v[i]))
        dims.push_back(*n);
      else
        ok = false;
    }
    if (ok && dims.size() == 3)
      ok = dims[0] == in.h && dims[1] == in.w && dims[2] == in.c;
    else if (ok && dims.size() == 1)
      ok = in.h == 1 && in.w == 1 && dims[0] == in.c;
    else
      ok = false;
    if (!ok)
      fail(ptr, v,
           fmt::format("must match the layer's input {}: {}[{}, {}, {}]", show_shape(in),
                       batch ? "[null, ...] = " : "", in.h, in.w, in.c));
  }

  Layer parse_layer(const json& entry, const std::string& ptr, const Shape& in) {
    if (!entry.is_object())
      fail(ptr, entry, "must be an object {\"class_name\": ..., \"config\": {...}}");
    // Keras 3 adds these beside class_name/config when it serialises a layer.
    static const std::vector<std::string> entry_keys = {"class_name", "config"};
    static const std::vector<std::string> entry_ignored = {"module", "registered_name",
                                                           "build_config", "name"};
    for (auto it = entry.begin(); it != entry.end(); ++it)
      if (!contains(entry_keys, it.key()) && !contains(entry_ignored, it.key()))
        throw InputError(
            fmt::format("{}: {}/{}: unknown key (allowed: {}; Keras keys accepted "
                        "and ignored: {})",
                        origin_, ptr, escape_key(it.key()), join(entry_keys), join(entry_ignored)));
    const json& cls = require(entry, ptr, "class_name", "a layer class");
    const ClassSpec* spec = nullptr;
    std::vector<std::string> class_names;
    for (const ClassSpec& s : class_specs()) {
      class_names.emplace_back(s.class_name);
      if (cls == s.class_name) spec = &s;
    }
    if (!spec) fail(ptr + "/class_name", cls, fmt::format("must be one of {}", join(class_names)));

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

    Layer l;
    l.kind = spec->kind;
    l.in = in;
    if (const json* v = arg("name"))
      l.name = name_value(*v, key_ptr("name"));
    else
      l.name = default_name(spec->base_name);
    taken_.insert(l.name);

    if (const json* v = arg("batch_input_shape"))
      check_shape_key(*v, key_ptr("batch_input_shape"), in, true);
    if (const json* v = arg("input_shape")) check_shape_key(*v, key_ptr("input_shape"), in, false);
    if (const json* v = arg("data_format"); v && !v->is_null() && *v != "channels_last")
      fail(key_ptr("data_format"), *v, "must be \"channels_last\": activations are NHWC");
    if (const json* v = arg("dilation_rate"); v && *v != 1 && *v != json::array({1, 1}))
      fail(key_ptr("dilation_rate"), *v,
           "must be 1 or [1, 1]: dilated convolutions are not supported");
    if (const json* v = arg("groups"); v && *v != 1)
      fail(key_ptr("groups"), *v, "must be 1: grouped convolutions are not supported");
    if (const json* v = arg("use_bias")) l.use_bias = bool_value(*v, key_ptr("use_bias"));
    if (const json* v = arg("activation"))
      l.activation = activation_value(*v, key_ptr("activation"));
    if (const json* v = arg("padding")) l.padding = padding_value(*v, key_ptr("padding"));

    switch (l.kind) {
      case LayerKind::Conv2D: {
        const json& f =
            require(cfg, cptr, "filters", fmt::format("an integer in [1, {}]", kMaxDim));
        l.filters = uint_value(f, key_ptr("filters"), 1, kMaxDim);
        const json& k = require(cfg, cptr, "kernel_size", "an integer or [rows, cols]");
        std::tie(l.kernel_h, l.kernel_w) = int_or_pair(k, key_ptr("kernel_size"));
        if (const json* v = arg("strides"))
          std::tie(l.stride_h, l.stride_w) = int_or_pair(*v, key_ptr("strides"));
        resolve_window(l, key_ptr("kernel_size"), k);
        l.out.c = l.filters;
        break;
      }
      case LayerKind::MaxPooling2D:
      case LayerKind::AveragePooling2D: {
        // Keras: pool_size defaults to (2, 2); strides=None means strides = pool_size.
        static const json kDefaultPool = 2;
        const json* pool = arg("pool_size");
        std::tie(l.kernel_h, l.kernel_w) =
            int_or_pair(pool ? *pool : kDefaultPool, key_ptr("pool_size"));
        std::tie(l.stride_h, l.stride_w) = std::pair{l.kernel_h, l.kernel_w};
        if (const json* v = arg("strides"); v && !v->is_null())
          std::tie(l.stride_h, l.stride_w) = int_or_pair(*v, key_ptr("strides"));
        const json& shown = pool ? *pool : kDefaultPool;
        resolve_window(l, key_ptr("pool_size"), shown);
        l.out.c = in.c;
        break;
      }
      case LayerKind::Activation:
        l.activation = activation_value(require(cfg, cptr, "activation", "an activation name"),
                                        key_ptr("activation"));
        l.out = in;
        break;
      case LayerKind::Flatten:
        // Every resolved shape holds at most kMaxTensorElements, which fits 32 bits.
        l.out = Shape{1, 1, static_cast<std::uint32_t>(in.size())};
        break;
      case LayerKind::Dense: {
        const json& u = require(cfg, cptr, "units", fmt::format("an integer in [1, {}]", kMaxDim));
        l.filters = uint_value(u, key_ptr("units"), 1, kMaxDim);
        // Keras applies Dense to the last axis of a 3-D input; tpusim's chips and references
        // treat Dense as a matrix product over the whole flat input, so the two would disagree.
        if (in.h != 1 || in.w != 1)
          fail(ptr + "/class_name", cls,
               fmt::format("Dense needs a flat input (h = w = 1) but gets {}; insert a Flatten "
                           "before it (Keras would apply it to the last axis only)",
                           show_shape(in)));
        l.out = Shape{1, 1, l.filters};
        break;
      }
    }
    check_tensor(l, cptr, cfg);
    return l;
  }

  std::string origin_;
  std::map<std::string, std::size_t> explicit_names_;
  std::set<std::string> taken_;
  std::map<std::string, std::uint32_t> name_counters_;
};

// nlohmann's parser recurses per nesting level; a hostile file must not exhaust the stack.
int json_depth(const std::string& text) {
  int depth = 0, max_depth = 0;
  bool in_str = false, esc = false;
  for (char ch : text) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (ch == '\\')
        esc = true;
      else if (ch == '"')
        in_str = false;
    } else if (ch == '"') {
      in_str = true;
    } else if (ch == '{' || ch == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
  return max_depth;
}

}  // namespace

Model parse_model(const json& doc, const std::string& origin) { return Parser(origin).parse(doc); }

Model load_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open model file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (const int depth = json_depth(text); depth > kMaxJsonDepth)
    throw InputError(fmt::format("{}: JSON nested {} levels deep (at most {} allowed)", path, depth,
                                 kMaxJsonDepth));
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    const auto pos = what.find("parse error");
    throw InputError(fmt::format("{}: not valid JSON: {}", path,
                                 pos == std::string::npos ? what : what.substr(pos)));
  }
  return parse_model(doc, path);
}

}  // namespace tpu::nn
