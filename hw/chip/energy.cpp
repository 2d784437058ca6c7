#include "hw/chip/energy.h"

namespace tpu {

constexpr double kPico = 1e-12;

EnergyBreakdown energy_of(const EnergyConfig& e, const Counters& c, double seconds) {
  auto d = [](std::uint64_t n) { return static_cast<double>(n); };
  EnergyBreakdown b;
  b.mxu_j = d(c.macs) * e.mac_pj * kPico;
  b.accumulators_j = d(c.acc_bytes_read + c.acc_bytes_written) * e.acc_pj_per_byte * kPico;
  b.unified_buffer_j = d(c.ub_bytes_read + c.ub_bytes_written) * e.ub_pj_per_byte * kPico;
  b.vector_unit_j = d(c.vector_ops) * e.vector_op_pj * kPico;
  b.sequencer_j = d(c.instructions) * e.instruction_pj * kPico;
  b.off_chip_j =
      d(c.off_chip_bytes_read + c.off_chip_bytes_written) * e.off_chip_pj_per_byte * kPico;
  b.host_link_j = d(c.host_bytes_in + c.host_bytes_out) * e.host_link_pj_per_byte * kPico;
  b.static_j = e.idle_w * seconds;
  return b;
}

nlohmann::ordered_json EnergyBreakdown::to_json() const {
  return {{"mxu_j", mxu_j},
          {"accumulators_j", accumulators_j},
          {"unified_buffer_j", unified_buffer_j},
          {"vector_unit_j", vector_unit_j},
          {"sequencer_j", sequencer_j},
          {"off_chip_j", off_chip_j},
          {"host_link_j", host_link_j},
          {"static_j", static_j}};
}

}  // namespace tpu
