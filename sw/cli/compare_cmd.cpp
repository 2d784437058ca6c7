#include "sw/cli/compare_cmd.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/cli/process_pool.h"
#include "sw/report/files.h"
#include "sw/report/formats.h"

namespace tpu::cli {
namespace fs = std::filesystem;
using nlohmann::ordered_json;

int run_compare(CompareCommand& cmd) {
  if (cmd.chips.size() < 2) throw InputError("compare: give at least two --chip configs");
  // Every config is checked before anything runs: a typo in the fifth chip should not cost the
  // first four simulations.
  for (const auto& c : cmd.chips) (void)load_chip_config(c);
  resolve_workload(cmd.workload);
  const unsigned jobs = cmd.jobs > 0 ? cmd.jobs : default_parallelism();

  char tmpl[] = "/tmp/tpusim-compare-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    throw InputError(
        fmt::format("compare: cannot create a temporary directory ({})", std::strerror(errno)));
  const std::string dir = tmpl;

  std::vector<ProcessJob> runs;
  std::vector<std::string> report_files;
  const auto w = workload_args(cmd.workload);
  for (std::size_t i = 0; i < cmd.chips.size(); ++i) {
    report_files.push_back(fmt::format("{}/{}.json", dir, i));
    ProcessJob job;
    job.argv = {"tpusim", "run", "--chip", cmd.chips[i], "--json", report_files.back()};
    job.argv.insert(job.argv.end(), w.begin(), w.end());
    job.log = fmt::format("{}/{}.log", dir, i);
    runs.push_back(std::move(job));
  }
  std::vector<ordered_json> reports(cmd.chips.size());
  std::vector<std::string> errors(cmd.chips.size());
  std::size_t failed = 0;
  run_processes(runs, jobs, [&](std::size_t i, const ProcessResult& r) {
    const std::string& chip = cmd.chips[i];
    if (r.ok()) {
      reports[i] = ordered_json::parse(report::read_text_file(report_files[i]));
      std::cerr << fmt::format("compare: {} done in {:.1f} s\n", chip, r.seconds);
    } else {
      ++failed;
      errors[i] = fmt::format("{}: {}", r.describe(), last_line(runs[i].log));
      std::cerr << fmt::format("compare: {} FAILED ({})\n", chip, errors[i]);
    }
  });
  std::error_code ec;
  fs::remove_all(dir, ec);

  ordered_json cmp;
  cmp["schema"] = "tpusim.compare/1";
  cmp["workload"] = nullptr;
  cmp["runs"] = ordered_json::array();
  for (std::size_t i = 0; i < cmd.chips.size(); ++i) {
    if (!errors[i].empty()) {
      cmp["failed"].push_back({{"chip_file", cmd.chips[i]}, {"error", errors[i]}});
      continue;
    }
    if (cmp["workload"].is_null()) {
      cmp["workload"] = reports[i]["workload"];
      // Per-chip figures of the compiled program differ by chip; the workload is what ran.
      for (const char* k : {"micro_batch_per_core", "instructions", "weights_in_unified_buffer",
                            "unified_buffer_bytes_used"})
        cmp["workload"].erase(k);
    }
    cmp["runs"].push_back(reports[i]);
  }
  if (cmp["runs"].empty())
    throw InputError(
        fmt::format("compare: every chip failed; the first: {}: {}", cmd.chips[0], errors[0]));

  const std::string md = report::compare_markdown(cmp);
  std::cout << md.substr(0, md.find("\n## "));
  if (!cmd.json.empty()) report::write_atomically(cmd.json, cmp.dump(2) + "\n");
  if (!cmd.markdown.empty()) report::write_atomically(cmd.markdown, md);
  if (!cmd.csv.empty()) report::write_atomically(cmd.csv, report::compare_csv(cmp));
  if (failed > 0) {
    std::cerr << fmt::format("tpusim: compare: {} of {} chips failed\n", failed, cmd.chips.size());
    return 1;
  }
  return 0;
}

}  // namespace tpu::cli
