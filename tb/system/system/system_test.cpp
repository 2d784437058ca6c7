// A system of chips joined by the ICI (hw/system/system.h): an ici_write lands in the other
// chip's off-chip memory and counts on its semaphore, taking the fabric's time; an ici_wait holds
// the core until then; a chip outside the system is named.
#include "hw/system/system.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/test_host.h"
#include "hw/config/system_config.h"

namespace tpu {
namespace {

SystemConfig v3_8() {
  return load_system_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/systems/v3-8.json");
}

// Every chip of the system with a test host of its own; chip 0 core 0 sends `bytes` bytes of
// its host memory to chip 3, whose core 0 waits for them and writes them to its host.
struct Sending {
  System system{"system", v3_8()};
  std::vector<std::unique_ptr<test::TestHost>> hosts;
  std::uint32_t bytes;
  explicit Sending(std::uint32_t n, std::uint32_t to = 3) : bytes(n) {
    for (std::size_t c = 0; c < system.size(); ++c)
      hosts.push_back(std::make_unique<test::TestHost>(("host" + std::to_string(c)).c_str(),
                                                       system.chip(c), 1 << 20));
    for (auto& h : hosts)
      for (auto& p : h->programs) p = {isa::Halt{}};
    for (std::uint32_t i = 0; i < n; ++i) hosts[0]->memory[i] = static_cast<std::uint8_t>(i * 7);
    hosts[0]->programs[0] = {isa::ReadHost{HostAddr(0), UbAddr(0), n}, isa::Sync{false},
                             isa::IciWrite{UbAddr(0), MemAddr(0x1000), n, to, 5}, isa::Halt{}};
    hosts[3]->programs[0] = {isa::IciWait{5, 1}, isa::ReadMem{MemAddr(0x1000), UbAddr(0x4000), n},
                             isa::WriteHost{UbAddr(0x4000), HostAddr(0x80000), n}, isa::Halt{}};
  }
};

TEST(SystemIci, AWriteLandsInTheOtherChipsMemoryAfterTheFabricsTime) {
  const std::uint32_t n = 1 << 16;
  Sending s(n);
  sc_core::sc_start();
  for (std::uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(s.hosts[3]->memory[0x80000 + i], static_cast<std::uint8_t>(i * 7)) << i;
  // The write is posted: chip 0's core halts when its last byte has left; chip 3's core only
  // after the bytes arrived the route's latency later, for it waited on them. Chips 0 and 3 are
  // opposite corners of the 2 x 2: two hops; the bytes took the fabric's uncontended time, the
  // UB port (256 B a cycle) being faster than a link.
  const IciFabric& fabric = s.system.fabric();
  EXPECT_EQ(fabric.route(0, 3).size(), 2u);
  const Cycle sent = s.hosts[0]->halted_at[0];
  const Cycles streaming = fabric.uncontended_cycles(0, 3, n) - fabric.latency(0, 3);
  EXPECT_GE(sent, streaming.value());
  EXPECT_GE(s.hosts[3]->halted_at[0], sent + fabric.latency(0, 3).value());
}

// The ici_write itself (from the trace) takes the time its bytes stream at one link's rate (the
// UB port, 256 B a cycle, being faster); the hops' latency comes after it, on the way.
TEST(SystemIci, AWriteTakesTheFabricsTimeForItsRoute) {
  const std::uint32_t n = 1 << 16;
  Sending s(n);
  Trace trace;
  s.system.chip(0).enable_trace(trace);
  sc_core::sc_start();
  const IciFabric& fabric = s.system.fabric();
  const Cycles streaming = fabric.uncontended_cycles(0, 3, n) - fabric.latency(0, 3);
  bool found = false;
  for (const TraceSlice& sl : trace.slices())
    if (sl.core == 0 && !sl.is_stall && sl.opcode == isa::Opcode::IciWrite) {
      EXPECT_EQ(sl.end - sl.begin, streaming.value());
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(SystemIci, AWriteToAChipOutsideTheSystemIsNamed) {
  Sending s(64, 9);
  try {
    sc_core::sc_start();
    FAIL() << "no error";
  } catch (const sc_core::sc_report& r) {
    const std::string m = r.get_msg();
    EXPECT_NE(m.find("chip 9 does not exist (the system has 4 chips, 0 to 3)"), std::string::npos)
        << m;
    EXPECT_NE(m.find("ici_write"), std::string::npos) << m;
  }
}

// Scale-out (docs/systems.md, "Scale-out"): chip 0 alone on the fabric of a 4 x 4 mesh; its
// write to its ring successor streams over its link and lands back in chip 0, at the address and
// semaphore it named, the ring's mean edge later: edges of 1, 1, 1 and 3 hops, 1.5 hops.
TEST(SystemIci, AMirroredWriteLandsBackInChipZeroAfterTheRingsMeanEdge) {
  System system("system",
                load_system_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/systems/v3-32.json"),
                System::Scale::kRepresentative);
  ASSERT_EQ(system.size(), 1u);
  test::TestHost host("host", system.chip(0), 1 << 20);
  for (auto& p : host.programs) p = {isa::Halt{}};
  const std::uint32_t n = 1 << 16;
  for (std::uint32_t i = 0; i < n; ++i) host.memory[i] = static_cast<std::uint8_t>(i * 7);
  host.programs[0] = {isa::ReadHost{HostAddr(0), UbAddr(0), n},
                      isa::Sync{false},
                      isa::IciWrite{UbAddr(0), MemAddr(0x1000), n, 1, 5},
                      isa::IciWait{5, 1},
                      isa::ReadMem{MemAddr(0x1000), UbAddr(0x40000), n},
                      isa::WriteHost{UbAddr(0x40000), HostAddr(0x80000), n},
                      isa::Halt{}};
  Trace trace;
  system.chip(0).enable_trace(trace);
  sc_core::sc_start();
  for (std::uint32_t i = 0; i < n; ++i)
    ASSERT_EQ(host.memory[0x80000 + i], static_cast<std::uint8_t>(i * 7)) << i;
  const IciFabric& fabric = system.fabric();
  const std::uint64_t hop = fabric.hop_latency().value();
  Cycle sent = 0, arrived = 0;
  for (const TraceSlice& sl : trace.slices()) {
    if (sl.core != 0) continue;
    if (!sl.is_stall && sl.opcode == isa::Opcode::IciWrite) sent = sl.end;
    if (sl.is_stall && sl.index == 3) arrived = sl.end;  // the ici_wait, a stall until the arrival
  }
  ASSERT_GT(sent, 0u);
  EXPECT_EQ(arrived, sent + (6 * hop + 2) / 4);
}

}  // namespace
}  // namespace tpu
