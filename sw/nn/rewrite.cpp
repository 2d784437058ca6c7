#include "sw/nn/rewrite.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "hw/common/error.h"

namespace tpu::nn {

Model inference_graph(Model m) {
  // Where each old layer's output now comes from: a new index, or kModelInput.
  std::vector<std::size_t> source(m.layers.size(), kModelInput);
  std::vector<Layer> kept;
  kept.reserve(m.layers.size());
  auto remap = [&](std::size_t p) { return p == kModelInput ? kModelInput : source[p]; };
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    Layer& l = m.layers[i];
    if (l.kind == LayerKind::Dropout) {
      source[i] = remap(l.inputs.at(0));
      continue;
    }
    for (std::size_t& p : l.inputs) p = remap(p);
    source[i] = kept.size();
    kept.push_back(std::move(l));
  }
  if (kept.empty())
    throw InputError(
        fmt::format("{}: the model computes nothing at inference: every layer is "
                    "the identity (Dropout and its kin)",
                    m.file));
  if (const std::size_t out = source.back(); out != kept.size() - 1)
    throw InputError(fmt::format(
        "{}: layer {} ({}), the model's output, is the identity at inference and reads {}, which "
        "is not the last layer that remains; tpusim's output is the last layer",
        m.file, m.layers.back().name, name_of(LayerKind::Dropout),
        out == kModelInput ? std::string("the model's input") : kept[out].name));
  m.layers = std::move(kept);
  return m;
}

}  // namespace tpu::nn
