// How hw/config reads a config file a user wrote: includes resolved with the file that wrote each
// value remembered, and a reader that checks every key against its rule and refuses the keys it
// was never asked for. Chip configs (chip_config.cpp) and system configs (system_config.cpp) are
// both read through it, so the two follow one set of rules (docs/config.md, docs/systems.md).
//
// Every error is a ConfigError that reads "<file>: <JSON pointer> = <value> (<what is allowed>)";
// the file is the one that wrote the value, or for a missing key the one whose object lacks it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpu::config_reader {

// Bandwidths from 1 MB/s (slower than any link a TPU has used) to 1 PB/s (about 300 times the
// fastest HBM): the fluid-sharing model needs a transfer of one byte to take a representable
// number of cycles, and absurd values (1e300, a typo's 2^63) are refused, not simulated.
inline constexpr double kMinBandwidthGbps = 1e-3;
inline constexpr double kMaxBandwidthGbps = 1e6;
// Latencies up to a second: a million times DRAM's, ten thousand times a USB round trip.
inline constexpr double kMaxLatencyNs = 1e9;

// JSON pointer of the merged document -> the file that wrote the value there.
using Origins = std::map<std::string, std::string>;

// A key as it appears in a JSON pointer (RFC 6901: "~" -> "~0", "/" -> "~1").
std::string escape_key(const std::string& key);

// Loads `path` and resolves every "include" in it (relative to the including file, at most 16
// files deep, no cycles); the including object's keys override, nested objects merge key by
// key. `what` names the kind of file in messages ("chip config"). Fills `origins`.
nlohmann::json load_with_includes(const std::string& path, std::string_view what, Origins& origins);

// The file a config names by a path relative to itself (`value`, written at `ptr` of `file`):
// checked to be a regular file, so that the message names the file, the pointer and the value
// the user wrote ("<file>: /chip = \"x.json\" (<dir>/x.json: no such file)").
std::filesystem::path referenced_file(const std::filesystem::path& file, const std::string& ptr,
                                      const nlohmann::json& value);

// Where errors point: the file the user named, and which file wrote each value (none for a
// document built in memory, such as a sweep point: then every message names `top`).
struct Context {
  std::string top;
  const Origins* origins = nullptr;

  [[nodiscard]] std::string file_of(const std::string& ptr) const;
  [[noreturn]] void fail(const std::string& ptr, const std::string& msg) const;
  // "<file>: <ptr> = <v> (<rule>)", the value cut to 60 characters.
  [[noreturn]] void bad(const std::string& ptr, const nlohmann::json& v,
                        const std::string& rule) const;
};

// One JSON object of a config: each read names its key and rule; finish() refuses the keys that
// were never read.
class ObjectReader {
 public:
  ObjectReader(const nlohmann::json& j, std::string ptr, const Context& ctx);

  [[nodiscard]] std::string at(const std::string& key) const {
    return ptr_ + "/" + escape_key(key);
  }
  // The value at `key`; a missing key is an error that states `rule`.
  const nlohmann::json& need(const std::string& key, const std::string& rule);
  [[nodiscard]] bool has(const std::string& key) const { return j_.contains(key); }

  std::uint64_t integer(const std::string& key, std::uint64_t min, std::uint64_t max);
  std::uint32_t u32(const std::string& key, std::uint32_t min, std::uint32_t max) {
    return static_cast<std::uint32_t>(integer(key, min, max));
  }
  // A finite number; `strict` excludes `min` itself.
  double number(const std::string& key, double min, bool strict, double max);
  std::string string(const std::string& key);

  template <class E>
  E choice(const std::string& key, const std::vector<std::pair<std::string, E>>& allowed) {
    std::string names;
    for (const auto& [n, e] : allowed) names += (names.empty() ? "" : ", ") + ("\"" + n + "\"");
    const std::string rule = "must be one of " + names;
    const nlohmann::json& v = need(key, rule);
    if (v.is_string())
      for (const auto& [n, e] : allowed)
        if (v.get<std::string>() == n) return e;
    ctx_.bad(at(key), v, rule);
  }

  ObjectReader object(const std::string& key);

  // Every key must have been read: a typo must never fall back to a default.
  void finish(std::initializer_list<const char*> optional = {});

  [[nodiscard]] const std::string& pointer() const { return ptr_; }
  [[nodiscard]] const nlohmann::json& raw() const { return j_; }

 private:
  const nlohmann::json& j_;
  std::string ptr_;
  const Context& ctx_;
  std::set<std::string> used_;
};

// `sources`: every key a JSON pointer naming a field of `doc` (not inside /sources), every value
// a non-empty citation string. Returns them. `example` is a pointer the message shows.
std::map<std::string, std::string> read_sources(const nlohmann::json& doc,
                                                const nlohmann::json& sources, const Context& ctx,
                                                std::string_view example);

}  // namespace tpu::config_reader
