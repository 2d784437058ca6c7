// The tpusim command line itself: its version, its help, and a mistake on the command line as
// one `tpusim:` line with status 2, like every other bad input (docs/robustness.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>
#include <systemc>

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

// The first line of a command's output, or "" when it fails.
std::string first_line(const std::string& command) {
  std::string line;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof buf, p)) line = buf;
    if (pclose(p) != 0) line.clear();
  }
  while (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

TEST(CliBasics, VersionNamesTheProjectVersionTheCommitAndTheLinkedSystemC) {
  const auto r = test::run_tpusim("--version");
  EXPECT_EQ(r.status, 0);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(r.out, m,
                               std::regex(R"(tpusim (\S+) \(git ([0-9a-f]{12}(-dirty)?|unknown), )"
                                          R"(SystemC (\S+)\)\n)")))
      << r.out;
  EXPECT_EQ(m[1], TPUSIM_PROJECT_VERSION);
  EXPECT_EQ(m[4], sc_core::sc_release());
  // Built from this checkout just now (the commit is written at every build, not at
  // configure time): the commit is HEAD's.
  const std::string head =
      first_line("git -C " + test::source("") + " rev-parse --short=12 HEAD 2>/dev/null");
  if (!head.empty()) {
    EXPECT_EQ(m[2].str().substr(0, 12), head);
  }
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
