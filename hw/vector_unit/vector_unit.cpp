#include "hw/vector_unit/vector_unit.h"

#include "hw/common/error.h"
#include "hw/unit/program_error.h"

namespace tpu {

VectorUnit::VectorUnit(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                       const CoreStorage& storage, LayerCounters& counters, std::string core_name,
                       SimOptions options)
    : sc_core::sc_module(name),
      queue("queue", kUnitQueueDepth),
      cfg_(cfg),
      clock_(clock),
      storage_(storage),
      counters_(counters),
      core_name_(std::move(core_name)),
      ops_(cfg, options) {
  SC_HAS_PROCESS(VectorUnit);
  SC_THREAD(run);
}

void VectorUnit::run() {
  const UbView ub{storage_.ub, storage_.ub_bytes};
  const AccView acc{storage_.acc, storage_.acc_entries, storage_.acc_words_per_entry,
                    cfg_.mxu.acc_type};
  while (true) {
    std::shared_ptr<InFlight> f = queue.read();
    f->wait_deps(clock_);
    f->started_at = clock_.now();
    VectorCost cost;
    try {
      std::visit(
          [&](const auto& i) {
            using T = std::decay_t<decltype(i)>;
            if constexpr (std::is_same_v<T, isa::Activate>) {
              ops_.activate(i, acc, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Pool>) {
              ops_.pool(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Eltwise>) {
              ops_.eltwise(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Softmax>) {
              ops_.softmax(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Copy>) {
              ops_.copy(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Map>) {
              ops_.map(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Xent>) {
              ops_.xent(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Update>) {
              ops_.update(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::Reduce>) {
              ops_.reduce(i, ub);
              cost = ops_.cost(i);
            } else if constexpr (std::is_same_v<T, isa::PoolGrad>) {
              ops_.pool_grad(i, f->window, ub);
              cost = ops_.cost(i, f->window);
            } else {
              throw ProgramError("not a vector-unit instruction");
            }
          },
          f->inst);
    } catch (const InputError& e) {
      report_program_error(core_name_, *f, e.what());
    }
    Counters& c = counters_.at(f->layer);
    c.vector_ops += cost.element_ops;
    c.ub_bytes_read += cost.ub_bytes_read;
    c.ub_bytes_written += cost.ub_bytes_written;
    c.acc_bytes_read += cost.acc_bytes_read;
    clock_.wait_for(Cycles(cost.cycles));
    f->complete_at(clock_, clock_.now());
  }
}

}  // namespace tpu
