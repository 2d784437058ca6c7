// IciFabric (hw/system/ici_fabric.h): transfers over the ICI links of a torus or mesh take
// hops × hop latency + the bytes at their max-min fair rate (docs/systems.md, "The ICI fabric").
// Each TEST elaborates, so each runs in its own process (gtest_discover_tests).
#include "hw/system/ici_fabric.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <systemc>
#include <utility>
#include <vector>

#include "hw/common/clock.h"
#include "tb/common/process.h"

namespace tpu {
namespace {

// Shaped like TPU v4's ICI (45 GB/s per link one way, J23 in docs/sources.md; about 1 µs per
// hop) at v4's clock (configs/chips/v4.json: 1050 MHz).
constexpr double kClockHz = 1050e6;
constexpr double kLinkBytesPerS = 45e9;
constexpr double kHopLatencyNs = 1000;
constexpr std::uint64_t kBytes = std::uint64_t{1} << 20;
constexpr std::uint32_t kRing = 8;

double rate() { return kLinkBytesPerS / kClockHz; }  // bytes per cycle per link
Cycle hop() { return static_cast<Cycle>(std::ceil(kHopLatencyNs * kClockHz / 1e9)); }
// Whole cycles to move `bytes` at `bytes_per_cycle`, rounded up.
Cycle stream(double bytes, double bytes_per_cycle) {
  return static_cast<Cycle>(std::ceil(bytes / bytes_per_cycle));
}

using test::Process;

// One transfer, started by its own thread `after` cycles into the run.
struct Send {
  std::uint32_t from;
  std::uint32_t to;
  std::uint64_t bytes;
  Cycle after = 0;
};

struct Bench {
  Bench(std::vector<std::uint32_t> dims, std::vector<bool> wraparound)
      : clock(kClockHz),
        fabric("ici", clock, std::move(dims), std::move(wraparound), kLinkBytesPerS,
               kHopLatencyNs) {}

  // Runs the transfers at once (each from its own thread); returns the cycle each returned.
  std::vector<Cycle> run(const std::vector<Send>& sends) {
    std::vector<Cycle> end(sends.size(), 0);
    for (std::size_t i = 0; i < sends.size(); ++i) {
      senders.push_back(
          std::make_unique<Process>(("send" + std::to_string(i)).c_str(), [this, &sends, &end, i] {
            clock.wait_for(Cycles(sends[i].after));
            fabric.transfer(sends[i].from, sends[i].to, sends[i].bytes);
            end[i] = clock.now();
          }));
    }
    sc_core::sc_start();
    return end;
  }

  Clock clock;
  IciFabric fabric;
  std::vector<std::unique_ptr<Process>> senders;
};

TEST(IciFabricTiming, ATransferTakesItsHopLatencyPlusItsBytesAtTheLinkRate) {
  Bench b({kRing}, {true});
  const std::vector<Cycle> end = b.run({{0, 1, kBytes}});
  const Cycle expected = hop() + stream(kBytes, rate());
  EXPECT_EQ(end[0], expected);
  EXPECT_EQ(b.fabric.uncontended_cycles(0, 1, kBytes), Cycles(expected));
  const std::size_t used = b.fabric.link_of(0, 0, Direction::Plus);
  for (std::size_t l = 0; l < b.fabric.link_count(); ++l) {
    EXPECT_EQ(b.fabric.bytes_carried(l), l == used ? kBytes : 0) << b.fabric.link_name(l);
    EXPECT_EQ(b.fabric.busy_cycles(l), Cycles(l == used ? stream(kBytes, rate()) : 0))
        << b.fabric.link_name(l);
  }
}

// Cut-through: the head pays each hop's latency once, then the bytes stream over every link of
// the path at the same time (not hop after hop).
TEST(IciFabricTiming, EachHopAddsItsLatencyOnceAndTheBytesStreamOverEveryLinkAtOnce) {
  Bench b({kRing}, {false});
  const std::uint32_t to = 5;
  const std::vector<Cycle> end = b.run({{0, to, kBytes}});
  EXPECT_EQ(end[0], to * hop() + stream(kBytes, rate()));
  EXPECT_EQ(b.fabric.uncontended_cycles(0, to, kBytes), Cycles(end[0]));
  for (const std::size_t l : b.fabric.route(0, to)) {
    EXPECT_EQ(b.fabric.bytes_carried(l), kBytes) << b.fabric.link_name(l);
    EXPECT_EQ(b.fabric.busy_cycles(l), Cycles(stream(kBytes, rate()))) << b.fabric.link_name(l);
  }
}

TEST(IciFabricTiming, NoBytesTakeTheHopLatencyAloneAndTheSameChipTakesNoTime) {
  Bench b({4, 4}, {true, true});
  const std::uint32_t far = b.fabric.chip_at({2, 2});  // 2 + 2 hops
  const std::vector<Cycle> end = b.run({{0, far, 0}, {3, 3, kBytes}});
  EXPECT_EQ(end[0], 4 * hop());
  EXPECT_EQ(end[1], 0U);
  EXPECT_EQ(b.fabric.uncontended_cycles(3, 3, kBytes), Cycles(0));
  for (std::size_t l = 0; l < b.fabric.link_count(); ++l)
    EXPECT_EQ(b.fabric.bytes_carried(l), 0U) << b.fabric.link_name(l);
}

TEST(IciFabricTiming, TwoTransfersOverOneLinkEachGetHalfOfIt) {
  Bench b({kRing}, {true});
  const std::vector<Cycle> end = b.run({{0, 1, kBytes}, {0, 1, kBytes}});
  const Cycle both = hop() + stream(2.0 * kBytes, rate());
  EXPECT_EQ(end[0], both);
  EXPECT_EQ(end[1], both);
  const std::size_t link = b.fabric.link_of(0, 0, Direction::Plus);
  EXPECT_EQ(b.fabric.bytes_carried(link), 2 * kBytes);
  EXPECT_EQ(b.fabric.busy_cycles(link), Cycles(stream(2.0 * kBytes, rate())));
}

// Max-min fairness where it differs from an equal split of each link. On a line 0 - 1 - 2, three
// transfers cross link 0→1 (two 0→1 and one 0→2) and two cross link 1→2 (the 0→2 and a 1→2). The
// one-hop transfers start a hop later, so that all four stream from the same cycle, 2 hops in.
// Link 0→1 holds its three to r/3 each; the 1→2 transfer then gets the rest of link 1→2,
// r − r/3 = 2r/3, not r/2: it finishes in 3N/(2r) cycles where an equal split would take 2N/r.
TEST(IciFabricTiming, ATransferLimitedElsewhereLeavesTheRestOfALinkToTheOther) {
  Bench b({3}, {false});
  const Cycle h = hop();
  const std::vector<Cycle> end =
      b.run({{0, 1, kBytes, h}, {0, 1, kBytes, h}, {0, 2, kBytes, 0}, {1, 2, kBytes, h}});
  const Cycle streaming_from = 2 * h;
  const Cycle shared = streaming_from + stream(kBytes, rate() / 3);
  EXPECT_EQ(end[0], shared);
  EXPECT_EQ(end[1], shared);
  EXPECT_EQ(end[2], shared);  // still r/3 after the 1→2 transfer leaves: link 0→1 holds it
  EXPECT_EQ(end[3], streaming_from + stream(kBytes, rate() - rate() / 3));
  EXPECT_LT(end[3], streaming_from + stream(kBytes, rate() / 2));
  EXPECT_EQ(b.fabric.bytes_carried(b.fabric.link_of(1, 0, Direction::Plus)), 2 * kBytes);
}

// Completions and the re-allocation they cause land on whole cycles: the larger transfer runs at
// r/2 up to the cycle the smaller one completes in, then alone at r.
TEST(IciFabricTiming, AFinishedTransferHandsItsShareBackOnTheCycleItCompletes) {
  Bench b({kRing}, {true});
  const std::uint64_t large = 3 * kBytes;
  const std::vector<Cycle> end = b.run({{0, 1, kBytes}, {0, 1, large}});
  const Cycle first = hop() + stream(2.0 * kBytes, rate());
  const double left = static_cast<double>(large) - rate() / 2 * static_cast<double>(first - hop());
  EXPECT_EQ(end[0], first);
  EXPECT_EQ(end[1], first + stream(left, rate()));
}

// The trace's view of a link (docs/trace.md): a sender's two posted writes back to back are two
// intervals of the link, the second from the cycle the first completed in (its last byte left
// within the cycle before), each naming the write's chips; a write sent after recording stopped
// is not recorded.
TEST(IciFabricTrace, ALinksStreamingIntervalsAreRecordedWhileAskedFor) {
  Bench b({kRing}, {true});
  Process sender("sender", [&] {
    b.fabric.record_busy(true);
    b.fabric.stream(0, 1, kBytes);
    b.fabric.stream(0, 1, kBytes);
    b.fabric.record_busy(false);
    b.fabric.stream(0, 1, kBytes);
  });
  sc_core::sc_start();
  const double alone = static_cast<double>(kBytes) / rate();
  const std::size_t used = b.fabric.link_of(0, 0, Direction::Plus);
  for (std::size_t l = 0; l < b.fabric.link_count(); ++l) {
    const auto& busy = b.fabric.busy_intervals(l);
    if (l != used) {
      EXPECT_TRUE(busy.empty()) << b.fabric.link_name(l);
      continue;
    }
    ASSERT_EQ(busy.size(), 2U);
    EXPECT_EQ(busy[0].begin, 0.0);
    EXPECT_NEAR(busy[0].end, alone, 1e-6);
    const auto second = static_cast<double>(stream(kBytes, rate()));
    EXPECT_EQ(busy[1].begin, second);
    EXPECT_NEAR(busy[1].end, second + alone, 1e-6);
    for (const auto& i : busy) {
      EXPECT_NEAR(i.bytes, static_cast<double>(kBytes), 1e-3);
      ASSERT_EQ(i.transfers.size(), 1U);  // the write, from chip 0 to chip 1
      EXPECT_EQ(i.transfers[0].from, 0U);
      EXPECT_EQ(i.transfers[0].to, 1U);
      EXPECT_NEAR(i.transfers[0].bytes, static_cast<double>(kBytes), 1e-3);
    }
  }
  EXPECT_EQ(b.fabric.bytes_carried(used), 3 * kBytes);  // the counters count regardless
}

// The pattern of a ring all-reduce step: every chip sends to its + neighbour at once. On a torus
// axis each transfer has its own + link: all take the single-link time.
TEST(IciFabricRing, EveryChipSendingToItsPlusNeighbourOnATorusTakesTheSingleLinkTime) {
  Bench b({kRing}, {true});
  std::vector<Send> sends;
  for (std::uint32_t c = 0; c < kRing; ++c) sends.push_back({c, (c + 1) % kRing, kBytes});
  const std::vector<Cycle> end = b.run(sends);
  for (std::uint32_t c = 0; c < kRing; ++c) {
    EXPECT_EQ(end[c], hop() + stream(kBytes, rate())) << "chip " << c;
    EXPECT_EQ(b.fabric.bytes_carried(b.fabric.link_of(c, 0, Direction::Plus)), kBytes);
    EXPECT_EQ(b.fabric.bytes_carried(b.fabric.link_of(c, 0, Direction::Minus)), 0U);
  }
}

// The same pattern on a mesh axis: the last chip's transfer to chip 0 runs back along the line,
// N − 1 hops over the − links. Links are full duplex and no other transfer uses a − link, so it
// shares nothing: it only pays N − 1 hop latencies instead of one.
TEST(IciFabricRing, OnAMeshTheWrapTransferRunsBackAlongTheMinusLinksAlone) {
  Bench b({kRing}, {false});
  std::vector<Send> sends;
  for (std::uint32_t c = 0; c < kRing; ++c) sends.push_back({c, (c + 1) % kRing, kBytes});
  const std::vector<Cycle> end = b.run(sends);
  for (std::uint32_t c = 0; c + 1 < kRing; ++c)
    EXPECT_EQ(end[c], hop() + stream(kBytes, rate())) << "chip " << c;
  EXPECT_EQ(end[kRing - 1], (kRing - 1) * hop() + stream(kBytes, rate()));
  for (std::uint32_t c = 1; c < kRing; ++c)
    EXPECT_EQ(b.fabric.bytes_carried(b.fabric.link_of(c, 0, Direction::Minus)), kBytes);
}

// A bidirectional ring step (every chip sends to both neighbours, as the pods' all-reduce does):
// on a torus axis every transfer still has a link of its own.
TEST(IciFabricRing, BothWaysRoundATorusEveryTransferHasALinkOfItsOwn) {
  Bench b({kRing}, {true});
  std::vector<Send> sends;
  for (std::uint32_t c = 0; c < kRing; ++c) {
    sends.push_back({c, (c + 1) % kRing, kBytes});
    sends.push_back({c, (c + kRing - 1) % kRing, kBytes});
  }
  const std::vector<Cycle> end = b.run(sends);
  for (std::size_t i = 0; i < sends.size(); ++i)
    EXPECT_EQ(end[i], hop() + stream(kBytes, rate())) << "transfer " << i;
}

// The same on a mesh axis: the two wrap transfers (0 → N−1 over the + links, N−1 → 0 over the −
// links) share every link of the line with a neighbour transfer. The neighbour transfers stream
// alone from 1 hop in until the wrap transfers arrive N − 1 hops in, then at r/2; once they are
// done (t1), the wrap transfers finish alone at r: about twice the torus time for large messages.
TEST(IciFabricRing, BothWaysRoundAMeshTheWrapTransfersShareEveryLink) {
  Bench b({kRing}, {false});
  std::vector<Send> sends;
  std::vector<bool> wrap;
  for (std::uint32_t c = 0; c < kRing; ++c) {
    sends.push_back({c, (c + 1) % kRing, kBytes});
    wrap.push_back(c == kRing - 1);
    sends.push_back({c, (c + kRing - 1) % kRing, kBytes});
    wrap.push_back(c == 0);
  }
  const std::vector<Cycle> end = b.run(sends);

  const double n = kBytes;
  const double r = rate();
  const Cycle near_start = hop();
  const Cycle wrap_start = (kRing - 1) * hop();
  const double near_left = n - r * static_cast<double>(wrap_start - near_start);
  ASSERT_GT(near_left, 0) << "the wrap transfers must arrive while the others stream";
  const Cycle t1 = wrap_start + stream(near_left, r / 2);
  const double wrap_left = n - r / 2 * static_cast<double>(t1 - wrap_start);
  const Cycle t2 = t1 + stream(wrap_left, r);
  for (std::size_t i = 0; i < sends.size(); ++i)
    EXPECT_EQ(end[i], wrap[i] ? t2 : t1) << sends[i].from << " -> " << sends[i].to;
  EXPECT_GT(t2, hop() + stream(n, r) * 3 / 2);  // the contention costs, not only the latency
}

constexpr Cycle kBeatItsTime = ~Cycle{0};

// Runs a fixed scenario of many overlapping transfers on a 4×4 torus in a child process (one
// elaboration each) and returns their completion cycles.
std::vector<Cycle> completions_in_a_fresh_process() {
  std::vector<Send> sends;
  std::uint32_t x = 2024;  // a fixed LCG stream: the scenario is part of the test
  for (int i = 0; i < 48; ++i) {
    x = x * 1103515245U + 12345U;
    sends.push_back({(x >> 8) % 16, (x >> 12) % 16, kBytes / 4 * (1 + (x >> 20) % 4),
                     static_cast<Cycle>((x >> 24) % 4) * 5000});
  }
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Bench b({4, 4}, {true, true});
    std::vector<Cycle> end = b.run(sends);
    for (std::size_t i = 0; i < sends.size(); ++i) {
      // No transfer beats its time alone on the fabric.
      const Cycle alone =
          b.fabric.uncontended_cycles(sends[i].from, sends[i].to, sends[i].bytes).value();
      if (end[i] < sends[i].after + alone) end[i] = kBeatItsTime;
    }
    const auto size = static_cast<ssize_t>(end.size() * sizeof(Cycle));
    _exit(write(fds[1], end.data(), end.size() * sizeof(Cycle)) == size ? 0 : 1);
  }
  close(fds[1]);
  std::vector<Cycle> end(sends.size(), 0);
  const auto size = static_cast<ssize_t>(end.size() * sizeof(Cycle));
  const bool read_all = read(fds[0], end.data(), end.size() * sizeof(Cycle)) == size;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!read_all || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return {};
  return end;
}

TEST(IciFabric, TheSameTransfersCompleteOnTheSameCyclesInEveryRun) {
  const std::vector<Cycle> first = completions_in_a_fresh_process();
  ASSERT_FALSE(first.empty()) << "the child run failed";
  for (const Cycle c : first) EXPECT_NE(c, kBeatItsTime) << "a transfer beat its time alone";
  EXPECT_EQ(completions_in_a_fresh_process(), first);
}

TEST(IciFabric, ATransferFromOrToAChipOutsideTheSystemIsAnError) {
  Bench b({2, 2}, {false, false});
  Process bad("bad", [&] { b.fabric.transfer(0, 4, kBytes); });
  std::string message;
  try {
    sc_core::sc_start();
  } catch (const sc_core::sc_report& r) {
    message = r.get_msg();
  }
  EXPECT_NE(message.find("chip 4"), std::string::npos) << message;
}

}  // namespace
}  // namespace tpu
