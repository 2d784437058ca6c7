#include "sw/cli/sweep_cmd.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "hw/common/error.h"
#include "sw/cli/process_pool.h"
#include "sw/report/files.h"
#include "sw/sweep/spec.h"

namespace tpu::cli {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

using Clock = std::chrono::steady_clock;

// The per-workload columns of the table, from each run report's `totals` (docs/report.md).
const std::vector<std::string> kMetrics = {"cycles",       "seconds",     "ops_per_s",
                                           "images_per_s", "utilization", "energy_j",
                                           "avg_power_w",  "ops_per_j",   "bytes_off_chip"};

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) { g_interrupted = 1; }

// SIGINT and SIGTERM stop the sweep between points instead of killing it mid-write; installed
// without SA_RESTART so that a wait is interrupted at once.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptGuard() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ = {};
  struct sigaction old_term_ = {};
};

// Where a task (one design point x one workload) keeps its files, under the sweep's directory.
struct TaskFiles {
  std::string dir, chip, report, host, failed, log, raw;
};

class Sweep {
 public:
  Sweep(sweep::Spec spec, std::string out) : spec_(std::move(spec)), out_(std::move(out)) {}

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
    f.chip = f.dir + "/chip.json";
    f.report = w + ".json";
    f.host = w + ".host.json";
    f.failed = w + ".failed.json";
    f.log = w + ".log";
    f.raw = w + ".run.json";
    return f;
  }

  [[nodiscard]] bool finished(std::size_t t) const {
    const TaskFiles f = files(t);
    return fs::exists(f.report) || fs::exists(f.failed);
  }

  [[nodiscard]] ProcessJob job(std::size_t t) const {
    // Run inside the sweep's directory with relative paths, so a point's report (which names
    // its chip file) is the same wherever the sweep's directory is.
    const std::string rel = fmt::format("points/{}/", point(t).id);
    ProcessJob j;
    j.argv = {"tpusim",          "run",    "--chip",
              rel + "chip.json", "--json", rel + workload(t).name + ".run.json"};
    j.cwd = out_;
    const auto& a = workload(t).run_args;
    j.argv.insert(j.argv.end(), a.begin(), a.end());
    j.log = files(t).log;
    return j;
  }

  // Records a task's outcome. The report is the finished marker and appears last, by rename:
  // a sweep killed at any instant leaves the task either finished or not started.
  // Returns "" when the run succeeded, its error otherwise.
  std::string record(std::size_t t, const ProcessResult& r) const {
    const TaskFiles f = files(t);
    std::error_code ec;
    std::string error;
    if (r.ok()) {
      try {
        ordered_json rep = ordered_json::parse(report::read_text_file(f.raw));
        // Host timings differ run to run; kept apart so the point's report is reproducible
        // byte for byte (docs/sweeps.md).
        report::write_atomically(f.host, rep["host"].dump(2) + "\n");
        rep.erase("host");
        report::write_atomically(f.report, rep.dump(2) + "\n");
      } catch (const std::exception& e) {
        error = fmt::format("exit status 0 but no readable report ({})", e.what());
      }
    } else {
      error = fmt::format("{}: {}", r.describe(), last_line(f.log));
    }
    if (!error.empty()) {
      ordered_json j;
      j["status"] = r.status;
      j["error"] = error;
      report::write_atomically(f.failed, j.dump(2) + "\n");
    }
    fs::remove(f.raw, ec);
    return error;
  }

  // Lays out the directory: the plan (refusing a directory that holds another sweep) and each
  // point's chip config, runnable by hand with `tpusim run --chip points/<id>/chip.json`.
  void prepare() const {
    report::make_directory(out_);
    const std::string plan_file = out_ + "/sweep.json";
    const std::string plan = sweep::to_json(spec_).dump(2) + "\n";
    if (fs::exists(plan_file)) {
      if (report::read_text_file(plan_file) != plan)
        throw InputError(fmt::format(
            "{}: holds a different sweep (its sweep.json differs from what {} expands to); "
            "remove the directory or choose another --out",
            out_, spec_.file));
    } else {
      report::write_atomically(plan_file, plan);
    }
    for (const auto& p : spec_.points) {
      const std::string dir = fmt::format("{}/points/{}", out_, p.id);
      report::make_directory(dir);
      const std::string text = p.chip.dump(2) + "\n";
      const std::string file = dir + "/chip.json";
      if (!fs::exists(file) || report::read_text_file(file) != text)
        report::write_atomically(file, text);
    }
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
    for (const auto& w : spec_.workloads)
      res["workloads"].push_back({{"name", w.name}, {"run_args", w.run_args}});
    std::vector<std::string> metrics = kMetrics;
    if (spec_.check) metrics.emplace_back("bit_exact");
    res["metrics"] = metrics;

    std::string csv = "point";
    for (const auto& a : spec_.axes) csv += "," + csv_field(a.name);
    for (const auto& w : spec_.workloads) {
      csv += "," + csv_field(w.name + ".status");
      for (const auto& m : metrics) csv += "," + csv_field(w.name + "." + m);
      csv += "," + csv_field(w.name + ".error");
    }
    csv += "\n";

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
      for (std::size_t w = 0; w < spec_.workloads.size(); ++w) {
        const std::size_t t = p * spec_.workloads.size() + w;
        const TaskFiles f = files(t);
        ordered_json cell;
        std::string error;
        if (fs::exists(f.report)) {
          const auto rep = ordered_json::parse(report::read_text_file(f.report));
          cell["status"] = "ok";
          for (const auto& m : kMetrics) cell[m] = rep.at("totals").at(m);
          if (spec_.check) cell["bit_exact"] = rep.at("accuracy").at("bit_exact");
          ++n.done;
        } else if (fs::exists(f.failed)) {
          const auto fail = ordered_json::parse(report::read_text_file(f.failed));
          cell["status"] = "failed";
          cell["error"] = fail.at("error");
          error = fail.at("error").get<std::string>();
          ++n.failed;
        } else {
          cell["status"] = "pending";
          ++n.pending;
        }
        csv += "," + cell["status"].get<std::string>();
        for (const auto& m : metrics) csv += "," + (cell.contains(m) ? cell[m].dump() : "");
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
    report::write_atomically(out_ + "/results.json", res.dump(2) + "\n");
    report::write_atomically(out_ + "/results.csv", csv);
    return n;
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

  sweep::Spec spec_;
  std::string out_;
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

std::string recorded_error(const std::string& failed_file) {
  try {
    return json::parse(report::read_text_file(failed_file)).at("error").get<std::string>();
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string task_name(const Sweep& s, std::size_t t) {
  return fmt::format("{} {} ({})", s.point(t).id, s.workload(t).name,
                     sweep::describe_point(s.spec(), s.point(t)));
}

// Runs the given tasks here, `jobs` at a time. Returns false when interrupted.
bool run_local(const Sweep& s, const std::vector<std::size_t>& todo, unsigned jobs,
               Progress& progress) {
  std::vector<ProcessJob> runs;
  for (std::size_t t : todo) {
    std::error_code ec;
    fs::remove(s.files(t).failed, ec);
    runs.push_back(s.job(t));
  }
  InterruptGuard guard;
  run_processes(
      runs, jobs,
      [&](std::size_t i, const ProcessResult& r) {
        if (r.stopped) return;
        const std::string error = s.record(todo[i], r);
        progress.finished(task_name(s, todo[i]), error.empty(), r.seconds, error);
      },
      [&] {
        progress.tick();
        return g_interrupted != 0;
      });
  return g_interrupted == 0;
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

// Writes the job-array script: task i runs `tpusim sweep --task i --out DIR`, which runs and
// records one design point x workload exactly as the local runner does.
std::string write_batch_script(const Sweep& s, const std::vector<std::size_t>& todo) {
  const std::string out = fs::absolute(s.out()).lexically_normal().string();
  const std::string dir = out + "/slurm";
  report::make_directory(dir);
  const std::string script = dir + "/sweep.sbatch";
  std::string text = "#!/bin/sh\n";
  text += fmt::format(
      "# Written by `tpusim sweep {} --executor slurm`: one array task per design point x "
      "workload\n# still to run. Rewritten on every submission; docs/sweeps.md.\n",
      s.spec().file);
  text += fmt::format("#SBATCH --job-name=tpusim-{}\n", s.spec().name);
  text += fmt::format("#SBATCH --array={}\n", array_ranges(todo));
  text += "#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n";
  text += fmt::format("#SBATCH --output={}/task-%a.out\n", dir);
  text += fmt::format("exec {} sweep --task \"$SLURM_ARRAY_TASK_ID\" --out {}\n",
                      shell_quote(self_executable()), shell_quote(out));
  report::write_atomically(script, text);
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                  fs::perm_options::add);
  return script;
}

// Submits the script and waits for the array (sbatch --wait), refreshing the progress from the
// files the tasks write. Returns false when interrupted (the job is then cancelled).
bool run_slurm(const Sweep& s, const std::vector<std::size_t>& todo,
               const std::vector<std::string>& sbatch_args, Progress& progress) {
  const std::string script = write_batch_script(s, todo);
  for (std::size_t t : todo) {
    std::error_code ec;
    fs::remove(s.files(t).failed, ec);
  }
  ProcessJob submit;
  submit.program = "sbatch";
  submit.argv = {"sbatch", "--parsable", "--wait"};
  submit.argv.insert(submit.argv.end(), sbatch_args.begin(), sbatch_args.end());
  submit.argv.push_back(script);
  submit.log = s.out() + "/slurm/sbatch.log";
  std::vector<bool> seen(s.tasks(), false);
  auto poll = [&] {
    for (std::size_t t : todo)
      if (!seen[t] && s.finished(t)) {
        seen[t] = true;
        const bool ok = fs::exists(s.files(t).report);
        // Slurm tasks are timed by Slurm (sacct), not here.
        progress.finished(task_name(s, t), ok, -1, ok ? "" : recorded_error(s.files(t).failed));
      }
    progress.tick();
  };
  ProcessResult submitted;
  {
    InterruptGuard guard;
    run_processes(
        {submit}, 1, [&](std::size_t, const ProcessResult& r) { submitted = r; },
        [&] {
          poll();
          return g_interrupted != 0;
        });
  }
  if (g_interrupted != 0) {
    // --parsable prints "jobid[;cluster]" first.
    std::string first = report::read_text_file(submit.log);
    first = first.substr(0, first.find_first_of(";\n"));
    if (!first.empty() && std::all_of(first.begin(), first.end(), ::isdigit)) {
      ProcessJob cancel{"scancel", {"scancel", first}, s.out() + "/slurm/scancel.log", ""};
      run_processes({cancel}, 1, [](std::size_t, const ProcessResult&) {});
    }
    return false;
  }
  poll();
  // The tasks record their own failures; a task that left nothing (Slurm killed it, the node
  // died, the binary was not reachable) is recorded here.
  for (std::size_t t : todo)
    if (!s.finished(t)) {
      ordered_json j;
      j["status"] = submitted.status;
      j["error"] =
          fmt::format("the Slurm task left no result (sbatch: {}; see {}/slurm/task-{}.out): {}",
                      submitted.describe(), s.out(), t, last_line(submit.log));
      report::write_atomically(s.files(t).failed, j.dump(2) + "\n");
      seen[t] = true;
      progress.finished(task_name(s, t), false, -1, j["error"].get<std::string>());
    }
  return true;
}

int run_task(const SweepCommand& cmd) {
  if (cmd.out.empty()) throw InputError("sweep: --task needs --out, the sweep's directory");
  const std::string plan = cmd.out + "/sweep.json";
  const Sweep s(sweep::from_json(json::parse(report::read_text_file(plan)), plan), cmd.out);
  if (*cmd.task >= s.tasks())
    throw InputError(fmt::format("sweep: --task {} (the plan {} has tasks 0 to {})", *cmd.task,
                                 plan, s.tasks() - 1));
  if (s.finished(*cmd.task)) return 0;
  const std::size_t t = *cmd.task;
  std::error_code ec;
  fs::remove(s.files(t).failed, ec);
  std::string error;
  run_processes({s.job(t)}, 1,
                [&](std::size_t, const ProcessResult& r) { error = s.record(t, r); });
  std::cerr << fmt::format("sweep: {} {}\n", task_name(s, t),
                           error.empty() ? "done" : "FAILED (" + error + ")");
  // A failure of the point is recorded: the task itself succeeded.
  return 0;
}

}  // namespace

int run_sweep(SweepCommand& cmd) {
  if (cmd.task) return run_task(cmd);
  if (cmd.spec.empty()) throw InputError("sweep: give a sweep spec (docs/sweeps.md)");
  if (cmd.executor != "local" && cmd.executor != "slurm")
    throw InputError(fmt::format("sweep: --executor {} (must be local or slurm)", cmd.executor));
  if (cmd.emit_only && cmd.executor != "slurm")
    throw InputError("sweep: --emit-only writes a Slurm batch script; add --executor slurm");
  sweep::Spec spec = sweep::load_spec(cmd.spec);
  spec.file = fs::absolute(spec.file).lexically_normal().string();
  const std::string out = cmd.out.empty() ? "results/" + spec.name : cmd.out;
  Sweep s(std::move(spec), out);
  s.prepare();

  std::vector<std::size_t> todo;
  std::size_t resumed = 0;
  for (std::size_t t = 0; t < s.tasks(); ++t) {
    const bool failed = fs::exists(s.files(t).failed);
    if (fs::exists(s.files(t).report) || (failed && !cmd.retry_failed))
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
      const std::string script = write_batch_script(s, todo);
      std::cout << fmt::format(
          "{}\nSubmit it with `sbatch {}`; when the array has finished, run this sweep again "
          "to collect the table.\n",
          script, script);
    }
    s.write_table();
    return 0;
  }

  Progress progress(s.tasks(), resumed, todo.size());
  bool completed = true;
  if (!todo.empty())
    completed = cmd.executor == "local" ? run_local(s, todo, jobs, progress)
                                        : run_slurm(s, todo, cmd.sbatch_args, progress);
  progress.end();
  const auto n = s.write_table();
  std::cout << fmt::format("{}/results.csv: {} of {} runs done, {} failed, {} pending\n", out,
                           n.done, s.tasks(), n.failed, n.pending);
  if (!completed) {
    std::cerr << fmt::format(
        "tpusim: sweep interrupted; finished points are kept: run the same command again to "
        "resume\n");
    return 130;
  }
  return n.failed > 0 ? 1 : 0;
}

}  // namespace tpu::cli
