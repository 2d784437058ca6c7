// The structured off-chip memory model (hw/memory/dram_timing.h) without the kernel. Every
// expected value is the formula of docs/memory-model.md evaluated on the parameters of the
// shipped structured-memory configs (configs/chips/structured-memory/*.json).
#include "hw/memory/dram_timing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "hw/config/chip_config.h"

namespace tpu {
namespace {

const std::vector<std::string> kDramChips = {"v1", "v2", "v3", "v4"};

ChipConfig chip(const std::string& name) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/structured-memory/" +
                          name + ".json");
}

// The chip's whole bandwidth in bytes per ns (= its bandwidth_gbps).
double peak(const DramTimingParams& p) { return p.channel_bytes_per_ns * p.channels; }

// docs/memory-model.md, "Sequential": a stream of N bytes from an idle memory takes
// tRCD + N / peak, plus tRFC + tRCD for every refresh window that starts before it ends.
struct Stream {
  double end_ns;
  std::uint64_t windows;
};
Stream derived_stream(const DramTimingParams& p, std::uint64_t n) {
  const double base = p.t_rcd_ns + static_cast<double>(n) / peak(p);
  const double loss = p.t_rfc_ns + p.t_rcd_ns;
  std::uint64_t k = 0;
  if (p.t_refi_ns > 0)
    while (static_cast<double>(k + 1) * p.t_refi_ns < base + static_cast<double>(k) * loss) ++k;
  return {base + static_cast<double>(k) * loss, k};
}
double derived_sequential_efficiency(const DramTimingParams& p) {
  return 1.0 - (p.t_rfc_ns + p.t_rcd_ns) / p.t_refi_ns;
}

// docs/memory-model.md, "One burst per row": each access opens a row; per channel they go no
// faster than the bus, tRRD, tFAW / 4 and a bank's own cycle over all banks allow.
double burst_ns(const DramTimingParams& p) { return p.bus_ns(p.burst_bytes); }
double miss_interval_ns(const DramTimingParams& p) {
  const double bank_cycle = std::max(p.t_rcd_ns + burst_ns(p), p.t_ras_ns) + p.t_rp_ns;
  return std::max({burst_ns(p), p.t_rrd_ns, p.t_faw_ns / 4, bank_cycle / p.banks});
}
double derived_strided_efficiency(const DramTimingParams& p) {
  return burst_ns(p) / miss_interval_ns(p) * derived_sequential_efficiency(p);
}
// The same with k bursts from each row: the bus holds k bursts per activate.
double derived_rows_efficiency(const DramTimingParams& p, std::uint64_t k) {
  const double data = static_cast<double>(k) * burst_ns(p);
  const double bank_cycle = std::max(p.t_rcd_ns + data, p.t_ras_ns) + p.t_rp_ns;
  const double interval = std::max({data, p.t_rrd_ns, p.t_faw_ns / 4, bank_cycle / p.banks});
  return data / interval * derived_sequential_efficiency(p);
}
// docs/memory-model.md, "Turnaround": transfers alternating read and write, each moving `per`
// bytes on every channel, pay one gap each, read-to-write and write-to-read in turn.
double derived_alternating_efficiency(const DramTimingParams& p, std::uint64_t per) {
  const double data = p.bus_ns(per);
  return data / (data + (p.read_to_write_ns + p.write_to_read_ns) / 2) *
         derived_sequential_efficiency(p);
}

// Access i of the strided pattern: the next row of its channel, one burst of it; consecutive
// accesses rotate over the channels.
std::uint64_t strided_address(const DramTimingParams& p, std::uint64_t i) {
  return (i / p.channels) * p.row_bytes * p.channels + (i % p.channels) * p.interleave_bytes;
}

// n accesses of one burst, all arriving at 0; returns when the last ends.
template <class Address>
double bursts(DramTiming& m, std::uint64_t n, Address address) {
  double end = 0;
  for (std::uint64_t i = 0; i < n; ++i)
    end = std::max(end, m.access(0, address(i), m.params().burst_bytes, DramAccess::Read));
  return end;
}

double random_end(const DramTimingParams& p, std::uint64_t n, DramStats* stats = nullptr) {
  DramTiming m(p);
  std::mt19937_64 rng(18);  // the engine's sequence is fixed by the standard
  const std::uint64_t span = std::uint64_t{1} << 30;
  const double end =
      bursts(m, n, [&](std::uint64_t) { return (rng() % (span / p.burst_bytes)) * p.burst_bytes; });
  if (stats != nullptr) *stats = m.stats();
  return end;
}

TEST(DramTiming, SequentialStreamReachesTheRefreshBoundEfficiency) {
  for (const std::string& name : kDramChips) {
    SCOPED_TRACE(name);
    const DramTimingParams p = dram_params(chip(name));
    const std::uint64_t n = std::uint64_t{64} << 20;
    DramTiming m(p);
    const double end = m.access(0, 0, n, DramAccess::Read);
    const Stream want = derived_stream(p, n);
    EXPECT_GT(want.windows, 10U);
    // A window that falls within tRRD of a row's end also delays the next bank's activate
    // (activates are tRRD apart): at most tRRD more per window.
    EXPECT_GE(end, want.end_ns - 1e-9 * want.end_ns);
    EXPECT_LE(end, want.end_ns + static_cast<double>(want.windows) * p.t_rrd_ns);
    // The long-run efficiency is the formula's, within the first and last partial interval.
    const double eff = static_cast<double>(n) / peak(p) / end;
    EXPECT_NEAR(eff, derived_sequential_efficiency(p), p.t_refi_ns / end);
    EXPECT_LT(eff, 1.0);
    // Every row is opened once, and its data never waits for its activate.
    EXPECT_EQ(m.stats().segments, n / p.row_bytes);
    EXPECT_EQ(m.stats().row_misses, n / p.row_bytes);
  }
}

TEST(DramTiming, RefreshCostsItsWindowPlusAnActivatePerInterval) {
  const DramTimingParams p = dram_params(chip("v1"));
  DramTimingParams none = p;
  none.t_refi_ns = 0;
  const std::uint64_t n = std::uint64_t{16} << 20;
  DramTiming with(p), without(none);
  const double a = with.access(0, 0, n, DramAccess::Read);
  const double b = without.access(0, 0, n, DramAccess::Read);
  const Stream want = derived_stream(p, n);
  EXPECT_NEAR(b, p.t_rcd_ns + static_cast<double>(n) / peak(p), 1e-9 * b);
  const double cost = static_cast<double>(want.windows) * (p.t_rfc_ns + p.t_rcd_ns);
  EXPECT_GE(a - b, cost - 1e-9 * a);
  EXPECT_LE(a - b, cost + static_cast<double>(want.windows) * p.t_rrd_ns);
}

TEST(DramTiming, DirectionFlipsCostTheTurnaroundGaps) {
  for (const std::string& name : kDramChips) {
    SCOPED_TRACE(name);
    DramTimingParams p = dram_params(chip(name));
    p.t_refi_ns = 0;
    p.channels = 1;
    const std::uint64_t n = 2 * p.row_bytes;  // each transfer opens rows of banks of its own
    DramTiming flips(p), same(p);
    double f = 0, s = 0;
    const DramAccess dirs[] = {DramAccess::Read, DramAccess::Write, DramAccess::Read};
    for (std::uint64_t i = 0; i < 3; ++i) {
      f = flips.access(0, i * n, n, dirs[i]);
      s = same.access(0, i * n, n, DramAccess::Read);
    }
    EXPECT_NEAR(s, p.t_rcd_ns + 3 * p.bus_ns(n), 1e-9 * s);
    EXPECT_NEAR(f - s, p.read_to_write_ns + p.write_to_read_ns, 1e-9 * f);
    EXPECT_EQ(flips.stats().turnarounds, 2U);
  }
}

TEST(DramTiming, RowHitPaysDataOnlyAndConflictPaysPrechargeAndActivate) {
  const DramTimingParams p = dram_params(chip("v1"));
  DramTiming m(p);
  const std::uint64_t b = p.burst_bytes;
  EXPECT_DOUBLE_EQ(m.access(0, 0, b, DramAccess::Read), p.t_rcd_ns + burst_ns(p));
  EXPECT_DOUBLE_EQ(m.access(1000, b, b, DramAccess::Read), 1000 + burst_ns(p));  // same row
  // The same bank, the next row of it: banks x channels rows on.
  const std::uint64_t other = p.row_bytes * p.banks * p.channels;
  EXPECT_DOUBLE_EQ(m.access(2000, other, b, DramAccess::Read),
                   2000 + p.t_rp_ns + p.t_rcd_ns + burst_ns(p));
  EXPECT_EQ(m.stats().row_hits, 1U);
  EXPECT_EQ(m.stats().row_misses, 2U);
}

TEST(DramTiming, OneBurstPerRowRunsAtTheActivateBoundBelowStreaming) {
  for (const std::string& name : kDramChips) {
    SCOPED_TRACE(name);
    const DramTimingParams p = dram_params(chip(name));
    const std::uint64_t n = 200000;
    DramTiming m(p);
    const double end = bursts(m, n, [&](std::uint64_t i) { return strided_address(p, i); });
    const double eff = static_cast<double>(n * p.burst_bytes) / peak(p) / end;
    EXPECT_EQ(m.stats().row_hits, 0U);
    EXPECT_NEAR(eff, derived_strided_efficiency(p), 0.01);
    EXPECT_LT(eff, derived_sequential_efficiency(p) - 0.2);
  }
}

TEST(DramTiming, RandomBurstsAreSlowerStillFromBankConflicts) {
  for (const std::string& name : kDramChips) {
    SCOPED_TRACE(name);
    const DramTimingParams p = dram_params(chip(name));
    const std::uint64_t n = 200000;
    const double eff = static_cast<double>(n * p.burst_bytes) / peak(p) / random_end(p, n);
    EXPECT_LT(eff, derived_strided_efficiency(p));
    EXPECT_GT(eff, 0.0);
  }
}

TEST(DramTiming, SameAccessesGiveTheSameTimes) {
  const DramTimingParams p = dram_params(chip("v3"));
  DramStats a, b;
  EXPECT_EQ(random_end(p, 50000, &a), random_end(p, 50000, &b));
  EXPECT_EQ(a.row_hits, b.row_hits);
  EXPECT_EQ(a.row_misses, b.row_misses);
  EXPECT_EQ(a.refresh_stalls, b.refresh_stalls);
}

TEST(DramTiming, NoPatternBeatsTheConfiguredBandwidth) {
  for (const std::string& name : kDramChips) {
    SCOPED_TRACE(name);
    const ChipConfig cfg = chip(name);
    const DramTimingParams p = dram_params(cfg);
    EXPECT_DOUBLE_EQ(peak(p), cfg.off_chip_memory.bandwidth_gbps);
    DramTimingParams none = p;
    none.t_refi_ns = 0;
    for (const std::uint64_t n : {std::uint64_t{64}, std::uint64_t{4096}, std::uint64_t{1} << 20}) {
      DramTiming m(none);
      EXPECT_GE(m.access(0, 0, n, DramAccess::Write), static_cast<double>(n) / peak(p));
      // Unaligned bytes cost whole bursts.
      EXPECT_GE(m.access(1e6, 1, n, DramAccess::Write), 1e6 + static_cast<double>(n) / peak(p));
    }
  }
}

TEST(DramTiming, UsbBulkPacketsCarryTheirFraming) {
  const ChipConfig cfg = chip("edge");
  const PacketLinkParams p = packet_params(cfg);
  const std::uint64_t mib = std::uint64_t{1} << 20;
  const std::uint64_t packets = mib / p.payload_bytes;
  EXPECT_EQ(wire_bytes(p, mib), mib + packets * p.overhead_bytes);
  EXPECT_EQ(wire_bytes(p, 1), 1 + p.overhead_bytes);  // a short packet pays it whole
  EXPECT_EQ(wire_bytes(p, 0), 0U);
  const double eff = static_cast<double>(mib) / static_cast<double>(wire_bytes(p, mib));
  EXPECT_DOUBLE_EQ(eff, static_cast<double>(p.payload_bytes) /
                            static_cast<double>(p.payload_bytes + p.overhead_bytes));
}

TEST(DramTiming, BadParametersAreRefusedWithTheReason) {
  DramTimingParams p = dram_params(chip("v1"));
  p.row_bytes = p.interleave_bytes + p.burst_bytes;
  EXPECT_THROW(DramTiming{p}, std::invalid_argument);
  p = dram_params(chip("v1"));
  p.t_refi_ns = p.t_rfc_ns;
  EXPECT_STRNE(check(p), "");
}

// The access-pattern sweep of docs/memory-model.md (its table is this test's output):
//   build/tb/unit_tests --gtest_filter=DramTiming.AccessPatternSweep
TEST(DramTiming, AccessPatternSweep) {
  std::printf("| chip | pattern | derived | measured |\n| --- | --- | --- | --- |\n");
  for (const std::string& name : kDramChips) {
    const DramTimingParams p = dram_params(chip(name));
    const double refi_span = 40 * p.t_refi_ns;  // each pattern runs ~40 refresh intervals
    auto row = [&](const char* pattern, double derived, double measured) {
      if (derived > 0)
        std::printf("| %s | %s | %.4f | %.4f |\n", name.c_str(), pattern, derived, measured);
      else
        std::printf("| %s | %s | — | %.4f |\n", name.c_str(), pattern, measured);
    };
    auto eff = [&](std::uint64_t bytes, double end) {
      return static_cast<double>(bytes) / peak(p) / end;
    };
    // Sequential: one stream.
    {
      const auto n = static_cast<std::uint64_t>(refi_span * peak(p)) / 4096 * 4096;
      DramTiming m(p);
      row("sequential", derived_sequential_efficiency(p),
          eff(n, m.access(0, 0, n, DramAccess::Read)));
    }
    // k bursts from each row, rows in turn over the channels.
    for (const std::uint64_t k : {std::uint64_t{1}, std::uint64_t{4}}) {
      const std::uint64_t bytes = k * p.burst_bytes;
      const auto n =
          static_cast<std::uint64_t>(refi_span * peak(p) * 0.5 / static_cast<double>(bytes));
      DramTiming m(p);
      double end = 0;
      for (std::uint64_t i = 0; i < n; ++i)
        end = std::max(end, m.access(0, strided_address(p, i), bytes, DramAccess::Read));
      row(k == 1 ? "strided, 1 burst per row" : "strided, 4 bursts per row",
          derived_rows_efficiency(p, k), eff(n * bytes, end));
    }
    // Random single bursts over 1 GiB.
    {
      const auto n = static_cast<std::uint64_t>(refi_span * peak(p) * 0.3 /
                                                static_cast<double>(p.burst_bytes));
      row("random bursts", 0, eff(n * p.burst_bytes, random_end(p, n)));
    }
    // Sequential transfers alternating read and write, 4 stripes per channel each.
    {
      const std::uint64_t per = 4 * p.interleave_bytes, size = per * p.channels;
      const auto n = static_cast<std::uint64_t>(refi_span * peak(p) / static_cast<double>(size));
      DramTiming m(p);
      double end = 0;
      for (std::uint64_t i = 0; i < n; ++i)
        end = std::max(
            end, m.access(0, i * size, size, i % 2 == 0 ? DramAccess::Read : DramAccess::Write));
      row("alternating read/write", derived_alternating_efficiency(p, per), eff(n * size, end));
    }
  }
  const ChipConfig edge = chip("edge");
  const PacketLinkParams u = packet_params(edge);
  for (const std::uint64_t n : {std::uint64_t{1} << 20, std::uint64_t{4096}, std::uint64_t{100}}) {
    const double derived =
        static_cast<double>(n) /
        static_cast<double>(n + (n + u.payload_bytes - 1) / u.payload_bytes * u.overhead_bytes);
    const double measured = static_cast<double>(n) / static_cast<double>(wire_bytes(u, n));
    std::printf("| edge | USB bulk transfers of %llu B | %.4f | %.4f |\n",
                static_cast<unsigned long long>(n), derived, measured);
  }
}

}  // namespace
}  // namespace tpu
