#include "sw/import/onnx.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>
#include <variant>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "onnx/onnx_pb.h"
#include "sw/ir/ops.h"

namespace tpu::importers {
using ir::Act;
using ir::kGraphInput;
using ir::kMaxDim;
using ir::kMaxTensorElements;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;

std::vector<std::uint64_t> OnnxLayout::ir_index() const {
  std::uint64_t n = 1;
  for (const Run& r : runs) n *= r.extent;
  std::vector<std::uint64_t> out(static_cast<std::size_t>(n));
  // Mixed-radix counting over the runs, the last (minor) fastest.
  std::vector<std::uint64_t> digit(runs.size(), 0);
  std::uint64_t at = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    out[static_cast<std::size_t>(k)] = at;
    for (std::size_t i = runs.size(); i-- > 0;) {
      if (++digit[i] < runs[i].extent) {
        at += runs[i].stride;
        break;
      }
      at -= runs[i].stride * (runs[i].extent - 1);
      digit[i] = 0;
    }
  }
  return out;
}

bool looks_like_protobuf(std::string_view bytes) {
  // Text (JSON, CSV) holds no control characters but tab, line feed and carriage return; a
  // serialized ModelProto starts with a field tag (ir_version's is 0x08) and holds binary lengths.
  const std::size_t n = std::min<std::size_t>(bytes.size(), 4096);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return true;
  }
  return false;
}

namespace {

// A name from the file, quoted for a one-line message: control and non-ASCII bytes escaped,
// long names shortened.
std::string shown(const std::string& s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\')
      out += fmt::format("\\{}", s[i]);
    else if (c < 0x20 || c > 0x7e)
      out += fmt::format("\\x{:02x}", c);
    else
      out += s[i];
  }
  if (s.size() > 64) out += "...";
  return out + "\"";
}

// An operator or domain name from the file, escaped as shown() does, without quotes.
std::string plain(const std::string& s) {
  const std::string q = shown(s);
  return q.substr(1, q.size() - 2);
}

// A tensor's value as fp32: beyond fp32's range it is an infinity (a plain conversion would be
// undefined), which the parameter checks then refuse.
float narrow(double d) {
  constexpr double kMax = std::numeric_limits<float>::max();
  if (d > kMax) return std::numeric_limits<float>::infinity();
  if (d < -kMax) return -std::numeric_limits<float>::infinity();
  return static_cast<float>(d);
}

std::string show_dims(const std::vector<std::int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ", "));
}

// ---- Constants: initializers and Constant nodes ------------------------------------------------

struct Const {
  std::vector<std::int64_t> dims;
  std::vector<double> values;  // float, double and integer tensors alike (int64 exact to 2^53)
  bool integer = false;
  [[nodiscard]] std::uint64_t size() const { return values.size(); }
};

// Decodes a TensorProto, checking that its data holds exactly what its dims say.
Const decode_tensor(const onnx::TensorProto& t, const std::string& origin,
                    const std::string& what) {
  Const c;
  std::uint64_t count = 1;
  for (int i = 0; i < t.dims_size(); ++i) {
    const std::int64_t d = t.dims(i);
    if (d < 0 || static_cast<std::uint64_t>(d) > kMaxTensorElements)
      throw InputError(fmt::format("{}: {}: dims {} (each must be in [0, {}])", origin, what,
                                   fmt::join(t.dims(), ", "), kMaxTensorElements));
    c.dims.push_back(d);
    count *= static_cast<std::uint64_t>(d);
    if (count > kMaxTensorElements)
      throw InputError(fmt::format("{}: {}: dims [{}] hold more than {} elements", origin, what,
                                   fmt::join(t.dims(), ", "), kMaxTensorElements));
  }
  if (t.has_segment())
    throw InputError(
        fmt::format("{}: {}: a segmented tensor (tpusim reads whole tensors)", origin, what));
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
    throw InputError(
        fmt::format("{}: {}: data in an external file (tpusim reads a model from one file: save "
                    "it without external data)",
                    origin, what));
  using DT = onnx::TensorProto_DataType;
  const int type = t.data_type();
  std::size_t width = 0;
  switch (type) {
    case DT::TensorProto_DataType_FLOAT:
    case DT::TensorProto_DataType_INT32: width = 4; break;
    case DT::TensorProto_DataType_DOUBLE:
    case DT::TensorProto_DataType_INT64: width = 8; break;
    default:
      throw InputError(
          fmt::format("{}: {}: data_type {} (tpusim reads FLOAT, DOUBLE, INT32 and INT64 tensors)",
                      origin, what,
                      onnx::TensorProto_DataType_IsValid(type)
                          ? onnx::TensorProto_DataType_Name(static_cast<DT>(type))
                          : std::to_string(type)));
  }
  c.integer = type == DT::TensorProto_DataType_INT32 || type == DT::TensorProto_DataType_INT64;
  const auto n = static_cast<std::size_t>(count);
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    if (raw.size() != count * width)
      throw InputError(
          fmt::format("{}: {}: dims {} hold {} values of {} bytes, its raw_data has {} bytes",
                      origin, what, show_dims(c.dims), count, width, raw.size()));
    c.values.resize(n);
    // Little-endian, as ONNX stores raw data (and as this host is).
    for (std::size_t k = 0; k < n; ++k) {
      const char* p = raw.data() + k * width;
      switch (type) {
        case DT::TensorProto_DataType_FLOAT: {
          float f;
          std::memcpy(&f, p, 4);
          c.values[k] = f;
          break;
        }
        case DT::TensorProto_DataType_INT32: {
          std::int32_t v;
          std::memcpy(&v, p, 4);
          c.values[k] = v;
          break;
        }
        case DT::TensorProto_DataType_DOUBLE: std::memcpy(&c.values[k], p, 8); break;
        default: {
          std::int64_t v;
          std::memcpy(&v, p, 8);
          c.values[k] = static_cast<double>(v);
        }
      }
    }
    return c;
  }
  auto take = [&](const auto& field, const char* field_name) {
    if (static_cast<std::uint64_t>(field.size()) != count)
      throw InputError(fmt::format("{}: {}: dims {} hold {} values, its {} holds {}", origin, what,
                                   show_dims(c.dims), count, field_name, field.size()));
    c.values.assign(field.begin(), field.end());
  };
  switch (type) {
    case DT::TensorProto_DataType_FLOAT: take(t.float_data(), "float_data"); break;
    case DT::TensorProto_DataType_INT32: take(t.int32_data(), "int32_data"); break;
    case DT::TensorProto_DataType_DOUBLE: take(t.double_data(), "double_data"); break;
    default: {
      if (static_cast<std::uint64_t>(t.int64_data_size()) != count)
        throw InputError(fmt::format("{}: {}: dims {} hold {} values, its int64_data holds {}",
                                     origin, what, show_dims(c.dims), count, t.int64_data_size()));
      c.values.reserve(n);
      for (std::int64_t v : t.int64_data()) c.values.push_back(static_cast<double>(v));
    }
  }
  return c;
}

// ---- Activations and their layouts
// ---------------------------------------------------------------

enum class Ax : std::uint8_t { H, W, C };

// A strided run along one IR axis: `extent` elements `stride` apart (in that axis's index).
struct Seg {
  Ax axis;
  std::uint64_t stride, extent;
  friend bool operator==(const Seg& a, const Seg& b) {
    return a.axis == b.axis && a.stride == b.stride && a.extent == b.extent;
  }
};
// Per ONNX axis of one sample, the runs it spans (major first; none for an axis of extent 1).
using Layout = std::vector<std::vector<Seg>>;

std::uint64_t axis_stride(Ax a, const Shape& s) {
  return a == Ax::H ? std::uint64_t{s.w} * s.c : a == Ax::W ? s.c : 1;
}

std::uint64_t extent_of(const std::vector<Seg>& axis) {
  std::uint64_t n = 1;
  for (const Seg& s : axis) n *= s.extent;
  return n;
}

std::vector<std::int64_t> dims_of(const Layout& l) {
  std::vector<std::int64_t> d;
  for (const auto& a : l) d.push_back(static_cast<std::int64_t>(extent_of(a)));
  return d;
}

// The ONNX-order-to-IR-index map as (IR linear stride, extent) runs, neighbours that continue
// each other merged: equal lists are equal maps.
std::vector<std::pair<std::uint64_t, std::uint64_t>> mapping(const Layout& l, const Shape& s) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> m;
  for (const auto& axis : l)
    for (const Seg& g : axis) {
      if (g.extent == 1) continue;
      const std::uint64_t stride = g.stride * axis_stride(g.axis, s);
      if (!m.empty() && m.back().first == stride * g.extent) {
        m.back() = {stride, m.back().second * g.extent};
      } else {
        m.emplace_back(stride, g.extent);
      }
    }
  return m;
}

// The layout of an ONNX tensor [N, C, spatial...] held channels-last: per sample [C] is 1x1xC,
// [C, L] is 1xLxC, [C, H, W] is HxWxC. Without `channels_first`, ONNX's own order: [A] is
// 1x1xA, [A, B] is 1xAxB, [A, B, D] is AxBxD.
std::pair<Shape, Layout> standard(const std::vector<std::int64_t>& d, bool channels_first) {
  auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
  auto seg = [](Ax a, std::int64_t e) {
    return e == 1 ? std::vector<Seg>{} : std::vector<Seg>{{a, 1, static_cast<std::uint64_t>(e)}};
  };
  switch (d.size()) {
    case 0: return {Shape{1, 1, 1}, {}};
    case 1: return {Shape{1, 1, u(d[0])}, {seg(Ax::C, d[0])}};
    case 2:
      if (channels_first) return {Shape{1, u(d[1]), u(d[0])}, {seg(Ax::C, d[0]), seg(Ax::W, d[1])}};
      return {Shape{1, u(d[0]), u(d[1])}, {seg(Ax::W, d[0]), seg(Ax::C, d[1])}};
    default:
      if (channels_first)
        return {Shape{u(d[1]), u(d[2]), u(d[0])},
                {seg(Ax::C, d[0]), seg(Ax::H, d[1]), seg(Ax::W, d[2])}};
      return {Shape{u(d[0]), u(d[1]), u(d[2])},
              {seg(Ax::H, d[0]), seg(Ax::W, d[1]), seg(Ax::C, d[2])}};
  }
}

// A problem with one node: what the message says about it.
struct NodeProblem {
  std::string text;
};

struct Activation {
  std::size_t producer = kGraphInput;  // IR op index or kGraphInput
  Shape ir;
  Layout layout;
  [[nodiscard]] std::vector<std::int64_t> dims() const { return dims_of(layout); }
};
// A value a failed node produced: nodes that read it are skipped without a message of their own.
struct Poisoned {};
// A value no node may read, with why (the graph input of a shape tpusim cannot hold).
struct Opaque {
  std::string why;
};
using Value = std::variant<Activation, Const, Poisoned, Opaque>;

struct Skip {};  // thrown by a node that reads a poisoned value

const std::vector<std::string>& supported_ops() {
  static const std::vector<std::string> ops = {"Conv",          "Gemm",
                                               "MatMul",        "Relu",
                                               "Sigmoid",       "Tanh",
                                               "LeakyRelu",     "Elu",
                                               "PRelu",         "Softmax",
                                               "Clip",          "MaxPool",
                                               "AveragePool",   "GlobalAveragePool",
                                               "GlobalMaxPool", "BatchNormalization",
                                               "Add",           "Sub",
                                               "Mul",           "Div",
                                               "Sum",           "Concat",
                                               "Flatten",       "Reshape",
                                               "Squeeze",       "Unsqueeze",
                                               "Transpose",     "Pad",
                                               "Dropout",       "Identity",
                                               "Constant",      "Gather"};
  return ops;
}

// Operations that want an image's channels on the IR's channel axis: with any of them the graph
// input is held channels-last (NCHW read as NHWC); without, in ONNX's own order.
bool channel_op(const std::string& op) {
  static const std::set<std::string> ops = {
      "Conv",  "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "BatchNormalization",
      "PRelu", "Pad",     "Concat"};
  return ops.count(op) > 0;
}

class Importer {
 public:
  // `channels_first`: the graph input is read as NCHW and held channels-last, else held in
  // ONNX's own order (docs/onnx.md, "Layouts"). parse_onnx tries channel_first_graph's guess
  // first, then the other.
  Importer(const onnx::ModelProto& model, std::string origin, bool channels_first)
      : model_(model),
        g_(model.graph()),
        origin_(std::move(origin)),
        channels_first_(channels_first) {}

  static bool channel_first_graph(const onnx::GraphProto& g) {
    for (const auto& n : g.node())
      if (channel_op(n.op_type())) return true;
    return false;
  }

  OnnxModel run() {
    opset_ = default_opset();
    for (const onnx::TensorProto& t : g_.initializer()) {
      const std::string what = fmt::format("initializer {}", shown(t.name()));
      if (t.name().empty())
        throw InputError(fmt::format("{}: an initializer without a name", origin_));
      values_[t.name()] = decode_tensor(t, origin_, what);
    }
    if (g_.output_size() != 1)
      throw InputError(
          fmt::format("{}: graph has {} outputs (tpusim runs models with one input and one output)",
                      origin_, g_.output_size()));
    read_input();
    const std::vector<bool> live = live_nodes();
    for (int i = 0; i < g_.node_size(); ++i) {
      if (!live[static_cast<std::size_t>(i)]) continue;
      const onnx::NodeProto& n = g_.node(i);
      const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
      if (onnx_domain &&
          (n.op_type() == "Constant" || std::find(supported_ops().begin(), supported_ops().end(),
                                                  n.op_type()) != supported_ops().end()))
        continue;
      problem(i, onnx_domain ? fmt::format("operator {} is not supported", plain(n.op_type()))
                             : fmt::format("operator {} of domain {} is not supported",
                                           plain(n.op_type()), shown(n.domain())));
    }
    for (int i = 0; i < g_.node_size(); ++i) {
      if (!live[static_cast<std::size_t>(i)]) continue;
      const onnx::NodeProto& n = g_.node(i);
      if (refused_.count(i)) {
        poison(n);
        continue;
      }
      try {
        node(i, n);
      } catch (const NodeProblem& p) {
        problem(i, p.text);
        poison(n);
      } catch (const Skip&) {
        poison(n);
      }
    }
    if (!problems_.empty()) refuse();
    return finish();
  }

 private:
  // ---- Graph-level reading ----

  std::int64_t default_opset() const {
    for (const auto& o : model_.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        if (o.version() < 1 || o.version() > 21)
          throw InputError(fmt::format(
              "{}: opset_import version {} of the ONNX domain (tpusim reads opsets 1 to 21)",
              origin_, o.version()));
        return o.version();
      }
    throw InputError(fmt::format(
        "{}: no opset_import for the ONNX domain (every ONNX model names the operator set it "
        "uses)",
        origin_));
  }

  void read_input() {
    const onnx::ValueInfoProto* input = nullptr;
    std::vector<std::string> names;
    for (const auto& v : g_.input()) {
      if (values_.count(v.name())) continue;  // IR version < 4 lists initializers as inputs too
      names.push_back(shown(v.name()));
      input = &v;
    }
    if (names.size() != 1)
      throw InputError(fmt::format(
          "{}: graph has {} inputs besides its initializers{}{} (tpusim runs models with one "
          "input and one output)",
          origin_, names.size(), names.empty() ? "" : ": ", fmt::join(names, ", ")));
    input_name_ = input->name();
    const std::string where = fmt::format("{}: graph input {}", origin_, shown(input_name_));
    if (!input->type().has_tensor_type()) throw InputError(where + ": not a tensor");
    const auto& tt = input->type().tensor_type();
    using DT = onnx::TensorProto_DataType;
    const int type = tt.elem_type();
    token_ids_ = type == DT::TensorProto_DataType_INT64 || type == DT::TensorProto_DataType_INT32;
    // A DOUBLE input is fed as floats: the chips compute in bf16 or int8 either way.
    if (type != DT::TensorProto_DataType_FLOAT && type != DT::TensorProto_DataType_DOUBLE &&
        !token_ids_)
      throw InputError(fmt::format(
          "{}: elem_type {} (tpusim feeds FLOAT or DOUBLE inputs, or INT64/INT32 token ids to a "
          "Gather)",
          where,
          onnx::TensorProto_DataType_IsValid(type)
              ? onnx::TensorProto_DataType_Name(static_cast<DT>(type))
              : std::to_string(type)));
    if (!tt.has_shape() || tt.shape().dim_size() == 0)
      throw InputError(where +
                       ": no shape (tpusim needs [batch, ...] with every dimension after the "
                       "batch known)");
    std::vector<std::int64_t> dims;
    for (int k = 0; k < tt.shape().dim_size(); ++k) {
      const auto& d = tt.shape().dim(k);
      if (k == 0) {
        batch_ = d.has_dim_value() ? d.dim_value() : -1;
        continue;
      }
      if (!d.has_dim_value() || d.dim_value() < 1 || d.dim_value() > kMaxDim)
        throw InputError(fmt::format(
            "{}: dimension {} is {} (must be a number in [1, {}]; only the first, the batch, may "
            "be symbolic)",
            where, k, d.has_dim_value() ? std::to_string(d.dim_value()) : shown(d.dim_param()),
            kMaxDim));
      dims.push_back(d.dim_value());
    }
    if (dims.size() > 3) {
      values_[input_name_] = Opaque{
          fmt::format("the graph input is {}-D ([N, {}]): tpusim's tensors are at most "
                      "N x C x H x W (4-D): 3-D convolutions and pooling cannot be expressed",
                      dims.size() + 1, fmt::join(dims, ", "))};
      return;
    }
    std::uint64_t size = 1;
    for (std::int64_t d : dims) size *= static_cast<std::uint64_t>(d);
    if (size > kMaxTensorElements)
      throw InputError(
          fmt::format("{}: {} elements per sample (at most {})", where, size, kMaxTensorElements));
    auto [shape, layout] = standard(dims, channels_first_);
    input_shape_ = shape;
    values_[input_name_] = Activation{kGraphInput, shape, layout};
  }

  // Nodes the graph output depends on; the others are not imported (docs/onnx.md).
  std::vector<bool> live_nodes() {
    std::set<std::string> needed = {g_.output(0).name()};
    std::vector<bool> live(static_cast<std::size_t>(g_.node_size()), false);
    for (int i = g_.node_size(); i-- > 0;) {
      const onnx::NodeProto& n = g_.node(i);
      bool used = false;
      for (const std::string& o : n.output()) used = used || (!o.empty() && needed.count(o));
      if (!used) continue;
      live[static_cast<std::size_t>(i)] = true;
      for (const std::string& in : n.input())
        if (!in.empty()) needed.insert(in);
    }
    for (int i = 0; i < g_.node_size(); ++i)
      if (live[static_cast<std::size_t>(i)])
        for (const std::string& in : g_.node(i).input()) ++readers_[in];
    ++readers_[g_.output(0).name()];
    return live;
  }

  void problem(int i, const std::string& text) {
    refused_.insert(i);
    const onnx::NodeProto& n = g_.node(i);
    problems_.emplace(i, fmt::format("node {} ({}{}): {}", i, plain(n.op_type()),
                                     n.name().empty() ? "" : " " + shown(n.name()), text));
  }

  void poison(const onnx::NodeProto& n) {
    for (const std::string& o : n.output())
      if (!o.empty()) values_[o] = Poisoned{};
  }

  [[noreturn]] void refuse() const {
    std::vector<std::string> in_order;
    for (const auto& [i, text] : problems_) in_order.push_back(text);
    const std::string list = fmt::format("{}", fmt::join(in_order, "; "));
    const std::string supported = fmt::format("{}", fmt::join(supported_ops(), ", "));
    if (problems_.size() == 1)
      throw InputError(
          fmt::format("{}: {} (tpusim imports the ONNX operators {})", origin_, list, supported));
    throw InputError(fmt::format(
        "{}: {} ONNX nodes cannot be expressed in tpusim's graph IR: {} (tpusim imports the ONNX "
        "operators {})",
        origin_, problems_.size(), list, supported));
  }

  OnnxModel finish() {
    const std::string& out = g_.output(0).name();
    const auto it = values_.find(out);
    if (it == values_.end())
      throw InputError(fmt::format("{}: graph output {}: no node, initializer or input makes it",
                                   origin_, shown(out)));
    const auto* a = std::get_if<Activation>(&it->second);
    if (!a)
      throw InputError(fmt::format(
          "{}: graph output {} is a constant: the model computes nothing from its input", origin_,
          shown(out)));
    if (a->producer == kGraphInput || graph_.ops.empty())
      throw InputError(fmt::format(
          "{}: graph output {} is the graph input{}: the model computes nothing tpusim could "
          "simulate",
          origin_, shown(out), a->layout.empty() ? "" : " under another shape"));
    if (a->producer != graph_.ops.size() - 1)
      throw std::logic_error("the ONNX graph output is not the last operation");
    graph_.file = origin_;
    graph_.input = input_shape_;
    OnnxModel m;
    m.graph = std::move(graph_);
    m.graph.name = ir_name(g_.name().empty() ? "onnx_model" : g_.name());
    m.parameters = std::move(params_);
    m.input_name = input_name_;
    m.output_name = out;
    m.batch = batch_;
    const auto& in = std::get<Activation>(values_.at(input_name_));
    m.input = public_layout(in);
    m.output = public_layout(*a);
    return m;
  }

  static OnnxLayout public_layout(const Activation& a) {
    OnnxLayout l;
    l.dims = a.dims();
    for (const auto& axis : a.layout)
      for (const Seg& g : axis)
        if (g.extent > 1) l.runs.push_back({g.stride * axis_stride(g.axis, a.ir), g.extent});
    return l;
  }

  // ---- Values ----

  const Value& value(const std::string& name) const {
    const auto it = values_.find(name);
    if (it == values_.end())
      throw InputError(fmt::format(
          "{}: value {}: no earlier node, initializer or graph input makes it (ONNX lists nodes "
          "in an order where a value is made before it is read)",
          origin_, shown(name)));
    return it->second;
  }

  // The node's input k, which must be an activation (the data the host streams through).
  Activation act(const onnx::NodeProto& n, int k) {
    if (k >= n.input_size() || n.input(k).empty())
      throw NodeProblem{fmt::format("input {} is missing", k)};
    const Value& v = value(n.input(k));
    if (std::holds_alternative<Poisoned>(v)) throw Skip{};
    if (const auto* o = std::get_if<Opaque>(&v)) throw NodeProblem{o->why};
    if (const auto* a = std::get_if<Activation>(&v)) {
      if (a->producer == kGraphInput && token_ids_ && n.op_type() != "Gather")
        throw NodeProblem{
            "reads the graph input's integer token ids: only a Gather (an "
            "Embedding) may"};
      return *a;
    }
    throw NodeProblem{fmt::format(
        "input {} ({}) is a constant: tpusim computes on the graph input's data, constants only "
        "as a weighted operation's parameters",
        k, shown(n.input(k)))};
  }

  // The node's input k, which must be a constant (an initializer or a Constant node's value).
  const Const* constant(const onnx::NodeProto& n, int k, bool required = true) {
    if (k >= n.input_size() || n.input(k).empty()) {
      if (required) throw NodeProblem{fmt::format("input {} is missing", k)};
      return nullptr;
    }
    const Value& v = value(n.input(k));
    if (std::holds_alternative<Poisoned>(v)) throw Skip{};
    if (const auto* c = std::get_if<Const>(&v)) return c;
    throw NodeProblem{fmt::format(
        "input {} ({}) must be a constant (an initializer): tpusim's {} takes its parameters from "
        "the model, not from the data",
        k, shown(n.input(k)), n.op_type())};
  }

  bool is_const(const onnx::NodeProto& n, int k) const {
    return k < n.input_size() && !n.input(k).empty() &&
           std::holds_alternative<Const>(value(n.input(k)));
  }

  void set(const onnx::NodeProto& n, Value v) {
    if (n.output_size() < 1 || n.output(0).empty())
      throw InputError(fmt::format("{}: a {} node without an output", origin_, plain(n.op_type())));
    values_[n.output(0)] = std::move(v);
  }

  // Extra outputs (BatchNormalization's statistics, Dropout's mask, MaxPool's indices) must not
  // be read: tpusim computes the first only.
  void only_first_output(const onnx::NodeProto& n) const {
    for (int k = 1; k < n.output_size(); ++k)
      if (!n.output(k).empty() && readers_.count(n.output(k)))
        throw NodeProblem{
            fmt::format("its output {} ({}) is read: tpusim computes only a {}'s "
                        "first output",
                        k, shown(n.output(k)), n.op_type())};
  }

  // ---- Attributes ----

  const onnx::AttributeProto* attr(const onnx::NodeProto& n, const char* name) const {
    for (const auto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  std::int64_t attr_int(const onnx::NodeProto& n, const char* name, std::int64_t def) const {
    const auto* a = attr(n, name);
    if (!a) return def;
    if (a->type() != onnx::AttributeProto_AttributeType_INT && !a->has_i())
      throw NodeProblem{fmt::format("attribute {} must be an integer", name)};
    return a->i();
  }
  float attr_float(const onnx::NodeProto& n, const char* name, float def) const {
    const auto* a = attr(n, name);
    if (!a) return def;
    if (a->type() != onnx::AttributeProto_AttributeType_FLOAT && !a->has_f())
      throw NodeProblem{fmt::format("attribute {} must be a float", name)};
    if (!std::isfinite(a->f()))
      throw NodeProblem{fmt::format("attribute {} = {} (must be finite)", name, a->f())};
    return a->f();
  }
  std::optional<std::vector<std::int64_t>> attr_ints(const onnx::NodeProto& n,
                                                     const char* name) const {
    const auto* a = attr(n, name);
    if (!a) return std::nullopt;
    return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
  }
  std::string attr_string(const onnx::NodeProto& n, const char* name, const char* def) const {
    const auto* a = attr(n, name);
    return a ? a->s() : def;
  }

  // Integers from a constant input (opset >= 13 Squeeze axes, Reshape shape, Pad pads).
  std::vector<std::int64_t> const_ints(const onnx::NodeProto& n, int k) {
    const Const* c = constant(n, k);
    std::vector<std::int64_t> v;
    for (double x : c->values) {
      // Shapes, axes and pads: integers well inside int64 (a wider double would not convert).
      if (!(std::fabs(x) <= 9.0e18) || x != std::floor(x))
        throw NodeProblem{fmt::format("input {} holds {} (must be an integer)", k, x)};
      v.push_back(static_cast<std::int64_t>(x));
    }
    return v;
  }

  // An ONNX axis of a tensor with the batch (rank r) as an axis of one sample; the batch axis
  // itself is refused.
  std::size_t sample_axis(std::int64_t axis, std::size_t rank, const char* what) const {
    const auto r = static_cast<std::int64_t>(rank);
    if (axis < -r || axis >= r)
      throw NodeProblem{fmt::format("{} = {} (must be in [{}, {}))", what, axis, -r, r)};
    if (axis < 0) axis += r;
    if (axis == 0)
      throw NodeProblem{fmt::format(
          "{} is the batch axis (0): tpusim computes every sample alike, on its own", what)};
    return static_cast<std::size_t>(axis - 1);
  }

  // ---- IR construction ----

  std::string ir_name(std::string s) const {
    for (char& ch : s)
      if (ch == '/' || static_cast<unsigned char>(ch) < 0x20 ||
          static_cast<unsigned char>(ch) > 0x7e)
        ch = '_';
    while (!s.empty() && s.front() == '_') s.erase(s.begin());
    if (s.size() > 100) s.resize(100);
    return s.empty() ? "op" : s;
  }

  std::string unique_name(const std::string& base) {
    std::string name = ir_name(base);
    for (int k = 1; names_.count(name); ++k) name = fmt::format("{}_{}", ir_name(base), k);
    names_.insert(name);
    return name;
  }

  std::string base_name(const onnx::NodeProto& n, int i) const {
    if (!n.name().empty()) return n.name();
    std::string lower;
    for (char ch : n.op_type())
      lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return fmt::format("{}_{}", lower, i);
  }

  // Appends `op` reading `inputs`, its shapes from the operation table.
  Activation add(Op op, const std::vector<std::size_t>& inputs, const std::string& base) {
    op.name = unique_name(base);
    op.inputs = inputs;
    std::vector<Shape> shapes;
    for (std::size_t p : inputs)
      shapes.push_back(p == kGraphInput ? input_shape_ : graph_.ops[p].out);
    if (auto problem = ir::infer_shapes(op, shapes))
      throw NodeProblem{fmt::format("{} (as a {})", problem->message, ir::name_of(op.kind))};
    if (op.out.size() > kMaxTensorElements || op.out.h > kMaxDim || op.out.w > kMaxDim ||
        op.out.c > kMaxDim)
      throw NodeProblem{
          fmt::format("output {} is larger than tpusim's tensors (at most {} a side, "
                      "{} elements)",
                      ir::show_shape(op.out), kMaxDim, kMaxTensorElements)};
    graph_.ops.push_back(std::move(op));
    Activation a;
    a.producer = graph_.ops.size() - 1;
    a.ir = graph_.ops.back().out;
    return a;
  }

  void param(const std::string& op, const char* suffix, std::vector<std::uint32_t> dims,
             std::vector<float> values) {
    for (float v : values)
      if (!std::isfinite(v))
        throw NodeProblem{fmt::format("a {} value is {} (parameters must be finite)", suffix, v)};
    params_.push_back({op + "/" + suffix, std::move(dims), std::move(values)});
  }

  // `a` held as `want` over shape `s` wants it: the same IR tensor when the element orders agree
  // (an IR Reshape, a view, when only its shape differs), else a problem.
  Activation relayout(const Activation& a, const Shape& s, const Layout& want,
                      const std::string& base, const char* what) {
    if (mapping(a.layout, a.ir) != mapping(want, s))
      throw NodeProblem{fmt::format(
          "{} needs its input {} in channels-last order (NCHW read as NHWC), but it is held in "
          "another order (the graph input's own, or an earlier Transpose's or Reshape's), which "
          "tpusim would have to move data to change",
          what, show_dims(a.dims()))};
    Activation out;
    if (a.ir == s) {
      out = a;
    } else {
      Op v;
      v.kind = OpKind::Reshape;
      v.target_shape = {s.h, s.w, s.c};
      out = add(std::move(v), {a.producer}, base + "_view");
    }
    out.layout = want;
    return out;
  }

  // `a` as an image N x C x H x W (rank 3 per sample) or a signal N x C x L (rank 2) held
  // channels-last, for windowed and per-channel operations.
  Activation channels_last(const Activation& a, const std::string& base, const char* what) {
    auto [s, l] = standard(a.dims(), true);
    return relayout(a, s, l, base, what);
  }

  // ---- Nodes ----

  void node(int i, const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    const std::string base = base_name(n, i);
    if (op == "Constant") return constant_node(n);
    // Nodes on constants only fold where they only rearrange (a transposed weight).
    bool all_const = n.input_size() > 0;
    for (int k = 0; k < n.input_size(); ++k)
      all_const = all_const && (n.input(k).empty() || is_const(n, k));
    if (all_const) return fold(n);
    if (op == "Identity" || op == "Dropout") return identity(n);
    if (op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "LeakyRelu" || op == "Elu" ||
        op == "Clip")
      return activation(n, base);
    if (op == "Softmax") return softmax(n, base);
    if (op == "Conv") return conv(n, base);
    if (op == "Gemm" || op == "MatMul") return dense(n, base);
    if (op == "MaxPool" || op == "AveragePool") return pool(n, base);
    if (op == "GlobalAveragePool" || op == "GlobalMaxPool") return global_pool(n, base);
    if (op == "BatchNormalization") return batch_norm(n, base);
    if (op == "PRelu") return prelu(n, base);
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Sum")
      return elementwise(n, base);
    if (op == "Concat") return concat(n, base);
    if (op == "Flatten" || op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" ||
        op == "Transpose")
      return set(n, reshape(n, act(n, 0)));
    if (op == "Pad") return pad(n, base);
    if (op == "Gather") return gather(n, base);
    throw NodeProblem{fmt::format("operator {} is not supported", op)};
  }

  void constant_node(const onnx::NodeProto& n) {
    Const c;
    if (const auto* a = attr(n, "value")) {
      c = decode_tensor(a->t(), origin_, fmt::format("Constant {}", shown(n.name())));
    } else if (const auto* f = attr(n, "value_float")) {
      c.values = {f->f()};
    } else if (const auto* fs = attr(n, "value_floats")) {
      c.values.assign(fs->floats().begin(), fs->floats().end());
      c.dims = {static_cast<std::int64_t>(c.values.size())};
    } else if (const auto* iv = attr(n, "value_int")) {
      c.values = {static_cast<double>(iv->i())};
      c.integer = true;
    } else if (const auto* is = attr(n, "value_ints")) {
      for (std::int64_t x : is->ints()) c.values.push_back(static_cast<double>(x));
      c.dims = {static_cast<std::int64_t>(c.values.size())};
      c.integer = true;
    } else {
      throw NodeProblem{"a Constant needs a value, value_float(s) or value_int(s) attribute"};
    }
    set(n, std::move(c));
  }

  void identity(const onnx::NodeProto& n) {
    if (n.op_type() == "Dropout") {
      only_first_output(n);
      if (attr_int(n, "is_test", 1) == 0 && opset_ < 7)
        throw NodeProblem{"is_test = 0: a Dropout in training mode"};
      if (n.input_size() > 2 && !n.input(2).empty()) {
        const Const* t = constant(n, 2);
        if (!t->values.empty() && t->values[0] != 0)
          throw NodeProblem{"training_mode is true: a Dropout in training mode"};
      }
    }
    set(n, act(n, 0));
  }

  // Transpose, Reshape and their kin on constants (a weight transposed before a MatMul).
  void fold(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (op == "Identity") return set(n, *constant(n, 0));
    if (op == "Transpose") {
      const Const& c = *constant(n, 0);
      const std::size_t r = c.dims.size();
      std::vector<std::int64_t> perm(r);
      for (std::size_t k = 0; k < r; ++k) perm[k] = static_cast<std::int64_t>(r - 1 - k);
      if (auto p = attr_ints(n, "perm")) perm = *p;
      std::vector<bool> seen(r, false);
      if (perm.size() != r)
        throw NodeProblem{fmt::format("perm {} does not permute {} axes", show_dims(perm), r)};
      for (std::int64_t p : perm) {
        if (p < 0 || static_cast<std::size_t>(p) >= r || seen[static_cast<std::size_t>(p)])
          throw NodeProblem{fmt::format("perm {} does not permute {} axes", show_dims(perm), r)};
        seen[static_cast<std::size_t>(p)] = true;
      }
      Const out;
      out.integer = c.integer;
      for (std::int64_t p : perm) out.dims.push_back(c.dims[static_cast<std::size_t>(p)]);
      std::vector<std::uint64_t> stride(r, 1);
      for (std::size_t k = r; k-- > 1;)
        stride[k - 1] = stride[k] * static_cast<std::uint64_t>(c.dims[k]);
      out.values.resize(c.values.size());
      std::vector<std::int64_t> idx(r, 0);
      for (std::size_t e = 0; e < out.values.size(); ++e) {
        std::uint64_t src = 0;
        for (std::size_t k = 0; k < r; ++k)
          src += static_cast<std::uint64_t>(idx[k]) * stride[static_cast<std::size_t>(perm[k])];
        out.values[e] = c.values[static_cast<std::size_t>(src)];
        for (std::size_t k = r; k-- > 0;) {
          if (++idx[k] < out.dims[k]) break;
          idx[k] = 0;
        }
      }
      return set(n, std::move(out));
    }
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      Const c = *constant(n, 0);
      std::vector<std::int64_t> dims;
      if (op == "Flatten") {
        const auto r = static_cast<std::int64_t>(c.dims.size());
        std::int64_t axis = attr_int(n, "axis", 1);
        if (axis < 0) axis += r;
        if (axis < 0 || axis > r)
          throw NodeProblem{fmt::format("axis {} of a {}-D tensor", axis, r)};
        std::int64_t a = 1, b = 1;
        for (std::int64_t k = 0; k < r; ++k)
          (k < axis ? a : b) *= c.dims[static_cast<std::size_t>(k)];
        dims = {a, b};
      } else if (op == "Reshape") {
        dims = opset_ < 5 ? attr_ints(n, "shape").value_or(std::vector<std::int64_t>{})
                          : const_ints(n, 1);
        std::int64_t known = 1, free = -1;
        for (std::size_t k = 0; k < dims.size(); ++k) {
          if (dims[k] == 0 && k < c.dims.size()) dims[k] = c.dims[k];
          if (dims[k] == -1 && free < 0)
            free = static_cast<std::int64_t>(k);
          else if (dims[k] < 1 || dims[k] > static_cast<std::int64_t>(kMaxTensorElements))
            throw NodeProblem{fmt::format("shape {} for a constant of dims {}", show_dims(dims),
                                          show_dims(c.dims))};
          else
            known *= dims[k];
        }
        if (free >= 0 && known > 0 && c.size() % static_cast<std::uint64_t>(known) == 0)
          dims[static_cast<std::size_t>(free)] = static_cast<std::int64_t>(c.size()) / known;
      } else {
        const auto axes = opset_ >= 13 && n.input_size() > 1
                              ? const_ints(n, 1)
                              : attr_ints(n, "axes").value_or(std::vector<std::int64_t>{});
        dims = c.dims;
        if (op == "Squeeze") {
          std::vector<std::int64_t> kept;
          for (std::size_t k = 0; k < dims.size(); ++k) {
            const bool listed =
                axes.empty() ? dims[k] == 1
                             : std::count(axes.begin(), axes.end(), static_cast<std::int64_t>(k)) ||
                                   std::count(axes.begin(), axes.end(),
                                              static_cast<std::int64_t>(k) -
                                                  static_cast<std::int64_t>(dims.size()));
            if (!listed) kept.push_back(dims[k]);
          }
          dims = kept;
        } else {
          std::vector<std::int64_t> sorted = axes;
          const auto out_rank = static_cast<std::int64_t>(dims.size() + axes.size());
          for (auto& a : sorted)
            if (a < 0) a += out_rank;
          std::sort(sorted.begin(), sorted.end());
          for (std::int64_t a : sorted) {
            if (a < 0 || a > static_cast<std::int64_t>(dims.size()))
              throw NodeProblem{fmt::format("axes {} for a constant of dims {}", show_dims(axes),
                                            show_dims(c.dims))};
            dims.insert(dims.begin() + a, 1);
          }
        }
      }
      std::uint64_t total = 1;
      for (std::int64_t d : dims) total *= static_cast<std::uint64_t>(std::max<std::int64_t>(d, 0));
      if (total != c.size())
        throw NodeProblem{fmt::format("{} to dims {} of a constant of {} elements", op,
                                      show_dims(dims), c.size())};
      c.dims = dims;
      return set(n, std::move(c));
    }
    throw NodeProblem{fmt::format(
        "computes on constants only: tpusim folds Identity, Transpose, Reshape, Flatten, "
        "Squeeze and Unsqueeze of constants, not {}",
        op)};
  }

  void activation(const onnx::NodeProto& n, const std::string& base) {
    const Activation in = act(n, 0);
    Op l;
    l.kind = OpKind::Activation;
    const std::string& op = n.op_type();
    if (op == "Relu") l.activation = Act::Relu;
    if (op == "Sigmoid") l.activation = Act::Sigmoid;
    if (op == "Tanh") l.activation = Act::Tanh;
    if (op == "LeakyRelu") {
      l.activation = Act::LeakyRelu;
      l.alpha = attr_float(n, "alpha", 0.01f);
    }
    if (op == "Elu") {
      l.activation = Act::Elu;
      l.alpha = attr_float(n, "alpha", 1.0f);
    }
    if (op == "Clip") {
      // relu (min 0, no max) and relu6 (min 0, max 6) are the chips' clips.
      float lo = -INFINITY, hi = INFINITY;
      if (opset_ < 11) {
        lo = attr_float(n, "min", lo);
        hi = attr_float(n, "max", hi);
      } else {
        if (const Const* c = constant(n, 1, false); c && !c->values.empty())
          lo = narrow(c->values[0]);
        if (const Const* c = constant(n, 2, false); c && !c->values.empty())
          hi = narrow(c->values[0]);
      }
      if (lo == 0 && hi == 6)
        l.activation = Act::Relu6;
      else if (lo == 0 && std::isinf(hi) && hi > 0)
        l.activation = Act::Relu;
      else
        throw NodeProblem{fmt::format(
            "min {} max {}: the chips' clips are relu (min 0, no max) and relu6 (min 0, max 6)", lo,
            hi)};
    }
    Activation out = add(std::move(l), {in.producer}, base);
    out.layout = in.layout;
    set(n, std::move(out));
  }

  void softmax(const onnx::NodeProto& n, const std::string& base) {
    const Activation in = act(n, 0);
    const std::size_t rank = in.layout.size() + 1;
    const std::int64_t def = opset_ >= 13 ? -1 : 1;
    const std::size_t axis = sample_axis(attr_int(n, "axis", def), rank, "axis");
    // Before opset 13 the axes from `axis` on are flattened into one; since, `axis` alone.
    const std::size_t last = opset_ >= 13 ? axis + 1 : in.layout.size();
    std::vector<Seg> reduced;
    for (std::size_t k = axis; k < last; ++k)
      for (const Seg& g : in.layout[k])
        if (g.extent > 1) reduced.push_back(g);
    const bool channels = in.ir.c == 1
                              ? reduced.empty()
                              : reduced.size() == 1 && reduced[0] == Seg{Ax::C, 1, in.ir.c};
    if (!channels)
      throw NodeProblem{fmt::format(
          "softmax over the axes {}..{} of {}, which tpusim does not hold as its channels (the "
          "IR's softmax runs over the channels of each pixel)",
          axis + 1, last, show_dims(in.dims()))};
    Op l;
    l.kind = OpKind::Activation;
    l.activation = Act::Softmax;
    Activation out = add(std::move(l), {in.producer}, base);
    out.layout = in.layout;
    set(n, std::move(out));
  }

  // Explicit pads [begin..., end...] of a 1-D or 2-D window as the IR's padding.
  struct Window {
    std::uint32_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
    Padding padding = Padding::Valid;
    std::uint32_t top = 0, bottom = 0, left = 0, right = 0;
  };

  Window window(const onnx::NodeProto& n, const Activation& in, std::vector<std::int64_t> kernel,
                bool dilation_allowed) {
    const std::size_t d = kernel.size();
    const std::size_t spatial = in.layout.size() - 1;
    if (d != spatial || (d != 1 && d != 2))
      throw NodeProblem{
          fmt::format("a {}-D window on a {} input: tpusim's windows are 1-D (N x C x L) or 2-D (N "
                      "x C x H x W)",
                      d, show_dims(in.dims()))};
    auto list = [&](const char* name, std::int64_t def, std::size_t count) {
      std::vector<std::int64_t> v =
          attr_ints(n, name).value_or(std::vector<std::int64_t>(count, def));
      if (v.size() != count)
        throw NodeProblem{fmt::format("{} {} (must have {} values)", name, show_dims(v), count)};
      for (std::int64_t x : v)
        if (x < 0 || x > kMaxDim)
          throw NodeProblem{
              fmt::format("{} {} (each must be in [0, {}])", name, show_dims(v), kMaxDim)};
      return v;
    };
    for (std::int64_t k : kernel)
      if (k < 1 || k > kMaxDim)
        throw NodeProblem{
            fmt::format("kernel {} (each must be in [1, {}])", show_dims(kernel), kMaxDim)};
    const auto strides = list("strides", 1, d);
    const auto dil = list("dilations", 1, d);
    auto pads = list("pads", 0, 2 * d);
    for (std::size_t k = 0; k < d; ++k)
      if (strides[k] < 1 || dil[k] < 1)
        throw NodeProblem{fmt::format("strides {} dilations {} (each must be >= 1)",
                                      show_dims(strides), show_dims(dil))};
    if (!dilation_allowed &&
        std::any_of(dil.begin(), dil.end(), [](std::int64_t x) { return x != 1; }))
      throw NodeProblem{
          fmt::format("dilations {}: tpusim's pooling has no dilation", show_dims(dil))};
    const std::string auto_pad = attr_string(n, "auto_pad", "NOTSET");
    const std::vector<std::int64_t> dims = in.dims();
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      // ONNX: output ceil(in / stride), total padding split with the odd one at the end (UPPER)
      // or the beginning (LOWER).
      for (std::size_t k = 0; k < d; ++k) {
        const std::int64_t size = dims[1 + k];
        const std::int64_t out = (size + strides[k] - 1) / strides[k];
        const std::int64_t total =
            std::max<std::int64_t>((out - 1) * strides[k] + (kernel[k] - 1) * dil[k] + 1 - size, 0);
        const std::int64_t small = total / 2;
        pads[k] = auto_pad == "SAME_UPPER" ? small : total - small;
        pads[d + k] = total - pads[k];
      }
    } else if (auto_pad == "VALID") {
      std::fill(pads.begin(), pads.end(), 0);
    } else if (auto_pad != "NOTSET") {
      throw NodeProblem{fmt::format("auto_pad {} (must be NOTSET, SAME_UPPER, SAME_LOWER or VALID)",
                                    shown(auto_pad))};
    }
    Window w;
    auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
    if (d == 1) {
      w.kw = u(kernel[0]), w.sw = u(strides[0]), w.dw = u(dil[0]);
      w.left = u(pads[0]), w.right = u(pads[1]);
    } else {
      w.kh = u(kernel[0]), w.kw = u(kernel[1]), w.sh = u(strides[0]), w.sw = u(strides[1]);
      w.dh = u(dil[0]), w.dw = u(dil[1]);
      w.top = u(pads[0]), w.left = u(pads[1]), w.bottom = u(pads[2]), w.right = u(pads[3]);
    }
    if (w.top || w.bottom || w.left || w.right) w.padding = Padding::Explicit;
    return w;
  }

  static void apply(Op& l, const Window& w) {
    l.kernel_h = w.kh, l.kernel_w = w.kw, l.stride_h = w.sh, l.stride_w = w.sw;
    l.dilation_h = w.dh, l.dilation_w = w.dw;
    l.padding = w.padding;
    l.pad_top = w.top, l.pad_bottom = w.bottom, l.pad_left = w.left, l.pad_right = w.right;
  }

  void conv(const onnx::NodeProto& n, const std::string& base) {
    const Activation raw = act(n, 0);
    const Const& wt = *constant(n, 1);
    const Const* bias = constant(n, 2, false);
    const std::vector<std::int64_t> in_dims = raw.dims();
    if (wt.dims.size() != in_dims.size() + 1 || wt.dims.size() < 3)
      throw NodeProblem{fmt::format("weight dims {} do not fit the input {}", show_dims(wt.dims),
                                    show_dims(in_dims))};
    const std::vector<std::int64_t> kernel(wt.dims.begin() + 2, wt.dims.end());
    if (auto ks = attr_ints(n, "kernel_shape"); ks && *ks != kernel)
      throw NodeProblem{
          fmt::format("kernel_shape {} but the weight is {}", show_dims(*ks), show_dims(wt.dims))};
    const Window w = window(n, raw, kernel, true);
    const Activation in = channels_last(raw, base, "Conv");
    const std::int64_t cin = in_dims[0], m = wt.dims[0];
    const std::int64_t group = attr_int(n, "group", 1);
    Op l;
    apply(l, w);
    const auto kh = w.kh, kw = w.kw;
    std::vector<float> k;
    if (group == 1) {
      if (wt.dims[1] != cin)
        throw NodeProblem{
            fmt::format("weight dims {} for {} input channels", show_dims(wt.dims), cin)};
      l.kind = OpKind::Conv2D;
      l.filters = static_cast<std::uint32_t>(m);
      // ONNX W[m][c][ky][kx] (1-D: [m][c][kx]) -> the IR's [ky][kx][c][m].
      k.resize(wt.size());
      for (std::int64_t o = 0; o < m; ++o)
        for (std::int64_t c = 0; c < cin; ++c)
          for (std::uint32_t y = 0; y < kh; ++y)
            for (std::uint32_t x = 0; x < kw; ++x)
              k[static_cast<std::size_t>(((y * kw + x) * cin + c) * m + o)] =
                  narrow(wt.values[static_cast<std::size_t>(((o * cin + c) * kh + y) * kw + x)]);
    } else if (group == cin && wt.dims[1] == 1 && m % cin == 0) {
      // Output channel c * multiplier + j reads input channel c alone: a depthwise convolution.
      l.kind = OpKind::DepthwiseConv2D;
      const std::int64_t mult = m / cin;
      l.depth_multiplier = static_cast<std::uint32_t>(mult);
      k.resize(wt.size());
      for (std::int64_t o = 0; o < m; ++o)
        for (std::uint32_t y = 0; y < kh; ++y)
          for (std::uint32_t x = 0; x < kw; ++x)
            k[static_cast<std::size_t>(((y * kw + x) * cin + o / mult) * mult + o % mult)] =
                narrow(wt.values[static_cast<std::size_t>((o * kh + y) * kw + x)]);
    } else {
      throw NodeProblem{fmt::format(
          "group = {} (must be 1, or {} — the input's channels — for a depthwise convolution: "
          "tpusim has no grouped convolution)",
          group, cin)};
    }
    l.use_bias = bias != nullptr;
    std::vector<float> b;
    if (bias) {
      if (bias->size() != static_cast<std::uint64_t>(m))
        throw NodeProblem{
            fmt::format("bias dims {} for {} output channels", show_dims(bias->dims), m)};
      for (double v : bias->values) b.push_back(narrow(v));
    }
    const bool depthwise = l.kind == OpKind::DepthwiseConv2D;
    const auto mult = l.depth_multiplier;
    Activation out = add(std::move(l), {in.producer}, base);
    const std::string& name = graph_.ops.back().name;
    if (depthwise)
      param(name, "depthwise_kernel", {kh, kw, static_cast<std::uint32_t>(cin), mult},
            std::move(k));
    else
      param(name, "kernel",
            {kh, kw, static_cast<std::uint32_t>(cin), static_cast<std::uint32_t>(m)}, std::move(k));
    if (bias) param(name, "bias", {static_cast<std::uint32_t>(m)}, std::move(b));
    out.layout = standard(spatial_dims(in_dims.size(), out.ir), true).second;
    set(n, std::move(out));
  }

  // ONNX dims of one sample [C, H, W] or [C, L] for an IR output held channels-last.
  static std::vector<std::int64_t> spatial_dims(std::size_t rank, const Shape& s) {
    if (rank == 2) return {s.c, s.w};
    return {s.c, s.h, s.w};
  }

  // Gemm and MatMul: a Dense on a flat sample [K], a 1x1 Conv2D on a sequence or image whose
  // last ONNX axis is its channels.
  void dense(const onnx::NodeProto& n, const std::string& base) {
    const bool gemm = n.op_type() == "Gemm";
    const Activation in = act(n, 0);
    const Const& b = *constant(n, 1);
    float alpha = 1, beta = 1;
    bool trans_b = false;
    if (gemm) {
      if (attr_int(n, "transA", 0) != 0)
        throw NodeProblem{"transA = 1: it would transpose the batch axis into the product"};
      trans_b = attr_int(n, "transB", 0) != 0;
      alpha = attr_float(n, "alpha", 1.0f);
      beta = attr_float(n, "beta", 1.0f);
    }
    if (b.dims.size() != 2)
      throw NodeProblem{
          fmt::format("B has dims {} (tpusim multiplies by a matrix)", show_dims(b.dims))};
    const std::int64_t kdim = trans_b ? b.dims[1] : b.dims[0];
    const std::int64_t m = trans_b ? b.dims[0] : b.dims[1];
    const std::vector<std::int64_t> dims = in.dims();
    if (dims.empty() || dims.back() != kdim)
      throw NodeProblem{
          fmt::format("A {} (with the batch axis first) times B {}: the inner "
                      "dimensions differ",
                      show_dims(dims), show_dims(b.dims))};
    if (gemm && dims.size() != 1)
      throw NodeProblem{fmt::format("A is {}-D (Gemm multiplies matrices)", dims.size() + 1)};
    if (m < 1 || m > kMaxDim)
      throw NodeProblem{fmt::format("{} output units (at most {})", m, kMaxDim)};
    auto bval = [&](std::int64_t row, std::int64_t col) {
      return alpha *
             narrow(b.values[static_cast<std::size_t>(trans_b ? col * kdim + row : row * m + col)]);
    };
    std::vector<float> bias;
    if (gemm && n.input_size() > 2 && !n.input(2).empty()) {
      const Const& c = *constant(n, 2);
      // C broadcasts onto [batch, M]: a row of M (or one value) the same for every sample.
      std::uint64_t per_row = c.size();
      if (c.dims.size() == 2 && c.dims[0] != 1) {
        if (c.dims[0] != batch_ || batch_ != 1)
          throw NodeProblem{
              fmt::format("C has dims {}: a bias that differs between the samples "
                          "of a batch",
                          show_dims(c.dims))};
      }
      if (per_row != 1 && per_row != static_cast<std::uint64_t>(m))
        throw NodeProblem{
            fmt::format("C has dims {} (a bias of {} or 1 values)", show_dims(c.dims), m)};
      for (std::int64_t o = 0; o < m; ++o)
        bias.push_back(beta * narrow(c.values[per_row == 1 ? 0 : static_cast<std::size_t>(o)]));
    }
    Op l;
    l.filters = static_cast<std::uint32_t>(m);
    l.use_bias = !bias.empty();
    const auto um = static_cast<std::uint32_t>(m);
    const auto uk = static_cast<std::uint32_t>(kdim);
    Activation out;
    if (dims.size() == 1) {
      // The rows of the kernel follow the IR's order of the input's elements.
      std::size_t producer = in.producer;
      if (!(in.ir == Shape{1, 1, uk})) {
        Op f;
        f.kind = OpKind::Flatten;
        producer = add(std::move(f), {producer}, base + "_flatten").producer;
      }
      OnnxLayout pl = public_layout(in);
      const std::vector<std::uint64_t> order = pl.ir_index();
      std::vector<float> k(static_cast<std::size_t>(kdim * m));
      for (std::int64_t r = 0; r < kdim; ++r)
        for (std::int64_t o = 0; o < m; ++o)
          k[static_cast<std::size_t>(order[static_cast<std::size_t>(r)] *
                                         static_cast<std::uint64_t>(m) +
                                     static_cast<std::uint64_t>(o))] = bval(r, o);
      l.kind = OpKind::Dense;
      out = add(std::move(l), {producer}, base);
      param(graph_.ops.back().name, "kernel", {uk, um}, std::move(k));
      out.layout = {{Seg{Ax::C, 1, static_cast<std::uint64_t>(m)}}};
      if (m == 1) out.layout = {{}};
    } else {
      const std::vector<Seg>& last = in.layout.back();
      const bool channels =
          in.ir.c == uk &&
          (uk == 1 ? last.empty() : last.size() == 1 && last[0] == Seg{Ax::C, 1, uk});
      bool c_elsewhere = false;
      for (std::size_t a = 0; a + 1 < in.layout.size(); ++a)
        for (const Seg& g : in.layout[a])
          c_elsewhere = c_elsewhere || (g.axis == Ax::C && g.extent > 1);
      if (!channels || c_elsewhere)
        throw NodeProblem{fmt::format(
            "MatMul over the last axis of {}, which tpusim does not hold as its channels",
            show_dims(dims))};
      std::vector<float> k(static_cast<std::size_t>(kdim * m));
      for (std::int64_t r = 0; r < kdim; ++r)
        for (std::int64_t o = 0; o < m; ++o) k[static_cast<std::size_t>(r * m + o)] = bval(r, o);
      l.kind = OpKind::Conv2D;
      out = add(std::move(l), {in.producer}, base);
      param(graph_.ops.back().name, "kernel", {1, 1, uk, um}, std::move(k));
      out.layout = in.layout;
      out.layout.back() =
          m == 1 ? std::vector<Seg>{} : std::vector<Seg>{{Ax::C, 1, static_cast<std::uint64_t>(m)}};
    }
    if (!bias.empty()) param(graph_.ops.back().name, "bias", {um}, std::move(bias));
    set(n, std::move(out));
  }

  void pool(const onnx::NodeProto& n, const std::string& base) {
    const Activation raw = act(n, 0);
    only_first_output(n);
    const bool max = n.op_type() == "MaxPool";
    const auto ks = attr_ints(n, "kernel_shape");
    if (!ks) throw NodeProblem{"kernel_shape is missing"};
    Window w = window(n, raw, *ks, false);
    if (attr_int(n, "storage_order", 0) != 0)
      throw NodeProblem{"storage_order = 1 (column-major indices)"};
    const bool padded = w.top || w.bottom || w.left || w.right;
    if (!max && padded && attr_int(n, "count_include_pad", 0) != 0)
      throw NodeProblem{
          "count_include_pad = 1 with padding: tpusim's average pooling divides by "
          "the positions inside the image"};
    if (attr_int(n, "ceil_mode", 0) != 0) {
      // Ceil and floor agree when the windows tile the padded input exactly.
      const std::vector<std::int64_t> d = raw.dims();
      const bool one_d = d.size() == 2;
      auto exact = [](std::int64_t size, std::uint32_t k, std::uint32_t s) {
        return size >= k && (size - k) % s == 0;
      };
      const bool ok = exact(static_cast<std::int64_t>(d.back()) + w.left + w.right, w.kw, w.sw) &&
                      (one_d || exact(d[1] + w.top + w.bottom, w.kh, w.sh));
      if (!ok)
        throw NodeProblem{
            "ceil_mode = 1 where it adds a partial window: tpusim's pooling keeps "
            "whole windows (floor)"};
    }
    const Activation in = channels_last(raw, base, n.op_type().c_str());
    Op l;
    l.kind = max ? OpKind::MaxPooling2D : OpKind::AveragePooling2D;
    apply(l, w);
    Activation out = add(std::move(l), {in.producer}, base);
    out.layout = standard(spatial_dims(raw.layout.size(), out.ir), true).second;
    set(n, std::move(out));
  }

  void global_pool(const onnx::NodeProto& n, const std::string& base) {
    const Activation raw = act(n, 0);
    if (raw.layout.size() != 2 && raw.layout.size() != 3)
      throw NodeProblem{fmt::format("a {} input: tpusim pools N x C x L and N x C x H x W tensors",
                                    show_dims(raw.dims()))};
    const Activation in = channels_last(raw, base, n.op_type().c_str());
    Op l;
    l.kind = n.op_type() == "GlobalMaxPool" ? OpKind::GlobalMaxPooling2D
                                            : OpKind::GlobalAveragePooling2D;
    Activation out = add(std::move(l), {in.producer}, base);
    out.layout = standard(spatial_dims(raw.layout.size(), out.ir), true).second;
    set(n, std::move(out));
  }

  // A constant that broadcasts onto an input of per-sample dims `in` as one value, or as values
  // that vary along one axis of a sample only: the values and that axis (none for one value).
  // `legacy_axis` >= 0: opset < 7's broadcast, the constant's dims aligned at that axis of the
  // input (counted with the batch).
  struct PerAxis {
    std::optional<std::size_t> axis;
    std::vector<float> values;
  };
  static std::optional<PerAxis> per_axis(const Const& c, const std::vector<std::int64_t>& in,
                                         std::int64_t legacy_axis) {
    const std::size_t r = in.size() + 1;  // with the batch
    PerAxis p;
    for (double x : c.values) p.values.push_back(narrow(x));
    if (c.size() == 1) return p;
    if (c.dims.size() > r) return std::nullopt;
    const std::size_t start =
        legacy_axis >= 0 ? static_cast<std::size_t>(legacy_axis) : r - c.dims.size();
    if (start + c.dims.size() > r) return std::nullopt;
    std::size_t varying = r;
    for (std::size_t k = 0; k < c.dims.size(); ++k)
      if (c.dims[k] != 1) {
        if (varying != r) return std::nullopt;
        varying = start + k;
      }
    if (varying == 0 || varying == r || c.size() != static_cast<std::uint64_t>(in[varying - 1]))
      return std::nullopt;
    p.axis = varying - 1;
    return p;
  }

  // `a` with its per-sample axis `axis` held as the IR's channels (the only axis that is), an IR
  // view made if an image's channels must be brought there; none: `a` as it is.
  Activation on_channels(const Activation& a, std::optional<std::size_t> axis,
                         const std::string& base, const char* what) {
    if (!axis) return a;
    auto holds = [&](const Activation& x) {
      const auto& l = x.layout;
      for (std::size_t k = 0; k < l.size(); ++k)
        for (const Seg& g : l[k])
          if (g.axis == Ax::C && g.extent > 1 && k != *axis) return false;
      const auto& own = l[*axis];
      return x.ir.c == 1 ? own.empty() : own.size() == 1 && own[0] == Seg{Ax::C, 1, x.ir.c};
    };
    if (holds(a)) return a;
    if (*axis == 0 && a.layout.size() >= 2) return channels_last(a, base, what);
    throw NodeProblem{
        fmt::format("{} per element of axis {} of {}, which tpusim does not hold as its channels",
                    what, *axis + 1, show_dims(a.dims()))};
  }

  // y = x * scale + shift per channel, as a BatchNormalization (mean 0, variance 0, epsilon 1:
  // its factor gamma / sqrt(0 + 1) is gamma exactly).
  Activation affine(const Activation& in, std::vector<float> scale, std::vector<float> shift,
                    const std::string& base) {
    const std::uint32_t c = in.ir.c;
    if (scale.size() == 1) scale.assign(c, scale[0]);
    if (shift.size() == 1) shift.assign(c, shift[0]);
    Op l;
    l.kind = OpKind::BatchNormalization;
    l.epsilon = 1.0f;
    Activation out = add(std::move(l), {in.producer}, base);
    const std::string& name = graph_.ops.back().name;
    param(name, "gamma", {c}, std::move(scale));
    param(name, "beta", {c}, std::move(shift));
    param(name, "moving_mean", {c}, std::vector<float>(c, 0.0f));
    param(name, "moving_variance", {c}, std::vector<float>(c, 0.0f));
    out.layout = in.layout;
    return out;
  }

  void batch_norm(const onnx::NodeProto& n, const std::string& base) {
    const Activation raw = act(n, 0);
    only_first_output(n);
    if (opset_ < 9 && attr_int(n, "spatial", 1) != 1)
      throw NodeProblem{"spatial = 0: statistics per element, not per channel"};
    if (opset_ < 7 && attr_int(n, "is_test", 0) == 0 && n.output_size() > 1)
      throw NodeProblem{"is_test = 0 with the statistics as outputs: training mode"};
    if (attr_int(n, "training_mode", 0) != 0) throw NodeProblem{"training_mode = 1"};
    const float eps = attr_float(n, "epsilon", 1e-5f);
    if (!(eps > 0)) throw NodeProblem{fmt::format("epsilon = {} (must be > 0)", eps)};
    const std::vector<std::int64_t> d = raw.dims();
    if (d.empty()) throw NodeProblem{"a tensor without channels"};
    std::vector<std::vector<float>> p;
    for (int k = 1; k <= 4; ++k) {
      const Const& c = *constant(n, k);
      if (c.size() != static_cast<std::uint64_t>(d[0]))
        throw NodeProblem{fmt::format("input {} has {} values for {} channels", k, c.size(), d[0])};
      std::vector<float> v;
      for (double x : c.values) v.push_back(narrow(x));
      p.push_back(std::move(v));
    }
    for (float v : p[3])
      if (v < 0) throw NodeProblem{fmt::format("a variance of {} (must be >= 0)", v)};
    const Activation in = on_channels(raw, std::size_t{0}, base, "BatchNormalization");
    Op l;
    l.kind = OpKind::BatchNormalization;
    l.epsilon = eps;
    Activation out = add(std::move(l), {in.producer}, base);
    const std::string& name = graph_.ops.back().name;
    const auto c = static_cast<std::uint32_t>(d[0]);
    param(name, "gamma", {c}, std::move(p[0]));
    param(name, "beta", {c}, std::move(p[1]));
    param(name, "moving_mean", {c}, std::move(p[2]));
    param(name, "moving_variance", {c}, std::move(p[3]));
    out.layout = in.layout;
    set(n, std::move(out));
  }

  void prelu(const onnx::NodeProto& n, const std::string& base) {
    const Activation raw = act(n, 0);
    const Const& slope = *constant(n, 1);
    const std::vector<std::int64_t> d = raw.dims();
    // Opset 6: a slope of one value, or one per channel; since 7, broadcast onto the input.
    auto v = per_axis(slope, d, opset_ < 7 ? 1 : -1);
    if (!v || (v->axis && *v->axis != 0))
      throw NodeProblem{fmt::format("slope dims {}: tpusim's PReLU has one slope per channel",
                                    show_dims(slope.dims))};
    const Activation in = on_channels(raw, v->axis, base, "PRelu");
    if (v->values.size() == 1) v->values.assign(in.ir.c, v->values[0]);
    Op l;
    l.kind = OpKind::PReLU;
    Activation out = add(std::move(l), {in.producer}, base);
    const Op& op = graph_.ops.back();
    std::vector<std::uint32_t> dims = {op.out.c};
    if (op.out.h != 1 || op.out.w != 1) dims = {1, 1, op.out.c};
    param(op.name, "alpha", dims, std::move(v->values));
    out.layout = in.layout;
    set(n, std::move(out));
  }

  void elementwise(const onnx::NodeProto& n, const std::string& base) {
    const std::string& op = n.op_type();
    std::vector<int> acts, consts;
    for (int k = 0; k < n.input_size(); ++k) (is_const(n, k) ? consts : acts).push_back(k);
    if (acts.empty()) throw NodeProblem{"no input comes from the graph input"};
    if (consts.empty()) {
      if (op == "Div") throw NodeProblem{"Div of two tensors (tpusim divides by constants only)"};
      const Activation first = act(n, acts[0]);
      std::vector<std::size_t> producers = {first.producer};
      for (std::size_t k = 1; k < acts.size(); ++k) {
        Activation b = act(n, acts[k]);
        if (b.dims() != first.dims())
          throw NodeProblem{
              fmt::format("inputs {} and {}: tpusim's elementwise operations do not "
                          "broadcast",
                          show_dims(first.dims()), show_dims(b.dims()))};
        b = relayout(b, first.ir, first.layout, base, op.c_str());
        producers.push_back(b.producer);
      }
      if (producers.size() == 1) return set(n, first);
      Op l;
      l.kind = op == "Mul" ? OpKind::Multiply : op == "Sub" ? OpKind::Subtract : OpKind::Add;
      Activation out = add(std::move(l), producers, base);
      out.layout = first.layout;
      return set(n, std::move(out));
    }
    if (op == "Sum" || acts.size() != 1 || consts.size() != 1)
      throw NodeProblem{"a constant among several operands"};
    const Activation x = act(n, acts[0]);
    const Const& c = *constant(n, consts[0]);
    std::int64_t legacy = -1;
    if (opset_ < 7) {
      const std::size_t r = x.layout.size() + 1;
      if (attr_int(n, "broadcast", 0) == 0 && c.dims.size() != r && c.size() != 1)
        throw NodeProblem{"broadcast = 0 with operands of different shapes"};
      if (attr(n, "axis")) {
        legacy = attr_int(n, "axis", 0);
        if (legacy < 0) legacy += static_cast<std::int64_t>(r);
      }
    }
    const auto v = per_axis(c, x.dims(), legacy);
    if (!v)
      throw NodeProblem{fmt::format(
          "a constant of dims {} on a {} input: tpusim applies one value, or one per element of "
          "one axis, the same to every sample",
          show_dims(c.dims), show_dims(x.dims()))};
    const bool const_first = consts[0] < acts[0];
    const std::vector<float>& a = v->values;
    std::vector<float> scale(a.size(), 1.0f), shift(a.size(), 0.0f);
    for (std::size_t k = 0; k < a.size(); ++k) {
      if (op == "Add") shift[k] = a[k];
      if (op == "Sub") {
        // x - a, or a - x.
        scale[k] = const_first ? -1.0f : 1.0f;
        shift[k] = const_first ? a[k] : -a[k];
      }
      if (op == "Mul") scale[k] = a[k];
      if (op == "Div") {
        if (const_first) throw NodeProblem{"a constant divided by a tensor"};
        if (a[k] == 0) throw NodeProblem{"division by a constant 0"};
        scale[k] = 1.0f / a[k];
      }
    }
    const Activation in = on_channels(x, v->axis, base, op.c_str());
    // A bias after a product without one, nothing else reading the product (MatMul + Add, Conv
    // + Add): the product's bias.
    if (op == "Add" && in.producer == x.producer && x.producer != kGraphInput &&
        x.producer == graph_.ops.size() - 1 && readers_[n.input(acts[0])] == 1) {
      Op& prev = graph_.ops[x.producer];
      const bool weighted = prev.kind == OpKind::Dense || prev.kind == OpKind::Conv2D ||
                            prev.kind == OpKind::DepthwiseConv2D;
      if (weighted && !prev.use_bias && prev.activation == Act::Linear) {
        prev.use_bias = true;
        shift.resize(prev.out.c, shift.empty() ? 0.0f : shift[0]);
        param(prev.name, "bias", {prev.out.c}, std::move(shift));
        return set(n, in);
      }
    }
    set(n, affine(in, std::move(scale), std::move(shift), base));
  }

  void concat(const onnx::NodeProto& n, const std::string& base) {
    if (n.input_size() < 1) throw NodeProblem{"no inputs"};
    const Activation first = act(n, 0);
    const std::size_t rank = first.layout.size() + 1;
    const std::size_t axis = sample_axis(attr_int(n, "axis", 1), rank, "axis");
    if (axis != 0)
      throw NodeProblem{
          fmt::format("axis {}: tpusim concatenates along the channels (axis 1)", axis + 1)};
    std::vector<std::size_t> producers;
    for (int k = 0; k < n.input_size(); ++k) {
      const Activation a = act(n, k);
      const auto d = a.dims();
      if (d.size() != first.dims().size())
        throw NodeProblem{fmt::format("inputs of {} and {} dimensions", d.size() + 1, rank)};
      if (d.size() == 1) {
        if (!(a.ir == Shape{1, 1, static_cast<std::uint32_t>(d[0])}))
          throw NodeProblem{"an input tpusim does not hold as its channels"};
        producers.push_back(a.producer);
      } else {
        producers.push_back(channels_last(a, base, "Concat").producer);
      }
    }
    if (producers.size() == 1) return set(n, first);
    Op l;
    l.kind = OpKind::Concatenate;
    Activation out = add(std::move(l), producers, base);
    out.layout = standard(first.dims().size() == 1 ? std::vector<std::int64_t>{out.ir.c}
                                                   : spatial_dims(first.dims().size(), out.ir),
                          true)
                     .second;
    set(n, std::move(out));
  }

  // Flatten, Reshape, Squeeze, Unsqueeze and Transpose: the same elements in another ONNX shape.
  // tpusim keeps the tensor and describes it anew; nothing is computed.
  Activation reshape(const onnx::NodeProto& n, Activation a) {
    const std::string& op = n.op_type();
    const std::vector<std::int64_t> d = a.dims();
    const std::size_t rank = d.size() + 1;
    if (op == "Transpose") {
      std::vector<std::int64_t> perm;
      for (std::size_t k = rank; k-- > 0;) perm.push_back(static_cast<std::int64_t>(k));
      if (auto p = attr_ints(n, "perm")) perm = *p;
      std::vector<bool> seen(rank, false);
      bool ok = perm.size() == rank;
      for (std::int64_t p : perm)
        ok = ok && p >= 0 && static_cast<std::size_t>(p) < rank &&
             !seen[static_cast<std::size_t>(p)] && (seen[static_cast<std::size_t>(p)] = true);
      if (!ok)
        throw NodeProblem{fmt::format("perm {} does not permute {} axes", show_dims(perm), rank)};
      if (perm[0] != 0)
        throw NodeProblem{fmt::format("perm {} moves the batch axis", show_dims(perm))};
      Layout l;
      for (std::size_t k = 1; k < rank; ++k)
        l.push_back(a.layout[static_cast<std::size_t>(perm[k] - 1)]);
      a.layout = std::move(l);
      return a;
    }
    std::vector<std::int64_t> target;  // per sample
    if (op == "Flatten") {
      const std::int64_t axis = attr_int(n, "axis", 1);
      if (axis != 1 && axis != 1 - static_cast<std::int64_t>(rank))
        throw NodeProblem{
            fmt::format("axis = {}: a Flatten that does not keep the batch axis (1)", axis)};
      std::int64_t all = 1;
      for (std::int64_t x : d) all *= x;
      target = {all};
    } else if (op == "Reshape") {
      std::vector<std::int64_t> shape =
          opset_ < 5 ? attr_ints(n, "shape").value_or(std::vector<std::int64_t>{})
                     : const_ints(n, 1);
      const bool allowzero = attr_int(n, "allowzero", 0) != 0;
      std::int64_t all = 1;
      for (std::int64_t x : d) all *= x;
      if (shape.empty()) throw NodeProblem{"an empty shape"};
      // The first entry must keep the batch: 0 (copy), the batch size, or -1 with the rest fixed.
      const bool keeps =
          (shape[0] == 0 && !allowzero) || (batch_ > 0 && shape[0] == batch_) || shape[0] == -1;
      if (!keeps)
        throw NodeProblem{
            fmt::format("shape {} changes the batch axis (its first entry must be 0, "
                        "-1 or the batch, {})",
                        show_dims(shape), batch_)};
      std::int64_t known = 1;
      int free = -1;
      for (std::size_t k = 1; k < shape.size(); ++k) {
        std::int64_t x = shape[k];
        if (x == 0 && !allowzero) x = k - 1 < d.size() ? d[k - 1] : 0;
        if (x == -1 && free < 0 && shape[0] != -1) {
          free = static_cast<int>(k - 1);
        } else if (x < 1 || x > kMaxDim) {
          throw NodeProblem{fmt::format("shape {} for a {} input", show_dims(shape), show_dims(d))};
        } else {
          known *= x;
        }
        target.push_back(x);
        if (known > all) break;
      }
      if (free >= 0) {
        if (known == 0 || all % known != 0)
          throw NodeProblem{fmt::format("shape {} for a {} input", show_dims(shape), show_dims(d))};
        target[static_cast<std::size_t>(free)] = all / known;
      }
    } else {
      std::vector<std::int64_t> axes =
          opset_ >= 13 && n.input_size() > 1
              ? const_ints(n, 1)
              : attr_ints(n, "axes").value_or(std::vector<std::int64_t>{});
      if (op == "Squeeze") {
        std::vector<bool> drop(d.size(), false);
        if (axes.empty())
          for (std::size_t k = 0; k < d.size(); ++k) drop[k] = d[k] == 1;
        for (std::int64_t x : axes) {
          const std::size_t k = sample_axis(x, rank, "axes");
          if (d[k] != 1)
            throw NodeProblem{
                fmt::format("axis {} has {} elements (Squeeze removes axes of 1)", k + 1, d[k])};
          drop[k] = true;
        }
        for (std::size_t k = 0; k < d.size(); ++k)
          if (!drop[k]) target.push_back(d[k]);
      } else {
        const std::size_t out_rank = rank + axes.size();
        std::vector<bool> added(out_rank, false);
        for (std::int64_t x : axes) added[sample_axis(x, out_rank, "axes") + 1] = true;
        std::size_t next = 0;
        for (std::size_t k = 1; k < out_rank; ++k) target.push_back(added[k] ? 1 : d[next++]);
      }
    }
    std::uint64_t before = 1, after = 1;
    for (std::int64_t x : d) before *= static_cast<std::uint64_t>(x);
    for (std::int64_t x : target) after *= static_cast<std::uint64_t>(x);
    if (before != after)
      throw NodeProblem{fmt::format("{} to {} of a {} input: the element counts differ", op,
                                    show_dims(target), show_dims(d))};
    if (target.size() > 3)
      throw NodeProblem{fmt::format("a {}-D result {}: tpusim's tensors are at most N x C x H x W",
                                    target.size() + 1, show_dims(target))};
    // Regroup the runs: each new axis takes runs from the front, splitting one where it must.
    std::vector<Seg> runs;
    for (const auto& axis : a.layout)
      for (const Seg& g : axis)
        if (g.extent > 1) runs.push_back(g);
    Layout l;
    std::size_t at = 0;
    for (std::int64_t x : target) {
      std::vector<Seg> axis;
      auto need = static_cast<std::uint64_t>(x);
      while (need > 1) {
        if (at >= runs.size()) throw std::logic_error("a reshape ran out of runs");
        Seg& g = runs[at];
        if (g.extent <= need && need % g.extent == 0) {
          axis.push_back(g);
          need /= g.extent;
          ++at;
        } else if (g.extent % need == 0) {
          // The major part of the run goes to this axis, the rest stays for the next.
          axis.push_back({g.axis, g.stride * (g.extent / need), need});
          g.extent /= need;
          need = 1;
        } else {
          throw NodeProblem{fmt::format(
              "{} to {} of a {} input would need tpusim to move data: the new axes cut across "
              "the IR's channels-last order",
              op, show_dims(target), show_dims(d))};
        }
      }
      l.push_back(std::move(axis));
    }
    a.layout = std::move(l);
    return a;
  }

  void pad(const onnx::NodeProto& n, const std::string& base) {
    const Activation raw = act(n, 0);
    const std::vector<std::int64_t> d = raw.dims();
    const std::size_t rank = d.size() + 1;
    std::string mode = attr_string(n, "mode", "constant");
    std::vector<std::int64_t> pads;
    double value = 0;
    if (opset_ < 11) {
      pads = attr_ints(n, opset_ < 2 ? "paddings" : "pads").value_or(std::vector<std::int64_t>{});
      value = attr_float(n, "value", 0.0f);
    } else {
      pads = const_ints(n, 1);
      if (const Const* c = constant(n, 2, false); c && !c->values.empty()) value = c->values[0];
      if (n.input_size() > 3 && !n.input(3).empty()) throw NodeProblem{"the axes input (opset 18)"};
    }
    if (mode != "constant")
      throw NodeProblem{
          fmt::format("mode {}: tpusim pads with zeros (mode constant, value 0)", shown(mode))};
    if (value != 0)
      throw NodeProblem{
          fmt::format("value {}: tpusim pads with zeros (mode constant, value 0)", value)};
    if (pads.size() != 2 * rank)
      throw NodeProblem{fmt::format("pads {} for a {}-D input", show_dims(pads), rank)};
    if (rank < 3 || rank > 4 || pads[0] || pads[rank] || pads[1] || pads[rank + 1])
      throw NodeProblem{fmt::format(
          "pads {} of a {} input: tpusim pads the rows and columns of an image (N x C x H x W) or "
          "signal (N x C x L), not its batch or channels",
          show_dims(pads), show_dims(d))};
    for (std::int64_t p : pads)
      if (p < 0 || p > kMaxDim)
        throw NodeProblem{
            fmt::format("pads {} (each must be in [0, {}])", show_dims(pads), kMaxDim)};
    const Activation in = channels_last(raw, base, "Pad");
    Op l;
    l.kind = OpKind::ZeroPadding2D;
    auto u = [](std::int64_t x) { return static_cast<std::uint32_t>(x); };
    if (rank == 3) {
      l.pad_left = u(pads[2]), l.pad_right = u(pads[5]);
    } else {
      l.pad_top = u(pads[2]), l.pad_left = u(pads[3]), l.pad_bottom = u(pads[6]),
      l.pad_right = u(pads[7]);
    }
    Activation out = add(std::move(l), {in.producer}, base);
    out.layout = standard(spatial_dims(d.size(), out.ir), true).second;
    set(n, std::move(out));
  }

  // Gather of a constant table's rows by the graph input's token ids: an Embedding.
  void gather(const onnx::NodeProto& n, const std::string& base) {
    if (!is_const(n, 0))
      throw NodeProblem{"the data is not a constant (tpusim gathers rows of a table)"};
    const Const& table = *constant(n, 0);
    const Activation ids = act(n, 1);
    if (attr_int(n, "axis", 0) != 0) throw NodeProblem{"axis != 0: tpusim gathers rows of a table"};
    if (ids.producer != kGraphInput || !token_ids_)
      throw NodeProblem{"the indices are not the graph input's INT64/INT32 token ids"};
    if (table.dims.size() != 2 || table.dims[0] < 1 || table.dims[0] > ir::kMaxEmbeddingRows ||
        table.dims[1] < 1 || table.dims[1] > kMaxDim)
      throw NodeProblem{fmt::format("a table of dims {} (rows in [1, {}] of [1, {}] values)",
                                    show_dims(table.dims), ir::kMaxEmbeddingRows, kMaxDim)};
    const std::vector<std::int64_t> d = ids.dims();
    if (d.size() > 1)
      throw NodeProblem{fmt::format("indices {}: tpusim looks up a sequence [N, T]", show_dims(d))};
    Op l;
    l.kind = OpKind::Embedding;
    l.input_dim = static_cast<std::uint32_t>(table.dims[0]);
    l.filters = static_cast<std::uint32_t>(table.dims[1]);
    Activation out = add(std::move(l), {ids.producer}, base);
    std::vector<float> v;
    for (double x : table.values) v.push_back(narrow(x));
    param(graph_.ops.back().name, "embeddings",
          {static_cast<std::uint32_t>(table.dims[0]), static_cast<std::uint32_t>(table.dims[1])},
          std::move(v));
    const auto t = static_cast<std::uint64_t>(out.ir.w), f = static_cast<std::uint64_t>(out.ir.c);
    out.layout.clear();
    if (!d.empty())
      out.layout.push_back(t == 1 ? std::vector<Seg>{} : std::vector<Seg>{{Ax::W, 1, t}});
    out.layout.push_back(f == 1 ? std::vector<Seg>{} : std::vector<Seg>{{Ax::C, 1, f}});
    set(n, std::move(out));
  }

  const onnx::ModelProto& model_;
  const onnx::GraphProto& g_;
  std::string origin_;
  bool channels_first_ = false;
  std::int64_t opset_ = 0;
  std::map<std::string, Value> values_;
  std::map<std::string, int> readers_;
  std::set<int> refused_;
  std::map<int, std::string> problems_;  // by node index
  std::string input_name_;
  Shape input_shape_;
  std::int64_t batch_ = -1;
  bool token_ids_ = false;
  ir::Graph graph_;
  std::vector<Parameter> params_;
  std::set<std::string> names_;
};

}  // namespace

OnnxModel parse_onnx(const std::string& bytes, const std::string& origin) {
  onnx::ModelProto model;
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX) || !model.ParseFromString(bytes))
    throw InputError(fmt::format(
        "{}: not an ONNX model: its {} bytes do not parse as a protobuf onnx.ModelProto "
        "(truncated, or another binary file)",
        origin, bytes.size()));
  if (!model.has_graph())
    throw InputError(fmt::format("{}: an ONNX ModelProto without a graph: nothing to run", origin));
  if (model.graph().node_size() == 0)
    throw InputError(fmt::format("{}: the ONNX graph has no nodes: nothing to run", origin));
  // The graph input's layout is a guess from the operations present; when the model cannot be
  // expressed with it, the other is tried before the first refusal is reported.
  const bool guess = Importer::channel_first_graph(model.graph());
  try {
    return Importer(model, origin, guess).run();
  } catch (const InputError& first) {
    try {
      return Importer(model, origin, !guess).run();
    } catch (const InputError&) {
      throw first;
    }
  }
}

OnnxModel load_onnx(const std::string& path) {
  return parse_onnx(read_input_file(path, "model", kMaxModelBytes), path);
}

OnnxTensor load_onnx_tensor(const std::string& path) {
  const std::string bytes = read_input_file(path, "ONNX tensor", kMaxModelBytes);
  onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    throw InputError(fmt::format("{}: does not parse as a protobuf onnx.TensorProto", path));
  const Const c = decode_tensor(t, path, "tensor");
  OnnxTensor out;
  out.dims = c.dims;
  for (double v : c.values) out.values.push_back(narrow(v));
  return out;
}

}  // namespace tpu::importers
