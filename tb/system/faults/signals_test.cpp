// Signals at random moments (issue 12, rows 5-8 and 19): SIGINT, SIGTERM and SIGHUP to run,
// compare, sweep and train, alone or to their whole process group as a terminal's Ctrl-C or
// `timeout` sends them, and SIGKILL to a sweep. After each: no temporary file or directory, the
// outputs all there or none, no process left, and a resumed sweep's table identical to an
// uninterrupted one. sw/io/signals.h states the promises.
#include <fstream>

#include "faults.h"
#include "system/bad_input/bad_input.h"

namespace tpu::test::faults {
namespace {

const std::string kV1 = source("configs/chips/v1.json");
const std::string kV3 = source("configs/chips/v3.json");
const std::string kSpec = source("tb/system/sweep/data/small.json");

constexpr int kTerminating[] = {SIGINT, SIGTERM, SIGHUP};

bool parses(const std::string& text) {
  try {
    return !json::parse(text).is_discarded();
  } catch (const std::exception&) {
    return false;
  }
}

// How long `args` takes uninterrupted: the window the random moments are drawn from.
double duration_of(const std::vector<std::string>& args, const Options& o = {}) {
  Child c(args, o);
  const Ended e = c.wait();
  EXPECT_EQ(e.status, 0) << e.err;
  return c.seconds();
}

// What one trial did, for the summary a failure prints.
std::string trial(int i, int sig, double at) {
  return "trial " + std::to_string(i) + ": signal " + std::to_string(sig) + " at " +
         std::to_string(at) + " s";
}

TEST(Signals, Row05_RunEndedByASignalLeavesAllItsOutputsOrNone) {
  Scratch d("row05");
  auto args = [&](const fs::path& dir) -> std::vector<std::string> {
    return {"run",
            "--chip",
            kV3,
            "--images",
            "512",
            "--batch",
            "128",
            "--json",
            (dir / "r.json").string(),
            "--scalesim-csv",
            (dir / "csv").string(),
            "--markdown",
            (dir / "r.md").string(),
            "--trace",
            (dir / "r.trace.json").string()};
  };
  fs::create_directories(d.path / "whole");
  const double window = duration_of(args(d.path / "whole")) * 1.2;
  auto g = rng("Row05");
  const int n = trials(30);
  int completed = 0, interrupted = 0;
  for (int i = 0; i < n; ++i) {
    const fs::path dir = d.path / ("t" + std::to_string(i));
    fs::create_directories(dir);
    const int sig = kTerminating[g() % 3];
    const double at = uniform(g, 0, window);
    Child c(args(dir));
    std::this_thread::sleep_for(std::chrono::duration<double>(at));
    c.signal(sig, g() % 2 == 0);
    const Ended e = c.wait();
    const std::string what = trial(i, sig, at);
    ASSERT_TRUE(acceptable(e, sig)) << what << ": " << e.describe() << "\n" << e.err;
    EXPECT_TRUE(temporaries(dir).empty()) << what;
    EXPECT_TRUE(c.group_gone()) << what;
    const auto left = files(dir);
    if (e.status == 0) {
      ++completed;
      EXPECT_EQ(left.size(), 6u) << what;
    } else {
      ++interrupted;
      // All or nothing: the set was renamed into place with the signals held back.
      EXPECT_TRUE(left.empty() || left.size() == 6u) << what << ": " << left.size() << " files";
      if (left.empty()) {
        EXPECT_FALSE(fs::exists(dir / "csv")) << what << ": an empty --scalesim-csv dir";
      }
    }
    for (const auto& [f, text] : left)
      if (f.size() > 5 && f.compare(f.size() - 5, 5, ".json") == 0) {
        EXPECT_TRUE(parses(text)) << what << ": " << f << " is cut short";
      }
  }
  std::cerr << "Row05: " << n << " trials, " << interrupted << " interrupted, " << completed
            << " completed\n";
  EXPECT_GT(interrupted, 0) << "no trial was interrupted: the window is wrong";
}

TEST(Signals, Row06_CompareEndedByASignalLeavesNothingAndNoChild) {
  Scratch d("row06-signals");
  fs::create_directories(d.path / "tmp");
  Options o;
  o.env = {{"TMPDIR", d / "tmp"}};
  auto args = [&](const fs::path& dir) -> std::vector<std::string> {
    return {"compare",
            "--chip",
            kV1,
            "--chip",
            kV3,
            "--images",
            "1024",
            "-j",
            "2",
            "--json",
            (dir / "cmp.json").string(),
            "--markdown",
            (dir / "cmp.md").string()};
  };
  fs::create_directories(d.path / "whole");
  const double window = duration_of(args(d.path / "whole"), o) * 1.2;
  auto g = rng("Row06");
  const int n = trials(20);
  int interrupted = 0;
  for (int i = 0; i < n; ++i) {
    const fs::path dir = d.path / ("t" + std::to_string(i));
    fs::create_directories(dir);
    const int sig = kTerminating[g() % 3];
    const double at = uniform(g, 0, window);
    Child c(args(dir), o);
    std::this_thread::sleep_for(std::chrono::duration<double>(at));
    c.signal(sig, g() % 2 == 0);
    const Ended e = c.wait();
    const std::string what = trial(i, sig, at);
    ASSERT_TRUE(acceptable(e, sig)) << what << ": " << e.describe() << "\n" << e.err;
    if (e.signal) ++interrupted;
    EXPECT_TRUE(c.group_gone()) << what << ": a simulation outlived the compare";
    EXPECT_TRUE(fs::is_empty(d.path / "tmp")) << what;
    EXPECT_TRUE(temporaries(dir).empty()) << what;
    const auto left = files(dir);
    EXPECT_TRUE(left.empty() || left.size() == 2u) << what << ": " << left.size() << " files";
    // A finished compare has both; one ended by a signal has neither, or both when the signal
    // came after they were renamed into place (nothing can take a finished output back).
    if (e.status == 0) {
      EXPECT_EQ(left.size(), 2u) << what;
    }
    for (const auto& [f, text] : left) {
      if (f == "cmp.json") {
        EXPECT_TRUE(parses(text)) << what << ": cmp.json is cut short";
      }
    }
  }
  std::cerr << "Row06: " << n << " trials, " << interrupted << " interrupted\n";
  EXPECT_GT(interrupted, 0);
}

// The table of an uninterrupted sweep of `spec`, to compare resumed ones with.
std::map<std::string, std::string> whole_table(const fs::path& out, const std::string& spec,
                                               const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"sweep", spec, "-j", "2", "--out", out.string()};
  a.insert(a.end(), extra.begin(), extra.end());
  const Ended e = run(a);
  EXPECT_TRUE(e.status == 0 || e.status == 1) << e.err;
  return {{"results.csv", read_file(out / "results.csv")},
          {"results.json", read_file(out / "results.json")}};
}

std::vector<std::string> failure_records(const fs::path& out) {
  std::vector<std::string> f;
  for (const auto& [name, text] : files(out))
    if (name.find(".failed.json") != std::string::npos) f.push_back(name);
  return f;
}

// Interrupts a sweep at a random moment with `sig` (to the group or the sweep alone), then runs
// it again and checks the table against the uninterrupted one.
void interrupt_and_resume(const std::string& test, const std::vector<int>& signals, int n,
                          bool group_only) {
  Scratch d(test);
  const auto whole = whole_table(d.path / "whole", kSpec);
  const double window = [&] {
    Child c({"sweep", kSpec, "-j", "2", "--out", d / "timed"});
    c.wait();
    return c.seconds() * 1.1;
  }();
  auto g = rng(test);
  int interrupted = 0;
  for (int i = 0; i < n; ++i) {
    const fs::path out = d.path / ("t" + std::to_string(i));
    const int sig = signals[g() % signals.size()];
    const double at = uniform(g, 0, window);
    const bool group = group_only || g() % 2 == 0;
    Child c({"sweep", kSpec, "-j", "2", "--out", out.string()});
    std::this_thread::sleep_for(std::chrono::duration<double>(at));
    c.signal(sig, group);
    const Ended e = c.wait();
    const std::string what = trial(i, sig, at) + (group ? " to the group" : " to the sweep");
    ASSERT_TRUE(acceptable(e, sig)) << what << ": " << e.describe() << "\n" << e.err;
    if (e.signal) ++interrupted;
    EXPECT_TRUE(c.group_gone()) << what << ": a run outlived the sweep";
    EXPECT_TRUE(failure_records(out).empty()) << what
                                              << ": a run the sweep's interruption "
                                                 "ended was recorded as failed";
    if (!fs::exists(out)) continue;  // stopped before it made its directory
    const Ended again = run({"sweep", kSpec, "-j", "2", "--out", out.string()});
    EXPECT_EQ(again.status, 0) << what << ": " << again.err;
    EXPECT_TRUE(temporaries(out).empty()) << what;
    EXPECT_EQ(read_file(out / "results.csv"), whole.at("results.csv")) << what;
    EXPECT_EQ(read_file(out / "results.json"), whole.at("results.json")) << what;
  }
  std::cerr << test << ": " << n << " trials, " << interrupted << " interrupted\n";
  EXPECT_GT(interrupted, 0);
}

TEST(Signals, Row07_SweepKilledWhileWritingResumesToTheSameTableWithoutTemporaries) {
  interrupt_and_resume("Row07", {SIGTERM, SIGKILL}, trials(16), false);
}

TEST(Signals, Row08_CtrlCToTheSweepsProcessGroupLeavesRunsPendingNeverFailed) {
  interrupt_and_resume("Row08", {SIGINT}, trials(16), true);
}

// The children of `pid` (Linux: /proc/<pid>/task/<pid>/children).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

TEST(Signals, Row08_ARunEndedByASignalFromOutsideIsPendingAndTheResumeFinishesIt) {
  Scratch d("row08-one");
  const auto whole = whole_table(d.path / "whole", kSpec);
  const fs::path out = d.path / "out";
  Child c({"sweep", kSpec, "-j", "1", "--out", out.string()});
  // The first run the sweep starts gets SIGTERM, as from a user's kill or an OOM handler.
  pid_t victim = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (victim == 0 && std::chrono::steady_clock::now() < until) {
    const auto kids = children_of(c.pid());
    if (!kids.empty()) victim = kids.front();
  }
  ASSERT_NE(victim, 0) << "the sweep started no run";
  ::kill(victim, SIGTERM);
  const Ended e = c.wait();
  EXPECT_EQ(e.status, 1) << e.err;
  EXPECT_NE(e.err.find("ended by a signal from outside the sweep and are pending"),
            std::string::npos)
      << e.err;
  EXPECT_TRUE(failure_records(out).empty()) << "the signalled run was recorded as failed";
  EXPECT_NE(read_file(out / "results.csv").find(",pending,"), std::string::npos);
  const Ended again = run({"sweep", kSpec, "-j", "2", "--out", out.string()});
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_NE(again.err.find("1 to run"), std::string::npos) << again.err;
  EXPECT_EQ(read_file(out / "results.csv"), whole.at("results.csv"));
}

TEST(Signals, Row19_AnInterruptedRetryKeepsEveryFailureRecord) {
  Scratch d("row19");
  // Two unified-buffer sizes: the 16 KiB points fail in the compiler, deterministically.
  json spec = json::parse(read_file(kSpec));
  spec["base"] = kV1;
  spec["axes"] = json::array({json{
      {"name", "ub_bytes"}, {"pointer", "/unified_buffer/bytes"}, {"values", {16384, 25165824}}}});
  for (auto& w : spec["workloads"])
    w["model"] =
        source("configs/models/" + fs::path(w["model"].get<std::string>()).filename().string());
  write_file(d / "spec.json", spec.dump(2));
  const std::string s = d / "spec.json";
  const fs::path out = d.path / "out";
  const Ended first = run({"sweep", s, "-j", "2", "--out", out.string()});
  ASSERT_EQ(first.status, 1) << first.err;
  const auto failures = failure_records(out);
  ASSERT_EQ(failures.size(), 2u);
  std::map<std::string, std::string> recorded;
  for (const auto& f : failures) recorded[f] = read_file(out / f);
  const std::string table = read_file(out / "results.csv");

  const double window = [&] {
    Child c({"sweep", s, "-j", "2", "--out", (d.path / "timed").string()});
    c.wait();
    return c.seconds();
  }();
  auto g = rng("Row19");
  const int n = trials(12);
  for (int i = 0; i < n; ++i) {
    const double at = uniform(g, 0, window);
    Child c({"sweep", s, "-j", "2", "--retry-failed", "--out", out.string()});
    std::this_thread::sleep_for(std::chrono::duration<double>(at));
    c.signal(SIGINT, true);
    const Ended e = c.wait();
    ASSERT_TRUE(acceptable(e, SIGINT)) << e.describe() << "\n" << e.err;
    // Each record is there, with its error, whether or not its rerun got to finish.
    for (const auto& [f, text] : recorded)
      EXPECT_EQ(read_file(out / f), text) << trial(i, SIGINT, at) << ": " << f;
  }
  const Ended last = run({"sweep", s, "-j", "2", "--out", out.string()});
  EXPECT_EQ(last.status, 1);
  EXPECT_EQ(read_file(out / "results.csv"), table);
}

TEST(Signals, TrainEndedByASignalLeavesTheOldWeightsOrTheNewPair) {
  Scratch d("train-signals");
  // A data set of 2,000 random images: a second or so of training, in several batches.
  {
    using bad_input::be32;
    using bad_input::gzip;
    fs::create_directories(d.path / "data");
    std::mt19937 g(3);
    for (const auto& [name, n] : {std::pair{"train", 2000u}, std::pair{"t10k", 64u}}) {
      std::string pixels(std::size_t{n} * 784, '\0'), labels(n, '\0');
      for (char& c : pixels) c = static_cast<char>(g() & 0xff);
      for (char& c : labels) c = static_cast<char>(g() % 10);
      write_file(d / ("data/" + std::string(name) + "-images-idx3-ubyte.gz"),
                 gzip(be32({0x803, n, 28, 28}) + pixels));
      write_file(d / ("data/" + std::string(name) + "-labels-idx1-ubyte.gz"),
                 gzip(be32({0x801, n}) + labels));
    }
  }
  auto args = [&](const fs::path& out) -> std::vector<std::string> {
    return {"train",   "--data-dir", d / "data", "--epochs",  "1",
            "--batch", "32",         "--save",   out.string()};
  };
  // The old pair (seed 2) and what an uninterrupted run writes (seed 1): a trial must leave one
  // or the other, whole.
  fs::create_directories(d.path / "old");
  std::vector<std::string> old_args = args(d.path / "old/w.bin");
  old_args.insert(old_args.end(), {"--seed", "2"});
  ASSERT_EQ(run(old_args).status, 0);
  const auto old = files(d.path / "old");
  ASSERT_EQ(old.size(), 2u);
  fs::create_directories(d.path / "new");
  const double window = duration_of(args(d.path / "new/w.bin")) * 1.2;
  const std::string new_weights = read_file(d.path / "new/w.bin");
  ASSERT_NE(new_weights, old.at("w.bin"));
  auto g = rng("Train");
  const int n = trials(12);
  int interrupted = 0;
  for (int i = 0; i < n; ++i) {
    const fs::path dir = d.path / ("t" + std::to_string(i));
    fs::create_directories(dir);
    for (const auto& [f, text] : old) write_file(dir / f, text);
    const int sig = kTerminating[g() % 3];
    const double at = uniform(g, 0, window);
    Child c(args(dir / "w.bin"));
    std::this_thread::sleep_for(std::chrono::duration<double>(at));
    c.signal(sig, true);
    const Ended e = c.wait();
    const std::string what = trial(i, sig, at);
    ASSERT_TRUE(acceptable(e, sig)) << what << ": " << e.describe() << "\n" << e.err;
    EXPECT_TRUE(temporaries(dir).empty()) << what;
    if (e.signal) ++interrupted;
    const auto now = files(dir);
    ASSERT_EQ(now.size(), 2u) << what;
    const bool kept_old = now == old;
    const bool whole_new = now.at("w.bin") == new_weights && now.at("w.json") != old.at("w.json") &&
                           parses(now.at("w.json"));
    EXPECT_TRUE(kept_old || whole_new) << what << ": a mix of the old and the new pair";
    if (!e.signal) {
      EXPECT_TRUE(whole_new) << what;
    }
  }
  std::cerr << "Train: " << n << " trials, " << interrupted << " interrupted\n";
  EXPECT_GT(interrupted, 0);
}

}  // namespace
}  // namespace tpu::test::faults
