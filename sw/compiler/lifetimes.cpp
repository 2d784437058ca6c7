#include "sw/compiler/lifetimes.h"

#include "sw/compiler/memory.h"

namespace tpu::compiler {

std::vector<std::size_t> Lifetimes::reads(const nn::QuantizedModel& q, std::size_t i) {
  std::vector<std::size_t> r;
  for (std::size_t p : q.graph.ops[i].inputs) r.push_back(q.tensor_of(p));
  return r;
}

Lifetimes lifetimes(const nn::QuantizedModel& q) {
  const std::size_t L = q.graph.ops.size();
  Lifetimes l;
  for (std::size_t i = 0; i < L; ++i) l.schedule.push_back(i);
  l.last_read.assign(L, ir::kNoOp);
  for (std::size_t i : l.schedule)
    if (q.computes(i))
      for (std::size_t t : Lifetimes::reads(q, i))
        if (t != ir::kGraphInput) l.last_read[t] = i;
  l.output = L == 0 ? ir::kGraphInput : q.tensor.back();
  return l;
}

Homes spill_homes(const nn::QuantizedModel& q, const Lifetimes& l,
                  const std::function<std::uint64_t(std::size_t)>& tensor_bytes) {
  const ir::Graph& g = q.graph;
  auto homed = [&](std::size_t i) {
    return q.computes(i) && g.ops[i].kind != ir::OpKind::Constant;
  };
  Homes h;
  h.offset.assign(g.ops.size(), 0);
  Arena arena;
  std::vector<std::size_t> taken;  // homed tensors in the order they were given homes
  for (std::size_t i : l.schedule) {
    if (!homed(i)) continue;
    h.offset[i] = arena.alloc(tensor_bytes(i));
    taken.push_back(i);
    for (std::size_t t : taken)
      if (l.last_read[t] == i || (t == i && l.last_read[t] == ir::kNoOp))
        arena.release(h.offset[t], tensor_bytes(t));
  }
  h.bytes = align(arena.high());
  return h;
}

}  // namespace tpu::compiler
