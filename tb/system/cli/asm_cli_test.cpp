// `tpusim asm` and `tpusim disasm` as a user runs them.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/cli.h"

namespace tpu {
namespace {

using Result = test::CliResult;
Result run(const std::string& args) { return test::run_tpusim(args); }

std::string temp(const std::string& name) { return ::testing::TempDir() + name; }

TEST(AsmCli, AssemblyRoundTripsThroughTheBinaryForm) {
  const std::string text =
      "# a small program\n"
      "read_host src=0x1000 dst=0x0 bytes=784\n"
      "set_window in_h=28 in_w=28 in_c=1 kernel_h=3 kernel_w=3 out_h=26 out_w=26\n"
      "read_weights mxu=0 from=mem addr=0x100000 rows=9 cols=64\n"
      "matmul mxu=0 src=0x0 dst=0x0 rows=676 window swap\n"
      "activate src=0x0 dst=0x4000 params=0x8000 rows=676 cols=64 stride=64 func=relu out=int8\n"
      "pool src=0x4000 dst=0xe000 in_h=26 in_w=26 channels=64 kernel_h=2 kernel_w=2 stride_h=2 "
      "stride_w=2 images=1 kind=max type=int8\n"
      "halt\n";
  std::ofstream(temp("p.s")) << text;
  const Result a = run("asm " + temp("p.s") + " -o " + temp("p.bin"));
  ASSERT_EQ(a.status, 0) << a.out;
  const Result d = run("disasm " + temp("p.bin"));
  ASSERT_EQ(d.status, 0) << d.out;
  std::ofstream(temp("q.s")) << d.out;
  ASSERT_EQ(run("asm " + temp("q.s") + " -o " + temp("q.bin")).status, 0);
  std::ifstream p(temp("p.bin"), std::ios::binary), q(temp("q.bin"), std::ios::binary);
  std::stringstream ps, qs;
  ps << p.rdbuf();
  qs << q.rdbuf();
  EXPECT_EQ(ps.str().size(), 7u * 32u);
  EXPECT_EQ(ps.str(), qs.str());
  EXPECT_EQ(run("disasm " + temp("q.bin")).out, d.out);
}

TEST(AsmCli, ErrorsNameTheFileAndLineAndLeaveNoOutput) {
  std::ofstream(temp("bad.s")) << "nop\nmatmul rowz=3\n";
  const Result r = run("asm " + temp("bad.s") + " -o " + temp("bad.bin"));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find(temp("bad.s") + ":2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rowz"), std::string::npos) << r.out;
  EXPECT_FALSE(std::ifstream(temp("bad.bin")).good()) << "no half-written output";
  std::ofstream(temp("odd.bin"), std::ios::binary) << std::string(33, '\0');
  const Result d = run("disasm " + temp("odd.bin"));
  EXPECT_EQ(d.status, 2) << d.out;
}

}  // namespace
}  // namespace tpu
