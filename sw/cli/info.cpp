#include "sw/cli/info.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tpu::cli {
namespace {

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt::format("{:.{}f} {}", b, u == 0 ? 0 : 1, units[u]);
}

// 340e12 -> "340.0 T", 1.1e15 -> "1.11 P": three significant digits, a decimal prefix.
std::string decimal_text(double v) {
  const char* prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int p = 0;
  while (v >= 1000 && p < 6) v /= 1000, ++p;
  return fmt::format("{:.{}f} {}", v, v >= 100 ? 1 : 2, prefixes[p]);
}

std::string joined(const std::vector<std::uint32_t>& v, const char* sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{}", i ? sep : "", v[i]);
  return s;
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
  // Only a structured model adds a line: the ideal chips print as they always have.
  if (o.model == MemoryModel::Structured)
    s += o.kind == MemoryKind::HostLink
             ? fmt::format(
                   "off-chip model  structured: {} B packets + {} B framing each "
                   "(docs/memory-model.md)\n",
                   o.timing.packet_payload_bytes, o.timing.packet_overhead_bytes)
             : fmt::format(
                   "off-chip model  structured: {} banks/channel, {} B rows, {} B "
                   "interleave, tRFC {:g} ns every {:g} ns (docs/memory-model.md)\n",
                   o.timing.banks, o.timing.row_bytes, o.timing.interleave_bytes, o.timing.t_rfc_ns,
                   o.timing.t_refi_ns);
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

std::string describe(const SystemConfig& s) {
  const auto& ici = s.ici;
  const char* ops = is_float(s.chip.mxu.input_type) ? "FLOPS" : "OPS";
  std::string wraps;
  for (std::size_t d = 0; d < ici.wraparound.size(); ++d)
    wraps += fmt::format("{}{}", d ? ", " : "", ici.wraparound[d] ? "yes" : "no");
  std::string t;
  t += fmt::format("system          {}  ({})\n", s.name, s.file);
  t += fmt::format("chips           {} = {} of {}, {} TensorCores\n", s.chips(),
                   joined(ici.dims, " x "), s.chip.name, s.tensor_cores());
  t += fmt::format("hosts           {}, each driving up to {} chip(s)\n", s.hosts(),
                   s.chips_per_host);
  t += fmt::format("topology        {}D, dims {}, wraparound per axis: {}\n", ici.dims.size(),
                   joined(ici.dims, " x "), wraps);
  t += fmt::format(
      "ici             {} links per chip ({} in use), {} links in all, {:g} GB/s per "
      "link per direction, {:g} ns per hop\n",
      ici.links_per_chip, s.links_in_use(), s.links(), ici.bandwidth_gbps, ici.latency_ns);
  t += fmt::format("peak            {} x {}{} = {}{}\n", s.chips(),
                   decimal_text(s.chip.peak_ops_per_s()), ops, decimal_text(s.peak_ops_per_s()),
                   ops);
  t += fmt::format(
      "all-reduce      {}B/s (sum over chips of one-way injection: 2 x {} links x "
      "{:g} GB/s)\n",
      decimal_text(s.all_reduce_bytes_per_s()), s.links(), ici.bandwidth_gbps);
  t += fmt::format("bisection       {}B/s (one way, the cheapest cut that halves an axis)\n",
                   decimal_text(s.bisection_bytes_per_s()));
  t += "\n";
  t += describe(s.chip);
  return t;
}

}  // namespace tpu::cli
