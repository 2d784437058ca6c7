// The command line's conventions for outputs and shipped files (docs/cli.md): `-` is standard
// output for every output flag that names a file, the document then has standard output to
// itself (the human summary or log goes to stderr), `info --json` takes a path as --json does
// everywhere, and the default model and weights are found in the data directory, from any
// current directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "system/bad_input/bad_input.h"

namespace tpu {
namespace {

using test::bad_input::Outcome;
using test::bad_input::run_tpusim;
using test::bad_input::source_path;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kV1 = source_path("configs/chips/v1.json");
const std::string kV3 = source_path("configs/chips/v3.json");

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool is_json(const std::string& text) { return nlohmann::json::accept(text); }

struct DashRow {
  std::vector<std::string> args;  // with "-" for the output under test
  enum class Kind { Json, Markdown, Csv, LayersCsv, Program } kind;
};

TEST(CliOutputs, DashIsStandardOutputForEveryOutputThatNamesAFile) {
  using K = DashRow::Kind;
  const test::TempDir d("tpusim-dash");
  std::ofstream(d / "p.s") << "nop\nhalt\n";
  const std::vector<std::string> run = {"run", "--chip", kV1, "--images", "1", "--batch", "1"};
  const std::vector<std::string> fit = {"fit", "--chip",  kV3,  "--steps",
                                        "1",   "--batch", "16", "--timing-only"};
  auto with = [](std::vector<std::string> a, std::initializer_list<std::string> more) {
    a.insert(a.end(), more);
    return a;
  };
  const std::vector<DashRow> rows = {
      {with(run, {"--json", "-"}), K::Json},
      {with(run, {"--markdown", "-"}), K::Markdown},
      {with(run, {"--trace", "-"}), K::Json},
      {with(run, {"--csv", "-"}), K::LayersCsv},
      {{"compare", "--chip", kV1, "--chip", kV3, "--images", "1", "--batch", "1", "-j", "1",
        "--json", "-"},
       K::Json},
      {{"compare", "--chip", kV1, "--chip", kV3, "--images", "1", "--batch", "1", "-j", "1",
        "--csv", "-"},
       K::Csv},
      {with(fit, {"--json", "-"}), K::Json},
      {with(fit, {"--markdown", "-"}), K::Markdown},
      {{"graph", "--json", "-"}, K::Json},
      {{"info", "--chip", kV1, "--json", "-"}, K::Json},
      {{"asm", d / "p.s", "-o", "-"}, K::Program},
  };
  for (const DashRow& r : rows) {
    std::string line;
    for (const auto& a : r.args) line += a + " ";
    SCOPED_TRACE(line);
    const Outcome o = run_tpusim(r.args);
    ASSERT_EQ(o.status, 0) << o.err;
    switch (r.kind) {
      case K::Json:
        EXPECT_TRUE(is_json(o.out)) << "standard output is the document alone:\n" << o.out;
        break;
      case K::Markdown: EXPECT_THAT(o.out, StartsWith("# ")) << o.out; break;
      case K::Csv:
        EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 3) << "a header and two rows";
        break;
      case K::LayersCsv:
        EXPECT_THAT(o.out, StartsWith("layer,type,cycles,span_cycles,")) << o.out;
        EXPECT_NE(o.out.find("\ntotal,"), std::string::npos) << "ends with the total row";
        break;
      case K::Program:
        EXPECT_EQ(o.out.size(), 2 * 32u) << "two 32-byte instructions (docs/isa.md)";
        break;
    }
  }
}

TEST(CliOutputs, TheHumanSummaryGoesToStderrWhenTheDocumentTakesStandardOutput) {
  const test::TempDir d("tpusim-summary");
  const Outcome to_file =
      run_tpusim({"run", "--chip", kV1, "--images", "1", "--batch", "1", "--json", d / "r.json"});
  ASSERT_EQ(to_file.status, 0) << to_file.err;
  EXPECT_THAT(to_file.out, HasSubstr("chip        tpu-v1"));
  const Outcome to_stdout =
      run_tpusim({"run", "--chip", kV1, "--images", "1", "--batch", "1", "--json", "-"});
  ASSERT_EQ(to_stdout.status, 0) << to_stdout.err;
  EXPECT_THAT(to_stdout.err, HasSubstr("chip        tpu-v1"));
  EXPECT_TRUE(is_json(to_stdout.out));
}

TEST(CliOutputs, FitsKerasLogIsOnStderrSoStandardOutputStaysForADocument) {
  const Outcome o = run_tpusim({"fit", "--chip", kV3, "--steps", "1", "--batch", "16"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_THAT(o.err, HasSubstr("1/1"));
}

// --json names where the JSON goes in every command; `info --json` alone is still standard
// output, as when it was a switch.
TEST(CliOutputs, InfoJsonTakesAPathAndBareMeansStandardOutput) {
  const test::TempDir d("tpusim-info-json");
  const Outcome bare = run_tpusim({"info", "--chip", kV1, "--json"});
  ASSERT_EQ(bare.status, 0) << bare.err;
  ASSERT_TRUE(is_json(bare.out)) << bare.out;
  const Outcome dash = run_tpusim({"info", "--chip", kV1, "--json", "-"});
  EXPECT_EQ(dash.out, bare.out);
  const Outcome file = run_tpusim({"info", "--chip", kV1, "--json", d / "v1.json"});
  ASSERT_EQ(file.status, 0) << file.err;
  EXPECT_EQ(read_text(d / "v1.json"), bare.out);
  // The JSON went to a file: standard output gets the text, as `info` alone prints it.
  EXPECT_EQ(file.out, run_tpusim({"info", "--chip", kV1}).out);
  EXPECT_THAT(file.out, StartsWith("chip            tpu-v1"));
}

// tb/CMakeLists.txt runs the tests from the source tree; this one leaves it.
TEST(CliShippedFiles, RunFromAnotherDirectoryFindsTheDefaultModelAndWeights) {
  const test::TempDir elsewhere("tpusim-elsewhere");
  const Outcome o = test::bad_input::run_process(
      {"/usr/bin/env", "-C", elsewhere.path.string(), std::string(TPUSIM_BINARY_DIR) + "/tpusim",
       "run", "--chip", kV1, "--images", "1", "--batch", "1", "--json", "-"},
      test::bad_input::kTimeLimitSeconds);
  ASSERT_EQ(o.status, 0) << o.err;
  const auto report = nlohmann::json::parse(o.out);
  EXPECT_EQ(report["workload"]["model_file"], source_path("configs/models/fashion_mnist_cnn.json"));
  EXPECT_EQ(report["workload"]["weights"], source_path("configs/weights/fashion_mnist_cnn.bin"));
}

// From the source tree the default names stay relative: reports (and the goldens) carry no
// machine's path.
TEST(CliShippedFiles, FromTheSourceTreeTheDefaultModelKeepsItsRelativeName) {
  const Outcome o =
      run_tpusim({"run", "--chip", kV1, "--images", "1", "--batch", "1", "--json", "-"});
  ASSERT_EQ(o.status, 0) << o.err;
  const auto report = nlohmann::json::parse(o.out);
  EXPECT_EQ(report["workload"]["model_file"], "configs/models/fashion_mnist_cnn.json");
  EXPECT_EQ(report["workload"]["weights"], "configs/weights/fashion_mnist_cnn.bin");
}

}  // namespace
}  // namespace tpu
