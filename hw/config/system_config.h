// SystemConfig: chips joined by ICI links in a torus or mesh — a board, a slice or a pod. The
// only code that reads system JSON is system_config.cpp; it follows the chip loader's rules
// (docs/config.md) and loads the chip config the system names. Keys, rules and the derived
// figures: docs/systems.md.
//
// Units live in the names. Bandwidths in GB/s mean 1e9 bytes per second.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hw/config/chip_config.h"

namespace tpu {

struct IciConfig {
  double bandwidth_gbps = 0;         // per link, per direction (GB/s)
  double latency_ns = 0;             // per hop
  std::uint32_t links_per_chip = 0;  // ICI ports of a chip; the topology may leave some unused
  std::vector<std::uint32_t> dims;   // torus/mesh dimensions; their product is the chip count
  std::vector<bool> wraparound;      // per dimension: whether the ring closes (a torus axis)
};

struct SystemConfig {
  std::string file;  // where it was loaded from (a chip's file for system_of_chip)
  std::string name;
  ChipConfig chip;  // the included chip config, resolved as load_chip_config does
  // Chips one host drives over their host links; hosts() = ceil(chips() / chips_per_host), and
  // each host drives min(chips(), chips_per_host) chips (the loader refuses a remainder).
  std::uint32_t chips_per_host = 0;
  IciConfig ici;
  std::map<std::string, std::string> sources;  // JSON pointer -> publication

  [[nodiscard]] std::uint32_t chips() const;         // product of ici.dims
  [[nodiscard]] std::uint32_t tensor_cores() const;  // chips() * chip.tensor_cores
  [[nodiscard]] std::uint32_t hosts() const;
  [[nodiscard]] double peak_ops_per_s() const;  // chips() * the chip's
  [[nodiscard]] double link_bytes_per_s() const { return ici.bandwidth_gbps * 1e9; }

  // ICI links the topology connects at the chip with the most neighbours: per axis 0 for extent
  // 1, 1 for extent 2 without wraparound, 2 otherwise (two links to the same neighbour for a
  // closed ring of two). The loader refuses links_per_chip below it.
  [[nodiscard]] std::uint32_t links_in_use() const;
  // Links the topology connects, counted once each (a ring of two with wraparound has two).
  [[nodiscard]] std::uint64_t links() const;
  // Sum over chips of one-way injection bandwidth (bytes/s): Google's "all-reduce bandwidth".
  // Each chip injects on the links the topology connects to it: 2 * links() * link_bytes_per_s().
  [[nodiscard]] double all_reduce_bytes_per_s() const;
  // One-way bandwidth across the cheapest cut that halves one axis: over the axes of extent >= 2,
  // the fewest of (chips() / extent) * (2 with wraparound, else 1) links, times the link's
  // bandwidth; 0 for a single chip.
  [[nodiscard]] double bisection_bytes_per_s() const;

  // The chip at torus coordinates, and its neighbour along a dimension (+1 or -1), or nothing
  // where the axis does not wrap and the chip is at its end. Chip ids are row-major over dims
  // (the last dimension varies fastest). Throws std::out_of_range for a chip, dimension or step
  // outside the system (a caller's bug, not an input error).
  [[nodiscard]] std::vector<std::uint32_t> coordinates(std::uint32_t chip) const;
  [[nodiscard]] std::uint32_t chip_at(const std::vector<std::uint32_t>& coordinates) const;
  [[nodiscard]] std::optional<std::uint32_t> neighbour(std::uint32_t chip, std::size_t dim,
                                                       int step) const;
};

// Loads and validates a system config file and the chip config it names. Throws ConfigError
// naming the file, the JSON pointer, the value and what is allowed. "include" works as in chip
// configs: a slice is a pod config included with other dims.
SystemConfig load_system_config(const std::string& path);

// A system config built in memory, its includes already resolved (a sweep's design point): every
// message names `origin`, and /chip is relative to `origin`'s directory unless absolute.
SystemConfig parse_system_config(const nlohmann::json& doc, const std::string& origin);

// A chip alone as a one-chip system: dims {1}, no wraparound, no links, one host.
SystemConfig system_of_chip(const ChipConfig& chip);

// The resolved configuration with its derived figures, as `tpusim info --system --json` prints
// it: the system's keys, a `system` object (system_summary_json) and the chip as
// `tpusim info --chip --json` prints it under `chip`.
nlohmann::ordered_json to_json(const SystemConfig& cfg);
// The `system` object of reports: name, chips, tensor_cores, hosts, peak_ops_per_s,
// all_reduce_bytes_per_s, bisection_bytes_per_s, ...
nlohmann::ordered_json system_summary_json(const SystemConfig& cfg);

}  // namespace tpu
