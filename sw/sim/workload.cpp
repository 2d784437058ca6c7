#include "sw/sim/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>

#include "hw/common/error.h"
#include "sw/data/idx.h"
#include "sw/ir/ops.h"
#include "sw/nn/quantized.h"

namespace tpu::sim {
namespace fs = std::filesystem;
namespace {

// Seeded inputs uniform in [0, 255], like raw pixels, from our own mapping of mt19937_64 (the
// standard distributions are implementation-defined).
std::vector<float> random_images(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(count);
  for (auto& x : v) x = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 * 255.0);
  return v;
}

// Seeded token ids uniform in [0, vocab), as floats (exact: vocab <= 2^24).
std::vector<float> random_ids(std::size_t count, std::uint32_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> v(count);
  for (auto& x : v) x = static_cast<float>(rng() % vocab);
  return v;
}

// The smallest table an Embedding on the input has: every id must fit all of them.
std::uint32_t vocabulary(const ir::Graph& m) {
  std::uint32_t vocab = ir::kMaxEmbeddingRows;
  for (const ir::Op& op : m.ops)
    if (op.kind == ir::OpKind::Embedding) vocab = std::min(vocab, op.input_dim);
  return vocab;
}

}  // namespace

Inputs load_inputs(const ir::Graph& m, const RunOptions& opt) {
  Inputs in;
  const std::size_t per = m.input.size();
  if (ir::input_is_token_ids(m)) {
    const std::uint32_t vocab = vocabulary(m);
    in.images = random_ids(opt.images * per, vocab, opt.seed);
    in.calibration = random_ids(nn::calibration_images(m) * per, vocab, opt.seed + 1);
    in.source = fmt::format("random token ids (seed {}) in [0, {})", opt.seed, vocab);
    return in;
  }
  const bool fashion = m.input == ir::Shape{28, 28, 1};
  if (!fashion) {
    in.images = random_images(opt.images * per, opt.seed);
    // Only the images calibration will use: 256 random ResNet-50 inputs would be 154 MB. The
    // generator is sequential, so the first images are the same whatever the count.
    in.calibration = random_images(nn::calibration_images(m) * per, opt.seed + 1);
    in.source = fmt::format(
        "random inputs (seed {}): the model's input {}x{}x{} is not "
        "Fashion-MNIST's 28x28x1",
        opt.seed, m.input.h, m.input.w, m.input.c);
    return in;
  }
  const std::string dir = opt.data_dir.empty() ? data::kDefaultFashionMnistDir : opt.data_dir;
  data::Dataset ds = data::load_fashion_mnist(dir, "t10k");
  if (opt.images > ds.images.count)
    throw InputError(fmt::format("--images {}: the Fashion-MNIST test set in {} has {} images",
                                 opt.images, dir, ds.images.count));
  in.images.resize(opt.images * per);
  for (std::size_t i = 0; i < in.images.size(); ++i) in.images[i] = ds.images.pixels[i];
  in.labels.assign(ds.labels.begin(), ds.labels.begin() + static_cast<std::ptrdiff_t>(opt.images));
  const std::size_t cal = std::min<std::size_t>(nn::calibration_images(m), ds.images.count);
  in.calibration.resize(cal * per);
  for (std::size_t i = 0; i < in.calibration.size(); ++i) in.calibration[i] = ds.images.pixels[i];
  in.source = fmt::format("Fashion-MNIST t10k ({})", dir);
  return in;
}

namespace {

// The parameters a model file carries, by name, onto `model`'s operations (identities removed:
// names survive, indices do not). The importer made them in the operation table's shapes.
nn::Weights embedded_weights(const ir::Graph& model,
                             const std::vector<importers::Parameter>& embedded) {
  std::map<std::string, const importers::Parameter*> by_name;
  for (const auto& p : embedded) by_name[p.name] = &p;
  nn::Weights w;
  w.layers.resize(model.ops.size());
  for (std::size_t i = 0; i < model.ops.size(); ++i) {
    const ir::Op& op = model.ops[i];
    for (const ir::ParamSpec& spec : ir::op_info(op.kind).params(op)) {
      const std::string name = op.name + "/" + std::string(spec.suffix);
      const auto it = by_name.find(name);
      if (it == by_name.end() || it->second->dims != spec.dims)
        throw std::logic_error("the importer gave no parameter " + name + " of its shape");
      nn::tensor_of(w.layers[i], spec.param) = it->second->values;
    }
    // A weighted operation without a bias adds zeros (nn::fill_defaults' rule).
    if (op.has_weights() && !op.use_bias) w.layers[i].bias.assign(op.out.c, 0.0f);
  }
  nn::check_weights(model, w);
  return w;
}

}  // namespace

nn::Weights load_weights(const ir::Graph& model, const RunOptions& opt, std::string& source,
                         const std::vector<importers::Parameter>& embedded) {
  std::string wfile = opt.weights.value_or("");
  if (wfile.empty() && !opt.random_weights && opt.topology.empty() && !embedded.empty()) {
    source = opt.model + " (its initializers)";
    return embedded_weights(model, embedded);
  }
  if (wfile.empty() && !opt.random_weights && opt.topology.empty()) {
    const fs::path guess = fs::path(opt.model).parent_path() / ".." / "weights" /
                           (fs::path(opt.model).stem().string() + ".bin");
    if (fs::exists(guess)) wfile = guess.lexically_normal().string();
  }
  if (!wfile.empty()) {
    source = wfile;
    return nn::load_weights(wfile, model);
  }
  source = fmt::format("random (seed {})", opt.seed);
  return nn::random_weights(model, opt.seed);
}

}  // namespace tpu::sim
