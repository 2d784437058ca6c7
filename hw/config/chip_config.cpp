#include "hw/config/chip_config.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <vector>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "hw/common/json_text.h"

namespace tpu {
namespace fs = std::filesystem;
using nlohmann::json;

std::string_view name_of(MemoryKind k) {
  switch (k) {
    case MemoryKind::Ddr3: return "ddr3";
    case MemoryKind::Hbm: return "hbm";
    case MemoryKind::HostLink: return "host-link";
  }
  return "?";
}

namespace {

// ---------------------------------------------------------------------------------------------
// Includes. An object's "include" names a file whose object is the starting point; the object's
// own keys override it (objects merge recursively). `Origins` remembers, per JSON pointer of the
// merged document, which file wrote it, so errors name the file the user must edit.

constexpr int kMaxIncludeDepth = 16;
using Origins = std::map<std::string, std::string>;

std::string escape_key(const std::string& k) {
  std::string out;
  for (char c : k) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

void erase_below(Origins& o, const std::string& ptr) {
  const std::string prefix = ptr + "/";
  for (auto it = o.lower_bound(prefix); it != o.end() && it->first.rfind(prefix, 0) == 0;)
    it = o.erase(it);
}

json parse_file(const fs::path& file) {
  std::string text;
  try {
    text = read_input_file(file.string(), "chip config", kMaxConfigBytes);
  } catch (const InputError& e) {
    throw ConfigError(e.what());
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw ConfigError(fmt::format("{}: file is empty (expected a JSON object)", file.string()));
  try {
    return parse_json_text(text, file.string());
  } catch (const InputError& e) {
    throw ConfigError(e.what());
  }
}

// Where a file's includes are looked up: beside the file itself, so a symlink to a config (or
// to its folder) finds the includes the config's author put beside it. Follows symlinks as
// the kernel does; a path it cannot resolve keeps its own folder (the read reports the error).
fs::path include_dir(const fs::path& file) {
  std::error_code ec;
  const fs::path real = fs::canonical(file, ec);
  return (ec ? file : real).parent_path();
}

json resolve(const json& node, const fs::path& file, const std::string& ptr, Origins& origins,
             std::vector<fs::path>& stack);

json load_resolved(const fs::path& file, const std::string& ptr, Origins& origins,
                   std::vector<fs::path>& stack) {
  std::error_code ec;
  const fs::path canon = fs::weakly_canonical(file, ec);
  if (stack.size() >= kMaxIncludeDepth)
    throw ConfigError(fmt::format("{}: includes nested deeper than {} (the chain starts at {})",
                                  file.string(), kMaxIncludeDepth, stack.front().string()));
  stack.push_back(canon);
  json doc = resolve(parse_file(file), file, ptr, origins, stack);
  stack.pop_back();
  return doc;
}

void merge_into(json& base, const json& overlay) {
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    if (base.contains(it.key()) && base[it.key()].is_object() && it.value().is_object())
      merge_into(base[it.key()], it.value());
    else
      base[it.key()] = it.value();
  }
}

json resolve(const json& node, const fs::path& file, const std::string& ptr, Origins& origins,
             std::vector<fs::path>& stack) {
  origins[ptr] = file.string();
  if (!node.is_object()) {
    erase_below(origins, ptr);
    return node;
  }
  json out = json::object();
  if (auto inc = node.find("include"); inc != node.end()) {
    if (!inc->is_string() || inc->get<std::string>().empty())
      throw ConfigError(fmt::format("{}: {}/include = {} (must be a file name, relative to {})",
                                    file.string(), ptr, inc->dump(), include_dir(file).string()));
    const fs::path target = include_dir(file) / inc->get<std::string>();
    // Checked here, not in load_resolved, so the message names the including file, the pointer
    // and the value the user wrote.
    struct stat st {};
    if (::stat(target.c_str(), &st) != 0)
      throw ConfigError(fmt::format("{}: {}/include = {} ({}: {})", file.string(), ptr, inc->dump(),
                                    target.string(), path_error_reason(errno)));
    if (!S_ISREG(st.st_mode))
      throw ConfigError(fmt::format("{}: {}/include = {} ({} is {})", file.string(), ptr,
                                    inc->dump(), target.string(), file_kind(st.st_mode)));
    std::error_code ec;
    const fs::path canon = fs::weakly_canonical(target, ec);
    for (const auto& f : stack)
      if (f == canon)
        throw ConfigError(fmt::format("{}: {}/include = {} (include cycle back to {})",
                                      file.string(), ptr, inc->dump(), target.string()));
    out = load_resolved(target, ptr, origins, stack);
    // The object itself belongs to the including file: a key missing from it is for that file's
    // author to add (the included file may be a deliberately partial fragment).
    origins[ptr] = file.string();
    if (!out.is_object())
      throw ConfigError(fmt::format("{}: must hold a JSON object to be included at {} by {}",
                                    target.string(), ptr.empty() ? "/" : ptr, file.string()));
  }
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (it.key() == "include") continue;
    const std::string child = ptr + "/" + escape_key(it.key());
    json v = resolve(it.value(), file, child, origins, stack);
    if (out.contains(it.key()) && out[it.key()].is_object() && v.is_object())
      merge_into(out[it.key()], v);
    else
      out[it.key()] = std::move(v);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Validation. Every error reads "<file>: <json pointer> = <value> (<what is allowed>)".

struct Context {
  std::string top;  // the file the user named
  const Origins* origins = nullptr;

  [[nodiscard]] std::string file_of(const std::string& ptr) const {
    if (origins) {
      std::string p = ptr;
      while (true) {
        if (auto it = origins->find(p); it != origins->end()) return it->second;
        if (p.empty()) break;
        p = p.substr(0, p.rfind('/'));
      }
    }
    return top;
  }
  [[noreturn]] void fail(const std::string& ptr, const std::string& msg) const {
    throw ConfigError(fmt::format("{}: {} {}", file_of(ptr), ptr.empty() ? "/" : ptr, msg));
  }
  [[noreturn]] void bad(const std::string& ptr, const json& v, const std::string& rule) const {
    std::string shown = v.dump();
    if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
    fail(ptr, fmt::format("= {} ({})", shown, rule));
  }
};

class ObjectReader {
 public:
  ObjectReader(const json& j, std::string ptr, const Context& ctx)
      : j_(j), ptr_(std::move(ptr)), ctx_(ctx) {
    if (!j_.is_object()) ctx_.bad(ptr_, j_, "must be a JSON object");
  }

  [[nodiscard]] std::string at(const std::string& key) const {
    return ptr_ + "/" + escape_key(key);
  }

  const json& need(const std::string& key, const std::string& rule) {
    used_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) ctx_.fail(at(key), fmt::format("is missing ({})", rule));
    return *it;
  }
  [[nodiscard]] bool has(const std::string& key) const { return j_.contains(key); }

  std::uint64_t integer(const std::string& key, std::uint64_t min, std::uint64_t max) {
    const std::string rule = max == std::numeric_limits<std::uint64_t>::max()
                                 ? fmt::format("must be an integer >= {}", min)
                                 : fmt::format("must be an integer in [{}, {}]", min, max);
    const json& v = need(key, rule);
    if (!v.is_number_integer()) ctx_.bad(at(key), v, rule);
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u < min || u > max) ctx_.bad(at(key), v, rule);
      return u;
    }
    const auto s = v.get<std::int64_t>();
    if (s < 0 || static_cast<std::uint64_t>(s) < min || static_cast<std::uint64_t>(s) > max)
      ctx_.bad(at(key), v, rule);
    return static_cast<std::uint64_t>(s);
  }
  std::uint32_t u32(const std::string& key, std::uint32_t min, std::uint32_t max) {
    return static_cast<std::uint32_t>(integer(key, min, max));
  }

  // A finite number; `strict` excludes `min` itself.
  double number(const std::string& key, double min, bool strict, double max) {
    const std::string rule = fmt::format("must be a number {} {}{}", strict ? ">" : ">=", min,
                                         std::isinf(max) ? "" : fmt::format(" and <= {}", max));
    const json& v = need(key, rule);
    if (!v.is_number()) ctx_.bad(at(key), v, rule);
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < min || (strict && d == min) || d > max) ctx_.bad(at(key), v, rule);
    return d;
  }
  std::string string(const std::string& key) {
    const json& v = need(key, "must be a non-empty string");
    if (!v.is_string() || v.get<std::string>().empty())
      ctx_.bad(at(key), v, "must be a non-empty string");
    return v.get<std::string>();
  }

  template <class E>
  E choice(const std::string& key, const std::vector<std::pair<std::string, E>>& allowed) {
    std::string names;
    for (const auto& [n, e] : allowed) names += (names.empty() ? "" : ", ") + ("\"" + n + "\"");
    const std::string rule = "must be one of " + names;
    const json& v = need(key, rule);
    if (v.is_string())
      for (const auto& [n, e] : allowed)
        if (v.get<std::string>() == n) return e;
    ctx_.bad(at(key), v, rule);
  }

  ObjectReader object(const std::string& key) {
    const json& v = need(key, "must be a JSON object");
    return ObjectReader(v, at(key), ctx_);
  }

  // Every key must have been read: a typo must never fall back to a default.
  void finish(std::initializer_list<const char*> optional = {}) {
    for (const char* k : optional) used_.insert(k);
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (used_.count(it.key())) continue;
      std::string allowed;
      for (const auto& k : used_) allowed += (allowed.empty() ? "" : ", ") + k;
      ctx_.fail(at(it.key()), fmt::format("is not a known key (allowed here: {})", allowed));
    }
  }

  [[nodiscard]] const std::string& pointer() const { return ptr_; }
  [[nodiscard]] const json& raw() const { return j_; }

 private:
  const json& j_;
  std::string ptr_;
  const Context& ctx_;
  std::set<std::string> used_;
};

// Limits that keep the model's host memory and integer arithmetic sane; each has its reason.
constexpr std::uint32_t kMaxCores = 64;  // cores are SystemC threads; more is no TPU
constexpr std::uint32_t kMaxMxus = 64;
constexpr std::uint32_t kMaxArrayDim = 4096;  // a 4096^2 fp32 tile buffer is 64 MiB of host RAM
constexpr std::uint64_t kMaxUbBytes = 1ull << 32;       // UbAddr is 32 bits (docs/isa.md)
constexpr std::uint32_t kMaxAccEntries = 1u << 24;      // AccAddr rows fit the 24-bit ISA field
constexpr std::uint64_t kMaxOffChipBytes = 1ull << 48;  // MemAddr is 48 bits in the ISA
constexpr double kMaxClockMhz = 4000;  // Clock: cycle<->ps round trip is exact up to 4 GHz
// Below 1 MHz a cycle is longer than a microsecond: no accelerator, and SystemC's 64-bit
// picosecond clock would run out after 2^64 ps / 1e6 ps per cycle = 1.8e13 cycles.
constexpr double kMinClockMhz = 1;
// Bandwidths from 1 MB/s (slower than any link a TPU has used) to 1 PB/s (about 300 times the
// fastest HBM): the fluid-sharing model needs a transfer of one byte to take a representable
// number of cycles, and absurd values (1e300, a typo's 2^63) are refused, not simulated.
constexpr double kMinBandwidthGbps = 1e-3;
constexpr double kMaxBandwidthGbps = 1e6;
// Latencies up to a second: a million times DRAM's, ten thousand times a USB round trip.
constexpr double kMaxLatencyNs = 1e9;
// Energies per action up to a microjoule (DRAM is about 10^2 pJ/byte, a 45 nm fp32 multiply
// 3.7 pJ) and idle power up to a megawatt (a TPU v4 pod draws about that).
constexpr double kMaxActionPj = 1e6;
constexpr double kMaxIdleW = 1e6;

void check_sources(const json& doc, const json& sources, const Context& ctx) {
  if (!sources.is_object())
    ctx.bad("/sources", sources, "must be an object of JSON pointer -> citation");
  for (auto it = sources.begin(); it != sources.end(); ++it) {
    const std::string at = "/sources/" + escape_key(it.key());
    if (!it.value().is_string() || it.value().get<std::string>().empty())
      ctx.bad(at, it.value(), "must be a non-empty citation string");
    bool names_field = false;
    try {
      names_field = !it.key().empty() && it.key()[0] == '/' &&
                    doc.contains(json::json_pointer(it.key())) &&
                    it.key().rfind("/sources", 0) != 0;
    } catch (const json::exception&) {
      names_field = false;
    }
    if (!names_field)
      ctx.fail(at, fmt::format("= {} names no field of this config (keys of /sources are JSON "
                               "pointers such as \"/clock_mhz\")",
                               json(it.key()).dump()));
  }
}

ChipConfig parse_chip_config_impl(const json& doc, const Context& ctx) {
  ChipConfig c;
  c.file = ctx.top;
  ObjectReader top(doc, "", ctx);
  c.name = top.string("name");
  c.clock_mhz = top.number("clock_mhz", kMinClockMhz, false, kMaxClockMhz);
  c.tensor_cores = top.u32("tensor_cores", 1, kMaxCores);

  {
    ObjectReader m = top.object("mxu");
    c.mxu.count = m.u32("count", 1, kMaxMxus);
    c.mxu.rows = m.u32("rows", 1, kMaxArrayDim);
    c.mxu.cols = m.u32("cols", 1, kMaxArrayDim);
    c.mxu.input_type =
        m.choice<DType>("input_type", {{"int8", DType::Int8}, {"bf16", DType::Bf16}});
    c.mxu.acc_type = m.choice<DType>("acc_type", {{"int32", DType::Int32}, {"fp32", DType::Fp32}});
    // int8 x int8 products need an integer accumulator; bf16 products an fp32 one (DESIGN).
    const DType want = c.mxu.input_type == DType::Int8 ? DType::Int32 : DType::Fp32;
    if (c.mxu.acc_type != want)
      ctx.bad(m.at("acc_type"), std::string(name_of(c.mxu.acc_type)),
              fmt::format("input_type {} needs acc_type \"{}\"", name_of(c.mxu.input_type),
                          name_of(want)));
    c.mxu.weight_fifo_tiles = m.u32("weight_fifo_tiles", 1, 64);
    c.mxu.weight_buffers = m.u32("weight_buffers", 1, 2);
    if (m.has("impl"))
      c.mxu.impl = m.choice<MxuImpl>("impl", {{"tlm", MxuImpl::Tlm}, {"rtl", MxuImpl::Rtl}});
    m.finish({"impl"});  // impl defaults to "tlm": the RTL array is an opt-in cross-check
    // The RTL array (rtl/mxu/mxu_array.sv) is int8 x int8 -> int32 and double-buffered.
    if (c.mxu.impl == MxuImpl::Rtl && c.mxu.input_type != DType::Int8)
      ctx.bad(m.at("impl"), "rtl",
              fmt::format("the RTL array multiplies int8 only; input_type {} needs impl \"tlm\"",
                          name_of(c.mxu.input_type)));
    if (c.mxu.impl == MxuImpl::Rtl && c.mxu.weight_buffers != 2)
      ctx.bad(m.at("impl"), "rtl",
              fmt::format("the RTL array is double-buffered; weight_buffers {} needs impl \"tlm\"",
                          c.mxu.weight_buffers));
  }
  {
    ObjectReader u = top.object("unified_buffer");
    c.unified_buffer.bytes = u.integer("bytes", 1, kMaxUbBytes);
    c.unified_buffer.bytes_per_cycle = u.u32("bytes_per_cycle", 1, 1u << 20);
    u.finish();
  }
  {
    ObjectReader a = top.object("accumulators");
    c.accumulators.entries = a.u32("entries", 1, kMaxAccEntries);
    a.finish();
  }
  {
    ObjectReader v = top.object("vector_unit");
    c.vector_unit.lanes = v.u32("lanes", 1, 1u << 16);
    c.vector_unit.sublanes = v.u32("sublanes", 1, 1u << 10);
    c.vector_unit.latency_cycles = v.u32("latency_cycles", 0, 1u << 16);
    c.vector_unit.bytes_per_cycle = v.u32("bytes_per_cycle", 1, 1u << 20);
    v.finish();
  }
  {
    ObjectReader h = top.object("host_link");
    c.host_link.kind = h.string("kind");
    c.host_link.bandwidth_gbps =
        h.number("bandwidth_gbps", kMinBandwidthGbps, false, kMaxBandwidthGbps);
    c.host_link.latency_ns = h.number("latency_ns", 0, false, kMaxLatencyNs);
    h.finish();
  }
  {
    ObjectReader o = top.object("off_chip_memory");
    c.off_chip_memory.kind = o.choice<MemoryKind>("kind", {{"ddr3", MemoryKind::Ddr3},
                                                           {"hbm", MemoryKind::Hbm},
                                                           {"host-link", MemoryKind::HostLink}});
    c.off_chip_memory.bytes = o.integer("bytes", 1, kMaxOffChipBytes);
    if (c.off_chip_memory.kind == MemoryKind::HostLink) {
      // Edge: parameters beyond the on-chip SRAM live in host memory and cross the host link,
      // so bandwidth and latency are the link's, never a second, independent figure.
      for (const char* k : {"bandwidth_gbps", "latency_ns", "channels"})
        if (o.has(k))
          ctx.bad(o.at(k), o.raw()[k],
                  "not allowed with kind \"host-link\": the host link's figures apply");
      c.off_chip_memory.bandwidth_gbps = c.host_link.bandwidth_gbps;
      c.off_chip_memory.latency_ns = c.host_link.latency_ns;
      c.off_chip_memory.channels = 1;
    } else {
      c.off_chip_memory.bandwidth_gbps =
          o.number("bandwidth_gbps", kMinBandwidthGbps, false, kMaxBandwidthGbps);
      c.off_chip_memory.latency_ns = o.number("latency_ns", 0, false, kMaxLatencyNs);
      c.off_chip_memory.channels = o.u32("channels", 1, 1024);
    }
    o.finish();
  }
  {
    ObjectReader e = top.object("energy");
    auto& en = c.energy;
    en.scale_from_45nm = e.number("scale_from_45nm", 0, true, 10);
    auto pj = [&](const char* key) { return e.number(key, 0, false, kMaxActionPj); };
    en.mac_pj = pj("mac_pj_45nm") * en.scale_from_45nm;
    en.acc_pj_per_byte = pj("acc_pj_per_byte_45nm") * en.scale_from_45nm;
    en.ub_pj_per_byte = pj("ub_pj_per_byte_45nm") * en.scale_from_45nm;
    en.vector_op_pj = pj("vector_op_pj_45nm") * en.scale_from_45nm;
    en.instruction_pj = pj("instruction_pj_45nm") * en.scale_from_45nm;
    en.off_chip_pj_per_byte = pj("off_chip_pj_per_byte");
    en.host_link_pj_per_byte = pj("host_link_pj_per_byte");
    en.idle_w = e.number("idle_w", 0, false, kMaxIdleW);
    e.finish();
  }
  if (top.has("sources")) {
    check_sources(doc, doc["sources"], ctx);
    for (auto it = doc["sources"].begin(); it != doc["sources"].end(); ++it)
      c.sources[it.key()] = it.value().get<std::string>();
  }
  top.finish({"sources", "description"});
  if (doc.contains("description") && !doc["description"].is_string())
    ctx.bad("/description", doc["description"], "must be a string");

  // Combinations that cannot work.
  const std::uint64_t row_bytes = std::uint64_t{c.mxu.rows} * size_of(c.mxu.input_type);
  if (c.unified_buffer.bytes < row_bytes)
    ctx.bad("/unified_buffer/bytes", c.unified_buffer.bytes,
            fmt::format("must hold at least one MXU input row of {} bytes", row_bytes));
  return c;
}

}  // namespace

json load_json_with_includes(const std::string& path) {
  Origins origins;
  std::vector<fs::path> stack;
  return load_resolved(path, "", origins, stack);
}

ChipConfig load_chip_config(const std::string& path) {
  Origins origins;
  std::vector<fs::path> stack;
  const json doc = load_resolved(path, "", origins, stack);
  return parse_chip_config_impl(doc, Context{path, &origins});
}

ChipConfig parse_chip_config(const json& doc, const std::string& origin) {
  return parse_chip_config_impl(doc, Context{origin, nullptr});
}

nlohmann::ordered_json chip_summary_json(const ChipConfig& c) {
  nlohmann::ordered_json j;
  j["name"] = c.name;
  j["clock_hz"] = c.clock_hz();
  j["tensor_cores"] = c.tensor_cores;
  j["mxus_per_core"] = c.mxu.count;
  j["mxu_rows"] = c.mxu.rows;
  j["mxu_cols"] = c.mxu.cols;
  j["input_type"] = name_of(c.mxu.input_type);
  j["acc_type"] = name_of(c.mxu.acc_type);
  j["peak_macs_per_cycle"] = c.peak_macs_per_cycle();
  j["peak_ops_per_s"] = c.peak_ops_per_s();
  j["on_chip_bytes"] = c.on_chip_bytes();
  j["off_chip_bytes_per_s"] = c.off_chip_bytes_per_s();
  j["host_link_bytes_per_s"] = c.host_link_bytes_per_s();
  j["ridge_macs_per_byte"] = c.ridge_macs_per_byte();
  j["idle_w"] = c.energy.idle_w;
  return j;
}

nlohmann::ordered_json to_json(const ChipConfig& c) {
  nlohmann::ordered_json j;
  j["file"] = c.file;
  j["name"] = c.name;
  j["clock_mhz"] = c.clock_mhz;
  j["tensor_cores"] = c.tensor_cores;
  j["mxu"] = {{"count", c.mxu.count},
              {"rows", c.mxu.rows},
              {"cols", c.mxu.cols},
              {"input_type", name_of(c.mxu.input_type)},
              {"acc_type", name_of(c.mxu.acc_type)},
              {"weight_fifo_tiles", c.mxu.weight_fifo_tiles},
              {"weight_buffers", c.mxu.weight_buffers},
              {"impl", c.mxu.impl == MxuImpl::Tlm ? "tlm" : "rtl"}};
  j["unified_buffer"] = {{"bytes", c.unified_buffer.bytes},
                         {"bytes_per_cycle", c.unified_buffer.bytes_per_cycle}};
  j["accumulators"] = {{"entries", c.accumulators.entries},
                       {"bytes", c.accumulator_bytes_per_core()}};
  j["vector_unit"] = {{"lanes", c.vector_unit.lanes},
                      {"sublanes", c.vector_unit.sublanes},
                      {"latency_cycles", c.vector_unit.latency_cycles},
                      {"bytes_per_cycle", c.vector_unit.bytes_per_cycle}};
  j["off_chip_memory"] = {{"kind", name_of(c.off_chip_memory.kind)},
                          {"bytes", c.off_chip_memory.bytes},
                          {"bandwidth_gbps", c.off_chip_memory.bandwidth_gbps},
                          {"latency_ns", c.off_chip_memory.latency_ns},
                          {"channels", c.off_chip_memory.channels}};
  j["host_link"] = {{"kind", c.host_link.kind},
                    {"bandwidth_gbps", c.host_link.bandwidth_gbps},
                    {"latency_ns", c.host_link.latency_ns}};
  j["energy"] = {{"scale_from_45nm", c.energy.scale_from_45nm},
                 {"mac_pj", c.energy.mac_pj},
                 {"acc_pj_per_byte", c.energy.acc_pj_per_byte},
                 {"ub_pj_per_byte", c.energy.ub_pj_per_byte},
                 {"vector_op_pj", c.energy.vector_op_pj},
                 {"instruction_pj", c.energy.instruction_pj},
                 {"off_chip_pj_per_byte", c.energy.off_chip_pj_per_byte},
                 {"host_link_pj_per_byte", c.energy.host_link_pj_per_byte},
                 {"idle_w", c.energy.idle_w}};
  j["sources"] = c.sources;
  j["chip"] = chip_summary_json(c);
  return j;
}

}  // namespace tpu
