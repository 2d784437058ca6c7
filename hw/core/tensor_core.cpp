#include "hw/core/tensor_core.h"

#include <fmt/format.h>

#include "hw/mxu/mxu_factory.h"

namespace tpu {

CoreStorage TensorCore::storage_of(UnifiedBuffer& ub, Accumulators& acc) {
  CoreStorage s;
  s.ub = ub.data();
  s.ub_bytes = ub.bytes();
  s.acc = acc.words();
  s.acc_entries = acc.entries();
  s.acc_words_per_entry = acc.words_per_entry();
  return s;
}

TensorCore::TensorCore(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                       std::uint32_t id, ChipSync& sync, SimOptions options)
    : sc_core::sc_module(name),
      id_(id),
      ub("ub", cfg, clock, options),
      acc("acc", cfg, clock, options),
      dma("dma", cfg, clock, storage_of(ub, acc), counters_, fmt::format("core {}", id), options),
      ici("ici", cfg, clock, storage_of(ub, acc), counters_, fmt::format("core {}", id), options,
          kIciQueueDepth),
      vector_unit("vector_unit", cfg, clock, storage_of(ub, acc), counters_,
                  fmt::format("core {}", id), options) {
  UnitQueues q;
  q.dma = &dma.queue;
  q.ici = &ici.queue;
  q.vector = &vector_unit.queue;
  for (std::uint32_t m = 0; m < cfg.mxu.count; ++m) {
    mxus.push_back(make_mxu(fmt::format("mxu{}", m), cfg, clock, storage_of(ub, acc), counters_,
                            fmt::format("core {}", id), options));
    q.weights.push_back(&mxus.back()->weight_queue);
    q.matmul.push_back(&mxus.back()->matmul_queue);
  }
  ici.set_engine_sync(&sync);
  sequencer = std::make_unique<Sequencer>("sequencer", cfg, clock, storage_of(ub, acc), q, sync,
                                          counters_, fmt::format("core {}", id));
}

void TensorCore::finish(Cycle end) {
  for (auto& m : mxus) m->finish(end);
  sequencer->finish(end);
}

}  // namespace tpu
