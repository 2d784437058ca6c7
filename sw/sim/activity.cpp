#include "sw/sim/activity.h"

#include "hw/chip/energy.h"

namespace tpu::sim {

using nlohmann::ordered_json;

ChipConfig system_as_one_chip(const SystemConfig& sys) {
  ChipConfig all = sys.chip;
  if (sys.chips() == 1) return all;
  all.name = sys.name;
  all.tensor_cores = sys.tensor_cores();
  all.energy.idle_w = sys.chip.energy.idle_w * sys.chips();
  return all;
}

ordered_json buckets_json(const MxuBuckets& b) {
  return {{"active", b.active},
          {"weight_stall", b.weight_stall},
          {"weight_shift", b.weight_shift},
          {"data_hazard", b.data_hazard},
          {"input_stall", b.input_stall},
          {"idle", b.idle}};
}

ordered_json bytes_json(const Counters& c) {
  return {{"host_link", c.host_bytes_in + c.host_bytes_out},
          {"host_link_in", c.host_bytes_in},
          {"host_link_out", c.host_bytes_out},
          {"off_chip", c.off_chip_bytes_read + c.off_chip_bytes_written},
          {"off_chip_read", c.off_chip_bytes_read},
          {"off_chip_write", c.off_chip_bytes_written},
          {"off_chip_weights", c.weight_bytes_off_chip},
          {"unified_buffer_read", c.ub_bytes_read},
          {"unified_buffer_write", c.ub_bytes_written},
          {"mxu_input", c.mxu_input_bytes},
          {"weights", c.weight_bytes},
          {"accumulators_read", c.acc_bytes_read},
          {"accumulators_write", c.acc_bytes_written}};
}

ordered_json activity_json(const ChipConfig& cfg, const Counters& c, double cycles,
                           double span_cycles, std::uint64_t images, std::uint64_t network_macs) {
  const double seconds = cycles / cfg.clock_hz();
  const double span_seconds = span_cycles / cfg.clock_hz();
  const double macs = static_cast<double>(network_macs);
  const double ops = 2.0 * macs;
  const double peak_macs = static_cast<double>(cfg.peak_macs_per_cycle());
  const EnergyBreakdown e = energy_of(cfg.energy, c, seconds);
  const std::uint64_t off_chip = c.off_chip_bytes_read + c.off_chip_bytes_written;
  auto per = [](double num, double den) { return den > 0 ? num / den : 0.0; };
  ordered_json j;
  j["seconds"] = seconds;
  j["span_cycles"] = span_cycles;
  j["images_per_s"] = per(static_cast<double>(images), span_seconds);
  j["macs"] = network_macs;
  j["ops"] = ops;
  j["ops_per_s"] = per(ops, span_seconds);
  j["peak_ops_per_s"] = cfg.peak_ops_per_s();
  j["utilization"] = per(macs, peak_macs * span_cycles);
  j["energy_j"] = e.total_j();
  j["energy_per_image_j"] = e.total_j() / static_cast<double>(images);
  j["avg_power_w"] = per(e.total_j(), seconds);
  j["ops_per_j"] = per(ops, e.total_j());
  j["bytes_off_chip"] = off_chip;
  j["bytes_host_link"] = c.host_bytes_in + c.host_bytes_out;
  j["bytes"] = bytes_json(c);
  // Operational intensity (Williams et al. 2009): work per byte of the slowest memory.
  j["macs_per_off_chip_byte"] = per(macs, static_cast<double>(off_chip));
  j["instructions"] = c.instructions;
  j["vector_ops"] = c.vector_ops;
  j["weight_tiles"] = c.weight_tiles;
  j["mxu_cycles"] = buckets_json(c.mxu);
  j["energy"] = e.to_json();
  return j;
}

Counters counts_since(const Counters& total, const Counters& before) {
  Counters c;
  c.instructions = total.instructions - before.instructions;
  c.macs = total.macs - before.macs;
  c.weight_tiles = total.weight_tiles - before.weight_tiles;
  c.weight_bytes = total.weight_bytes - before.weight_bytes;
  c.weight_bytes_off_chip = total.weight_bytes_off_chip - before.weight_bytes_off_chip;
  c.mxu_input_bytes = total.mxu_input_bytes - before.mxu_input_bytes;
  c.ub_bytes_read = total.ub_bytes_read - before.ub_bytes_read;
  c.ub_bytes_written = total.ub_bytes_written - before.ub_bytes_written;
  c.acc_bytes_read = total.acc_bytes_read - before.acc_bytes_read;
  c.acc_bytes_written = total.acc_bytes_written - before.acc_bytes_written;
  c.vector_ops = total.vector_ops - before.vector_ops;
  c.off_chip_bytes_read = total.off_chip_bytes_read - before.off_chip_bytes_read;
  c.off_chip_bytes_written = total.off_chip_bytes_written - before.off_chip_bytes_written;
  c.host_bytes_in = total.host_bytes_in - before.host_bytes_in;
  c.host_bytes_out = total.host_bytes_out - before.host_bytes_out;
  c.ici_bytes_out = total.ici_bytes_out - before.ici_bytes_out;
  return c;
}

ordered_json load_json(const ChipConfig& cfg, const Counters& load, std::uint64_t loaded_at) {
  const double seconds = static_cast<double>(loaded_at) / cfg.clock_hz();
  const EnergyBreakdown e = energy_of(cfg.energy, load, seconds);
  ordered_json j;
  j["cycles"] = loaded_at;
  j["seconds"] = seconds;
  j["bytes_host_link"] = load.host_bytes_in + load.host_bytes_out;
  j["bytes_off_chip"] = load.off_chip_bytes_read + load.off_chip_bytes_written;
  j["energy_j"] = e.total_j();
  return j;
}

ordered_json steady_state_json(const ChipConfig& cfg, const Counters& c, std::uint64_t cycles,
                               std::uint64_t batches, std::uint64_t images,
                               std::uint64_t network_macs) {
  const auto cyc = static_cast<double>(cycles);
  const double seconds = cyc / cfg.clock_hz();
  const double macs = static_cast<double>(network_macs);
  const double peak_macs = static_cast<double>(cfg.peak_macs_per_cycle());
  const EnergyBreakdown e = energy_of(cfg.energy, c, seconds);
  auto per = [](double num, double den) { return den > 0 ? num / den : 0.0; };
  const double n_batches = static_cast<double>(batches);
  ordered_json j;
  j["cycles"] = cycles;
  j["seconds"] = seconds;
  j["batches"] = batches;
  j["images"] = images;
  j["cycles_per_batch"] = per(cyc, n_batches);
  j["seconds_per_batch"] = per(seconds, n_batches);
  j["images_per_s"] = per(static_cast<double>(images), seconds);
  j["macs"] = network_macs;
  j["ops"] = 2.0 * macs;
  j["ops_per_s"] = per(2.0 * macs, seconds);
  j["utilization"] = per(macs, peak_macs * cyc);
  j["energy_j"] = e.total_j();
  j["energy_per_image_j"] = per(e.total_j(), static_cast<double>(images));
  j["avg_power_w"] = per(e.total_j(), seconds);
  j["ops_per_j"] = per(2.0 * macs, e.total_j());
  j["bytes_host_link"] = c.host_bytes_in + c.host_bytes_out;
  j["bytes_off_chip"] = c.off_chip_bytes_read + c.off_chip_bytes_written;
  j["bytes_off_chip_weights"] = c.weight_bytes_off_chip;
  return j;
}

}  // namespace tpu::sim
