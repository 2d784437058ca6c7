#include "sw/cli/info.h"

#include <fmt/format.h>

namespace tpu::cli {
namespace {

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 1, units[u]);
}

}  // namespace

std::string describe(const ChipConfig& c) {
  const bool flops = is_float(c.mxu.input_type);
  const auto& m = c.mxu;
  const auto& o = c.off_chip_memory;
  const auto& e = c.energy;
  std::string s;
  s += fmt::format("chip            {}  ({})\n", c.name, c.file);
  s += fmt::format("clock           {} MHz\n", c.clock_mhz);
  s += fmt::format("cores           {} TensorCore(s) x {} MXU(s) of {} x {}, {} -> {}\n",
                   c.tensor_cores, m.count, m.rows, m.cols, name_of(m.input_type),
                   name_of(m.acc_type));
  s += fmt::format("weights         FIFO of {} tiles ({} each), {} buffer(s) in the array\n",
                   m.weight_fifo_tiles, bytes_text(static_cast<double>(c.weight_tile_bytes())),
                   m.weight_buffers);
  s += fmt::format("peak            {} MAC/cycle = {:.2f} {} (2 ops per MAC)\n",
                   c.peak_macs_per_cycle(), c.peak_ops_per_s() / 1e12, flops ? "TFLOPS" : "TOPS");
  s += fmt::format("unified buffer  {} per core, {} B/cycle per port\n",
                   bytes_text(static_cast<double>(c.unified_buffer.bytes)),
                   c.unified_buffer.bytes_per_cycle);
  s += fmt::format("accumulators    {} entries x {} = {} per core\n", c.accumulators.entries,
                   name_of(m.acc_type),
                   bytes_text(static_cast<double>(c.accumulator_bytes_per_core())));
  s += fmt::format("on-chip memory  {} in total\n",
                   bytes_text(static_cast<double>(c.on_chip_bytes())));
  s += fmt::format("vector unit     {} lanes x {} sublanes, {} cycles latency\n",
                   c.vector_unit.lanes, c.vector_unit.sublanes, c.vector_unit.latency_cycles);
  s += fmt::format("off-chip        {} {}, {:g} GB/s, {} channel(s), {:g} ns\n", name_of(o.kind),
                   bytes_text(static_cast<double>(o.bytes)), o.bandwidth_gbps, o.channels,
                   o.latency_ns);
  s += fmt::format("host link       {}, {:g} GB/s, {:g} ns\n", c.host_link.kind,
                   c.host_link.bandwidth_gbps, c.host_link.latency_ns);
  s += fmt::format("ridge point     {:.0f} MAC per off-chip byte\n", c.ridge_macs_per_byte());
  s += fmt::format(
      "energy (pJ)     MAC {:.4g}, acc {:.4g}/B, UB {:.4g}/B, vector op {:.4g}, instruction "
      "{:.4g}, off-chip {:.4g}/B, host link {:.4g}/B (x{:g} from 45 nm on chip)\n",
      e.mac_pj, e.acc_pj_per_byte, e.ub_pj_per_byte, e.vector_op_pj, e.instruction_pj,
      e.off_chip_pj_per_byte, e.host_link_pj_per_byte, e.scale_from_45nm);
  s += fmt::format("idle power      {:g} W\n", e.idle_w);
  return s;
}

}  // namespace tpu::cli
