#include "hw/config/system_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "hw/common/error.h"
#include "hw/config/json_reader.h"

namespace tpu {
using nlohmann::json;

namespace {

using config_reader::Context;
using config_reader::ObjectReader;

// Limits, each with its reason (docs/systems.md).
// Torus and mesh dimensions: TPU pods are 2D (v2, v3) and 3D (v4) tori.
constexpr std::size_t kMaxDims = 3;
// Chips: 16 times the largest pod modelled (v4: 4096); the fabric keeps state per chip and link.
constexpr std::uint64_t kMaxChips = 65536;
// ICI ports per chip: TPU v2/v3 have 4, v4 has 6; 64 leaves room for any what-if.
constexpr std::uint32_t kMaxLinksPerChip = 64;

// Links one line of chips along an axis holds, counted once each: a closed ring of `extent`
// chips has `extent` (a ring of two: two links to the same neighbour), an open one extent - 1.
std::uint64_t links_per_line(std::uint32_t extent, bool wraps) {
  if (extent < 2) return 0;
  return wraps ? extent : extent - 1;
}

// Links a chip needs on one axis: none for extent 1, one for an open pair, two otherwise.
std::uint32_t links_on_axis(std::uint32_t extent, bool wraps) {
  if (extent < 2) return 0;
  return extent == 2 && !wraps ? 1 : 2;
}

std::string list_text(const IciConfig& ici) {
  std::string dims, wraps;
  for (std::size_t d = 0; d < ici.dims.size(); ++d) {
    dims += fmt::format("{}{}", d ? ", " : "", ici.dims[d]);
    wraps += fmt::format("{}{}", d ? ", " : "", ici.wraparound[d] ? "true" : "false");
  }
  return fmt::format("dims [{}], wraparound [{}]", dims, wraps);
}

// " (set in <file>)" when the value at `ptr` comes from another file than the one an error at
// `blamed` names: a slice's dims can make its pod's links_per_chip too few.
std::string set_in(const Context& ctx, const std::string& ptr, const std::string& blamed) {
  const std::string file = ctx.file_of(ptr);
  return file == ctx.file_of(blamed) ? "" : fmt::format(" (set in {})", file);
}

void read_topology(ObjectReader& ici_reader, IciConfig& ici, const Context& ctx) {
  ObjectReader t = ici_reader.object("topology");
  const std::string dims_rule =
      fmt::format("must be an array of 1 to {} integers, each in [1, {}]: the torus or mesh",
                  kMaxDims, kMaxChips);
  const json& dims = t.need("dims", dims_rule);
  if (!dims.is_array() || dims.empty() || dims.size() > kMaxDims)
    ctx.bad(t.at("dims"), dims, dims_rule);
  std::uint64_t chips = 1;
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const json& v = dims[d];
    const std::string at = fmt::format("{}/{}", t.at("dims"), d);
    const std::string rule = fmt::format("must be an integer in [1, {}]", kMaxChips);
    const bool in_range =
        v.is_number_unsigned() ? v.get<std::uint64_t>() >= 1 && v.get<std::uint64_t>() <= kMaxChips
        : v.is_number_integer()
            ? v.get<std::int64_t>() >= 1 && v.get<std::int64_t>() <= std::int64_t{kMaxChips}
            : false;
    if (!in_range) ctx.bad(at, v, rule);
    ici.dims.push_back(static_cast<std::uint32_t>(v.get<std::uint64_t>()));
    chips *= ici.dims.back();
  }
  if (chips > kMaxChips)
    ctx.bad(t.at("dims"), dims,
            fmt::format("the product, {} chips, must be at most {}", chips, kMaxChips));

  const std::string wrap_rule = fmt::format("must be an array of {} booleans, one per entry of {}",
                                            dims.size(), t.at("dims"));
  const json& wraps = t.need("wraparound", wrap_rule);
  if (!wraps.is_array() || wraps.size() != dims.size())
    ctx.bad(t.at("wraparound"), wraps, wrap_rule);
  for (std::size_t d = 0; d < wraps.size(); ++d) {
    const std::string at = fmt::format("{}/{}", t.at("wraparound"), d);
    if (!wraps[d].is_boolean()) ctx.bad(at, wraps[d], "must be true or false");
    ici.wraparound.push_back(wraps[d].get<bool>());
    if (ici.wraparound.back() && ici.dims[d] == 1)
      ctx.bad(at, wraps[d],
              fmt::format("axis {} has extent 1: a ring of one chip has nothing to close", d));
  }
  // An include may change the wraparound alone (the same torus, opened), but a file that sets
  // dims must set the wraparound that goes with them: the included file's describes other dims.
  // (The last file to write into /ici/topology owns the object: a wraparound from it goes with
  // whichever dims.)
  const std::string dims_file = ctx.file_of(t.at("dims"));
  const std::string wrap_file = ctx.file_of(t.at("wraparound"));
  if (wrap_file != dims_file && wrap_file != ctx.file_of(t.pointer()))
    throw ConfigError(fmt::format(
        "{}: {} is missing (this file sets {}, and the wraparound of {} describes other dims: "
        "give both)",
        dims_file, t.at("wraparound"), t.at("dims"), wrap_file));
  t.finish();
}

SystemConfig parse_system_config(const json& doc, const Context& ctx) {
  SystemConfig s;
  s.file = ctx.top;
  ObjectReader top(doc, "", ctx);
  s.name = top.string("name");
  {
    const std::string chip_path = top.string("chip");
    const std::string chip_file = ctx.file_of("/chip");
    const std::string chip =
        config_reader::referenced_file(chip_file, "/chip", json(chip_path)).string();
    try {
      s.chip = load_chip_config(chip);
    } catch (const ConfigError& e) {
      // The chip loader's message names the chip file to edit; the system that led there too.
      throw ConfigError(fmt::format("{}; the chip config {} names at /chip", e.what(), chip_file));
    }
  }
  {
    ObjectReader i = top.object("ici");
    s.ici.bandwidth_gbps = i.number("bandwidth_gbps", config_reader::kMinBandwidthGbps, false,
                                    config_reader::kMaxBandwidthGbps);
    s.ici.latency_ns = i.number("latency_ns", 0, false, config_reader::kMaxLatencyNs);
    s.ici.links_per_chip = i.u32("links_per_chip", 0, kMaxLinksPerChip);
    read_topology(i, s.ici, ctx);
    i.finish();
    const std::uint32_t needed = s.links_in_use();
    if (s.ici.links_per_chip < needed)
      ctx.bad(i.at("links_per_chip"), s.ici.links_per_chip,
              fmt::format("fewer than the {} links per chip that /ici/topology{} needs: {}; an "
                          "axis of extent 1 needs 0, of extent 2 needs 1 (2 with wraparound), "
                          "longer 2",
                          needed, set_in(ctx, "/ici/topology/dims", i.at("links_per_chip")),
                          list_text(s.ici)));
  }
  // chips_per_host is the host's capacity: a system smaller than one host is one host; a larger
  // one must fill every host alike.
  s.chips_per_host = top.u32("chips_per_host", 1, static_cast<std::uint32_t>(kMaxChips));
  const std::uint32_t chips = s.chips();
  if (s.chips_per_host < chips && chips % s.chips_per_host != 0)
    ctx.bad("/chips_per_host", s.chips_per_host,
            fmt::format("must divide the {} chips of /ici/topology/dims{}, or be at least {} "
                        "(one host drives them all)",
                        chips, set_in(ctx, "/ici/topology/dims", "/chips_per_host"), chips));
  if (top.has("sources"))
    s.sources = config_reader::read_sources(doc, doc["sources"], ctx, "/ici/bandwidth_gbps");
  top.finish({"sources", "description"});
  if (doc.contains("description") && !doc["description"].is_string())
    ctx.bad("/description", doc["description"], "must be a string");
  return s;
}

}  // namespace

std::uint32_t SystemConfig::chips() const {
  std::uint32_t n = 1;
  for (std::uint32_t d : ici.dims) n *= d;
  return n;
}

std::uint32_t SystemConfig::tensor_cores() const { return chips() * chip.tensor_cores; }

std::uint32_t SystemConfig::hosts() const {
  return (chips() + chips_per_host - 1) / chips_per_host;
}

double SystemConfig::peak_ops_per_s() const {
  return static_cast<double>(chips()) * chip.peak_ops_per_s();
}

std::uint32_t SystemConfig::links_in_use() const {
  std::uint32_t n = 0;
  for (std::size_t d = 0; d < ici.dims.size(); ++d)
    n += links_on_axis(ici.dims[d], ici.wraparound[d]);
  return n;
}

std::uint64_t SystemConfig::links() const {
  std::uint64_t n = 0;
  for (std::size_t d = 0; d < ici.dims.size(); ++d)
    n += std::uint64_t{chips() / ici.dims[d]} * links_per_line(ici.dims[d], ici.wraparound[d]);
  return n;
}

double SystemConfig::all_reduce_bytes_per_s() const {
  return 2.0 * static_cast<double>(links()) * link_bytes_per_s();
}

double SystemConfig::bisection_bytes_per_s() const {
  std::uint64_t fewest = std::numeric_limits<std::uint64_t>::max();
  for (std::size_t d = 0; d < ici.dims.size(); ++d)
    if (ici.dims[d] >= 2)
      fewest = std::min(fewest, std::uint64_t{chips() / ici.dims[d]} * (ici.wraparound[d] ? 2 : 1));
  if (fewest == std::numeric_limits<std::uint64_t>::max()) return 0;
  return static_cast<double>(fewest) * link_bytes_per_s();
}

std::vector<std::uint32_t> SystemConfig::coordinates(std::uint32_t chip_id) const {
  if (chip_id >= chips())
    throw std::out_of_range(
        fmt::format("{}: chip {} is outside its {} chips", name, chip_id, chips()));
  std::vector<std::uint32_t> c(ici.dims.size());
  for (std::size_t d = ici.dims.size(); d-- > 0;) {
    c[d] = chip_id % ici.dims[d];
    chip_id /= ici.dims[d];
  }
  return c;
}

std::uint32_t SystemConfig::chip_at(const std::vector<std::uint32_t>& c) const {
  if (c.size() != ici.dims.size())
    throw std::out_of_range(
        fmt::format("{}: {} coordinates for {} dimensions", name, c.size(), ici.dims.size()));
  std::uint32_t id = 0;
  for (std::size_t d = 0; d < c.size(); ++d) {
    if (c[d] >= ici.dims[d])
      throw std::out_of_range(
          fmt::format("{}: coordinate {} = {} is outside extent {}", name, d, c[d], ici.dims[d]));
    id = id * ici.dims[d] + c[d];
  }
  return id;
}

std::optional<std::uint32_t> SystemConfig::neighbour(std::uint32_t chip_id, std::size_t dim,
                                                     int step) const {
  if (dim >= ici.dims.size() || (step != 1 && step != -1))
    throw std::out_of_range(
        fmt::format("{}: no neighbour along dimension {} at step {}", name, dim, step));
  std::vector<std::uint32_t> c = coordinates(chip_id);
  const std::uint32_t extent = ici.dims[dim];
  if (extent == 1) return std::nullopt;
  if (step == 1 && c[dim] + 1 == extent) {
    if (!ici.wraparound[dim]) return std::nullopt;
    c[dim] = 0;
  } else if (step == -1 && c[dim] == 0) {
    if (!ici.wraparound[dim]) return std::nullopt;
    c[dim] = extent - 1;
  } else {
    c[dim] = step == 1 ? c[dim] + 1 : c[dim] - 1;
  }
  return chip_at(c);
}

SystemConfig load_system_config(const std::string& path) {
  config_reader::Origins origins;
  const json doc = config_reader::load_with_includes(path, "system config", origins);
  return parse_system_config(doc, Context{path, &origins});
}

SystemConfig parse_system_config(const json& doc, const std::string& origin) {
  return parse_system_config(doc, Context{origin, nullptr});
}

SystemConfig system_of_chip(const ChipConfig& chip) {
  SystemConfig s;
  s.file = chip.file;
  s.name = chip.name;
  s.chip = chip;
  s.chips_per_host = 1;
  s.ici.dims = {1};
  s.ici.wraparound = {false};
  return s;
}

nlohmann::ordered_json system_summary_json(const SystemConfig& s) {
  nlohmann::ordered_json j;
  j["name"] = s.name;
  j["chips"] = s.chips();
  j["tensor_cores"] = s.tensor_cores();
  j["hosts"] = s.hosts();
  j["links"] = s.links();
  j["peak_ops_per_s"] = s.peak_ops_per_s();
  j["link_bytes_per_s"] = s.link_bytes_per_s();
  j["all_reduce_bytes_per_s"] = s.all_reduce_bytes_per_s();
  j["bisection_bytes_per_s"] = s.bisection_bytes_per_s();
  return j;
}

nlohmann::ordered_json to_json(const SystemConfig& s) {
  nlohmann::ordered_json j;
  j["file"] = s.file;
  j["name"] = s.name;
  j["chip_file"] = s.chip.file;
  j["chips_per_host"] = s.chips_per_host;
  nlohmann::ordered_json wraps = nlohmann::ordered_json::array();
  for (bool w : s.ici.wraparound) wraps.push_back(w);
  j["ici"] = {{"bandwidth_gbps", s.ici.bandwidth_gbps},
              {"latency_ns", s.ici.latency_ns},
              {"links_per_chip", s.ici.links_per_chip},
              {"links_in_use", s.links_in_use()},
              {"topology", {{"dims", s.ici.dims}, {"wraparound", wraps}}}};
  j["sources"] = s.sources;
  j["system"] = system_summary_json(s);
  j["chip"] = to_json(s.chip);
  return j;
}

}  // namespace tpu
