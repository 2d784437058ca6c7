#include "sw/nn/weights.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "sw/io/output.h"
#include "sw/ir/ops.h"

namespace tpu::nn {
using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;
namespace {

// docs/weights.md describes the layout byte by byte.
constexpr std::array<char, 4> kMagic = {'T', 'P', 'U', 'W'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxNameBytes = 256;
constexpr std::uint32_t kMaxRank = 4;

// What the model expects of one tensor.
struct Expected {
  std::size_t layer = 0;
  ir::ParamSpec spec;
};

// Tensors in the order save_weights writes them: model order, each operation's in its table's
// order (kernel before bias; Keras's BatchNormalization order gamma, beta, moving_mean,
// moving_variance).
std::vector<std::pair<std::string, Expected>> expected_tensors(const Graph& m) {
  std::vector<std::pair<std::string, Expected>> out;
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const Op& l = m.ops[i];
    for (ir::ParamSpec& spec : ir::op_info(l.kind).params(l))
      out.push_back({l.name + "/" + std::string(spec.suffix), Expected{i, std::move(spec)}});
  }
  return out;
}

std::string_view param_name(ir::Param p) {
  switch (p) {
    case ir::Param::Kernel: return "kernel";
    case ir::Param::Bias: return "bias";
    case ir::Param::Gamma: return "gamma";
    case ir::Param::Beta: return "beta";
    case ir::Param::MovingMean: return "moving_mean";
    case ir::Param::MovingVariance: return "moving_variance";
    case ir::Param::PointwiseKernel: return "pointwise_kernel";
    case ir::Param::RecurrentKernel: return "recurrent_kernel";
    case ir::Param::Alpha: return "alpha";
  }
  return "?";
}

// What a file may omit: a weighted layer without bias gets zeros, and Keras's defaults for the
// BatchNormalization tensors a layer without scale or center omits.
void fill_defaults(const Graph& m, Weights& w) {
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const Op& l = m.ops[i];
    if (l.has_weights() && !l.use_bias) w.layers[i].bias.assign(l.out.c, 0.0f);
    if (l.kind != OpKind::BatchNormalization) continue;
    if (!l.scale) w.layers[i].gamma.assign(l.out.c, 1.0f);
    if (!l.use_bias) w.layers[i].beta.assign(l.out.c, 0.0f);
  }
}

// A name read from the file, quoted for a one-line message: control and non-ASCII bytes escaped.
std::string printable(const std::string& name) {
  std::string s = "\"";
  for (const char ch : name) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\')
      s += fmt::format("\\{}", ch);
    else if (c < 0x20 || c > 0x7e)
      s += fmt::format("\\x{:02x}", c);
    else
      s += ch;
  }
  return s + "\"";
}

std::string show_dims(const std::vector<std::uint32_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ", "));
}

std::uint32_t float_bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::uint32_t get_u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

// Sequential reads that know how much of the file is left, so no size taken from the file is
// trusted before the bytes are known to exist.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(open_input(path, "weights file")) {
    // The size is known before anything is read, so a pipe cannot stand in for the file.
    if (!in_.regular())
      throw InputError(
          fmt::format("{}: cannot read the weights file (is not a regular file)", path));
    size_ = in_.size();
  }

  [[nodiscard]] std::uint64_t remaining() const { return size_ - pos_; }
  [[nodiscard]] std::uint64_t pos() const { return pos_; }

  void require(std::uint64_t n, const std::string& what) const {
    if (n > remaining())
      throw InputError(
          fmt::format("{}: truncated: {} needs {} bytes at offset {}, the file has {} "
                      "left",
                      path_, what, n, pos_, remaining()));
  }

  void read(void* dst, std::uint64_t n, const std::string& what) {
    require(n, what);
    auto* p = static_cast<char*>(dst);
    std::uint64_t done = 0;
    while (done < n) {
      const ssize_t got = ::read(in_.fd(), p + done, static_cast<std::size_t>(n - done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        throw InputError(fmt::format("{}: read error at offset {} ({})", path_, pos_ + done,
                                     path_error_reason(errno)));
      if (got == 0)
        throw InputError(
            fmt::format("{}: truncated while reading {}: the file shrank", path_, what));
      done += static_cast<std::uint64_t>(got);
    }
    pos_ += n;
  }

  std::uint32_t u32(const std::string& what) {
    std::array<std::uint8_t, 4> b{};
    read(b.data(), b.size(), what);
    return get_u32(b.data());
  }

 private:
  std::string path_;
  InputFd in_;
  std::uint64_t size_ = 0, pos_ = 0;
};

// LW is LayerWeights or const LayerWeights.
template <class LW>
auto& field_of(LW& w, ir::Param p) {
  switch (p) {
    case ir::Param::Kernel: return w.kernel;
    case ir::Param::Bias: return w.bias;
    case ir::Param::Gamma: return w.gamma;
    case ir::Param::Beta: return w.beta;
    case ir::Param::MovingMean: return w.moving_mean;
    case ir::Param::MovingVariance: return w.moving_variance;
    case ir::Param::PointwiseKernel: return w.pointwise;
    case ir::Param::RecurrentKernel: return w.recurrent;
    case ir::Param::Alpha: return w.alpha;
  }
  return w.kernel;
}

}  // namespace

std::vector<float>& tensor_of(LayerWeights& w, ir::Param p) { return field_of(w, p); }
const std::vector<float>& tensor_of(const LayerWeights& w, ir::Param p) { return field_of(w, p); }

void check_weights(const Graph& m, const Weights& w) {
  if (w.layers.size() != m.ops.size())
    throw InputError(fmt::format("{}: weights for {} layers, the model has {}", m.file,
                                 w.layers.size(), m.ops.size()));
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const Op& l = m.ops[i];
    const LayerWeights& lw = w.layers[i];
    LayerWeights expected;  // each field sized as the operation needs it
    for (const ir::ParamSpec& spec : ir::op_info(l.kind).params(l))
      tensor_of(expected, spec.param).resize(static_cast<std::size_t>(spec.elements()));
    // Defaults the file may omit: a weighted layer's missing bias is zeros, a normalisation's
    // missing gamma ones and beta zeros (fill_defaults).
    const bool weighted = l.has_weights();
    if (weighted && !l.use_bias && lw.bias.empty()) expected.bias.clear();
    if (weighted && !l.use_bias && !lw.bias.empty()) expected.bias.resize(l.out.c);
    if (l.kind == OpKind::BatchNormalization) {
      expected.gamma.resize(l.out.c);
      expected.beta.resize(l.out.c);
    }
    for (ir::Param p : {ir::Param::Kernel, ir::Param::Bias, ir::Param::Gamma, ir::Param::Beta,
                        ir::Param::MovingMean, ir::Param::MovingVariance,
                        ir::Param::PointwiseKernel, ir::Param::RecurrentKernel, ir::Param::Alpha})
      if (tensor_of(lw, p).size() != tensor_of(expected, p).size())
        throw InputError(
            fmt::format("{}: layer {} ({}) needs {} values of parameter {}, the weights hold {}",
                        m.file, l.name, name_of(l.kind), tensor_of(expected, p).size(),
                        param_name(p), tensor_of(lw, p).size()));
  }
}

Weights random_weights(const Graph& m, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  // The top 53 bits as a double in [0, 1): the same numbers on every platform, unlike
  // std::uniform_real_distribution whose algorithm the standard leaves open.
  auto uniform = [&](double limit) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    return static_cast<float>(limit * (2.0 * u - 1.0));
  };
  Weights w;
  w.layers.resize(m.ops.size());
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    const Op& l = m.ops[i];
    LayerWeights& lw = w.layers[i];
    for (const ir::ParamSpec& spec : ir::op_info(l.kind).params(l)) {
      std::vector<float>& t = tensor_of(lw, spec.param);
      t.resize(static_cast<std::size_t>(spec.elements()));
      switch (spec.init) {
        case ir::Init::Glorot: {
          // Glorot & Bengio 2010 (Keras's glorot_uniform): U(-limit, limit) with
          // limit = sqrt(6 / (fan_in + fan_out)); a convolution's fans count its receptive field.
          const double limit = std::sqrt(6.0 / (spec.fan_in + spec.fan_out));
          for (float& x : t) x = uniform(limit);
          break;
        }
        case ir::Init::Embedding:
          for (float& x : t) x = uniform(0.05);
          break;
        case ir::Init::Zeros: std::fill(t.begin(), t.end(), 0.0f); break;
        case ir::Init::Ones: std::fill(t.begin(), t.end(), 1.0f); break;
        case ir::Init::LstmBias:
          // Gates i, f, c, o: the forget gate's quarter starts at 1 (Jozefowicz et al. 2015).
          for (std::size_t k = 0; k < t.size(); ++k)
            t[k] = k >= t.size() / 4 && k < t.size() / 2 ? 1.0f : 0.0f;
          break;
      }
    }
  }
  fill_defaults(m, w);
  return w;
}

Weights load_weights(const std::string& path, const Graph& m) {
  Reader in(path);
  std::array<std::uint8_t, 4> magic{};
  in.read(magic.data(), magic.size(), "the magic");
  if (!std::equal(magic.begin(), magic.end(), kMagic.begin()))
    throw InputError(
        fmt::format("{}: bad magic {:02x} {:02x} {:02x} {:02x} (expected 54 50 55 57, "
                    "\"TPUW\": a tpusim weights file)",
                    path, magic[0], magic[1], magic[2], magic[3]));
  const std::uint32_t version = in.u32("the version");
  if (version != kVersion)
    throw InputError(
        fmt::format("{}: version {} (this tpusim reads version {})", path, version, kVersion));

  const auto expected = expected_tensors(m);
  std::map<std::string, const Expected*> by_name;
  std::vector<std::string> names;
  for (const auto& [name, e] : expected) {
    by_name.emplace(name, &e);
    names.push_back(name);
  }
  const std::string needed = fmt::format("{}", fmt::join(names, ", "));
  const std::uint32_t count = in.u32("the tensor count");
  if (count != expected.size())
    throw InputError(fmt::format("{}: {} tensors, model {} ({}) needs {}: {}", path, count, m.name,
                                 m.file, expected.size(), needed));

  Weights w;
  w.layers.resize(m.ops.size());
  std::map<std::string, bool> seen;
  for (std::uint32_t t = 0; t < count; ++t) {
    const std::string where = fmt::format("tensor {}", t);
    const std::uint32_t name_len = in.u32(where + "'s name length");
    if (name_len == 0 || name_len > kMaxNameBytes)
      throw InputError(fmt::format("{}: {}: name length {} (must be 1 to {} bytes)", path, where,
                                   name_len, kMaxNameBytes));
    std::string name(name_len, '\0');
    in.read(name.data(), name_len, where + "'s name");
    auto it = by_name.find(name);
    if (it == by_name.end())
      throw InputError(fmt::format("{}: {} {} is not a tensor of model {} ({}); it needs: {}", path,
                                   where, printable(name), m.name, m.file, needed));
    if (seen[name]) throw InputError(fmt::format("{}: tensor \"{}\" appears twice", path, name));
    seen[name] = true;
    const Expected& e = *it->second;
    const Op& l = m.ops[e.layer];

    const std::uint32_t rank = in.u32(fmt::format("tensor \"{}\"'s rank", name));
    if (rank == 0 || rank > kMaxRank)
      throw InputError(
          fmt::format("{}: tensor \"{}\": rank {} (must be 1 to {}; layer {} ({}) "
                      "expects shape {})",
                      path, name, rank, kMaxRank, l.name, name_of(l.kind), show_dims(e.spec.dims)));
    std::vector<std::uint32_t> dims(rank);
    for (std::uint32_t d = 0; d < rank; ++d)
      dims[d] = in.u32(fmt::format("tensor \"{}\"'s dimension {}", name, d));
    if (dims != e.spec.dims)
      throw InputError(fmt::format("{}: tensor \"{}\": shape {}, layer {} ({}) expects {}", path,
                                   name, show_dims(dims), l.name, name_of(l.kind),
                                   show_dims(e.spec.dims)));

    // The shape equals the model's, so the allocation is bounded by the model, and the bytes are
    // known to be in the file before it is made.
    const std::uint64_t n = e.spec.elements();
    const std::string data_what = fmt::format("tensor \"{}\"'s {} fp32 values", name, n);
    in.require(n * 4, data_what);
    std::vector<std::uint8_t> raw(static_cast<std::size_t>(n * 4));
    in.read(raw.data(), raw.size(), data_what);
    std::vector<float>& dst = tensor_of(w.layers[e.layer], e.spec.param);
    dst.resize(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < dst.size(); ++k) {
      const std::uint32_t bits = get_u32(raw.data() + 4 * k);
      std::memcpy(&dst[k], &bits, sizeof bits);
      // Inference and quantization scales assume finite weights, and normalisation a variance
      // that is not negative.
      if (!std::isfinite(dst[k]))
        throw InputError(fmt::format("{}: tensor \"{}\": value {} is {} (weights must be finite)",
                                     path, name, k, dst[k]));
      if (e.spec.param == ir::Param::MovingVariance && dst[k] < 0)
        throw InputError(fmt::format("{}: tensor \"{}\": value {} is {} (a variance must be >= 0)",
                                     path, name, k, dst[k]));
    }
  }
  if (in.remaining() != 0)
    throw InputError(fmt::format("{}: {} bytes after the last tensor (offset {})", path,
                                 in.remaining(), in.pos()));
  fill_defaults(m, w);
  return w;
}

std::string weights_bytes(const Graph& m, const Weights& w) {
  check_weights(m, w);
  std::string bytes(kMagic.begin(), kMagic.end());
  auto put = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put(kVersion);
  const auto expected = expected_tensors(m);
  put(static_cast<std::uint32_t>(expected.size()));
  for (const auto& [name, e] : expected) {
    put(static_cast<std::uint32_t>(name.size()));
    bytes += name;
    put(static_cast<std::uint32_t>(e.spec.dims.size()));
    for (std::uint32_t d : e.spec.dims) put(d);
    const std::vector<float>& src = tensor_of(w.layers[e.layer], e.spec.param);
    for (float f : src) put(float_bits(f));
  }
  return bytes;
}

void save_weights(const std::string& path, const Graph& m, const Weights& w) {
  io::write_file(path, weights_bytes(m, w));
}

}  // namespace tpu::nn
