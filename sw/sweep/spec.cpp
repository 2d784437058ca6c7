#include "sw/sweep/spec.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <set>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "hw/common/json_text.h"
#include "hw/config/chip_config.h"
#include "hw/config/json_reader.h"
#include "hw/config/system_config.h"

namespace tpu::sweep {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Bounds that keep a typo (a step of 0.001) from expanding into millions of simulations.
constexpr std::size_t kMaxValuesPerAxis = 10000;
constexpr std::size_t kMaxPoints = 100000;

// Reads one JSON object of the spec, remembering which keys were used: unknown keys are errors
// (STYLE: a typo must never silently fall back to a default).
class Fields {
 public:
  Fields(const json& j, std::string where, std::string file)
      : j_(j), where_(std::move(where)), file_(std::move(file)) {
    if (!j_.is_object()) fail("", "must be a JSON object");
  }
  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    throw InputError(fmt::format("{}: {}{} {}", file_, where_.empty() ? "/" : where_,
                                 key.empty() ? "" : (where_.empty() ? "" : "/") + key, msg));
  }
  [[nodiscard]] bool has(const std::string& key) const { return j_.contains(key); }
  const json& get(const std::string& key) {
    used_.insert(key);
    if (!j_.contains(key)) fail(key, "is missing");
    return j_.at(key);
  }
  std::string string(const std::string& key) {
    const json& v = get(key);
    if (!v.is_string() || v.get<std::string>().empty()) fail(key, "must be a non-empty string");
    return v.get<std::string>();
  }
  std::string string(const std::string& key, const std::string& fallback) {
    return has(key) ? string(key) : fallback;
  }
  std::uint64_t integer(const std::string& key, std::uint64_t min, std::uint64_t max,
                        std::uint64_t fallback) {
    if (!has(key)) return fallback;
    const json& v = get(key);
    const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
    if (!ok || v.get<std::uint64_t>() < min || v.get<std::uint64_t>() > max)
      fail(key, fmt::format("= {} (must be an integer in [{}, {}])", v.dump(), min, max));
    return v.get<std::uint64_t>();
  }
  bool boolean(const std::string& key, bool fallback) {
    if (!has(key)) return fallback;
    const json& v = get(key);
    if (!v.is_boolean()) fail(key, fmt::format("= {} (must be true or false)", v.dump()));
    return v.get<bool>();
  }
  double number(const std::string& key) {
    const json& v = get(key);
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      fail(key, fmt::format("= {} (must be a number)", v.dump()));
    return v.get<double>();
  }
  void done() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.count(it.key())) fail(it.key(), "is not a known key (docs/sweeps.md)");
  }
  [[nodiscard]] std::string at(const std::string& key) const { return where_ + "/" + key; }

 private:
  const json& j_;
  std::string where_, file_;
  std::set<std::string> used_;
};

// "" for a regular file; else why it is not one ("no such file", "a directory", ...).
std::string not_a_file(const std::string& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return path_error_reason(errno);
  return S_ISREG(st.st_mode) ? "" : "is " + file_kind(st.st_mode);
}

std::string relative_to(const fs::path& spec_dir, const std::string& p) {
  return fs::absolute(spec_dir / p).lexically_normal().string();
}

// Rounds to `digits` significant digits, so a logarithmic range reads 8, 11.4, 16.2, ...
double round_significant(double v, int digits) {
  if (v == 0) return 0;
  const double scale =
      std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(std::abs(v)))));
  return std::round(v * scale) / scale;
}

// A range is inclusive of both ends: {from, to, step}, {from, to, factor} (geometric), or
// {from, to, count[, scale: "linear" | "log"]}. Integer ends and step/factor give integers.
std::vector<json> expand_range(Fields& r) {
  const json& jf = r.get("from");
  const json& jt = r.get("to");
  const double from = r.number("from"), to = r.number("to");
  const int modes = r.has("step") + r.has("factor") + r.has("count");
  if (modes != 1) r.fail("", "must have exactly one of \"step\", \"factor\" and \"count\"");
  std::vector<json> out;
  auto push = [&](double v, bool integral) {
    if (out.size() >= kMaxValuesPerAxis)
      r.fail("", fmt::format("expands to more than {} values", kMaxValuesPerAxis));
    if (!std::isfinite(v)) r.fail("", "expands to a value past a double's range");
    // An integer axis stays within int64 (llround of a larger value is undefined).
    if (integral && std::abs(v) >= 0x1p63)
      r.fail("", fmt::format("expands to {} (integer values must lie within +-2^63)", v));
    if (integral)
      out.emplace_back(static_cast<std::int64_t>(std::llround(v)));
    else
      out.emplace_back(v);
  };
  if (from > to) r.fail("from", fmt::format("= {} (must be <= \"to\" = {})", jf.dump(), jt.dump()));
  const bool int_ends = jf.is_number_integer() && jt.is_number_integer();
  if (r.has("step")) {
    const double step = r.number("step");
    if (step <= 0) r.fail("step", fmt::format("= {} (must be > 0)", step));
    const bool integral = int_ends && r.get("step").is_number_integer();
    // Counted, not accumulated, so 0.1-steps do not drift past `to`. The count is bounded as a
    // double before it becomes an integer: (to - from) / step can be any size, even infinite.
    const double steps = std::floor((to - from) / step * (1 + 1e-12));
    if (!(steps < static_cast<double>(kMaxValuesPerAxis)))
      r.fail("step", fmt::format("= {} expands [{}, {}] to more than {} values",
                                 r.get("step").dump(), jf.dump(), jt.dump(), kMaxValuesPerAxis));
    const auto n = static_cast<std::size_t>(steps) + 1;
    for (std::size_t i = 0; i < n; ++i) push(from + static_cast<double>(i) * step, integral);
  } else if (r.has("factor")) {
    const double factor = r.number("factor");
    if (factor <= 1) r.fail("factor", fmt::format("= {} (must be > 1)", factor));
    if (from <= 0) r.fail("from", fmt::format("= {} (must be > 0 with \"factor\")", from));
    const bool integral = int_ends && r.get("factor").is_number_integer();
    for (double v = from; v <= to * (1 + 1e-12); v *= factor) push(v, integral);
  } else {
    const auto count = r.integer("count", 1, kMaxValuesPerAxis, 0);
    const std::string scale = r.string("scale", "linear");
    if (scale != "linear" && scale != "log")
      r.fail("scale", fmt::format("= \"{}\" (must be \"linear\" or \"log\")", scale));
    if (scale == "log" && from <= 0)
      r.fail("from", fmt::format("= {} (must be > 0 with \"scale\": \"log\")", from));
    if (count == 1 && from != to) r.fail("count", "= 1 (must be >= 2 unless from = to)");
    for (std::uint64_t i = 0; i < count; ++i) {
      const double t = count == 1 ? 0 : static_cast<double>(i) / static_cast<double>(count - 1);
      if (scale == "linear") {
        const double v = from + t * (to - from);
        push(v, int_ends && std::abs(v - std::round(v)) < 1e-9);
      } else {
        const double v = i == 0 ? from : i + 1 == count ? to : from * std::pow(to / from, t);
        push(round_significant(v, 3), false);
      }
    }
  }
  r.done();
  return out;
}

struct AxisSettings {
  Axis axis;
  std::vector<std::vector<json>> settings;  // per value, one per pointer
};

AxisSettings read_axis(const json& j, std::size_t index, const std::string& file,
                       const json& base) {
  Fields f(j, fmt::format("/axes/{}", index), file);
  AxisSettings a;
  bool compound = false;
  if (f.has("pointers")) {
    if (f.has("pointer") || f.has("tied")) f.fail("pointers", "excludes \"pointer\" and \"tied\"");
    const json& ps = f.get("pointers");
    if (!ps.is_array() || ps.size() < 2)
      f.fail("pointers", "must be an array of two or more JSON pointers");
    for (const auto& p : ps) {
      if (!p.is_string()) f.fail("pointers", "must hold JSON pointers (strings)");
      a.axis.pointers.push_back(p.get<std::string>());
    }
    compound = true;
  } else {
    a.axis.pointers.push_back(f.string("pointer"));
    if (f.has("tied")) {
      const json& t = f.get("tied");
      if (!t.is_array() || t.empty()) f.fail("tied", "must be an array of JSON pointers");
      for (const auto& p : t) {
        if (!p.is_string()) f.fail("tied", "must hold JSON pointers (strings)");
        a.axis.pointers.push_back(p.get<std::string>());
      }
    }
  }
  a.axis.name = f.string("name", a.axis.pointers[0].substr(a.axis.pointers[0].rfind('/') + 1));
  // The table's columns are "point", the axis names and "<workload>.<metric>": an axis name
  // must not be able to repeat one of them.
  if (a.axis.name == "point" || a.axis.name.find('.') != std::string::npos ||
      a.axis.name.find_first_of(",\"\n\r") != std::string::npos || a.axis.name.empty())
    f.fail(f.has("name") ? "name" : "pointer",
           fmt::format("axis name \"{}\" (an axis name names a table column: not \"point\", "
                       "and no '.', ',', quote or line break)",
                       a.axis.name));
  for (const auto& p : a.axis.pointers) {
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(p);
    } catch (const json::exception&) {
      f.fail(compound ? "pointers" : "pointer",
             fmt::format("\"{}\" is not a JSON pointer (RFC 6901: \"/mxu/rows\")", p));
    }
    if (p.empty() || !base.contains(ptr))
      f.fail(compound ? "pointers" : "pointer",
             fmt::format("\"{}\" names no key of the base config (axis \"{}\")", p, a.axis.name));
  }
  const int kinds = f.has("values") + f.has("range");
  if (kinds != 1)
    f.fail("",
           fmt::format("axis \"{}\" needs exactly one of \"values\" and \"range\"", a.axis.name));
  if (f.has("values")) {
    const json& v = f.get("values");
    if (!v.is_array() || v.empty())
      f.fail("values",
             fmt::format("axis \"{}\" must have a non-empty array of values", a.axis.name));
    if (v.size() > kMaxValuesPerAxis)
      f.fail("values", fmt::format("has more than {} values", kMaxValuesPerAxis));
    a.axis.values.assign(v.begin(), v.end());
  } else {
    if (compound) f.fail("range", "a compound axis (\"pointers\") takes \"values\", not a range");
    Fields r(f.get("range"), f.at("range"), file);
    a.axis.values = expand_range(r);
  }
  for (std::size_t i = 0; i < a.axis.values.size(); ++i) {
    const json& v = a.axis.values[i];
    if (compound) {
      if (!v.is_array() || v.size() != a.axis.pointers.size())
        f.fail(fmt::format("values/{}", i),
               fmt::format("= {} (axis \"{}\" sets {} pointers: each value is an array of {})",
                           v.dump(), a.axis.name, a.axis.pointers.size(), a.axis.pointers.size()));
      a.settings.emplace_back(v.begin(), v.end());
    } else {
      a.settings.emplace_back(a.axis.pointers.size(), v);
    }
  }
  std::set<std::string> seen;
  for (const auto& v : a.axis.values)
    if (!seen.insert(v.dump()).second)
      f.fail("values", fmt::format("axis \"{}\" lists {} twice", a.axis.name, v.dump()));
  f.done();
  return a;
}

// A workload's name names files and table columns; points/<id>/<reserved>.json is the point's
// config.
void check_workload_name(Fields& f, const std::string& name, const std::string& reserved) {
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
      f.fail("name", fmt::format("= \"{}\" (letters, digits, '_' and '-' only: it names files "
                                 "and table columns)",
                                 name));
  if (name == reserved)
    f.fail("name", fmt::format("= \"{0}\" (reserved: points/<id>/{0}.json is the point's {0} "
                               "config; name the workload otherwise)",
                               reserved));
}

std::string existing_file(Fields& f, const fs::path& dir, const std::string& key) {
  const std::string p = relative_to(dir, f.string(key));
  if (const std::string why = not_a_file(p); !why.empty())
    f.fail(key, fmt::format("= \"{}\" ({})", p, why));
  return p;
}

// A system sweep's workload: `tpusim fit` steps on every design point, the global batch
// batch_per_chip x the point's chips (a fixed batch per chip, as Google's pod setups).
Workload read_fit_workload(Fields& f, const fs::path& dir, bool check) {
  Workload w;
  w.command = "fit";
  auto& a = w.run_args;
  const std::string m = existing_file(f, dir, "model");
  a = {"--model", m};
  // "random" (fit's default): seeded random weights; anything else: a weights file.
  const std::string weights = f.string("weights", "random");
  if (weights == "random")
    a.emplace_back("--random-weights");
  else
    a.insert(a.end(), {"--weights", existing_file(f, dir, "weights")});
  a.insert(a.end(), {"--seed", std::to_string(f.integer("seed", 0, ~std::uint64_t{0}, 1)),
                     "--steps", std::to_string(f.integer("steps", 1, 1000000, 1))});
  w.batch_per_chip = f.integer("batch_per_chip", 1, 1u << 20, 32);
  std::string optimizer = "adam";
  if (f.has("optimizer")) {
    optimizer = f.string("optimizer");
    if (optimizer != "adam" && optimizer != "sgd" && optimizer != "momentum" && optimizer != "lars")
      f.fail(
          "optimizer",
          fmt::format("= \"{}\" (must be \"adam\", \"sgd\", \"momentum\" or \"lars\")", optimizer));
    a.insert(a.end(), {"--optimizer", optimizer});
  }
  // LARS's hyper-parameters (fit --weight-decay, --lars-eta): for "lars" only.
  for (const auto& [key, flag] :
       {std::pair<const char*, const char*>{"weight_decay", "--weight-decay"},
        {"lars_eta", "--lars-eta"}}) {
    if (!f.has(key)) continue;
    if (optimizer != "lars")
      f.fail(key, fmt::format("is LARS's (set \"optimizer\": \"lars\"), not {}'s", optimizer));
    const double v = f.number(key);
    if (!(v >= 0) || (std::string(key) == "lars_eta" && !(v > 0)))
      f.fail(key,
             fmt::format("= {} (must be {})", v, std::string(key) == "lars_eta" ? "> 0" : ">= 0"));
    a.insert(a.end(), {flag, fmt::format("{}", v)});
  }
  if (f.has("learning_rate")) {
    const double lr = f.number("learning_rate");
    if (!(lr > 0)) f.fail("learning_rate", fmt::format("= {} (must be > 0)", lr));
    a.insert(a.end(), {"--learning-rate", fmt::format("{}", lr)});
  }
  // Big-batch practice (docs/training.md): the loss's label smoothing and the learning rate's
  // warm-up, in steps (the workload's run is one epoch of `steps`).
  if (f.has("label_smoothing")) {
    const double e = f.number("label_smoothing");
    if (!(e >= 0 && e < 1)) f.fail("label_smoothing", fmt::format("= {} (must be in [0, 1))", e));
    a.insert(a.end(), {"--label-smoothing", fmt::format("{}", e)});
  }
  if (f.has("warmup_steps"))
    a.insert(a.end(), {"--warmup-steps", std::to_string(f.integer("warmup_steps", 0, 1000000, 0))});
  // Distributed BatchNormalization's group of replicas (fit checks it against each point's
  // system).
  if (f.has("bn_group"))
    a.insert(a.end(), {"--bn-group", std::to_string(f.integer("bn_group", 1, 1u << 20, 1))});
  if (f.boolean("scale_out", false)) a.emplace_back("--scale-out");
  // Timing only: the one-chip point of a scaling sweep, which scale-out leaves computing values,
  // takes 20 times less (the same cycles and energy).
  if (f.boolean("timing_only", false)) {
    if (check)
      f.fail("timing_only",
             "= true computes no values to check, but the spec sets \"check\": true");
    a.emplace_back("--timing-only");
  }
  if (f.has("data_dir")) a.insert(a.end(), {"--data-dir", relative_to(dir, f.string("data_dir"))});
  if (!check) a.emplace_back("--no-check");
  w.name = f.string("name", fs::path(m).stem().string());
  check_workload_name(f, w.name, "system");
  f.done();
  return w;
}

Workload read_workload(const json& j, std::size_t index, const std::string& file,
                       const fs::path& dir, bool check, bool system) {
  Fields f(j, fmt::format("/workloads/{}", index), file);
  const std::string command = f.string("command", system ? "fit" : "run");
  if (system ? command != "fit" && command != "run" : command != "run")
    f.fail("command", system ? fmt::format("= \"{}\" (a system sweep's workloads are \"fit\" "
                                           "or \"run\")",
                                           command)
                             : fmt::format("= \"{}\" (a chip sweep's workloads are \"run\"; "
                                           "\"fit\" needs a system config as the base)",
                                           command));
  if (system && command == "fit") return read_fit_workload(f, dir, check);
  Workload w;
  auto& a = w.run_args;
  auto existing = [&](const std::string& key) { return existing_file(f, dir, key); };
  if (f.has("model") == f.has("topology"))
    f.fail("", "needs exactly one of \"model\" and \"topology\"");
  std::string default_name;
  if (f.has("model")) {
    const std::string m = existing("model");
    a = {"--model", m};
    default_name = fs::path(m).stem().string();
  } else {
    const std::string t = existing("topology");
    a = {"--topology", t};
    default_name = fs::path(t).stem().string();
  }
  // "trained": the model's shipped weights (what `tpusim run` loads by default); "random":
  // seeded random weights; anything else: a weights file.
  const std::string weights = f.string("weights", f.has("topology") ? "random" : "trained");
  if (weights == "random") {
    if (f.has("model")) a.emplace_back("--random-weights");
  } else if (f.has("topology")) {
    f.fail("weights", "a topology runs with random weights only (docs/models.md)");
  } else if (weights != "trained") {
    a.insert(a.end(), {"--weights", existing("weights")});
  }
  a.insert(a.end(), {"--seed", std::to_string(f.integer("seed", 0, ~std::uint64_t{0}, 1))});
  if (system) {
    // Every chip of a system runs an equal share (docs/systems.md, "Inference on a system"):
    // the images and the batch per chip, as a fit workload's batch.
    for (const char* key : {"images", "batch"})
      if (f.has(key))
        f.fail(key, fmt::format("a system sweep's run takes \"{0}_per_chip\" (the point's "
                                "{0} is that times its chips)",
                                key));
    w.images_per_chip = f.integer("images_per_chip", 1, std::uint64_t{1} << 32, 1000);
    w.batch_per_chip = f.integer("batch_per_chip", 1, 1u << 20, 256);
    w.command = "run";
  } else {
    a.insert(a.end(),
             {"--images", std::to_string(f.integer("images", 1, std::uint64_t{1} << 32, 1000)),
              "--batch", std::to_string(f.integer("batch", 1, 1u << 20, 256))});
  }
  if (f.boolean("timing_only", false)) {
    if (check)
      f.fail("timing_only",
             "= true computes no values to check, but the spec sets \"check\": true");
    a.emplace_back("--timing-only");
  }
  if (f.has("data_dir")) a.insert(a.end(), {"--data-dir", relative_to(dir, f.string("data_dir"))});
  if (!check && !f.boolean("timing_only", false)) a.emplace_back("--no-check");
  w.name = f.string("name", default_name);
  // points/<id>/chip.json (or system.json) is the point's config; a workload's report is
  // <name>.json.
  check_workload_name(f, w.name, system ? "system" : "chip");
  f.done();
  return w;
}

std::string show(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : "/") + show(e);
    return s;
  }
  return v.dump();
}

json apply(json doc, const Axis& axis, const std::vector<json>& setting) {
  for (std::size_t k = 0; k < axis.pointers.size(); ++k)
    doc[json::json_pointer(axis.pointers[k])] = setting[k];
  return doc;
}

// Validates a design point (or the base with one axis value) as the spec's kind of config;
// returns its chips.
std::uint32_t validate(const Spec& s, const json& doc, const std::string& origin) {
  if (s.system) return parse_system_config(doc, origin).chips();
  (void)parse_chip_config(doc, origin);
  return 1;
}

}  // namespace

std::string config_file(const Spec& spec) { return spec.system ? "system.json" : "chip.json"; }

std::string describe_point(const Spec& spec, const Point& point) {
  std::string s;
  for (std::size_t a = 0; a < spec.axes.size(); ++a)
    s += fmt::format("{}{}={}", a ? ", " : "", spec.axes[a].name, show(point.values[a]));
  return s;
}

Spec load_spec(const std::string& path) {
  const std::string text = read_input_file(path, "sweep spec", kMaxConfigBytes);
  const json doc = parse_json_text(text, path);
  Fields f(doc, "", path);
  Spec s;
  s.file = path;
  const fs::path dir = fs::path(path).parent_path();
  s.name = f.string("name");
  for (char c : s.name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-')
      f.fail("name", fmt::format("= \"{}\" (letters, digits, '_' and '-' only)", s.name));
  s.description = f.string("description", "");
  s.base = relative_to(dir, f.string("base"));
  if (const std::string why = not_a_file(s.base); !why.empty())
    f.fail("base", fmt::format("= \"{}\" ({})", s.base, why));
  const std::string combine = f.string("combine", "product");
  if (combine != "product" && combine != "zip")
    f.fail("combine", fmt::format("= \"{}\" (must be \"product\" or \"zip\")", combine));
  s.zip = combine == "zip";
  s.check = f.boolean("check", false);
  // The base must be a valid config on its own: an error here is the base file's, not an
  // axis's. A system config names its chip; a chip config has no "chip" key.
  json base = load_json_with_includes(s.base);
  s.system = base.is_object() && base.contains("chip");
  if (s.system) {
    (void)load_system_config(s.base);
    // /chip is relative to the file that wrote it (the base or a file it includes): made
    // absolute, so a point's system.json is valid in its own directory.
    config_reader::Origins origins;
    base = config_reader::load_with_includes(s.base, "system config", origins);
    const config_reader::Context ctx{s.base, &origins};
    base["chip"] = config_reader::referenced_file(ctx.file_of("/chip"), "/chip", base["chip"])
                       .lexically_normal()
                       .string();
  } else {
    (void)parse_chip_config(base, s.base);
  }

  const json& axes = f.get("axes");
  if (!axes.is_array() || axes.empty()) f.fail("axes", "must be a non-empty array of axes");
  std::vector<AxisSettings> settings;
  std::set<std::string> names, pointers;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    settings.push_back(read_axis(axes[i], i, path, base));
    const Axis& ax = settings.back().axis;
    // A system sweep's table has a "chips" column of its own.
    if (s.system && ax.name == "chips")
      f.fail(fmt::format("axes/{}", i),
             "is named \"chips\", the column a system sweep adds; name the axis otherwise");
    if (!names.insert(ax.name).second)
      f.fail(fmt::format("axes/{}/name", i), fmt::format("\"{}\" names two axes", ax.name));
    for (const auto& p : ax.pointers)
      if (!pointers.insert(p).second)
        f.fail(fmt::format("axes/{}", i), fmt::format("sets {}, which another axis sets", p));
    s.axes.push_back(ax);
  }
  const json& wl = f.get("workloads");
  if (!wl.is_array() || wl.empty()) f.fail("workloads", "must be a non-empty array of workloads");
  std::set<std::string> wnames;
  for (std::size_t i = 0; i < wl.size(); ++i) {
    s.workloads.push_back(read_workload(wl[i], i, path, dir, s.check, s.system));
    if (!wnames.insert(s.workloads.back().name).second)
      f.fail(fmt::format("workloads/{}/name", i),
             fmt::format("\"{}\" names two workloads", s.workloads.back().name));
  }
  f.done();

  // 1. Each axis value alone on the base config, so an error names one axis and one value.
  for (const auto& a : settings)
    for (std::size_t v = 0; v < a.axis.values.size(); ++v) {
      try {
        (void)validate(s, apply(base, a.axis, a.settings[v]), s.base);
      } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("{}: axis \"{}\" value {}: {}", path, a.axis.name,
                                      a.axis.values[v].dump(), e.what()));
      }
    }
  // 2. Every design point, since values valid alone may clash together.
  std::size_t count = 1;
  if (s.zip) {
    count = s.axes[0].values.size();
    for (const auto& a : s.axes)
      if (a.values.size() != count)
        f.fail("axes", fmt::format("with \"combine\": \"zip\" every axis needs as many values "
                                   "(\"{}\" has {}, \"{}\" has {})",
                                   s.axes[0].name, count, a.name, a.values.size()));
  } else {
    for (const auto& a : s.axes) {
      count *= a.values.size();
      if (count > kMaxPoints)
        f.fail("axes", fmt::format("expand to more than {} design points", kMaxPoints));
    }
  }
  const std::size_t width = std::to_string(count - 1).size();
  for (std::size_t i = 0; i < count; ++i) {
    Point p;
    p.id = fmt::format("{:0{}}", i, std::max<std::size_t>(width, 3));
    json chip = base;
    std::size_t rest = i;
    std::vector<std::size_t> idx(s.axes.size());
    // The last axis varies fastest, as nested loops written in the spec's order would.
    for (std::size_t a = s.axes.size(); a-- > 0;) {
      idx[a] = s.zip ? i : rest % s.axes[a].values.size();
      if (!s.zip) rest /= s.axes[a].values.size();
    }
    for (std::size_t a = 0; a < s.axes.size(); ++a) {
      p.values.push_back(s.axes[a].values[idx[a]]);
      chip = apply(chip, s.axes[a], settings[a].settings[idx[a]]);
    }
    const std::string desc = describe_point(s, p);
    chip["name"] = fmt::format("{} [{}]", base.value("name", s.system ? "system" : "chip"), desc);
    chip["description"] = fmt::format("Design point {} of sweep \"{}\" ({}): {}; base {}.", p.id,
                                      s.name, s.file, desc, s.base);
    try {
      p.chips = validate(s, chip, fmt::format("{} point {}", path, p.id));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: design point {} ({}): {}", path, p.id, desc, e.what()));
    }
    p.chip = std::move(chip);
    s.points.push_back(std::move(p));
  }
  return s;
}

ordered_json workload_json(const Workload& w) {
  if (w.command == "run" && w.batch_per_chip == 0)
    return {{"name", w.name}, {"run_args", w.run_args}};
  ordered_json j = {{"name", w.name},
                    {"command", w.command},
                    {"args", w.run_args},
                    {"batch_per_chip", w.batch_per_chip}};
  if (w.images_per_chip > 0) j["images_per_chip"] = w.images_per_chip;
  return j;
}

ordered_json to_json(const Spec& spec) {
  ordered_json j;
  j["schema"] = "tpusim.sweep-plan/1";
  j["name"] = spec.name;
  j["description"] = spec.description;
  j["spec_file"] = spec.file;
  j["base"] = spec.base;
  if (spec.system) j["base_kind"] = "system";
  j["combine"] = spec.zip ? "zip" : "product";
  j["check"] = spec.check;
  for (const auto& a : spec.axes)
    j["axes"].push_back({{"name", a.name}, {"pointers", a.pointers}, {"values", a.values}});
  for (const auto& w : spec.workloads) j["workloads"].push_back(workload_json(w));
  for (const auto& p : spec.points) {
    if (spec.system)
      j["points"].push_back(
          {{"id", p.id}, {"values", p.values}, {"chips", p.chips}, {"system", p.chip}});
    else
      j["points"].push_back({{"id", p.id}, {"values", p.values}, {"chip", p.chip}});
  }
  return j;
}

Spec from_json(const json& doc, const std::string& origin) {
  try {
    if (doc.at("schema") != "tpusim.sweep-plan/1")
      throw InputError(fmt::format("{}: /schema is not \"tpusim.sweep-plan/1\"", origin));
    Spec s;
    s.file = doc.at("spec_file").get<std::string>();
    s.name = doc.at("name").get<std::string>();
    s.description = doc.at("description").get<std::string>();
    s.base = doc.at("base").get<std::string>();
    s.system = doc.contains("base_kind") && doc.at("base_kind") == "system";
    s.zip = doc.at("combine") == "zip";
    s.check = doc.at("check").get<bool>();
    for (const auto& a : doc.at("axes"))
      s.axes.push_back(Axis{a.at("name").get<std::string>(),
                            a.at("pointers").get<std::vector<std::string>>(),
                            a.at("values").get<std::vector<json>>()});
    for (const auto& w : doc.at("workloads")) {
      Workload x;
      x.name = w.at("name").get<std::string>();
      if (w.contains("command")) {
        x.command = w.at("command").get<std::string>();
        x.run_args = w.at("args").get<std::vector<std::string>>();
        x.batch_per_chip = w.at("batch_per_chip").get<std::uint64_t>();
        x.images_per_chip = w.value("images_per_chip", std::uint64_t{0});
      } else {
        x.run_args = w.at("run_args").get<std::vector<std::string>>();
      }
      s.workloads.push_back(std::move(x));
    }
    for (const auto& p : doc.at("points")) {
      Point x{p.at("id").get<std::string>(), p.at("values").get<std::vector<json>>(),
              p.at(s.system ? "system" : "chip")};
      if (s.system) x.chips = p.at("chips").get<std::uint32_t>();
      s.points.push_back(std::move(x));
    }
    return s;
  } catch (const json::exception& e) {
    throw InputError(
        fmt::format("{}: not a sweep plan written by tpusim sweep ({})", origin, e.what()));
  }
}

}  // namespace tpu::sweep
