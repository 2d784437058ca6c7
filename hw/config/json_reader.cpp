#include "hw/config/json_reader.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "hw/common/json_text.h"

namespace tpu::config_reader {
namespace fs = std::filesystem;
using nlohmann::json;

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

namespace {

// ---------------------------------------------------------------------------------------------
// Includes. An object's "include" names a file whose object is the starting point; the object's
// own keys override it (objects merge recursively). `Origins` remembers, per JSON pointer of the
// merged document, which file wrote it, so errors name the file the user must edit.

constexpr int kMaxIncludeDepth = 16;

void erase_below(Origins& o, const std::string& ptr) {
  const std::string prefix = ptr + "/";
  for (auto it = o.lower_bound(prefix); it != o.end() && it->first.rfind(prefix, 0) == 0;)
    it = o.erase(it);
}

// Where a file's includes are looked up: beside the file itself, so a symlink to a config (or
// to its folder) finds the includes the config's author put beside it. Follows symlinks as
// the kernel does; a path it cannot resolve keeps its own folder (the read reports the error).
fs::path include_dir(const fs::path& file) {
  std::error_code ec;
  const fs::path real = fs::canonical(file, ec);
  return (ec ? file : real).parent_path();
}

void merge_into(json& base, const json& overlay) {
  for (auto it = overlay.begin(); it != overlay.end(); ++it) {
    if (base.contains(it.key()) && base[it.key()].is_object() && it.value().is_object())
      merge_into(base[it.key()], it.value());
    else
      base[it.key()] = it.value();
  }
}

struct Resolver {
  std::string_view what;
  Origins& origins;
  std::vector<fs::path> stack;
  // When each pointer was last written, in resolution order: an included file's keys are
  // resolved before the including file's, so a later write overrides an earlier one.
  std::map<std::string, std::size_t> written;
  std::size_t clock = 0;

  json parse_file(const fs::path& file) const {
    std::string text;
    try {
      text = read_input_file(file.string(), what, kMaxConfigBytes);
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

  json load(const fs::path& file, const std::string& ptr) {
    std::error_code ec;
    const fs::path canon = fs::weakly_canonical(file, ec);
    if (stack.size() >= kMaxIncludeDepth)
      throw ConfigError(fmt::format("{}: includes nested deeper than {} (the chain starts at {})",
                                    file.string(), kMaxIncludeDepth, stack.front().string()));
    stack.push_back(canon);
    json doc = resolve(parse_file(file), file, ptr);
    stack.pop_back();
    return doc;
  }

  json resolve(const json& node, const fs::path& file, const std::string& ptr) {
    origins[ptr] = file.string();
    if (!node.is_object()) {
      erase_below(origins, ptr);
      written[ptr] = ++clock;
      return node;
    }
    json out = json::object();
    if (auto inc = node.find("include"); inc != node.end()) {
      if (!inc->is_string() || inc->get<std::string>().empty())
        throw ConfigError(fmt::format("{}: {}/include = {} (must be a file name, relative to {})",
                                      file.string(), ptr, inc->dump(), include_dir(file).string()));
      const fs::path target = referenced_file(file, ptr + "/include", *inc);
      std::error_code ec;
      const fs::path canon = fs::weakly_canonical(target, ec);
      for (const auto& f : stack)
        if (f == canon)
          throw ConfigError(fmt::format("{}: {}/include = {} (include cycle back to {})",
                                        file.string(), ptr, inc->dump(), target.string()));
      out = load(target, ptr);
      // The object itself belongs to the including file: a key missing from it is for that
      // file's author to add (the included file may be a deliberately partial fragment).
      origins[ptr] = file.string();
      if (!out.is_object())
        throw ConfigError(fmt::format("{}: must hold a JSON object to be included at {} by {}",
                                      target.string(), ptr.empty() ? "/" : ptr, file.string()));
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() == "include") continue;
      const std::string child = ptr + "/" + escape_key(it.key());
      json v = resolve(it.value(), file, child);
      if (out.contains(it.key()) && out[it.key()].is_object() && v.is_object())
        merge_into(out[it.key()], v);
      else
        out[it.key()] = std::move(v);
    }
    return out;
  }
};

}  // namespace

// A citation describes the value its file wrote: when a file that includes it overrides the
// field, the included file's citation no longer applies and is dropped (the including file may
// cite its own value). A citation a file adds for a field it inherits is kept.
void drop_overridden_sources(json& doc, const Origins& origins,
                             const std::map<std::string, std::size_t>& written) {
  auto it = doc.find("sources");
  if (it == doc.end() || !it->is_object()) return;
  const auto last_write = [&](const std::string& ptr) {
    std::size_t t = 0;
    for (auto w = written.lower_bound(ptr); w != written.end(); ++w) {
      if (w->first != ptr && w->first.rfind(ptr + "/", 0) != 0) break;
      t = std::max(t, w->second);
    }
    return t;
  };
  const auto origin = [&](const std::string& ptr) {
    const auto o = origins.find(ptr);
    return o == origins.end() ? std::string() : o->second;
  };
  std::vector<std::string> stale;
  for (auto c = it->begin(); c != it->end(); ++c) {
    const std::string cite = "/sources/" + escape_key(c.key());
    const std::string field = c.key();
    if (field.empty() || field[0] != '/') continue;  // validated later, with its message
    if (origin(field).empty() || origin(field) == origin(cite)) continue;
    if (last_write(field) > last_write(cite)) stale.push_back(c.key());
  }
  for (const auto& k : stale) it->erase(k);
}

json load_with_includes(const std::string& path, std::string_view what, Origins& origins) {
  Resolver r{what, origins, {}, {}, 0};
  json doc = r.load(path, "");
  if (doc.is_object()) drop_overridden_sources(doc, origins, r.written);
  return doc;
}

fs::path referenced_file(const fs::path& file, const std::string& ptr, const json& value) {
  const fs::path target = include_dir(file) / value.get<std::string>();
  // Checked here, not when the file is read, so the message names the referring file, the
  // pointer and the value the user wrote.
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0)
    throw ConfigError(fmt::format("{}: {} = {} ({}: {})", file.string(), ptr, value.dump(),
                                  target.string(), path_error_reason(errno)));
  if (!S_ISREG(st.st_mode))
    throw ConfigError(fmt::format("{}: {} = {} ({} is {})", file.string(), ptr, value.dump(),
                                  target.string(), file_kind(st.st_mode)));
  return target;
}

// ---------------------------------------------------------------------------------------------
// Validation.

std::string Context::file_of(const std::string& ptr) const {
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

void Context::fail(const std::string& ptr, const std::string& msg) const {
  throw ConfigError(fmt::format("{}: {} {}", file_of(ptr), ptr.empty() ? "/" : ptr, msg));
}

void Context::bad(const std::string& ptr, const json& v, const std::string& rule) const {
  std::string shown = v.dump();
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  fail(ptr, fmt::format("= {} ({})", shown, rule));
}

ObjectReader::ObjectReader(const json& j, std::string ptr, const Context& ctx)
    : j_(j), ptr_(std::move(ptr)), ctx_(ctx) {
  if (!j_.is_object()) ctx_.bad(ptr_, j_, "must be a JSON object");
}

const json& ObjectReader::need(const std::string& key, const std::string& rule) {
  used_.insert(key);
  auto it = j_.find(key);
  if (it == j_.end()) ctx_.fail(at(key), fmt::format("is missing ({})", rule));
  return *it;
}

std::uint64_t ObjectReader::integer(const std::string& key, std::uint64_t min, std::uint64_t max) {
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

double ObjectReader::number(const std::string& key, double min, bool strict, double max) {
  const std::string rule = fmt::format("must be a number {} {}{}", strict ? ">" : ">=", min,
                                       std::isinf(max) ? "" : fmt::format(" and <= {}", max));
  const json& v = need(key, rule);
  if (!v.is_number()) ctx_.bad(at(key), v, rule);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < min || (strict && d == min) || d > max) ctx_.bad(at(key), v, rule);
  return d;
}

std::string ObjectReader::string(const std::string& key) {
  const json& v = need(key, "must be a non-empty string");
  if (!v.is_string() || v.get<std::string>().empty())
    ctx_.bad(at(key), v, "must be a non-empty string");
  return v.get<std::string>();
}

ObjectReader ObjectReader::object(const std::string& key) {
  const json& v = need(key, "must be a JSON object");
  return ObjectReader(v, at(key), ctx_);
}

void ObjectReader::finish(std::initializer_list<const char*> optional) {
  for (const char* k : optional) used_.insert(k);
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (used_.count(it.key())) continue;
    std::string allowed;
    for (const auto& k : used_) allowed += (allowed.empty() ? "" : ", ") + k;
    ctx_.fail(at(it.key()), fmt::format("is not a known key (allowed here: {})", allowed));
  }
}

std::map<std::string, std::string> read_sources(const json& doc, const json& sources,
                                                const Context& ctx, std::string_view example) {
  if (!sources.is_object())
    ctx.bad("/sources", sources, "must be an object of JSON pointer -> citation");
  std::map<std::string, std::string> out;
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
                               "pointers such as \"{}\")",
                               json(it.key()).dump(), example));
    out[it.key()] = it.value().get<std::string>();
  }
  return out;
}

}  // namespace tpu::config_reader
