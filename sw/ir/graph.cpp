#include "sw/ir/graph.h"

namespace tpu::ir {

std::uint64_t Graph::macs_per_image() const {
  std::uint64_t total = 0;
  for (const Op& op : ops) total += op.macs();
  return total;
}

std::vector<std::vector<std::size_t>> consumers(const Graph& g) {
  std::vector<std::vector<std::size_t>> out(g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    for (std::size_t p : g.ops[i].inputs)
      if (p != kGraphInput) out[p].push_back(i);
  return out;
}

bool input_is_token_ids(const Graph& g) {
  for (const Op& op : g.ops)
    for (std::size_t p : op.inputs)
      if (p == kGraphInput && op.kind == OpKind::Embedding) return true;
  return false;
}

std::string_view name_of(Act a) {
  switch (a) {
    case Act::Linear: return "linear";
    case Act::Relu: return "relu";
    case Act::Relu6: return "relu6";
    case Act::Sigmoid: return "sigmoid";
    case Act::Tanh: return "tanh";
    case Act::Softmax: return "softmax";
    case Act::LeakyRelu: return "leaky_relu";
    case Act::Elu: return "elu";
  }
  return "?";
}

}  // namespace tpu::ir
