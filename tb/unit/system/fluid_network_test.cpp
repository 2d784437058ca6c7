// FluidNetwork (hw/system/fluid_network.h): max-min fair sharing of directed links by flows over
// paths. Plain C++, no elaboration. Expected rates and times come from the capacities and sizes
// below through the allocation rule written at the top of the header.
#include "hw/system/fluid_network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

namespace tpu {
namespace {

using FlowId = FluidNetwork::FlowId;

constexpr double kCapacity = 40.0;  // bytes per cycle
constexpr double kBytes = 10000.0;

// Relative tolerance for rates and times that pass through a few float operations.
void expect_near(double got, double want) { EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, want)); }

TEST(FluidNetwork, ASingleFlowMovesAtItsLinksCapacity) {
  FluidNetwork net({kCapacity});
  const FlowId f = net.start(0, kBytes, {0});
  expect_near(net.rate(f), kCapacity);
  expect_near(net.next_completion(), kBytes / kCapacity);

  net.advance(kBytes / kCapacity);
  EXPECT_EQ(net.retire_finished(), std::vector<FlowId>{f});
  EXPECT_FALSE(net.active(f));
  expect_near(net.bytes_carried(0), kBytes);
  expect_near(net.busy_time(0), kBytes / kCapacity);
  EXPECT_EQ(net.next_completion(), std::numeric_limits<double>::infinity());
}

TEST(FluidNetwork, AFlowMovesAtTheCapacityOfTheSlowestLinkOnItsPath) {
  FluidNetwork net({kCapacity, kCapacity / 4, kCapacity * 2});
  const FlowId f = net.start(0, kBytes, {0, 1, 2});
  expect_near(net.rate(f), kCapacity / 4);
  expect_near(net.next_completion(), kBytes / (kCapacity / 4));
}

TEST(FluidNetwork, TwoFlowsOnOneLinkEachGetHalf) {
  FluidNetwork net({kCapacity});
  const FlowId a = net.start(0, kBytes, {0});
  const FlowId b = net.start(0, kBytes, {0});
  expect_near(net.rate(a), kCapacity / 2);
  expect_near(net.rate(b), kCapacity / 2);
  expect_near(net.next_completion(), 2 * kBytes / kCapacity);

  net.advance(2 * kBytes / kCapacity);
  EXPECT_EQ(net.retire_finished(), (std::vector<FlowId>{a, b}));
  expect_near(net.bytes_carried(0), 2 * kBytes);
  expect_near(net.busy_time(0), 2 * kBytes / kCapacity);
}

// Max-min, not an equal split of every link: link 0 carries three flows (one of them also
// crosses link 1), link 1 carries that flow and one more. Link 0 is the bottleneck of its three
// flows at c/3 each; the flow alone on link 1 then takes what is left of it, c - c/3 = 2c/3. An
// equal split of each link would give it only c/2 and leave link 1 a sixth idle.
TEST(FluidNetwork, AFlowGetsTheShareOthersLeaveOnItsBottleneck) {
  FluidNetwork net({kCapacity, kCapacity});
  const FlowId only0 = net.start(0, kBytes, {0});
  const FlowId across = net.start(0, kBytes, {0, 1});
  const FlowId also0 = net.start(0, kBytes, {0});
  const FlowId only1 = net.start(0, kBytes, {1});

  expect_near(net.rate(only0), kCapacity / 3);
  expect_near(net.rate(across), kCapacity / 3);
  expect_near(net.rate(also0), kCapacity / 3);
  expect_near(net.rate(only1), kCapacity - kCapacity / 3);
  EXPECT_GT(net.rate(only1), kCapacity / 2 + 1);               // more than the naive equal split
  expect_near(net.rate(across) + net.rate(only1), kCapacity);  // link 1 is full
}

// The same rule with unequal links: a flow held to a slow link's capacity on one part of its path
// leaves the rest of a fast link it shares to the flow alone there (b − a, not b / 2).
TEST(FluidNetwork, AFlowLimitedElsewhereLeavesItsUnusedShareToTheOthers) {
  const double slow = kCapacity / 8;
  FluidNetwork net({slow, kCapacity});
  const FlowId limited = net.start(0, kBytes, {0, 1});
  const FlowId fast = net.start(0, kBytes, {1});
  expect_near(net.rate(limited), slow);
  expect_near(net.rate(fast), kCapacity - slow);
}

TEST(FluidNetwork, AFinishedFlowHandsItsShareBackWhenRetired) {
  FluidNetwork net({kCapacity});
  const FlowId small = net.start(0, kBytes, {0});
  const FlowId large = net.start(0, 3 * kBytes, {0});
  const double t1 = 2 * kBytes / kCapacity;  // both at c/2 until the small one is done
  expect_near(net.next_completion(), t1);

  net.advance(t1);
  EXPECT_EQ(net.retire_finished(), std::vector<FlowId>{small});
  expect_near(net.rate(large), kCapacity);
  expect_near(net.bytes_left(large), 2 * kBytes);
  expect_near(net.next_completion(), t1 + 2 * kBytes / kCapacity);
}

TEST(FluidNetwork, AStartingFlowTakesItsShareFromThen) {
  FluidNetwork net({kCapacity});
  const FlowId first = net.start(0, kBytes, {0});
  const double t = kBytes / kCapacity / 2;  // half of it moved alone
  const FlowId second = net.start(t, kBytes, {0});
  expect_near(net.bytes_left(first), kBytes / 2);
  expect_near(net.rate(first), kCapacity / 2);
  expect_near(net.rate(second), kCapacity / 2);
  expect_near(net.next_completion(), t + (kBytes / 2) / (kCapacity / 2));
}

// A flow stops at its last byte even if the caller advances past it (completions take effect
// when the caller retires them): it carries no more bytes and keeps its link busy no longer.
TEST(FluidNetwork, AFlowStopsAtItsLastByteAndTheLinkIsBusyOnlyWhileBytesMove) {
  FluidNetwork net({kCapacity});
  const FlowId f = net.start(0, kBytes, {0});
  net.advance(3 * kBytes / kCapacity);
  EXPECT_TRUE(net.active(f));
  EXPECT_EQ(net.bytes_left(f), 0.0);
  expect_near(net.next_completion(), 3 * kBytes / kCapacity);  // due now
  expect_near(net.bytes_carried(0), kBytes);
  expect_near(net.busy_time(0), kBytes / kCapacity);
  EXPECT_EQ(net.retire_finished(), std::vector<FlowId>{f});
}

// The same chip (an empty path) and an empty message need no link: finished from the start,
// retired by the next retire_finished(), and they take nothing from the flows beside them.
TEST(FluidNetwork, AnEmptyPathOrNoBytesIsFinishedAtOnceAndTakesNoShare) {
  FluidNetwork net({kCapacity});
  const FlowId busy = net.start(0, kBytes, {0});
  const FlowId same_chip = net.start(5, kBytes, {});
  const FlowId empty = net.start(5, 0, {0});
  EXPECT_EQ(net.rate(same_chip), std::numeric_limits<double>::infinity());
  EXPECT_EQ(net.rate(empty), 0.0);
  expect_near(net.rate(busy), kCapacity);
  EXPECT_EQ(net.next_completion(), 5.0);

  EXPECT_EQ(net.retire_finished(), (std::vector<FlowId>{same_chip, empty}));
  expect_near(net.rate(busy), kCapacity);
  expect_near(net.next_completion(), kBytes / kCapacity);
  expect_near(net.bytes_carried(0), 5 * kCapacity);
}

// Busy intervals (for traces): a link busy across events elsewhere is one interval; an idle gap
// starts another; each holds the bytes moved in it, and the durations add up to busy_time.
TEST(FluidNetwork, BusyIntervalsSpanEventsElsewhereAndSplitAtIdleGaps) {
  FluidNetwork net({kCapacity, kCapacity});
  net.record_busy(true);
  const double alone = kBytes / kCapacity;  // 250 cycles
  const FlowId first = net.start(0, kBytes, {0}, 7);
  net.start(100, kBytes, {1}, 8);  // an event on the other link
  net.advance(alone + 10);         // link 0's flow finished at `alone`; link 0 idle since
  net.retire_finished();
  const FlowId third = net.start(alone + 10, kBytes, {0}, 9);
  net.advance(3 * alone);
  net.retire_finished();
  const auto& l0 = net.busy_intervals(0);
  ASSERT_EQ(l0.size(), 2U);
  EXPECT_EQ(l0[0].begin, 0.0);
  expect_near(l0[0].end, alone);
  expect_near(l0[0].bytes, kBytes);
  EXPECT_EQ(l0[1].begin, alone + 10);
  expect_near(l0[1].end, 2 * alone + 10);
  expect_near(l0[1].bytes, kBytes);
  ASSERT_EQ(l0[0].flows.size(), 1U);
  EXPECT_EQ(l0[0].flows[0].flow, first);
  EXPECT_EQ(l0[0].flows[0].label, 7U);
  expect_near(l0[0].flows[0].bytes, kBytes);
  ASSERT_EQ(l0[1].flows.size(), 1U);
  EXPECT_EQ(l0[1].flows[0].flow, third);
  EXPECT_EQ(l0[1].flows[0].label, 9U);
  const auto& l1 = net.busy_intervals(1);
  ASSERT_EQ(l1.size(), 1U);  // across the other link's start, completion and start
  EXPECT_EQ(l1[0].begin, 100.0);
  expect_near(l1[0].end, 100 + alone);
  expect_near(l1[0].bytes, kBytes);
  for (FluidNetwork::Link l = 0; l < 2; ++l) {
    double sum = 0;
    for (const auto& b : net.busy_intervals(l)) sum += b.end - b.begin;
    expect_near(sum, net.busy_time(l));
  }
}

// Two flows on a link: one interval while either moves, holding both flows' bytes, each by flow.
TEST(FluidNetwork, ABusyIntervalOfASharedLinkHoldsEveryFlowsBytes) {
  FluidNetwork net({kCapacity});
  net.record_busy(true);
  const FlowId a = net.start(0, kBytes, {0}, 1);
  const FlowId b = net.start(50, 2 * kBytes, {0}, 2);
  net.advance(450);  // the first flow's last byte: 2000 bytes alone, then 8000 at half the rate
  net.retire_finished();
  net.advance(1000);
  const auto& l0 = net.busy_intervals(0);
  ASSERT_EQ(l0.size(), 1U);
  EXPECT_EQ(l0[0].begin, 0.0);
  expect_near(l0[0].end, 3 * kBytes / kCapacity);
  expect_near(l0[0].bytes, 3 * kBytes);
  ASSERT_EQ(l0[0].flows.size(), 2U);  // each flow once, with all it moved in the interval
  EXPECT_EQ(l0[0].flows[0].flow, a);
  expect_near(l0[0].flows[0].bytes, kBytes);
  EXPECT_EQ(l0[0].flows[1].flow, b);
  EXPECT_EQ(l0[0].flows[1].label, 2U);
  expect_near(l0[0].flows[1].bytes, 2 * kBytes);
}

// Recording covers only the time between turning it on and off, and keeps what it recorded.
TEST(FluidNetwork, BusyIntervalsAreRecordedOnlyWhileAskedFor) {
  FluidNetwork net({kCapacity});
  net.start(0, kBytes, {0});
  net.advance(100);
  EXPECT_TRUE(net.busy_intervals(0).empty());
  net.record_busy(true);
  net.advance(200);
  net.record_busy(false);
  net.advance(1000);
  const auto& l0 = net.busy_intervals(0);
  ASSERT_EQ(l0.size(), 1U);
  EXPECT_EQ(l0[0].begin, 100.0);
  EXPECT_EQ(l0[0].end, 200.0);
  expect_near(l0[0].bytes, 100 * kCapacity);
  expect_near(net.busy_time(0), kBytes / kCapacity);  // the counters count regardless
}

TEST(FluidNetwork, RejectsALinkWithoutCapacityAndAPathThroughAMissingOrRepeatedLink) {
  EXPECT_THROW(FluidNetwork({kCapacity, 0}), std::invalid_argument);
  FluidNetwork net({kCapacity, kCapacity});
  EXPECT_THROW(net.start(0, kBytes, {0, 2}), std::invalid_argument);
  EXPECT_THROW(net.start(0, kBytes, {1, 0, 1}), std::invalid_argument);
  EXPECT_THROW(net.start(0, -1, {0}), std::invalid_argument);
  EXPECT_EQ(net.active_count(), 0U);
}

// Drives a network as IciFabric does: events on whole cycles, completions rounded up to the
// next one, a flow started at its cycle after the completions due then. Returns each flow's
// completion cycle, in the order of `flows`.
struct FlowSpec {
  double start;
  double bytes;
  std::vector<FluidNetwork::Link> path;
};

std::vector<double> run_on_whole_cycles(const std::vector<double>& capacities,
                                        const std::vector<FlowSpec>& flows,
                                        const std::vector<std::size_t>& start_order) {
  FluidNetwork net(capacities);
  std::map<FlowId, std::size_t> which;
  std::vector<double> done(flows.size(), -1);
  std::size_t next_start = 0;
  double now = 0;
  while (next_start < start_order.size() || net.active_count() > 0) {
    // Completions round up to a whole cycle, at least one on (so that time advances).
    const double due = net.active_count() > 0
                           ? std::max(std::ceil(net.next_completion() - 1e-9), now + 1)
                           : std::numeric_limits<double>::infinity();
    const double arrival = next_start < start_order.size()
                               ? flows[start_order[next_start]].start
                               : std::numeric_limits<double>::infinity();
    now = std::max(now, std::min(due, arrival));
    net.advance(now);
    for (const FlowId id : net.retire_finished()) done[which.at(id)] = now;
    while (next_start < start_order.size() && flows[start_order[next_start]].start <= now) {
      const FlowSpec& s = flows[start_order[next_start]];
      which[net.start(now, s.bytes, s.path)] = start_order[next_start];
      ++next_start;
    }
  }
  return done;
}

// Same inputs, same completion cycles; and flows that start in the same cycle get the same
// allocation whatever order they are started in (max-min fairness is unique).
TEST(FluidNetwork, TheSameFlowsCompleteOnTheSameCyclesWhateverTheirStartOrder) {
  const std::vector<double> caps = {kCapacity, kCapacity / 2, kCapacity, kCapacity * 1.5};
  std::vector<FlowSpec> flows;
  std::uint32_t x = 12345;  // a fixed LCG stream: the scenario is part of the test
  for (int i = 0; i < 40; ++i) {
    x = x * 1103515245U + 12345U;
    const double start = static_cast<double>((x >> 8) % 8) * 100;  // several flows per cycle
    std::vector<FluidNetwork::Link> path;
    for (FluidNetwork::Link l = 0; l < caps.size(); ++l)
      if ((x >> (16 + l)) & 1U) path.push_back(l);
    flows.push_back({start, kBytes * static_cast<double>(1 + (x >> 24) % 5), path});
  }
  std::vector<std::size_t> by_start(flows.size());
  for (std::size_t i = 0; i < by_start.size(); ++i) by_start[i] = i;
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](std::size_t a, std::size_t b) { return flows[a].start < flows[b].start; });
  std::vector<std::size_t> reversed_within_cycle = by_start;
  std::stable_sort(reversed_within_cycle.begin(), reversed_within_cycle.end(),
                   [&](std::size_t a, std::size_t b) {
                     return flows[a].start < flows[b].start ||
                            (flows[a].start == flows[b].start && a > b);
                   });

  const std::vector<double> first = run_on_whole_cycles(caps, flows, by_start);
  EXPECT_EQ(run_on_whole_cycles(caps, flows, by_start), first);
  EXPECT_EQ(run_on_whole_cycles(caps, flows, reversed_within_cycle), first);
  for (std::size_t i = 0; i < flows.size(); ++i) EXPECT_GE(first[i], flows[i].start) << i;
}

}  // namespace
}  // namespace tpu
