#include "sw/sim/compiled.h"

#include <fmt/format.h>

#include <utility>

#include "hw/common/error.h"
#include "sw/compiler/compiler.h"
#include "sw/compiler/rewrite.h"
#include "sw/import/import.h"
#include "sw/sim/host_memory.h"

namespace tpu::sim {

CompiledWorkload compile_workload(const SystemConfig& sys, const RunOptions& opt,
                                  InputsFor inputs_for) {
  const ChipConfig& cfg = sys.chip;
  const std::uint32_t chips = sys.chips();
  if (opt.images == 0) throw InputError("--images must be >= 1");
  // Every chip runs the same program on an equal share, as TPUStrategy's replicas do.
  for (const auto& [flag, value] :
       {std::pair<const char*, std::uint64_t>{"--images", opt.images}, {"--batch", opt.batch}})
    if (value % chips != 0)
      throw InputError(fmt::format(
          "{} {} does not split evenly over the {} chips of {} ({}): every chip runs the same "
          "program on an equal share, so give a multiple of {}",
          flag, value, chips, sys.name, sys.file, chips));
  CompiledWorkload c;
  c.images_per_chip = opt.images / chips;
  c.model_file = opt.topology.empty() ? opt.model : opt.topology;
  // Dropout and its kin are the identity at inference (docs/models.md).
  importers::Imported imported =
      opt.topology.empty() ? importers::import_model(opt.model)
                           : importers::Imported{importers::load_topology(opt.topology), {}};
  c.model = compiler::remove_identities(std::move(imported.graph));
  check_host_memory(cfg, c.model, opt.images, chips);
  c.weights = load_weights(c.model, opt, c.weights_source, imported.parameters);
  if (inputs_for == InputsFor::Run) {
    c.inputs = load_inputs(c.model, opt);
  } else {
    RunOptions one = opt;
    one.images = 1;
    c.inputs = load_inputs(c.model, one);
  }
  const std::size_t n_cal = c.inputs.calibration.size() / c.model.input.size();
  c.quantized = compiler::prepare(c.model, c.weights, cfg.mxu.input_type, cfg.mxu.rows,
                                  c.inputs.calibration.data(), n_cal);
  c.program = compiler::compile(c.quantized, c.model, cfg,
                                compiler::Options{c.images_per_chip, opt.batch / chips});
  return c;
}

}  // namespace tpu::sim
