// Process limits and absurd values (issue 12, rows 15, 20, 21): an address-space limit, one
// process per user, the fastest link and the slowest clock a config may name, and a chip config
// reached through a symlink.
#include "faults.h"

namespace tpu::test::faults {
namespace {

const std::string kV1 = source("configs/chips/v1.json");
const std::string kV3 = source("configs/chips/v3.json");

// AddressSanitizer maps terabytes of shadow memory at start-up, so no instrumented tpusim starts
// under an address-space limit, and LeakSanitizer stops the process with a thread of its own,
// which one process per user forbids: the process limits are checked in uninstrumented builds.
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN() \
  GTEST_SKIP() << "process limits cannot bind an AddressSanitizer build (checked in stage build)"
#else
#define SKIP_UNDER_ASAN() (void)0
#endif

TEST(Limits, Row21_AnAddressSpaceLimitIsRefusedUpFrontWithTheSizes) {
  SKIP_UNDER_ASAN();
  Options o;
  o.limits = {{RLIMIT_AS, 200ull << 20}};
  const Ended e = run({"run", "--chip", kV3, "--model", source("configs/models/resnet50.json"),
                       "--random-weights", "--images", "4", "--batch", "4", "--no-check"},
                      o);
  EXPECT_EQ(e.status, 2) << e.describe() << "\n" << e.err;
  EXPECT_NE(e.err.find("of host memory"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("ulimit -v"), std::string::npos) << e.err;
  EXPECT_EQ(e.err.find("internal error"), std::string::npos) << e.err;
}

TEST(Limits, Row21_UnderTheAddressSpaceLimitASmallRunStillRuns) {
  SKIP_UNDER_ASAN();
  Options o;
  o.limits = {{RLIMIT_AS, 400ull << 20}};
  const Ended e = run({"run", "--chip", kV1, "--images", "64", "--batch", "32"}, o);
  EXPECT_EQ(e.status, 0) << e.describe() << "\n" << e.err;
  EXPECT_NE(e.out.find("bit-exact   yes"), std::string::npos) << e.out;
}

TEST(Limits, Row21_OneProcessPerUserRunsTheReferenceAfterTheSimulation) {
  SKIP_UNDER_ASAN();
  // RLIMIT_NPROC does not bind root: the run drops to nobody when the tests run as root.
  Options o;
  o.limits = {{RLIMIT_NPROC, 1}};
  o.unprivileged = true;
  Ended e = run({"run", "--chip", kV1, "--images", "64", "--batch", "32"}, o);
  EXPECT_EQ(e.status, 0) << e.describe() << "\n" << e.err;
  EXPECT_NE(e.out.find("bit-exact   yes"), std::string::npos) << e.out << e.err;
  // compare needs a process per chip: refused with the reason.
  e = run({"compare", "--chip", kV1, "--chip", kV3, "--images", "64"}, o);
  EXPECT_EQ(e.status, 2) << e.describe() << "\n" << e.err;
  EXPECT_NE(e.err.find("ulimit -u"), std::string::npos) << e.err;
}

TEST(Limits, Row20_TheFastestLinkAtTheSlowestClockStillAdvancesTime) {
  // 1 PB/s at 1 MHz: a billion bytes per cycle, so a transfer of a few bytes completes within the
  // cycle it starts in. The fluid share once waited zero time for it, forever.
  Scratch d("row20");
  json c = json::parse(read_file(kV1));
  c["clock_mhz"] = 1;
  c["off_chip_memory"]["bandwidth_gbps"] = 1e6;
  c["host_link"]["bandwidth_gbps"] = 1e6;
  write_file(d / "fast.json", c.dump(2));
  const Ended e =
      run({"run", "--chip", d / "fast.json", "--model", source("configs/models/mlp.json"),
           "--random-weights", "--images", "16", "--batch", "16"});
  EXPECT_EQ(e.status, 0) << e.describe() << "\n" << e.err;
  EXPECT_NE(e.out.find("bit-exact   yes"), std::string::npos) << e.out;
}

TEST(Limits, Row15_ASymlinkedChipConfigFindsItsIncludesBesideTheRealFile) {
  Scratch d("row15");
  fs::create_directories(d.path / "configs");
  fs::create_directories(d.path / "elsewhere");
  write_file(d / "configs/base.json", read_file(kV1));
  write_file(d / "configs/variant.json",
             R"({"include": "base.json", "name": "tpu-v1-fast", "clock_mhz": 940})");
  fs::create_symlink(d.path / "configs/variant.json", d.path / "elsewhere/my.json");
  const Ended e = run({"info", "--chip", d / "elsewhere/my.json", "--json"});
  ASSERT_EQ(e.status, 0) << e.err;
  const json info = json::parse(e.out);
  EXPECT_EQ(info["name"], "tpu-v1-fast");
  EXPECT_EQ(info["clock_mhz"], 940);
}

}  // namespace
}  // namespace tpu::test::faults
