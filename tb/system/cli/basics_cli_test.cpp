// The tpusim command line itself: its version, its help, and a mistake on the command line as
// one `tpusim:` line with status 2, like every other bad input (docs/robustness.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
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
  // "tpusim VERSION (git COMMIT, SystemC VERSION)": read by hand, not with std::regex, whose
  // GCC 12 headers fail the sanitizer build's -Werror (a maybe-uninitialized false positive).
  const std::string prefix = std::string("tpusim ") + TPUSIM_PROJECT_VERSION + " (git ";
  const std::string suffix = std::string(", SystemC ") + sc_core::sc_release() + ")\n";
  ASSERT_EQ(r.out.rfind(prefix, 0), 0u) << r.out;
  ASSERT_GT(r.out.size(), prefix.size() + suffix.size()) << r.out;
  ASSERT_EQ(r.out.substr(r.out.size() - suffix.size()), suffix) << r.out;
  const std::string commit =
      r.out.substr(prefix.size(), r.out.size() - prefix.size() - suffix.size());
  // Twelve hex digits, "-dirty" when tracked files differ from them, or "unknown".
  const std::string hash = commit.substr(0, 12);
  const bool hex = hash.size() == 12 && std::all_of(hash.begin(), hash.end(), [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                   });
  EXPECT_TRUE(commit == "unknown" ||
              (hex && (commit.size() == 12 || commit.substr(12) == "-dirty")))
      << commit;
  // Built from this checkout just now (the commit is written at every build, not at
  // configure time): the commit is HEAD's.
  const std::string head =
      first_line("git -C " + test::source("") + " rev-parse --short=12 HEAD 2>/dev/null");
  if (!head.empty()) {
    EXPECT_EQ(hash, head);
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
