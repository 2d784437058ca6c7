// `tpusim sweep` as a user runs it, over chip configs and over system configs (slices of a pod,
// `tpusim fit` per point): spec validation before anything runs, one row per design point, failures
// recorded without stopping the sweep, resume after SIGKILL, and results that are byte-identical
// whatever the parallelism and the order the points ran in.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/cli.h"
#include "common/files.h"
#include "common/temp_dir.h"
#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"

namespace tpu {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kSpecDir = std::string(TPUSIM_SOURCE_DIR) + "/tb/system/sweep/data";
const std::string kSpec = kSpecDir + "/small.json";
const std::string kSystemSpec = kSpecDir + "/system_small.json";

json read_json(const std::string& f) { return json::parse(test::read_file(f)); }

// A variant of the test spec, written under `tmp` with its relative paths made absolute.
std::string variant(const test::TempDir& tmp, const std::string& name, json spec) {
  auto absolute = [](json& v) {
    v = (fs::path(kSpecDir) / v.get<std::string>()).lexically_normal().string();
  };
  absolute(spec["base"]);
  for (auto& w : spec["workloads"]) absolute(w["model"]);
  const std::string f = tmp / (name + ".json");
  test::write_file(f, spec.dump(2));
  return f;
}

std::map<std::string, std::string> files_under(const fs::path& dir, const std::string& suffix) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (e.is_regular_file() && p.size() >= suffix.size() &&
        p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0)
      out[fs::relative(e.path(), dir).string()] = test::read_file(p);
  }
  return out;
}

// Point reports (points/<id>/<workload>.json): not the chip config, the host timings
// (.host.json), failure records (.failed.json) or a run's raw report still being recorded
// (.run.json).
std::map<std::string, std::string> point_reports(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (auto& [k, v] : files_under(dir / "points", ".json")) {
    const fs::path f(k);
    if (f.filename() != "chip.json" && f.stem().string().find('.') == std::string::npos) out[k] = v;
  }
  return out;
}

// A spec the sweep must refuse with status 2 before it writes anything, naming the spec file and
// everything in `expected`.
struct BadSpec {
  std::string name;
  json spec;
  std::vector<std::string> expected;  // all in the message
};

void expect_refused(const test::TempDir& tmp, const std::vector<BadSpec>& cases) {
  for (const auto& c : cases) {
    const std::string spec_file{variant(tmp, c.name, c.spec)};
    const auto r = test::run_tpusim("sweep " + spec_file + " --out " + (tmp / c.name));
    EXPECT_EQ(r.status, 2) << c.name << ": " << r.out;
    EXPECT_NE(r.out.find(spec_file), std::string::npos) << c.name << ": " << r.out;
    for (const auto& e : c.expected)
      EXPECT_NE(r.out.find(e), std::string::npos) << c.name << ": " << r.out;
    EXPECT_FALSE(fs::exists(tmp / c.name)) << c.name << ": nothing may be written";
  }
}

TEST(SweepCli, EveryDesignPointGetsItsRowWithTheMetricsOfItsOwnRunReport) {
  test::TempDir tmp("tpusim-sweep");
  const auto r = test::run_tpusim("sweep " + kSpec + " -j 2 --out " + (tmp / "out"));
  ASSERT_EQ(r.status, 0) << r.out;
  const json spec = read_json(kSpec);
  const json res = read_json(tmp / "out/results.json");
  EXPECT_EQ(res["schema"], "tpusim.sweep/1");
  const std::size_t points = spec["axes"][0]["values"].size() * 2;  // x the clock range's two
  ASSERT_EQ(res["points"].size(), points);
  EXPECT_EQ(res["summary"]["done"], points * spec["workloads"].size());
  for (const auto& p : res["points"]) {
    const std::string dir = tmp / ("out/" + p["dir"].get<std::string>());
    // The point's chip config is the base with the axis values applied, tied cols included.
    const ChipConfig cfg = load_chip_config(dir + "/chip.json");
    EXPECT_EQ(cfg.mxu.rows, p["axes"]["array"].get<std::uint32_t>());
    EXPECT_EQ(cfg.mxu.cols, p["axes"]["array"].get<std::uint32_t>());
    EXPECT_EQ(cfg.clock_mhz, p["axes"]["clock_mhz"].get<double>());
    for (const auto& w : spec["workloads"]) {
      const std::string name = w["name"];
      const json rep = read_json(dir + "/" + name + ".json");
      EXPECT_FALSE(rep.contains("host")) << "host timings are kept apart";
      EXPECT_TRUE(fs::exists(dir + "/" + name + ".host.json"));
      EXPECT_EQ(rep["workload"]["images"], w["images"]);
      const json& cell = p["workloads"][name];
      EXPECT_EQ(cell["status"], "ok");
      for (const auto& m : res["metrics"])
        EXPECT_EQ(cell[m.get<std::string>()], rep["totals"][m.get<std::string>()]) << m;
    }
  }
  // CSV: a header and one line per point.
  const std::string csv = test::read_file(tmp / "out/results.csv");
  EXPECT_EQ(static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')), points + 1);
  EXPECT_EQ(csv.rfind("point,array,clock_mhz,cnn.status,cnn.cycles,", 0), 0u) << csv;
  // Nothing temporary is left behind.
  for (const auto& e : fs::recursive_directory_iterator(tmp.path))
    EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(SweepCli, APointRunsByHandFromItsChipConfigWithTheSameResult) {
  test::TempDir tmp("tpusim-sweep");
  const json spec = read_json(kSpec);
  json one = spec;
  one["axes"][0]["values"] = {64};
  one["axes"][1]["range"]["to"] = 700;
  one["workloads"] = {spec["workloads"][0]};
  const std::string spec_file{variant(tmp, "one", one)};
  ASSERT_EQ(test::run_tpusim("sweep " + spec_file + " -j 1 --out " + (tmp / "out")).status, 0);
  const json row = read_json(tmp / "out/results.json")["points"][0];
  const auto r = test::run_tpusim("run --chip " + (tmp / "out/points/000/chip.json") + " --model " +
                                  TPUSIM_SOURCE_DIR +
                                  "/configs/models/fashion_mnist_cnn.json --images 64 --batch 32 "
                                  "--no-check --json " +
                                  (tmp / "by_hand.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  const json rep = read_json(tmp / "by_hand.json");
  EXPECT_EQ(row["workloads"]["cnn"]["cycles"], rep["totals"]["cycles"]);
  EXPECT_EQ(row["workloads"]["cnn"]["energy_j"], rep["totals"]["energy_j"]);
}

TEST(SweepCli, ABadSpecNamesTheAxisAndValueBeforeAnythingRuns) {
  test::TempDir tmp("tpusim-sweep");
  const json spec = read_json(kSpec);
  std::vector<BadSpec> cases;
  json missing = spec;
  missing["axes"][1]["pointer"] = "/mxu/clock";
  cases.push_back({"pointer", missing, {"/axes/1", "/mxu/clock", "names no key", "clock_mhz"}});
  json rejected = spec;
  rejected["axes"][0]["values"] = {64, 0};
  cases.push_back({"value", rejected, {"axis \"array\" value 0", "/mxu/rows"}});
  json empty = spec;
  empty["axes"][0]["values"] = json::array();
  cases.push_back({"empty", empty, {"/axes/0", "array", "non-empty"}});
  json unknown = spec;
  unknown["workloads"][0]["image"] = 3;
  cases.push_back({"unknown", unknown, {"/workloads/0/image", "not a known key"}});
  expect_refused(tmp, cases);
}

TEST(SweepCli, AFailingPointIsRecordedWithItsErrorAndTheSweepGoesOn) {
  test::TempDir tmp("tpusim-sweep");
  json spec = read_json(kSpec);
  // A unified buffer too small for one image's tensors is a valid chip the compiler refuses.
  spec["axes"] = {
      {{"name", "ub_bytes"}, {"pointer", "/unified_buffer/bytes"}, {"values", {4096, 25165824}}}};
  spec["workloads"] = {spec["workloads"][0]};
  const std::string spec_file{variant(tmp, "fails", spec)};
  const auto r = test::run_tpusim("sweep " + spec_file + " -j 2 --out " + (tmp / "out"));
  EXPECT_EQ(r.status, 1) << r.out;
  const json res = read_json(tmp / "out/results.json");
  const json& bad = res["points"][0]["workloads"]["cnn"];
  EXPECT_EQ(bad["status"], "failed");
  EXPECT_NE(bad["error"].get<std::string>().find("exit status 2"), std::string::npos) << bad;
  EXPECT_EQ(res["points"][1]["workloads"]["cnn"]["status"], "ok");
  EXPECT_EQ(res["summary"]["failed"], 1);
  EXPECT_EQ(res["summary"]["done"], 1);
  // A rerun keeps the failure (it is finished) and runs nothing.
  const auto again = test::run_tpusim("sweep " + spec_file + " --out " + (tmp / "out"));
  EXPECT_NE(again.out.find("0 to run"), std::string::npos) << again.out;
}

TEST(SweepCli, AnOutputDirectoryHoldingAnotherSweepIsRefused) {
  test::TempDir tmp("tpusim-sweep");
  json one = read_json(kSpec);
  one["axes"][0]["values"] = {64};
  one["axes"][1]["range"]["to"] = 700;
  one["workloads"] = {one["workloads"][0]};
  ASSERT_EQ(test::run_tpusim("sweep " + variant(tmp, "a", one) + " --out " + (tmp / "out")).status,
            0);
  const std::string before = test::read_file(tmp / "out/results.json");
  one["axes"][0]["values"] = {128};
  const auto r = test::run_tpusim("sweep " + variant(tmp, "b", one) + " --out " + (tmp / "out"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("holds a different sweep"), std::string::npos) << r.out;
  EXPECT_EQ(test::read_file(tmp / "out/results.json"), before);
}

TEST(SweepCli, ResultsAreByteIdenticalWhateverTheParallelismAndTheOrder) {
  test::TempDir tmp("tpusim-sweep");
  ASSERT_EQ(test::run_tpusim("sweep " + kSpec + " -j 1 --out " + (tmp / "serial")).status, 0);
  ASSERT_EQ(
      test::run_tpusim("sweep " + kSpec + " -j 2 --shuffle 7 --out " + (tmp / "shuffled")).status,
      0);
  for (const char* f : {"results.csv", "results.json", "sweep.json"})
    EXPECT_EQ(test::read_file(tmp / ("serial/" + std::string(f))),
              test::read_file(tmp / ("shuffled/" + std::string(f))))
        << f;
  const auto a = point_reports(tmp / "serial"), b = point_reports(tmp / "shuffled");
  EXPECT_EQ(a.size(), 8u);
  EXPECT_TRUE(a == b) << "point reports differ";
}

// Starts `tpusim args...` with its output in `log`; returns its pid.
pid_t start_tpusim(const std::vector<std::string>& args, const std::string& log) {
  const std::string exe = std::string(TPUSIM_BINARY_DIR) + "/tpusim";
  std::vector<std::string> all = {exe};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(exe.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

TEST(SweepCli, ASweepKilledHalfWayResumesRunningOnlyTheUnfinishedPoints) {
  test::TempDir tmp("tpusim-sweep");
  const std::string out = tmp / "out";
  const pid_t pid = start_tpusim({"sweep", kSpec, "-j", "1", "--out", out}, tmp / "first.log");
  // Half of the 8 runs finished, then SIGKILL: no chance to clean up.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  std::size_t finished = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    finished = fs::exists(out + "/points") ? point_reports(out).size() : 0;
    if (finished >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << test::read_file(tmp / "first.log");
  // What survived the kill, with each report's inode and modification time.
  std::map<std::string, std::pair<ino_t, std::int64_t>> kept;
  for (const auto& [f, text] : point_reports(out)) {
    struct stat st {};
    ::stat((out + "/points/" + f).c_str(), &st);
    kept[f] = {st.st_ino, st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec};
  }
  ASSERT_GE(kept.size(), 4u);
  ASSERT_LT(kept.size(), 8u) << "the sweep finished before it was killed; nothing to resume";

  const auto rerun = test::run_tpusim("sweep " + kSpec + " -j 2 --out " + out);
  ASSERT_EQ(rerun.status, 0) << rerun.out;
  // Only the unfinished runs ran: announced, and one progress line each.
  EXPECT_NE(rerun.out.find(fmt::format("= 8 runs, {} to run", 8 - kept.size())), std::string::npos)
      << rerun.out;
  std::size_t ran = 0;
  for (std::size_t at = 0; (at = rerun.out.find(" done in ", at)) != std::string::npos; ++at) ++ran;
  EXPECT_EQ(ran, 8 - kept.size()) << rerun.out;
  for (const auto& [f, id] : kept) {
    struct stat st {};
    ::stat((out + "/points/" + f).c_str(), &st);
    EXPECT_EQ(st.st_ino, id.first) << f << " was rewritten";
    EXPECT_EQ(st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, id.second) << f;
  }
  // The table equals an uninterrupted run's.
  ASSERT_EQ(test::run_tpusim("sweep " + kSpec + " -j 2 --out " + (tmp / "whole")).status, 0);
  for (const char* f : {"results.csv", "results.json"})
    EXPECT_EQ(test::read_file(out + "/" + f), test::read_file(tmp / ("whole/" + std::string(f))))
        << f;
  EXPECT_TRUE(point_reports(out) == point_reports(tmp / "whole"));
}

TEST(SweepCli, SlurmEmitOnlyWritesAJobArrayOfTheUnfinishedRuns) {
  test::TempDir tmp("tpusim-sweep");
  const auto r =
      test::run_tpusim("sweep " + kSpec + " --executor slurm --emit-only --out " + (tmp / "out"));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string script = test::read_file(tmp / "out/slurm/sweep.sbatch");
  EXPECT_NE(script.find("#SBATCH --array=0-7\n"), std::string::npos) << script;
  EXPECT_NE(script.find("sweep --task \"$SLURM_ARRAY_TASK_ID\" --out"), std::string::npos)
      << script;
  // A task run by hand, as Slurm would, records its point; the table then shows it.
  const auto task = test::run_tpusim("sweep --task 3 --out " + (tmp / "out"));
  ASSERT_EQ(task.status, 0) << task.out;
  const auto again =
      test::run_tpusim("sweep " + kSpec + " --executor slurm --emit-only --out " + (tmp / "out"));
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(test::read_file(tmp / "out/slurm/sweep.sbatch").find("#SBATCH --array=0-2,4-7\n"),
            std::string::npos);
  const json res = read_json(tmp / "out/results.json");
  EXPECT_EQ(res["points"][1]["workloads"]["mlp"]["status"], "ok");
  EXPECT_EQ(res["summary"]["pending"], 7);
}

// `--sbatch-arg --partition big` passes both words as written, as `--sbatch-arg=--time=5` does
// its one; the spec may come after them, and the command to run names them.
TEST(SweepCli, SbatchArgTakesAnOptionAndItsValueAsWritten) {
  test::TempDir tmp("tpusim-sweep");
  const auto r = test::run_tpusim(
      "sweep --executor slurm --emit-only --sbatch-arg --partition big "
      "--sbatch-arg=--time=5 --sbatch-arg -p --sbatch-arg 'a b' " +
      kSpec + " --out " + (tmp / "out"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("`sbatch --partition big --time=5 -p 'a b' " +
                       (tmp / "out/slurm/sweep.sbatch") + "`"),
            std::string::npos)
      << r.out;
  // A flag without a value before the spec takes the spec as its value: the spec is missing.
  const auto flag =
      test::run_tpusim("sweep --executor slurm --emit-only --sbatch-arg --exclusive " + kSpec +
                       " --out " + (tmp / "out2"));
  EXPECT_EQ(flag.status, 2) << flag.out;
  EXPECT_NE(flag.out.find("tpusim: sweep: give a sweep spec"), std::string::npos) << flag.out;
}

TEST(SweepCli, SlurmRunsBeyondMaxArraySizeGoIntoFurtherArraysWithTheirOffsets) {
  test::TempDir tmp("tpusim-sweep");
  const std::string cmd =
      "sweep " + kSpec + " --executor slurm --emit-only --max-array-size 3 --out " + (tmp / "out");
  const auto r = test::run_tpusim(cmd);
  ASSERT_EQ(r.status, 0) << r.out;
  // Eight runs: indices 0-2, then 3-5 as 0-2 + 3, then 6-7 as 0-1 + 6.
  const std::string first = test::read_file(tmp / "out/slurm/sweep.sbatch");
  EXPECT_NE(first.find("#SBATCH --array=0-2\n"), std::string::npos) << first;
  EXPECT_NE(first.find("--task \"$SLURM_ARRAY_TASK_ID\""), std::string::npos) << first;
  const std::string second = test::read_file(tmp / "out/slurm/sweep-1.sbatch");
  EXPECT_NE(second.find("#SBATCH --array=0-2\n"), std::string::npos) << second;
  EXPECT_NE(second.find("--task \"$((SLURM_ARRAY_TASK_ID + 3))\""), std::string::npos) << second;
  const std::string third = test::read_file(tmp / "out/slurm/sweep-2.sbatch");
  EXPECT_NE(third.find("#SBATCH --array=0-1\n"), std::string::npos) << third;
  EXPECT_NE(third.find("--task \"$((SLURM_ARRAY_TASK_ID + 6))\""), std::string::npos) << third;
  EXPECT_NE(third.find("array-2-task-%a.out"), std::string::npos) << third;
  // The script runs its task as Slurm would: array index 1 of the third array is run 7.
  const std::string script = tmp / "out/slurm/sweep-2.sbatch";
  ASSERT_EQ(std::system(("SLURM_ARRAY_TASK_ID=1 sh " + script + " >/dev/null 2>&1").c_str()), 0);
  const auto again = test::run_tpusim(cmd);
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(read_json(tmp / "out/results.json")["summary"]["done"], 1);
  EXPECT_EQ(read_json(tmp / "out/results.json")["points"][3]["workloads"]["mlp"]["status"], "ok");
  // Run 7 is done: the third array keeps index 0 (run 6) only.
  EXPECT_NE(test::read_file(tmp / "out/slurm/sweep-2.sbatch").find("#SBATCH --array=0\n"),
            std::string::npos);
}

// System sweeps: slices of a pod as design points, a `tpusim fit` per point at a fixed batch per
// chip, the table's figures those of each point's fit report, the scaling efficiency against the
// one-chip point.
TEST(SweepCli, SystemEverySliceGetsTheFiguresOfItsOwnFitReport) {
  test::TempDir tmp("tpusim-sweep");
  const auto r = test::run_tpusim("sweep " + kSystemSpec + " -j 2 --out " + (tmp / "out"));
  ASSERT_EQ(r.status, 0) << r.out;
  const json res = read_json(tmp / "out/results.json");
  ASSERT_EQ(res["points"].size(), 3u);
  EXPECT_EQ(res["summary"]["done"], 3);
  EXPECT_EQ(res["workloads"][0]["command"], "fit");
  EXPECT_EQ(res["workloads"][0]["batch_per_chip"], 8);
  const std::vector<std::uint32_t> chips = {1, 2, 4};
  double one_chip_images_per_s = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const json& p = res["points"][i];
    const std::string dir = tmp / ("out/" + p["dir"].get<std::string>());
    // The point's system config loads on its own, its chip path absolute.
    const json doc = read_json(dir + "/system.json");
    EXPECT_TRUE(fs::path(doc["chip"].get<std::string>()).is_absolute()) << doc["chip"];
    const SystemConfig sys = load_system_config(dir + "/system.json");
    EXPECT_EQ(sys.chips(), chips[i]);
    EXPECT_EQ(p["chips"], chips[i]);
    const json rep = read_json(dir + "/cnn.json");
    EXPECT_FALSE(rep.contains("host")) << "host timings are kept apart";
    // Scale-out has no other chip to stand for on one chip: that point simulates it whole.
    EXPECT_EQ(rep["mode"], chips[i] == 1 ? "every_chip" : "scale_out");
    EXPECT_EQ(rep["global_batch"], 8 * chips[i]);
    const json& last = rep["step"]["last"];
    const json& cell = p["workloads"]["cnn"];
    ASSERT_EQ(cell["status"], "ok") << cell;
    EXPECT_EQ(cell["global_batch"], rep["global_batch"]);
    EXPECT_EQ(cell["replicas"], rep["replicas"]);
    EXPECT_EQ(cell["step_cycles"], last["cycles"]);
    EXPECT_EQ(cell["step_seconds"], last["seconds"]);
    EXPECT_EQ(cell["images_per_s"], last["images_per_s"]);
    EXPECT_EQ(cell["energy_j"], last["energy_j"]);
    // The exposed all-reduce; a chip alone (its cores' sum, no buckets) has the split's part.
    const double exposed = last.contains("all_reduce")
                               ? last["all_reduce"]["exposed_cycles"].get<double>()
                               : last["split_cycles"]["communication"].get<double>();
    EXPECT_DOUBLE_EQ(cell["all_reduce_share"].get<double>(),
                     exposed / last["cycles"].get<double>());
    if (i == 0) one_chip_images_per_s = last["images_per_s"].get<double>();
    EXPECT_EQ(cell["scaling_reference"], "000");
    EXPECT_DOUBLE_EQ(cell["scaling_efficiency"].get<double>(),
                     last["images_per_s"].get<double>() / (chips[i] * one_chip_images_per_s));
  }
  // One chip sums its two TensorCores' gradients; more chips add the links' rings, and the
  // small CNN's step is short enough that the share grows with every chip.
  const auto share = [&](std::size_t i) {
    return res["points"][i]["workloads"]["cnn"]["all_reduce_share"].get<double>();
  };
  EXPECT_GT(share(0), 0.0);
  EXPECT_GT(share(1), share(0));
  EXPECT_GT(share(2), share(1));
  const std::string csv = test::read_file(tmp / "out/results.csv");
  EXPECT_EQ(csv.rfind("point,slice,chips,cnn.status,cnn.replicas,cnn.global_batch,", 0), 0u) << csv;
  EXPECT_NE(csv.find(",cnn.scaling_efficiency,cnn.error\n"), std::string::npos) << csv;
}

TEST(SweepCli, SystemARunWorkloadServesItsImagesPerChipOnEverySliceBesideTheFit) {
  test::TempDir tmp("tpusim-sweep");
  json spec = read_json(kSystemSpec);
  json serve = json::object();
  serve["name"] = "serve";
  serve["command"] = "run";
  serve["model"] = spec["workloads"][0]["model"];
  serve["images_per_chip"] = 16;
  serve["batch_per_chip"] = 8;
  serve["timing_only"] = true;
  spec["workloads"].push_back(serve);
  const auto r =
      test::run_tpusim("sweep " + variant(tmp, "mixed", spec) + " -j 2 --out " + (tmp / "out"));
  ASSERT_EQ(r.status, 0) << r.out;
  const json res = read_json(tmp / "out/results.json");
  EXPECT_EQ(res["workloads"][1]["command"], "run");
  EXPECT_EQ(res["workloads"][1]["images_per_chip"], 16);
  const std::vector<std::uint32_t> chips = {1, 2, 4};
  double one_chip = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const json& p = res["points"][i];
    // The run's report: run --system on the point's system, 16 images and a batch of 8 per chip.
    const json rep = read_json(tmp / ("out/" + p["dir"].get<std::string>() + "/serve.json"));
    EXPECT_EQ(rep["workload"]["images"], 16 * chips[i]);
    EXPECT_EQ(rep["workload"]["batch"], 8 * chips[i]);
    // A one-chip system runs as its chip (docs/systems.md).
    if (chips[i] > 1) {
      EXPECT_EQ(rep["system"]["chips"], chips[i]);
    }
    const json& cell = p["workloads"]["serve"];
    ASSERT_EQ(cell["status"], "ok") << cell;
    EXPECT_EQ(cell["cycles"], rep["totals"]["cycles"]);
    EXPECT_EQ(cell["images_per_s"], rep["totals"]["images_per_s"]);
    EXPECT_FALSE(cell.contains("step_cycles"));
    if (i == 0) one_chip = rep["totals"]["images_per_s"].get<double>();
    EXPECT_DOUBLE_EQ(cell["scaling_efficiency"].get<double>(),
                     rep["totals"]["images_per_s"].get<double>() / (chips[i] * one_chip));
    // The fit beside it keeps its own columns.
    EXPECT_TRUE(p["workloads"]["cnn"].contains("step_cycles"));
  }
  const std::string csv = test::read_file(tmp / "out/results.csv");
  EXPECT_NE(csv.find(",cnn.error,serve.status,serve.cycles,serve.seconds,"), std::string::npos)
      << csv;
}

TEST(SweepCli, SystemAPointRunsByHandFromItsSystemConfigWithTheSameResult) {
  test::TempDir tmp("tpusim-sweep");
  json spec = read_json(kSystemSpec);
  spec["axes"][0]["values"] = {spec["axes"][0]["values"][2]};
  ASSERT_EQ(test::run_tpusim("sweep " + variant(tmp, "one", spec) + " -j 1 --out " + (tmp / "out"))
                .status,
            0);
  const json row = read_json(tmp / "out/results.json")["points"][0];
  const auto r = test::run_tpusim("fit --system " + (tmp / "out/points/000/system.json") +
                                  " --model " + TPUSIM_SOURCE_DIR +
                                  "/configs/models/fashion_mnist_cnn.json --random-weights "
                                  "--steps 1 --optimizer momentum --scale-out --no-check "
                                  "--batch 32 --json " +
                                  (tmp / "by_hand.json"));
  ASSERT_EQ(r.status, 0) << r.out;
  const json rep = read_json(tmp / "by_hand.json");
  EXPECT_EQ(row["workloads"]["cnn"]["step_cycles"], rep["step"]["last"]["cycles"]);
  EXPECT_EQ(row["workloads"]["cnn"]["energy_j"], rep["step"]["last"]["energy_j"]);
  // No one-chip point: no scaling efficiency column.
  const json res = read_json(tmp / "out/results.json");
  EXPECT_EQ(std::count(res["metrics"].begin(), res["metrics"].end(), "scaling_efficiency"), 0);
}

// A fit workload's label smoothing and warm-up (docs/sweeps.md) become the point's fit flags:
// the plan's arguments carry them, and the point trains with them.
TEST(SweepCli, SystemAFitWorkloadsLabelSmoothingAndWarmupReachFit) {
  test::TempDir tmp("tpusim-sweep");
  json spec = read_json(kSystemSpec);
  spec["axes"][0]["values"] = {spec["axes"][0]["values"][0]};
  spec["workloads"][0]["label_smoothing"] = 0.1;
  spec["workloads"][0]["warmup_steps"] = 2;
  ASSERT_EQ(
      test::run_tpusim("sweep " + variant(tmp, "smooth", spec) + " -j 1 --out " + (tmp / "out"))
          .status,
      0);
  const auto args = read_json(tmp / "out/sweep.json")["workloads"][0]["args"];
  const auto flag = [&](const std::string& f) {
    const auto at = std::find(args.begin(), args.end(), f);
    return at == args.end() || at + 1 == args.end() ? std::string() : (at + 1)->get<std::string>();
  };
  EXPECT_EQ(flag("--label-smoothing"), "0.1");
  EXPECT_EQ(flag("--warmup-steps"), "2");
  const json row = read_json(tmp / "out/results.json")["points"][0];
  EXPECT_TRUE(row["workloads"]["cnn"].contains("step_cycles")) << row.dump();
}

// A fit workload's distributed BatchNormalization group becomes the point's --bn-group; every
// point's system (one chip of two cores, two chips) splits into groups of two.
TEST(SweepCli, SystemAFitWorkloadsBatchNormGroupReachesFit) {
  test::TempDir tmp("tpusim-sweep");
  json spec = read_json(kSystemSpec);
  spec["axes"][0]["values"] = {spec["axes"][0]["values"][0], spec["axes"][0]["values"][1]};
  spec["workloads"][0]["model"] = "../../../../configs/models/resnet_mini.json";
  spec["workloads"][0]["name"] = "resnet";
  spec["workloads"][0]["bn_group"] = 2;
  ASSERT_EQ(
      test::run_tpusim("sweep " + variant(tmp, "bn", spec) + " -j 1 --out " + (tmp / "out")).status,
      0);
  const auto args = read_json(tmp / "out/sweep.json")["workloads"][0]["args"];
  const auto at = std::find(args.begin(), args.end(), "--bn-group");
  ASSERT_NE(at, args.end());
  ASSERT_NE(at + 1, args.end());
  EXPECT_EQ(*(at + 1), "2");
  const json results = read_json(tmp / "out/results.json");  // the loop's range lives in it
  for (const json& row : results["points"])
    EXPECT_TRUE(row["workloads"]["resnet"].contains("step_cycles")) << row.dump();
}

TEST(SweepCli, SystemABadSpecNamesTheAxisAndValueBeforeAnythingRuns) {
  test::TempDir tmp("tpusim-sweep");
  const json spec = read_json(kSystemSpec);
  std::vector<BadSpec> cases;
  json zero = spec;
  zero["axes"][0]["values"][1] = {{0, 2}, {false, false}};
  cases.push_back({"zero_extent", zero, {"axis \"slice\" value", "/ici/topology/dims/0 = 0"}});
  json wraps = spec;
  wraps["axes"][0]["values"][1] = {{1, 2}, {false}};
  cases.push_back(
      {"wraparound_short", wraps, {"axis \"slice\" value", "/ici/topology/wraparound"}});
  json train = spec;
  train["workloads"][0]["command"] = "train";
  cases.push_back({"train_on_a_system", train, {"/workloads/0/command", "\"fit\" or \"run\""}});
  json batch = spec;
  batch["workloads"][0]["batch"] = 64;
  cases.push_back({"batch", batch, {"/workloads/0/batch", "not a known key"}});
  json per_chip = spec;
  per_chip["workloads"][0]["batch_per_chip"] = 0;
  cases.push_back({"batch_per_chip_zero", per_chip, {"/workloads/0/batch_per_chip"}});
  json optimizer = spec;
  optimizer["workloads"][0]["optimizer"] = "adamw";
  cases.push_back({"optimizer", optimizer, {"/workloads/0/optimizer", "lars"}});
  json smoothing = spec;
  smoothing["workloads"][0]["label_smoothing"] = 1;
  cases.push_back({"label_smoothing", smoothing, {"/workloads/0/label_smoothing = 1", "[0, 1)"}});
  json warmup = spec;
  warmup["workloads"][0]["warmup_steps"] = -2;
  cases.push_back({"warmup_steps", warmup, {"/workloads/0/warmup_steps"}});
  json named = spec;
  named["workloads"][0]["name"] = "system";
  cases.push_back({"reserved_name", named, {"/workloads/0/name", "reserved"}});
  json chips_axis = spec;
  chips_axis["axes"][0]["name"] = "chips";
  cases.push_back({"chips_axis", chips_axis, {"/axes/0", "\"chips\""}});
  expect_refused(tmp, cases);
}

}  // namespace
}  // namespace tpu
