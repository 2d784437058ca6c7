#include "sw/cli/sweep_cmd.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "sw/cli/process_pool.h"
#include "sw/io/output.h"
#include "sw/io/signals.h"
#include "sw/sweep/spec.h"

namespace tpu::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

using Clock = std::chrono::steady_clock;

// Slurm's default MaxArraySize (slurm.conf(5)).
constexpr std::size_t kSlurmDefaultMaxArraySize = 1001;

// The per-workload columns of the table, from each run report's `totals` (docs/report.md).
const std::vector<std::string> kMetrics = {"cycles",       "seconds",     "ops_per_s",
                                           "images_per_s", "utilization", "energy_j",
                                           "avg_power_w",  "ops_per_j",   "bytes_off_chip"};

// A system sweep's columns, from each fit report's last step (docs/sweeps.md): its cycles,
// seconds, images/s and energy, the share of it the gradient all-reduce left exposed, and the
// scaling efficiency against the nearest one-chip point when the sweep has one.
const std::vector<std::string> kFitMetrics = {"replicas",        "global_batch", "step_cycles",
                                              "step_seconds",    "images_per_s", "energy_j",
                                              "all_reduce_share"};

// Where a task (one design point x one workload) keeps its files, under the sweep's directory.
struct TaskFiles {
  std::string dir, config, report, host, failed, log;
};

class Sweep {
 public:
  Sweep(sweep::Spec spec, std::string out) : spec_(std::move(spec)), out_(std::move(out)) {}
  Sweep(const Sweep&) = delete;
  Sweep& operator=(const Sweep&) = delete;
  ~Sweep() {
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  [[nodiscard]] std::size_t tasks() const { return spec_.points.size() * spec_.workloads.size(); }
  [[nodiscard]] const sweep::Point& point(std::size_t t) const {
    return spec_.points[t / spec_.workloads.size()];
  }
  [[nodiscard]] const sweep::Workload& workload(std::size_t t) const {
    return spec_.workloads[t % spec_.workloads.size()];
  }
  [[nodiscard]] const sweep::Spec& spec() const { return spec_; }
  [[nodiscard]] const std::string& out() const { return out_; }

  [[nodiscard]] TaskFiles files(std::size_t t) const {
    TaskFiles f;
    f.dir = fmt::format("{}/points/{}", out_, point(t).id);
    const std::string w = fmt::format("{}/{}", f.dir, workload(t).name);
    f.config = f.dir + "/" + sweep::config_file(spec_);
    f.report = w + ".json";
    f.host = w + ".host.json";
    f.failed = w + ".failed.json";
    f.log = w + ".log";
    return f;
  }

  [[nodiscard]] bool done(std::size_t t) const { return exists(files(t).report); }
  [[nodiscard]] bool failed(std::size_t t) const { return exists(files(t).failed); }
  [[nodiscard]] bool finished(std::size_t t) const { return done(t) || failed(t); }

  [[nodiscard]] ProcessJob job(std::size_t t) const {
    // Run inside the sweep's directory with relative paths, so a point's report (which names
    // its chip file) is the same wherever the sweep's directory is.
    const std::string rel = fmt::format("points/{}/", point(t).id);
    ProcessJob j;
    // The report comes back on standard output: the run writes no file, so it cannot fail for
    // the sweep's disk, and nothing of it is on disk before the sweep records it.
    const sweep::Workload& w = workload(t);
    j.argv = {
        "tpusim", w.command, spec_.system ? "--system" : "--chip", rel + sweep::config_file(spec_),
        "--json", "-"};
    j.cwd = out_;
    j.argv.insert(j.argv.end(), w.run_args.begin(), w.run_args.end());
    // A fixed batch (and for run, images) per chip: the global ones grow with the slice.
    const std::uint64_t chips = point(t).chips;
    if (w.images_per_chip > 0)
      j.argv.insert(j.argv.end(), {"--images", std::to_string(w.images_per_chip * chips)});
    if (spec_.system)
      j.argv.insert(j.argv.end(), {"--batch", std::to_string(w.batch_per_chip * chips)});
    return j;
  }

  // Records a task's outcome. The report is the finished marker and appears last, by rename:
  // a sweep killed at any instant leaves the task either finished or not. Returns what happened
  // to the task. Throws InputError when the sweep cannot write its own files (a full disk): that
  // is never the design point's failure, and the task stays pending.
  enum class Outcome { Done, Failed, Pending };
  Outcome record(std::size_t t, const ProcessResult& r, std::string& error) const {
    const TaskFiles f = files(t);
    error.clear();
    // Ended by the sweep's own shutdown, or by a signal meant for the sweep (Ctrl-C reaches
    // the whole process group, `timeout` and schedulers signal it too): not the point's fault.
    if (r.stopped || is_interruption(r.signal())) {
      error = r.stopped ? "stopped by the sweep" : r.describe();
      return Outcome::Pending;
    }
    if (r.ok()) {
      ordered_json rep;
      try {
        rep = ordered_json::parse(r.out);
        if (!rep.is_object() || !rep.contains("host")) throw std::runtime_error("no host object");
      } catch (const std::exception& e) {
        error = fmt::format("exit status 0 but no readable report ({})", e.what());
      }
      if (error.empty()) {
        io::write_file(f.log, r.err);
        // Host timings differ run to run; kept apart so the point's report is reproducible
        // byte for byte (docs/sweeps.md).
        io::write_file(f.host, rep["host"].dump(2) + "\n");
        rep.erase("host");
        io::write_file(f.report, rep.dump(2) + "\n");
        // A failure record from an earlier try (--retry-failed) is stale once the report exists;
        // it goes only now, so an interrupted retry loses no error.
        std::error_code ec;
        fs::remove(f.failed, ec);
        return Outcome::Done;
      }
    } else {
      const std::string said = last_line(r.err);
      error = said.empty() ? r.describe() + " (it printed no message)"
                           : fmt::format("{}: {}", r.describe(), said);
    }
    io::write_file(f.log, r.err);
    ordered_json j;
    j["status"] = r.status;
    j["error"] = error;
    io::write_file(f.failed, j.dump(2) + "\n");
    return Outcome::Failed;
  }

  static bool is_interruption(int sig) {
    return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
  }

  // Lays out the directory: the plan (refusing a directory that holds another sweep) and each
  // point's config, runnable by hand with `tpusim run --chip points/<id>/chip.json` (or
  // `tpusim fit --system points/<id>/system.json`).
  void prepare() {
    io::make_directory(out_);
    lock();
    remove_stale_temporaries();
    const std::string plan_file = out_ + "/sweep.json";
    const std::string plan = sweep::to_json(spec_).dump(2) + "\n";
    if (exists(plan_file)) {
      if (read_file(plan_file) != plan)
        throw InputError(fmt::format(
            "{}: holds a different sweep (its sweep.json differs from what {} expands to); "
            "remove the directory or choose another --out",
            out_, spec_.file));
    } else {
      io::write_file(plan_file, plan);
    }
    for (const auto& p : spec_.points) {
      const std::string dir = fmt::format("{}/points/{}", out_, p.id);
      io::make_directory(dir);
      const std::string text = p.chip.dump(2) + "\n";
      const std::string file = dir + "/" + sweep::config_file(spec_);
      if (!exists(file) || read_file(file) != text) io::write_file(file, text);
    }
  }

  // One sweep at a time in a directory: a second one on the same --out is refused before it
  // reads or writes anything there (whatever its spec), so two sweeps can never run a point
  // twice, delete each other's files or mix two specs' results. flock(2): the kernel drops the
  // lock when the process ends, however it ends.
  void lock() {
    const std::string file = out_ + "/" + kLockFile;
    lock_fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock_fd_ < 0)
      throw InputError(fmt::format("{}: cannot open the sweep's lock file ({})", file,
                                   path_error_reason(errno)));
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK)
        throw InputError(fmt::format("{}: cannot lock the sweep's directory ({})", file,
                                     path_error_reason(err)));
      char pid[32] = {};
      const ssize_t n = ::pread(lock_fd_, pid, sizeof pid - 1, 0);
      std::string who = n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "";
      while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
      throw InputError(fmt::format(
          "{}: another tpusim sweep{} is running in this directory; wait for it to end or "
          "choose another --out",
          out_, who.empty() ? "" : " (process " + who + ")"));
    }
    const std::string me = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock_fd_, 0) != 0 ||
        ::pwrite(lock_fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
      // The pid only improves a second sweep's message; the lock itself holds.
    }
  }

  // Temporaries of a sweep (or of its runs) that was killed while writing.
  void remove_stale_temporaries() const {
    const std::string suffix = io::kTempSuffix;
    auto stale = [&](const fs::path& p) {
      const std::string n = p.filename().string();
      return n.size() > suffix.size() &&
             n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    std::error_code ec;
    std::vector<fs::path> dirs = {out_};
    for (fs::directory_iterator it(out_ + "/points", ec), end; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec)) dirs.push_back(it->path());
    for (const auto& d : dirs)
      for (fs::directory_iterator it(d, ec), end; !ec && it != end; it.increment(ec))
        if (stale(it->path())) fs::remove(it->path(), ec);
  }

  // results.json and results.csv from the files of the finished tasks, in point order, so the
  // table is the same whatever order or parallelism produced them.
  struct Counts {
    std::size_t done = 0, failed = 0, pending = 0;
  };
  Counts write_table() const {
    Counts n;
    ordered_json res;
    res["schema"] = "tpusim.sweep/1";
    res["name"] = spec_.name;
    res["description"] = spec_.description;
    res["base"] = spec_.base;
    res["combine"] = spec_.zip ? "zip" : "product";
    for (const auto& a : spec_.axes)
      res["axes"].push_back({{"name", a.name}, {"pointers", a.pointers}, {"values", a.values}});
    for (const auto& w : spec_.workloads) res["workloads"].push_back(sweep::workload_json(w));
    // Per point, the one-chip point its scaling efficiency is measured against.
    const std::vector<std::optional<std::size_t>> reference = scaling_references();
    const bool scaling = std::any_of(reference.begin(), reference.end(),
                                     [](const auto& r) { return r.has_value(); });
    // Each workload's columns (a fit's or a run's); /metrics is every workload's, in order.
    std::vector<std::vector<std::string>> columns;
    std::vector<std::string> metrics;
    for (std::size_t w = 0; w < spec_.workloads.size(); ++w) {
      std::vector<std::string> m = spec_.workloads[w].command == "fit" ? kFitMetrics : kMetrics;
      if (spec_.check && spec_.workloads[w].command == "run") m.emplace_back("bit_exact");
      if (scaling) m.emplace_back("scaling_efficiency");
      for (const auto& name : m)
        if (std::find(metrics.begin(), metrics.end(), name) == metrics.end())
          metrics.push_back(name);
      res["workloads"][w]["metrics"] = m;
      columns.push_back(std::move(m));
    }
    res["metrics"] = metrics;

    std::string csv = "point";
    for (const auto& a : spec_.axes) csv += "," + csv_field(a.name);
    if (spec_.system) csv += ",chips";
    for (std::size_t w = 0; w < spec_.workloads.size(); ++w) {
      const std::string& name = spec_.workloads[w].name;
      csv += "," + csv_field(name + ".status");
      for (const auto& m : columns[w]) csv += "," + csv_field(name + "." + m);
      csv += "," + csv_field(name + ".error");
    }
    csv += "\n";

    // Every task's cell, each report read once: a point's scaling efficiency needs its one-chip
    // point's figures, which may come later in the table.
    const std::size_t runs = tasks();
    std::vector<ordered_json> cells(runs);
    std::vector<std::string> errors(runs);
    for (std::size_t t = 0; t < runs; ++t) {
      const TaskFiles f = files(t);
      ordered_json& cell = cells[t];
      if (exists(f.report)) {
        cell["status"] = "ok";
        read_record(f.report, [&](const ordered_json& rep) {
          if (workload(t).command == "fit") {
            fit_metrics(rep, cell);
          } else {
            for (const auto& m : kMetrics) cell[m] = rep.at("totals").at(m);
            if (spec_.check) cell["bit_exact"] = rep.at("accuracy").at("bit_exact");
          }
        });
        ++n.done;
      } else if (exists(f.failed)) {
        cell["status"] = "failed";
        read_record(f.failed, [&](const ordered_json& fail) {
          errors[t] = fail.at("error").get<std::string>();
        });
        cell["error"] = errors[t];
        ++n.failed;
      } else {
        cell["status"] = "pending";
        ++n.pending;
      }
    }

    ordered_json points = ordered_json::array();
    for (std::size_t p = 0; p < spec_.points.size(); ++p) {
      const auto& pt = spec_.points[p];
      ordered_json row;
      row["id"] = pt.id;
      row["dir"] = "points/" + pt.id;
      csv += pt.id;
      for (std::size_t a = 0; a < spec_.axes.size(); ++a) {
        row["axes"][spec_.axes[a].name] = pt.values[a];
        csv += "," + csv_field(shown(pt.values[a]));
      }
      if (spec_.system) {
        row["chips"] = pt.chips;
        csv += fmt::format(",{}", pt.chips);
      }
      for (std::size_t w = 0; w < spec_.workloads.size(); ++w) {
        const std::size_t t = p * spec_.workloads.size() + w;
        ordered_json& cell = cells[t];
        const std::string& error = errors[t];
        if (cell["status"] == "ok" && reference[p]) {
          const ordered_json& ref = cells[*reference[p] * spec_.workloads.size() + w];
          if (ref["status"] == "ok") {
            cell["scaling_efficiency"] =
                cell["images_per_s"].get<double>() / (pt.chips * ref["images_per_s"].get<double>());
            cell["scaling_reference"] = spec_.points[*reference[p]].id;
          }
        }
        csv += "," + cell["status"].get<std::string>();
        for (const auto& m : columns[w]) csv += "," + (cell.contains(m) ? cell[m].dump() : "");
        csv += "," + csv_field(error);
        row["workloads"][spec_.workloads[w].name] = cell;
      }
      csv += "\n";
      points.push_back(row);
    }
    res["summary"] = {{"points", spec_.points.size()},
                      {"runs", tasks()},
                      {"done", n.done},
                      {"failed", n.failed},
                      {"pending", n.pending}};
    res["points"] = points;
    io::OutputSet table;
    const std::size_t json_file = table.add(out_ + "/results.json", "");
    const std::size_t csv_file = table.add(out_ + "/results.csv", "");
    table.check();
    table.set(json_file, res.dump(2) + "\n");
    table.set(csv_file, csv);
    table.commit();
    return n;
  }

  // A fit report's figures for the table: its last step's (docs/sweeps.md).
  static void fit_metrics(const ordered_json& rep, ordered_json& cell) {
    const ordered_json& last = rep.at("step").at("last");
    cell["replicas"] = rep.at("replicas");
    cell["global_batch"] = rep.at("global_batch");
    cell["step_cycles"] = last.at("cycles");
    cell["step_seconds"] = last.at("seconds");
    cell["images_per_s"] = last.at("images_per_s");
    cell["energy_j"] = last.at("energy_j");
    // The all-reduce's cycles that nothing else hid (docs/systems.md, "Overlap"); a report
    // without the block (written before buckets) has only the split's communication part.
    const double exposed = last.contains("all_reduce")
                               ? last.at("all_reduce").at("exposed_cycles").get<double>()
                               : last.at("split_cycles").at("communication").get<double>();
    cell["all_reduce_share"] = exposed / last.at("cycles").get<double>();
  }

  // For each point of a system sweep, the one-chip point that differs from it in the fewest axis
  // values (the earliest of equals): with one axis of slices, the sweep's one-chip point; with
  // another axis beside it, the one-chip point of the same value there. None when the sweep has
  // no one-chip point.
  [[nodiscard]] std::vector<std::optional<std::size_t>> scaling_references() const {
    std::vector<std::optional<std::size_t>> ref(spec_.points.size());
    if (!spec_.system) return ref;
    for (std::size_t p = 0; p < spec_.points.size(); ++p) {
      std::size_t best_diff = spec_.axes.size() + 1;
      for (std::size_t q = 0; q < spec_.points.size(); ++q) {
        if (spec_.points[q].chips != 1) continue;
        std::size_t diff = 0;
        for (std::size_t a = 0; a < spec_.axes.size(); ++a)
          diff += spec_.points[p].values[a] != spec_.points[q].values[a];
        if (diff < best_diff) {
          best_diff = diff;
          ref[p] = q;
        }
      }
    }
    return ref;
  }

  static bool exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }
  static std::string read_file(const std::string& path) {
    return read_input_file(path, "sweep file", kMaxReportBytes, Remember::No);
  }
  // A file the sweep wrote, read back; one that is not what the sweep writes (edited or
  // damaged by hand) is named, never an internal error.
  template <class Use>
  static void read_record(const std::string& path, Use use) {
    try {
      use(ordered_json::parse(read_file(path)));
    } catch (const nlohmann::json::exception& e) {
      throw InputError(
          fmt::format("{}: not a file this sweep wrote ({}); remove it to run the point again",
                      path, e.what()));
    }
  }

 private:
  static std::string shown(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array()) {
      std::string s;
      for (const auto& e : v) s += (s.empty() ? "" : "/") + shown(e);
      return s;
    }
    return v.dump();
  }
  // RFC 4180: quoted when it holds a comma, a quote or a line break.
  static std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  }

  static constexpr const char* kLockFile = ".lock";

  sweep::Spec spec_;
  std::string out_;
  int lock_fd_ = -1;  // held until the process ends
};

// Points done, failed and the ETA: a bar redrawn in place on a terminal, one line per finished
// run otherwise (logs, CI).
class Progress {
 public:
  Progress(std::size_t total, std::size_t resumed, std::size_t to_run)
      : total_(total),
        done_(resumed),
        resumed_(resumed),
        to_run_(to_run),
        tty_(::isatty(STDERR_FILENO) == 1),
        start_(Clock::now()) {}

  // `seconds` < 0: not known here.
  void finished(const std::string& what, bool ok, double seconds, const std::string& error) {
    ++done_;
    ++ran_;
    if (!ok) ++failed_;
    if (tty_) {
      if (!ok) std::cerr << "\r\033[K" << fmt::format("sweep: {} FAILED ({})\n", what, error);
      draw();
    } else {
      std::cerr << fmt::format(
          "sweep: [{}/{}] {} {}\n", done_, total_, what,
          ok ? (seconds < 0 ? std::string("done") : fmt::format("done in {:.2f} s", seconds))
             : fmt::format("FAILED ({})", error));
    }
  }
  void tick() {
    if (tty_ && Clock::now() - last_draw_ > std::chrono::milliseconds(500)) draw();
  }
  void end() const {
    if (tty_) std::cerr << "\n";
  }

 private:
  void draw() {
    last_draw_ = Clock::now();
    constexpr std::size_t width = 30;
    const std::size_t filled = total_ ? done_ * width / total_ : width;
    std::string eta = "--:--";
    const double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
    if (ran_ > 0) {
      const auto left = static_cast<long>(elapsed / static_cast<double>(ran_) *
                                          static_cast<double>(to_run_ - ran_));
      eta = fmt::format("{}:{:02}", left / 60, left % 60);
    }
    std::cerr << fmt::format("\r\033[Ksweep [{}{}] {}/{} done ({} resumed), {} failed, ETA {}",
                             std::string(filled, '#'), std::string(width - filled, '.'), done_,
                             total_, resumed_, failed_, eta)
              << std::flush;
  }

  std::size_t total_, done_, resumed_, to_run_, ran_ = 0, failed_ = 0;
  bool tty_;
  Clock::time_point start_, last_draw_;
};

std::string recorded_error(const Sweep& s, std::size_t t) {
  try {
    return json::parse(
               read_input_file(s.files(t).failed, "sweep file", kMaxReportBytes, Remember::No))
        .at("error")
        .get<std::string>();
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string task_name(const Sweep& s, std::size_t t) {
  return fmt::format("{} {} ({})", s.point(t).id, s.workload(t).name,
                     sweep::describe_point(s.spec(), s.point(t)));
}

// How a batch of runs ended.
struct Ran {
  bool interrupted = false;   // the sweep itself was asked to stop
  std::size_t signalled = 0;  // runs a signal from outside ended: pending, not failed
};

// Runs the given tasks here, `jobs` at a time.
Ran run_local(const Sweep& s, const std::vector<std::size_t>& todo, unsigned jobs,
              Progress& progress) {
  std::vector<ProcessJob> runs;
  for (std::size_t t : todo) runs.push_back(s.job(t));
  Ran ran;
  io::InterruptScope interrupt;
  run_processes(
      runs, jobs,
      [&](std::size_t i, ProcessResult& r) {
        std::string error;
        const auto outcome = s.record(todo[i], r, error);
        if (outcome == Sweep::Outcome::Pending) {
          if (!r.stopped) ++ran.signalled;
          return;
        }
        progress.finished(task_name(s, todo[i]), outcome == Sweep::Outcome::Done, r.seconds, error);
      },
      [&] {
        progress.tick();
        return io::interrupted() != 0;
      });
  ran.interrupted = io::interrupted() != 0;
  return ran;
}

// "0-5,7,9-12": Slurm's --array syntax for the task indices.
std::string array_ranges(const std::vector<std::size_t>& todo) {
  std::vector<std::size_t> v = todo;
  std::sort(v.begin(), v.end());
  std::string s;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    s +=
        (s.empty() ? "" : ",") + (i == j ? std::to_string(v[i]) : fmt::format("{}-{}", v[i], v[j]));
    i = j + 1;
  }
  return s;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Slurm's MaxArraySize: array indices run from 0 to one less. Asked of `scontrol show config`;
// Slurm's default (1001) when scontrol is not there or does not say (--emit-only on a machine
// without Slurm).
std::size_t slurm_max_array_size() {
  ProcessJob ask{"scontrol", {"scontrol", "show", "config"}, ""};
  ProcessResult said;
  try {
    run_processes({ask}, 1, [&](std::size_t, ProcessResult& r) { said = std::move(r); });
  } catch (const std::exception&) {
    return kSlurmDefaultMaxArraySize;
  }
  if (!said.ok()) return kSlurmDefaultMaxArraySize;
  const std::string key = "MaxArraySize";
  for (std::size_t at = said.out.find(key); at != std::string::npos;
       at = said.out.find(key, at + 1)) {
    std::size_t v = said.out.find_first_of("0123456789\n", at + key.size());
    if (v == std::string::npos || said.out[v] == '\n') continue;
    const std::size_t n = std::strtoull(said.out.c_str() + v, nullptr, 10);
    if (n > 0) return n;
  }
  return kSlurmDefaultMaxArraySize;
}

// One job array: the runs whose task indices lie in [offset, offset + MaxArraySize), as array
// indices `t - offset`.
struct ArrayPart {
  std::size_t offset = 0;
  std::vector<std::size_t> todo;
  std::string script;
};

std::vector<ArrayPart> split_array(const std::vector<std::size_t>& todo, std::size_t max_size) {
  std::map<std::size_t, ArrayPart> parts;
  for (std::size_t t : todo) {
    ArrayPart& p = parts[t / max_size];
    p.offset = t / max_size * max_size;
    p.todo.push_back(t - p.offset);
  }
  std::vector<ArrayPart> out;
  for (auto& [k, p] : parts) out.push_back(std::move(p));
  return out;
}

// The log of task t: Slurm's --output of its array task.
std::string task_log(const Sweep& s, std::size_t t, std::size_t max_size) {
  const std::size_t part = t / max_size;
  return part == 0 ? fmt::format("{}/slurm/task-{}.out", s.out(), t)
                   : fmt::format("{}/slurm/array-{}-task-{}.out", s.out(), part, t % max_size);
}

// Writes the job-array scripts: task i runs `tpusim sweep --task i --out DIR`, which runs and
// records one design point x workload exactly as the local runner does. Runs whose indices
// reach Slurm's MaxArraySize go into further arrays, each with its offset: slurm/sweep.sbatch
// holds indices 0 to MaxArraySize - 1, slurm/sweep-<k>.sbatch the k-th block after it.
std::vector<ArrayPart> write_batch_scripts(const Sweep& s, const std::vector<std::size_t>& todo,
                                           std::size_t max_size) {
  const std::string out = fs::absolute(s.out()).lexically_normal().string();
  const std::string dir = out + "/slurm";
  io::make_directory(dir);
  std::vector<ArrayPart> parts = split_array(todo, max_size);
  // A further array's script from an earlier submission that this one does not have would be
  // a trap: submitted by hand, it reruns finished runs' indices with the old offsets.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("sweep-", 0) == 0 && name.size() > 13 &&
        name.compare(name.size() - 7, 7, ".sbatch") == 0)
      fs::remove(e.path(), ec);
  }
  for (ArrayPart& p : parts) {
    const std::size_t k = p.offset / max_size;
    p.script = k == 0 ? dir + "/sweep.sbatch" : fmt::format("{}/sweep-{}.sbatch", dir, k);
    std::string text = "#!/bin/sh\n";
    text += fmt::format(
        "# Written by `tpusim sweep {} --executor slurm`: one array task per design point x "
        "workload\n# still to run. Rewritten on every submission; docs/sweeps.md.\n",
        s.spec().file);
    if (k > 0)
      text += fmt::format("# Runs {} to {}: array index + {} (Slurm's MaxArraySize is {}).\n",
                          p.offset, p.offset + max_size - 1, p.offset, max_size);
    text += fmt::format("#SBATCH --job-name=tpusim-{}\n", s.spec().name);
    text += fmt::format("#SBATCH --array={}\n", array_ranges(p.todo));
    text += "#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n";
    text += k == 0 ? fmt::format("#SBATCH --output={}/task-%a.out\n", dir)
                   : fmt::format("#SBATCH --output={}/array-{}-task-%a.out\n", dir, k);
    const std::string task = k == 0 ? std::string("\"$SLURM_ARRAY_TASK_ID\"")
                                    : fmt::format("\"$((SLURM_ARRAY_TASK_ID + {}))\"", p.offset);
    text += fmt::format("exec {} sweep --task {} --out {}\n", shell_quote(self_executable()), task,
                        shell_quote(out));
    io::write_file(p.script, text);
    fs::permissions(p.script,
                    fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add, ec);
    if (ec)
      throw InputError(fmt::format("{}: cannot make it executable ({})", p.script,
                                   path_error_reason(ec.value())));
  }
  return parts;
}

// Submits the scripts, all at once, and waits for the arrays (sbatch --wait), refreshing the
// progress from the files the tasks write. When interrupted, the jobs are cancelled.
Ran run_slurm(const Sweep& s, const std::vector<std::size_t>& todo,
              const std::vector<std::string>& sbatch_args, std::size_t max_size,
              Progress& progress) {
  const std::vector<ArrayPart> parts = write_batch_scripts(s, todo, max_size);
  // A retried task keeps its failure record until it has run again: a record that changed, or a
  // report, is this submission's result.
  std::map<std::size_t, std::string> earlier_failure;
  for (std::size_t t : todo)
    if (s.failed(t)) earlier_failure[t] = recorded_error(s, t);
  auto finished_now = [&](std::size_t t) {
    if (s.done(t)) return true;
    if (!s.failed(t)) return false;
    const auto it = earlier_failure.find(t);
    return it == earlier_failure.end() || recorded_error(s, t) != it->second;
  };
  std::vector<ProcessJob> submits;
  for (const ArrayPart& p : parts) {
    ProcessJob submit;
    submit.program = "sbatch";
    submit.argv = {"sbatch", "--parsable", "--wait"};
    submit.argv.insert(submit.argv.end(), sbatch_args.begin(), sbatch_args.end());
    submit.argv.push_back(p.script);
    submits.push_back(std::move(submit));
  }
  std::vector<bool> seen(s.tasks(), false);
  auto poll = [&] {
    for (std::size_t t : todo)
      if (!seen[t] && finished_now(t)) {
        seen[t] = true;
        const bool ok = s.done(t);
        // Slurm tasks are timed by Slurm (sacct), not here.
        progress.finished(task_name(s, t), ok, -1, ok ? "" : recorded_error(s, t));
      }
    progress.tick();
  };
  std::vector<ProcessResult> submitted(parts.size());
  Ran ran;
  {
    io::InterruptScope interrupt;
    run_processes(
        submits, static_cast<unsigned>(submits.size()),
        [&](std::size_t i, ProcessResult& r) { submitted[i] = std::move(r); },
        [&] {
          poll();
          return io::interrupted() != 0;
        });
    std::string log;
    for (const ProcessResult& r : submitted) log += r.out + r.err;
    io::write_file(s.out() + "/slurm/sbatch.log", log);
    if (io::interrupted() != 0) {
      for (const ProcessResult& r : submitted) {
        // --parsable prints "jobid[;cluster]" first.
        std::string first = r.out.substr(0, r.out.find_first_of(";\n"));
        if (!first.empty() && std::all_of(first.begin(), first.end(), ::isdigit)) {
          ProcessJob cancel{"scancel", {"scancel", first}, ""};
          run_processes({cancel}, 1, [](std::size_t, ProcessResult&) {});
        }
      }
      ran.interrupted = true;
      return ran;
    }
  }
  poll();
  // The tasks record their own failures; a task that left nothing (Slurm killed it, the node
  // died, the binary was not reachable) is recorded here.
  for (std::size_t t : todo)
    if (!finished_now(t)) {
      const ProcessResult& r = submitted[static_cast<std::size_t>(
          std::find_if(parts.begin(), parts.end(),
                       [&](const ArrayPart& p) { return p.offset == t / max_size * max_size; }) -
          parts.begin())];
      ordered_json j;
      j["status"] = r.status;
      j["error"] = fmt::format("the Slurm task left no result (sbatch: {}; see {}): {}",
                               r.describe(), task_log(s, t, max_size), last_line(r.err));
      io::write_file(s.files(t).failed, j.dump(2) + "\n");
      seen[t] = true;
      progress.finished(task_name(s, t), false, -1, j["error"].get<std::string>());
    }
  return ran;
}

std::size_t max_array_size(const SweepCommand& cmd) {
  return cmd.max_array_size ? *cmd.max_array_size : slurm_max_array_size();
}

int run_task(const SweepCommand& cmd) {
  if (cmd.out.empty()) throw InputError("sweep: --task needs --out, the sweep's directory");
  const std::string plan = cmd.out + "/sweep.json";
  json doc;
  try {
    doc = json::parse(read_input_file(plan, "sweep plan", kMaxReportBytes, Remember::No));
  } catch (const json::exception& e) {
    throw InputError(
        fmt::format("{}: not a sweep plan written by tpusim sweep ({})", plan, e.what()));
  }
  const Sweep s(sweep::from_json(doc, plan), cmd.out);
  if (*cmd.task >= s.tasks())
    throw InputError(fmt::format("sweep: --task {} (the plan {} has tasks 0 to {})", *cmd.task,
                                 plan, s.tasks() - 1));
  const std::size_t t = *cmd.task;
  // The submitting sweep chose the task; a report means a requeued task already ran.
  if (s.done(t)) return 0;
  std::string error;
  auto outcome = Sweep::Outcome::Pending;
  {
    io::InterruptScope interrupt;
    run_processes(
        {s.job(t)}, 1, [&](std::size_t, ProcessResult& r) { outcome = s.record(t, r, error); },
        [] { return io::interrupted() != 0; });
  }
  std::cerr << fmt::format("sweep: {} {}\n", task_name(s, t),
                           outcome == Sweep::Outcome::Done     ? std::string("done")
                           : outcome == Sweep::Outcome::Failed ? "FAILED (" + error + ")"
                                                               : "not finished (" + error + ")");
  io::end_if_interrupted();
  // A failure of the point is recorded: the task itself succeeded.
  return 0;
}

}  // namespace

std::vector<std::string> pair_sbatch_values(std::vector<std::string> words) {
  std::vector<std::string> out;
  out.reserve(words.size() + 2);
  for (std::size_t i = 0; i < words.size(); ++i) {
    out.push_back(words[i]);
    if (words[i] != "--sbatch-arg" || i + 1 >= words.size()) continue;
    const std::string& option = words[++i];
    out.push_back(option);
    const bool takes_value = option.size() > 1 && option[0] == '-' &&
                             option.find('=') == std::string::npos &&
                             (option[1] == '-' ? option.size() > 2 : option.size() == 2);
    if (takes_value && i + 1 < words.size() && !words[i + 1].empty() && words[i + 1][0] != '-') {
      out.push_back("--sbatch-arg");
      out.push_back(words[++i]);
    }
  }
  return out;
}

int run_sweep(SweepCommand& cmd) {
  io::refuse_stdout_for_directory(cmd.out, "--out output");
  if (cmd.task) return run_task(cmd);
  if (cmd.spec.empty()) throw InputError("sweep: give a sweep spec (docs/sweeps.md)");
  if (cmd.executor != "local" && cmd.executor != "slurm")
    throw InputError(fmt::format("sweep: --executor {} (must be local or slurm)", cmd.executor));
  if (cmd.emit_only && cmd.executor != "slurm")
    throw InputError("sweep: --emit-only writes a Slurm batch script; add --executor slurm");
  if (cmd.max_array_size && cmd.executor != "slurm")
    throw InputError("sweep: --max-array-size sizes Slurm job arrays; add --executor slurm");
  sweep::Spec spec = sweep::load_spec(cmd.spec);
  spec.file = fs::absolute(spec.file).lexically_normal().string();
  if (cmd.timing_only) {
    if (spec.check)
      throw InputError(fmt::format(
          "sweep: --timing-only computes no outputs to check, but {} sets \"check\": true",
          cmd.spec));
    // In the runs' arguments, so the plan (sweep.json) records it: resuming without the flag is
    // another sweep.
    for (sweep::Workload& w : spec.workloads)
      if (std::find(w.run_args.begin(), w.run_args.end(), "--timing-only") == w.run_args.end())
        w.run_args.emplace_back("--timing-only");
  }
  const std::string out = cmd.out.empty() ? "results/" + spec.name : cmd.out;
  Sweep s(std::move(spec), out);
  s.prepare();

  std::vector<std::size_t> todo;
  std::size_t resumed = 0;
  for (std::size_t t = 0; t < s.tasks(); ++t) {
    if (s.done(t) || (s.failed(t) && !cmd.retry_failed))
      ++resumed;
    else
      todo.push_back(t);
  }
  if (cmd.shuffle_seed) std::shuffle(todo.begin(), todo.end(), std::mt19937_64(*cmd.shuffle_seed));
  const unsigned jobs = cmd.jobs > 0 ? cmd.jobs : default_parallelism();
  std::cerr << fmt::format(
      "sweep {}: {} design points x {} workloads = {} runs, {} to run{}\n", s.spec().name,
      s.spec().points.size(), s.spec().workloads.size(), s.tasks(), todo.size(),
      cmd.executor == "local" ? fmt::format(", {} at a time", jobs) : std::string(" on Slurm"));
  if (cmd.emit_only) {
    if (todo.empty()) {
      std::cerr << "sweep: every run is finished; nothing to submit\n";
    } else {
      const std::vector<ArrayPart> parts = write_batch_scripts(s, todo, max_array_size(cmd));
      // The command to run names the --sbatch-arg words too, each quoted for a POSIX shell.
      std::string extra;
      for (const std::string& a : cmd.sbatch_args) {
        const bool plain =
            !a.empty() && a.find_first_not_of(
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij"
                              "klmnopqrstuvwxyz0123456789_./=:,+-@%") == std::string::npos;
        extra += (plain ? a : shell_quote(a)) + " ";
      }
      std::string submit;
      for (const ArrayPart& p : parts) {
        std::cout << p.script << "\n";
        submit += (submit.empty() ? "`sbatch " : ", `sbatch ") + extra + p.script + "`";
      }
      std::cout << fmt::format(
          "Submit {} with {}; when {} finished, run this sweep again to collect the table.\n",
          parts.size() == 1 ? "it" : "them", submit,
          parts.size() == 1 ? "the array has" : "the arrays have");
    }
    s.write_table();
    return 0;
  }

  Progress progress(s.tasks(), resumed, todo.size());
  Ran ran;
  if (!todo.empty())
    ran = cmd.executor == "local"
              ? run_local(s, todo, jobs, progress)
              : run_slurm(s, todo, cmd.sbatch_args, max_array_size(cmd), progress);
  progress.end();
  const auto n = s.write_table();
  std::cout << fmt::format("{}/results.csv: {} of {} runs done, {} failed, {} pending\n", out,
                           n.done, s.tasks(), n.failed, n.pending);
  if (ran.interrupted) {
    std::cerr << "tpusim: sweep interrupted; finished runs are kept: run the same command again "
                 "to resume\n";
    std::cout.flush();
    io::end_if_interrupted();
  }
  if (ran.signalled > 0) {
    std::cerr << fmt::format(
        "tpusim: {} run(s) were ended by a signal from outside the sweep and are pending: run "
        "the same command again to finish them\n",
        ran.signalled);
    return 1;
  }
  return n.failed > 0 ? 1 : 0;
}

}  // namespace tpu::cli
