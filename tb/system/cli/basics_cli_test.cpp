// The tpusim command line itself: its version, its help, and a mistake on the command line as
// one `tpusim:` line with status 2, like every other bad input (docs/robustness.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/cli.h"

namespace tpu {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CliBasics, VersionPrintsTheProjectVersionAndSucceeds) {
  const auto r = test::run_tpusim("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, std::string("tpusim ") + TPUSIM_PROJECT_VERSION + "\n");
}

TEST(CliBasics, HelpOfASubcommandListsItsOptionsAndSucceeds) {
  const auto r = test::run_tpusim("graph --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.out, HasSubstr("--pass"));
}

TEST(CliBasics, CommandLineMistakesAreOneLineAndStatusTwo) {
  for (const char* args : {"run --chip", "run --no-such-option", "info", "frobnicate", "",
                           "run --chip c.json --images 0"}) {
    const auto r = test::run_tpusim(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.out;
    EXPECT_THAT(r.out, StartsWith("tpusim: ")) << args;
    EXPECT_EQ(lines(r.out), 1) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace tpu
