#include "sw/cli/compare_cmd.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <system_error>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"
#include "sw/cli/process_pool.h"
#include "sw/io/output.h"
#include "sw/io/signals.h"
#include "sw/report/formats.h"

namespace tpu::cli {
using nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

// A scratch directory for the runs' traces, removed with everything in it however compare ends.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "tpusim-compare-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw InputError(fmt::format("compare --trace: cannot create a scratch directory under {}",
                                   fs::temp_directory_path().string()));
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The runs' traces in one: run i's processes (its cores, host, links) get pids after run i-1's,
// and their names start with the run's label, so Perfetto shows each run's tracks together.
// One run's trace is parsed at a time and its events written out as text, so memory holds the
// joined text and a single run's events, not every run's twice.
std::string merge_traces(const std::vector<std::string>& files,
                         const std::vector<std::string>& names,
                         const std::vector<std::string>& labels) {
  ordered_json runs = ordered_json::array();
  std::string events;
  std::uint64_t base = 0;
  for (std::size_t i = 0; i < files.size(); ++i) {
    std::ifstream in(files[i], std::ios::binary);
    ordered_json t = ordered_json::parse(in);
    runs.push_back({{"label", labels[i]}, {"otherData", t["otherData"]}});
    std::uint64_t next = base;
    for (auto& e : t.at("traceEvents")) {
      if (e.contains("pid")) {
        const std::uint64_t pid = base + e["pid"].get<std::uint64_t>();
        e["pid"] = pid;
        next = std::max(next, pid + 1);
      }
      if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
        // "tpu-v3 core 1" keeps its form with the run's label for the chip's name.
        const std::string name = e["args"]["name"].get<std::string>();
        e["args"]["name"] = name.rfind(names[i] + " ", 0) == 0
                                ? labels[i] + name.substr(names[i].size())
                                : labels[i] + ": " + name;
      }
      if (e.value("ph", "") == "M" && e.value("name", "") == "process_sort_index")
        e["args"]["sort_index"] = e["pid"];
      events += (events.empty() ? "" : ",\n") + e.dump();
    }
    base = next;
  }
  const ordered_json other = {{"runs", runs}};
  return "{\"displayTimeUnit\":\"ns\",\"otherData\":" + other.dump() + ",\"traceEvents\":[\n" +
         events + "\n]}\n";
}

}  // namespace

int run_compare(CompareCommand& cmd) {
  // What runs, in order: each config and the flag that names it.
  std::vector<std::pair<std::string, std::string>> configs;
  for (const auto& c : cmd.chips) configs.emplace_back("--chip", c);
  for (const auto& c : cmd.systems) configs.emplace_back("--system", c);
  if (configs.size() < 2)
    throw InputError("compare: give at least two configs (--chip or --system, each repeatable)");
  // Every config is checked before anything runs: a typo in the fifth chip should not cost the
  // first four simulations.
  for (const auto& [flag, file] : configs) {
    if (flag == "--chip")
      (void)load_chip_config(file);
    else
      (void)load_system_config(file);
  }
  resolve_workload(cmd.workload);
  const unsigned jobs = cmd.jobs > 0 ? cmd.jobs : default_parallelism();

  io::OutputSet out;
  std::optional<std::size_t> json, markdown, csv;
  if (!cmd.json.empty()) json = out.add(cmd.json, "--json output");
  if (!cmd.markdown.empty()) markdown = out.add(cmd.markdown, "--markdown output");
  if (!cmd.csv.empty()) csv = out.add(cmd.csv, "--csv output");
  std::optional<std::size_t> trace;
  if (!cmd.trace.empty()) trace = out.add(cmd.trace, "--trace output");
  out.check(workload_inputs(cmd.workload));

  // Each chip runs in its own process and sends its report on standard output: nothing is
  // written to disk until the comparison is.
  std::vector<ProcessJob> runs;
  const auto w = workload_args(cmd.workload);
  std::optional<ScratchDir> scratch;
  if (trace) scratch.emplace();
  const auto trace_file = [&](std::size_t i) {
    return (scratch->path() / fmt::format("{}.trace.json", i)).string();
  };
  for (const auto& [flag, file] : configs) {
    ProcessJob job;
    job.argv = {"tpusim", "run", flag, file, "--json", "-"};
    job.argv.insert(job.argv.end(), w.begin(), w.end());
    if (trace) {
      job.argv.emplace_back("--trace");
      job.argv.push_back(trace_file(runs.size()));
    }
    runs.push_back(std::move(job));
  }
  std::vector<ordered_json> reports(configs.size());
  std::vector<std::string> errors(configs.size());
  std::size_t failed = 0;
  {
    io::InterruptScope interrupt;
    run_processes(
        runs, jobs,
        [&](std::size_t i, ProcessResult& r) {
          if (r.stopped) return;
          const std::string& chip = configs[i].second;
          if (r.ok()) {
            try {
              reports[i] = ordered_json::parse(r.out);
            } catch (const nlohmann::json::exception& e) {
              errors[i] = fmt::format("exit status 0 but its report is not JSON ({})", e.what());
            }
          } else {
            const std::string said = last_line(r.err);
            errors[i] = said.empty() ? r.describe() + " (it printed no message)"
                                     : fmt::format("{}: {}", r.describe(), said);
          }
          if (errors[i].empty()) {
            std::cerr << fmt::format("compare: {} done in {:.1f} s\n", chip, r.seconds);
          } else {
            ++failed;
            std::cerr << fmt::format("compare: {} FAILED ({})\n", chip, errors[i]);
          }
        },
        [] { return io::interrupted() != 0; });
  }
  if (io::interrupted() != 0) {
    std::cerr << "tpusim: compare interrupted; nothing was written\n";
    io::end_if_interrupted();
  }

  ordered_json cmp;
  cmp["schema"] = "tpusim.compare/1";
  cmp["workload"] = nullptr;
  cmp["runs"] = ordered_json::array();
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (!errors[i].empty()) {
      cmp["failed"].push_back(
          {{configs[i].first == "--chip" ? "chip_file" : "system_file", configs[i].second},
           {"error", errors[i]}});
      continue;
    }
    if (cmp["workload"].is_null()) {
      cmp["workload"] = reports[i]["workload"];
      // Per-chip figures of the compiled program differ by chip; the workload is what ran.
      for (const char* k :
           {"images_per_chip", "batch_per_chip", "micro_batch_per_core", "instructions",
            "weights_in_unified_buffer", "unified_buffer_bytes_used"})
        cmp["workload"].erase(k);
    }
    cmp["runs"].push_back(reports[i]);
  }
  if (cmp["runs"].empty())
    throw InputError(
        fmt::format("compare: every run failed; the first: {}: {}", configs[0].second, errors[0]));

  const std::string md = report::compare_markdown(cmp);
  if (json) out.set(*json, cmp.dump(2) + "\n");
  if (trace) {
    std::vector<std::string> files;
    const std::vector<std::string> labels = report::compare_labels(cmp.at("runs"));
    std::vector<std::string> names;
    for (const auto& r : cmp.at("runs"))
      names.push_back((r.contains("system") ? r.at("system") : r.at("chip")).at("name"));
    for (std::size_t i = 0; i < configs.size(); ++i)
      if (errors[i].empty()) files.push_back(trace_file(i));
    out.set(*trace, merge_traces(files, names, labels));
  }
  if (markdown) out.set(*markdown, md);
  if (csv) out.set(*csv, report::compare_csv(cmp));
  out.commit();
  (out.uses_stdout() ? std::cerr : std::cout) << md.substr(0, md.find("\n## "));
  if (failed > 0) {
    std::cerr << fmt::format("tpusim: compare: {} of {} runs failed\n", failed, configs.size());
    return 1;
  }
  return 0;
}

}  // namespace tpu::cli
