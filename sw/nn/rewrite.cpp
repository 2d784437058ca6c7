#include "sw/nn/rewrite.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "hw/common/error.h"

namespace tpu::nn {
using ir::Act;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Padding;
using ir::Shape;

Graph inference_graph(Graph m) {
  // Where each old layer's output now comes from: a new index, or kGraphInput.
  std::vector<std::size_t> source(m.ops.size(), kGraphInput);
  std::vector<Op> kept;
  kept.reserve(m.ops.size());
  auto remap = [&](std::size_t p) { return p == kGraphInput ? kGraphInput : source[p]; };
  for (std::size_t i = 0; i < m.ops.size(); ++i) {
    Op& l = m.ops[i];
    if (l.kind == OpKind::Dropout) {
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
        m.file, m.ops.back().name, name_of(OpKind::Dropout),
        out == kGraphInput ? std::string("the model's input") : kept[out].name));
  m.ops = std::move(kept);
  return m;
}

}  // namespace tpu::nn
