// ChipConfig: the resolved description of one chip. The only code that reads chip JSON is
// chip_config.cpp; modules receive these resolved values in their constructors.
//
// Units live in the names. Bandwidths in GB/s mean 1e9 bytes per second. Energies are resolved
// to picojoules per action at the chip's process node (see docs/energy-model.md).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "hw/common/dtype.h"
#include "hw/common/types.h"

namespace tpu {

enum class MemoryKind : std::uint8_t { Ddr3, Hbm, HostLink };
std::string_view name_of(MemoryKind k);

// "ideal": one aggregate bandwidth shared by processor sharing plus a fixed latency (the
// default, and every report before issue 18); "structured": channels, banks, rows, refresh and
// turnaround (hw/memory/dram_timing.h), or USB packets for kind host-link. docs/memory-model.md.
enum class MemoryModel : std::uint8_t { Ideal, Structured };
std::string_view name_of(MemoryModel m);

enum class MxuImpl : std::uint8_t { Tlm, Rtl };

struct MxuConfig {
  std::uint32_t count = 0;  // MXUs per TensorCore
  std::uint32_t rows = 0;   // K: weight rows = input vector length
  std::uint32_t cols = 0;   // N: output columns
  DType input_type = DType::Int8;
  DType acc_type = DType::Int32;
  std::uint32_t weight_fifo_tiles = 0;  // tiles the weight FIFO holds between memory and array
  std::uint32_t weight_buffers = 0;     // 1: no double buffering; 2: shift behind the multiply
  MxuImpl impl = MxuImpl::Tlm;
};

struct UnifiedBufferConfig {
  std::uint64_t bytes = 0;            // per TensorCore
  std::uint32_t bytes_per_cycle = 0;  // per port; each unit has its own port
};

struct AccumulatorConfig {
  std::uint32_t entries = 0;  // per TensorCore; an entry holds mxu.cols values of acc_type
};

struct VectorUnitConfig {
  std::uint32_t lanes = 0;
  std::uint32_t sublanes = 0;  // elements per cycle = lanes * sublanes
  std::uint32_t latency_cycles = 0;
  std::uint32_t bytes_per_cycle = 0;  // its unified-buffer (vector memory) port, reads + writes
};

// `off_chip_memory.timing`, read only with model "structured" (docs/memory-model.md). DRAM
// kinds use the bank and time fields, kind host-link the packet fields; the others stay 0.
struct OffChipTimingConfig {
  std::uint32_t banks = 0;             // per channel
  std::uint64_t row_bytes = 0;         // one bank's row (page) over the channel's width
  std::uint64_t interleave_bytes = 0;  // consecutive bytes on one channel before the next
  std::uint64_t burst_bytes = 0;       // one column access
  double t_rcd_ns = 0, t_rp_ns = 0, t_ras_ns = 0, t_rrd_ns = 0, t_faw_ns = 0;
  double write_to_read_ns = 0, read_to_write_ns = 0;  // data-bus gaps when the direction flips
  double t_refi_ns = 0, t_rfc_ns = 0;
  std::uint32_t packet_payload_bytes = 0;   // host-link: payload of one full packet
  std::uint32_t packet_overhead_bytes = 0;  // host-link: framing, header, CRC per packet
};

struct OffChipMemoryConfig {
  MemoryKind kind = MemoryKind::Ddr3;
  std::uint64_t bytes = 0;
  double bandwidth_gbps = 0;  // aggregate over all channels (for host-link: the host link's)
  double latency_ns = 0;
  std::uint32_t channels = 0;
  MemoryModel model = MemoryModel::Ideal;  // ideal unless the JSON asks: reports stay as they were
  OffChipTimingConfig timing;              // model structured only
};

struct HostLinkConfig {
  std::string kind;
  double bandwidth_gbps = 0;
  double latency_ns = 0;
  LinkService service = LinkService::Shared;  // how overlapping transfers share the link
};

// Per-action energies at the chip's node, resolved from 45 nm figures times the scale factor
// (on-chip actions) or taken as given (off-chip interfaces). Derivation: docs/energy-model.md.
struct EnergyConfig {
  double scale_from_45nm = 0;
  double mac_pj = 0;                 // one multiply-accumulate of mxu.input_type
  double acc_pj_per_byte = 0;        // accumulator SRAM, per byte read or written
  double ub_pj_per_byte = 0;         // unified buffer SRAM, per byte read or written
  double vector_op_pj = 0;           // one element operation in the vector unit
  double instruction_pj = 0;         // fetch + decode + issue of one instruction
  double off_chip_pj_per_byte = 0;   // off-chip memory interface, per byte moved
  double host_link_pj_per_byte = 0;  // host link PHY, per byte moved
  double idle_w = 0;                 // static power of the whole chip
};

struct ChipConfig {
  std::string file;  // where it was loaded from ("" if built in code)
  std::string name;
  double clock_mhz = 0;
  std::uint32_t tensor_cores = 0;
  MxuConfig mxu;
  UnifiedBufferConfig unified_buffer;
  AccumulatorConfig accumulators;
  VectorUnitConfig vector_unit;
  OffChipMemoryConfig off_chip_memory;
  HostLinkConfig host_link;
  EnergyConfig energy;
  std::map<std::string, std::string> sources;  // JSON pointer -> publication

  // Derived figures (DESIGN: 2 ops per MAC).
  [[nodiscard]] double clock_hz() const { return clock_mhz * 1e6; }
  [[nodiscard]] std::uint64_t macs_per_cycle_per_mxu() const {
    return std::uint64_t{mxu.rows} * mxu.cols;
  }
  [[nodiscard]] std::uint64_t peak_macs_per_cycle() const {
    return std::uint64_t{tensor_cores} * mxu.count * macs_per_cycle_per_mxu();
  }
  [[nodiscard]] double peak_ops_per_s() const {
    return 2.0 * static_cast<double>(peak_macs_per_cycle()) * clock_hz();
  }
  [[nodiscard]] double off_chip_bytes_per_s() const { return off_chip_memory.bandwidth_gbps * 1e9; }
  [[nodiscard]] double host_link_bytes_per_s() const { return host_link.bandwidth_gbps * 1e9; }
  // Roofline ridge: MACs per byte of off-chip traffic at which compute and bandwidth balance.
  [[nodiscard]] double ridge_macs_per_byte() const {
    return static_cast<double>(peak_macs_per_cycle()) * clock_hz() / off_chip_bytes_per_s();
  }
  [[nodiscard]] std::uint64_t accumulator_bytes_per_core() const {
    return std::uint64_t{accumulators.entries} * mxu.cols * size_of(mxu.acc_type);
  }
  [[nodiscard]] std::uint64_t on_chip_bytes() const {
    return std::uint64_t{tensor_cores} * (unified_buffer.bytes + accumulator_bytes_per_core());
  }
  [[nodiscard]] std::uint64_t weight_tile_bytes() const {
    return macs_per_cycle_per_mxu() * size_of(mxu.input_type);
  }
};

// Loads and validates a chip config file. Throws ConfigError naming the file, the JSON path, the
// value and what is allowed. Objects may say "include": "path.json" (relative to the including
// file) to start from another file's object; keys beside it override.
ChipConfig load_chip_config(const std::string& path);

// Validates an already-merged JSON document; `origin` names it in messages.
ChipConfig parse_chip_config(const nlohmann::json& doc, const std::string& origin);

// Loads a JSON file, resolving "include" keys, without validating it as a chip (used by sweeps,
// which patch the merged document before parsing it).
nlohmann::json load_json_with_includes(const std::string& path);

// The resolved configuration with its derived figures, as `tpusim info --json` prints it.
nlohmann::ordered_json to_json(const ChipConfig& cfg);
// The `chip` object of reports: name, clock_hz, peak_ops_per_s, peak_macs_per_cycle, ...
nlohmann::ordered_json chip_summary_json(const ChipConfig& cfg);

}  // namespace tpu
