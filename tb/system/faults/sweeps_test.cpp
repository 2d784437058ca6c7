// Sweeps under concurrency and faults (issue 12, rows 9-11, 16): two sweeps started at once on one
// directory, a full disk under a sweep, a workload named like the sweep's own files.
#include "faults.h"

namespace tpu::test::faults {
namespace {

const std::string kSpec = source("tb/system/sweep/data/small.json");

// `kSpec` with its paths made absolute and `change` applied, written as `dir/name.json`.
std::string spec_variant(const fs::path& dir, const std::string& name,
                         const std::function<void(json&)>& change) {
  json spec = json::parse(read_file(kSpec));
  const fs::path here = fs::path(kSpec).parent_path();
  spec["base"] = (here / spec["base"].get<std::string>()).lexically_normal().string();
  for (auto& w : spec["workloads"])
    w["model"] = (here / w["model"].get<std::string>()).lexically_normal().string();
  change(spec);
  const std::string f = (dir / (name + ".json")).string();
  write_file(f, spec.dump(2));
  return f;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text.find(what, at)) != std::string::npos; ++at) ++n;
  return n;
}

std::vector<std::string> failure_records(const fs::path& out) {
  std::vector<std::string> f;
  for (const auto& [name, text] : files(out))
    if (name.find(".failed.json") != std::string::npos) f.push_back(name);
  return f;
}

TEST(Sweeps, Row09_TwoIdenticalSweepsOnOneDirectoryRunEachPointOnce) {
  Scratch d("row09");
  ASSERT_EQ(run({"sweep", kSpec, "-j", "2", "--out", d / "whole"}).status, 0);
  const std::string table = read_file(d / "whole/results.csv");
  const int n = trials(6);
  for (int i = 0; i < n; ++i) {
    const std::string out = d / ("t" + std::to_string(i));
    Child a({"sweep", kSpec, "-j", "1", "--out", out});
    Child b({"sweep", kSpec, "-j", "1", "--out", out});
    const Ended ea = a.wait(), eb = b.wait();
    // Each either ran (status 0) or was refused at once because the other held the directory.
    for (const Ended* e : {&ea, &eb}) {
      EXPECT_TRUE(e->status == 0 || e->status == 2) << e->describe() << "\n" << e->err;
      if (e->status == 2) {
        EXPECT_NE(e->err.find("another tpusim sweep"), std::string::npos) << e->err;
      }
    }
    // Every run ran exactly once between them (a sweep that came second finds them done).
    EXPECT_EQ(count(ea.err, " done in ") + count(eb.err, " done in "), 8u) << "trial " << i << "\n"
                                                                           << ea.err << "\n"
                                                                           << eb.err;
    EXPECT_TRUE(failure_records(out).empty()) << "trial " << i;
    EXPECT_EQ(read_file(out + "/results.csv"), table) << "trial " << i;
  }
}

TEST(Sweeps, Row10_ADifferentSpecOnABusyDirectoryIsRefusedAndTheTableStaysOneSpecs) {
  Scratch d("row10");
  const std::string a = spec_variant(d.path, "a", [](json&) {});
  const std::string b = spec_variant(d.path, "b", [](json& s) {
    s["axes"][1]["range"]["from"] = 800;
    s["axes"][1]["range"]["to"] = 1050;
    s["axes"][1]["range"]["step"] = 250;
  });
  ASSERT_EQ(run({"sweep", a, "-j", "2", "--out", d / "whole-a"}).status, 0);
  ASSERT_EQ(run({"sweep", b, "-j", "2", "--out", d / "whole-b"}).status, 0);
  const int n = trials(6);
  for (int i = 0; i < n; ++i) {
    const std::string out = d / ("t" + std::to_string(i));
    const bool a_first = i % 2 == 0;
    Child first({"sweep", a_first ? a : b, "-j", "1", "--out", out});
    Child second({"sweep", a_first ? b : a, "-j", "1", "--out", out});
    const Ended e1 = first.wait(), e2 = second.wait();
    // Exactly one spec owns the directory; the other is refused without touching it.
    ASSERT_EQ((e1.status == 0) + (e2.status == 0), 1)
        << "trial " << i << ": " << e1.describe() << " / " << e2.describe() << "\n"
        << e1.err << "\n"
        << e2.err;
    const Ended& refused = e1.status == 0 ? e2 : e1;
    EXPECT_EQ(refused.status, 2) << refused.err;
    const bool a_won = (e1.status == 0) == a_first;
    const std::string whole = d / (a_won ? "whole-a" : "whole-b");
    for (const char* f : {"results.csv", "results.json", "sweep.json"})
      EXPECT_EQ(read_file(out + "/" + f), read_file(whole + "/" + f)) << "trial " << i << ": " << f;
  }
}

TEST(Sweeps, Row11_ASweepOnAFullDiskStopsAndResumesToTheSameTable) {
  if (!is_root()) GTEST_SKIP() << "a full disk is a small tmpfs, and mounting one needs root";
  Scratch d("row11");
  ASSERT_EQ(run({"sweep", kSpec, "-j", "2", "--out", d / "whole"}).status, 0);
  std::uintmax_t total = 0;
  for (const auto& [f, text] : files(d.path / "whole")) total += (text.size() + 4095) / 4096 * 4096;
  // Room for about half of what the sweep writes.
  TmpFs disk(d.path / "disk", total / 2 / 4096 * 4096);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << disk.why();
  const std::string out = d / "disk/out";
  const Ended full = run({"sweep", kSpec, "-j", "2", "--out", out});
  EXPECT_EQ(full.status, 2) << full.err;
  EXPECT_NE(full.err.find("no space left on the device"), std::string::npos) << full.err;
  // The sweep's own failed write is not a design point's failure.
  EXPECT_TRUE(failure_records(out).empty());
  ASSERT_TRUE(disk.resize(total * 2));
  const Ended resumed = run({"sweep", kSpec, "-j", "2", "--out", out});
  EXPECT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_TRUE(temporaries(out).empty());
  for (const char* f : {"results.csv", "results.json"})
    EXPECT_EQ(read_file(out + "/" + f), read_file(d / ("whole/" + std::string(f)))) << f;
}

TEST(Sweeps, Row16_AWorkloadCannotTakeTheNameOfAPointsChipConfig) {
  Scratch d("row16");
  const std::string s =
      spec_variant(d.path, "chip", [](json& spec) { spec["workloads"][0]["name"] = "chip"; });
  const Ended e = run({"sweep", s, "--out", d / "out"});
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find("reserved"), std::string::npos) << e.err;
  EXPECT_FALSE(fs::exists(d.path / "out"));
}

TEST(Sweeps, Row17_AnAxisCannotTakeTheNameOfATableColumn) {
  Scratch d("row17");
  for (const std::string& name : std::vector<std::string>{"point", "cnn.cycles", "mlp.status"}) {
    const std::string s =
        spec_variant(d.path, "axis", [&](json& spec) { spec["axes"][0]["name"] = name; });
    const Ended e = run({"sweep", s, "--out", d / "out"});
    EXPECT_EQ(e.status, 2) << name << ": " << e.err;
    EXPECT_NE(e.err.find("axis name \"" + name + "\""), std::string::npos) << e.err;
    EXPECT_FALSE(fs::exists(d.path / "out"));
  }
}

TEST(Sweeps, Row18_ARangeTooFineForItsSpanIsRefusedNotShrunkToOneValue) {
  Scratch d("row18");
  for (const double step : {1e-20, 5e-324}) {
    const std::string s = spec_variant(d.path, "range", [&](json& spec) {
      spec["axes"][1]["range"] = {{"from", 700}, {"to", 701}, {"step", step}};
    });
    const Ended e = run({"sweep", s, "--out", d / "out"});
    EXPECT_EQ(e.status, 2) << step << ": " << e.err;
    EXPECT_NE(e.err.find("more than 10000 values"), std::string::npos) << e.err;
  }
}

}  // namespace
}  // namespace tpu::test::faults
