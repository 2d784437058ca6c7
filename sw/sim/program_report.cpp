#include "sw/sim/program_report.h"

#include "hw/isa/assembler.h"
#include "sw/sim/compiled.h"

namespace tpu::sim {

nlohmann::ordered_json program_report(const SystemConfig& sys, const RunOptions& opt) {
  using nlohmann::ordered_json;
  const CompiledWorkload c = compile_workload(sys, opt, InputsFor::CalibrationOnly);
  const compiler::Program& p = c.program;
  ordered_json r;
  r["schema"] = "tpusim.program/1";
  r["model"] = {{"name", c.model.name}, {"file", c.model_file}, {"weights", c.weights_source}};
  r["chip"] = {{"name", sys.chip.name}, {"file", sys.chip.file}};
  if (sys.chips() > 1) r["system"] = {{"name", sys.name}, {"file", sys.file}};
  r["images"] = c.images_per_chip;
  r["batch"] = opt.batch / sys.chips();
  r["micro_batch_per_core"] = p.micro_batch;
  r["instructions"] = p.instruction_count();
  r["weights_in_unified_buffer"] = p.weights_in_ub;
  r["unified_buffer_bytes_used"] = p.ub_bytes_used;
  r["activations_off_chip"] = p.activations_off_chip;
  r["off_chip_activation_bytes"] = p.off_chip_activation_bytes;
  std::uint64_t image_bytes = 0;
  for (const auto& s : p.memory_image) image_bytes += s.bytes.size();
  r["memory_image_bytes"] = image_bytes;
  ordered_json layers = ordered_json::array();
  for (std::size_t tag = 0; tag < p.layers.size(); ++tag)
    layers.push_back({{"tag", tag},
                      {"name", p.layers[tag].name},
                      {"type", p.layers[tag].type},
                      {"macs_per_image", p.layers[tag].macs_per_image}});
  r["layers"] = std::move(layers);
  ordered_json cores = ordered_json::array();
  for (std::size_t i = 0; i < p.cores.size(); ++i)
    cores.push_back({{"core", i},
                     {"instructions", p.cores[i].size()},
                     {"assembly", isa::disassemble(p.cores[i])}});
  r["cores"] = std::move(cores);
  return r;
}

}  // namespace tpu::sim
