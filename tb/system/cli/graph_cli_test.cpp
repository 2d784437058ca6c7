// `tpusim graph` as a user runs it: the graph after each compiler pass, in text and JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cli.h"
#include "sw/compiler/rewrite.h"

namespace tpu {
namespace {

using ::testing::HasSubstr;

using test::source;

TEST(GraphCli, ShowsTheGraphAfterEveryPassInTheCompilersOrder) {
  const auto r = test::run_tpusim("graph --model " + source("configs/models/resnet50_block.json") +
                                  " --chip " + source("configs/chips/v1.json") + " --json -");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "tpusim.graph/1");
  std::vector<std::string> passes;
  for (const auto& p : j["passes"]) passes.push_back(p["pass"]);
  std::vector<std::string> want = {"import", "remove-identities"};
  for (const auto& p : compiler::rewrite_passes()) want.emplace_back(p.name);
  want.insert(want.end(), {"split-int8-activations", "quantize", "tiling", "lifetimes"});
  EXPECT_EQ(passes, want);
  // The block's normalisations fold and its ReLUs fuse: 4 convolutions, the Add and its ReLU.
  const auto& last = j["passes"].back()["operations"];
  EXPECT_EQ(last.size(), 6u);
  EXPECT_EQ(last[0]["type"], "int8");
  EXPECT_TRUE(last[0].contains("tiles"));
  for (const auto& op : last)
    if (op["kind"] == "Conv2D") {
      EXPECT_THAT(op["value_of"].get<std::string>(), HasSubstr("_bn"))
          << "a convolution's value is the normalisation folded into it";
    }
}

TEST(GraphCli, OnePassAloneAndAnUnknownPassIsOneLineListingThem) {
  auto r = test::run_tpusim("graph --model " + source("configs/models/fashion_mnist_cnn.json") +
                            " --pass fuse-activations");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("== after fuse-activations"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("== after import")));
  r = test::run_tpusim("graph --model " + source("configs/models/fashion_mnist_cnn.json") +
                       " --pass tiling");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("tpusim: --pass tiling: no such pass without --chip (passes: "
                               "import, remove-identities"));
}

}  // namespace
}  // namespace tpu
