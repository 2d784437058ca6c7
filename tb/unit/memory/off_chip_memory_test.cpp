// Each TEST that elaborates modules must run in its own process (one elaboration per process).
#include "hw/memory/off_chip_memory.h"

#include <gtest/gtest.h>
#include <tlm_utils/multi_passthrough_target_socket.h>
#include <tlm_utils/simple_initiator_socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <systemc>
#include <tlm>
#include <utility>
#include <vector>

#include "hw/common/clock.h"
#include "hw/common/strided_rows.h"
#include "hw/common/tlm_util.h"
#include "hw/config/chip_config.h"
#include "hw/memory/bandwidth.h"
#include "hw/memory/dram_timing.h"
#include "hw/memory/sparse_memory.h"
#include "tb/common/process.h"

namespace tpu {
namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
constexpr unsigned int kTransferBytes = 1U << 20;

// Shaped like TPU v1 (J17 Table 2: 700 MHz, 8 GiB of DDR3 at 34 GB/s).
ChipConfig test_config() {
  ChipConfig cfg;
  cfg.name = "off-chip-memory-test";
  cfg.clock_mhz = 700;
  cfg.tensor_cores = 1;
  cfg.off_chip_memory.kind = MemoryKind::Ddr3;
  cfg.off_chip_memory.bytes = 8 * kGiB;
  cfg.off_chip_memory.bandwidth_gbps = 34;
  cfg.off_chip_memory.latency_ns = 100;
  cfg.off_chip_memory.channels = 2;
  cfg.host_link.kind = "pcie-gen3-x16";
  cfg.host_link.bandwidth_gbps = 14;
  cfg.host_link.latency_ns = 1000;
  return cfg;
}

// Independent reference of the timing formulas, in exact decimal steps (MHz, ns, GB/s).
double latency_cycles(const ChipConfig& cfg) {
  return std::ceil(cfg.off_chip_memory.latency_ns * cfg.clock_mhz / 1e3);
}
double bytes_per_cycle(const ChipConfig& cfg) {
  return cfg.off_chip_memory.bandwidth_gbps * 1e3 / cfg.clock_mhz;
}

class Initiator : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Initiator> socket;

  Initiator(sc_core::sc_module_name name, std::function<void(Initiator&)> body)
      : sc_core::sc_module(name), socket("socket"), body_(std::move(body)) {
    SC_HAS_PROCESS(Initiator);
    SC_THREAD(run);
  }

  tlm::tlm_response_status transport(tlm::tlm_command cmd, std::uint64_t addr, void* data,
                                     unsigned int len, sc_core::sc_time& delay) {
    tlm::tlm_generic_payload gp;
    gp.set_command(cmd);
    gp.set_address(addr);
    gp.set_data_ptr(static_cast<unsigned char*>(data));
    gp.set_data_length(len);
    gp.set_streaming_width(len);
    gp.set_byte_enable_ptr(nullptr);
    gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    socket->b_transport(gp, delay);
    return gp.get_response_status();
  }

  // `rows` rows of `row_bytes` at addr + i * pitch, packed in `data` (StridedRows).
  tlm::tlm_response_status strided(tlm::tlm_command cmd, std::uint64_t addr, void* data,
                                   StridedRows& rows) {
    return tlm_transfer(socket, cmd, addr, data, rows.rows * rows.row_bytes, &rows);
  }

  unsigned int debug(tlm::tlm_command cmd, std::uint64_t addr, void* data, unsigned int len) {
    tlm::tlm_generic_payload gp;
    gp.set_command(cmd);
    gp.set_address(addr);
    gp.set_data_ptr(static_cast<unsigned char*>(data));
    gp.set_data_length(len);
    return socket->transport_dbg(gp);
  }

 private:
  void run() { body_(*this); }
  std::function<void(Initiator&)> body_;
};

// A thread that uses a bandwidth resource directly (as the host interface does).
using test::Process;

// Several initiators into the memory's one target socket (the chip's interconnect, in small):
// routing adds no time.
class Fanin : public sc_core::sc_module {
 public:
  tlm_utils::multi_passthrough_target_socket<Fanin> in;
  tlm_utils::simple_initiator_socket<Fanin> out;

  explicit Fanin(sc_core::sc_module_name name) : sc_core::sc_module(name), in("in"), out("out") {
    in.register_b_transport(this, &Fanin::forward);
    in.register_transport_dbg(this, &Fanin::forward_dbg);
  }

 private:
  void forward(int, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
    out->b_transport(gp, delay);
  }
  unsigned int forward_dbg(int, tlm::tlm_generic_payload& gp) { return out->transport_dbg(gp); }
};

// The chip's own off-chip bandwidth resource, built from the config as the chip builds it.
struct Bench {
  explicit Bench(const ChipConfig& c, SimOptions options = {})
      : cfg(c),
        clock(cfg.clock_hz()),
        bw("bw", clock, cfg.off_chip_bytes_per_s(), cfg.off_chip_memory.latency_ns),
        memory("memory", cfg, clock, bw, options) {}
  ChipConfig cfg;
  Clock clock;
  BandwidthResource bw;
  OffChipMemory memory;
};

std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  std::iota(v.begin(), v.end(), std::uint8_t{11});
  return v;
}

// Writes kTransferBytes of a pattern at 4 GiB and reads them back, one initiator, both from
// cycle 0 with no loosely-timed offset: when each completed, what came back and the offset left.
struct WriteThenRead {
  Cycle after_write = 0, after_read = 0;
  std::vector<std::uint8_t> written, read;
  sc_core::sc_time left = sc_core::SC_ZERO_TIME;
};
WriteThenRead write_then_read(Bench& b) {
  WriteThenRead o;
  o.written = pattern(kTransferBytes);
  o.read.resize(kTransferBytes);
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> out = o.written;
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_WRITE_COMMAND, 4 * kGiB, out.data(), kTransferBytes, delay);
    o.after_write = b.clock.now();
    self.transport(tlm::TLM_READ_COMMAND, 4 * kGiB, o.read.data(), kTransferBytes, delay);
    o.after_read = b.clock.now();
    o.left = delay;
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();
  return o;
}

TEST(OffChipMemoryTiming, TransferTakesLatencyPlusBytesOverBandwidth) {
  Bench b(test_config());
  const WriteThenRead o = write_then_read(b);

  const auto one = static_cast<Cycle>(latency_cycles(b.cfg) +
                                      std::ceil(kTransferBytes / bytes_per_cycle(b.cfg)));
  EXPECT_EQ(o.after_write, one);
  EXPECT_EQ(o.after_read, 2 * one);
  EXPECT_EQ(o.left, sc_core::SC_ZERO_TIME);
  EXPECT_EQ(o.read, o.written);
  EXPECT_EQ(b.memory.bytes_written(), kTransferBytes);
  EXPECT_EQ(b.memory.bytes_read(), kTransferBytes);
  EXPECT_EQ(b.bw.bytes_moved(), 2ULL * kTransferBytes);
}

// DESIGN "Shared bandwidth is a resource": two transfers at once each see half of it.
TEST(OffChipMemoryTiming, ConcurrentTransfersShareTheBandwidth) {
  Bench b(test_config());
  Cycle end[2] = {0, 0};
  std::vector<std::unique_ptr<Initiator>> inits;
  for (int i = 0; i < 2; ++i) {
    inits.push_back(std::make_unique<Initiator>(
        ("init" + std::to_string(i)).c_str(), [&b, &end, i](Initiator& self) {
          std::vector<std::uint8_t> buf(kTransferBytes);
          sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
          self.transport(i == 0 ? tlm::TLM_READ_COMMAND : tlm::TLM_WRITE_COMMAND,
                         static_cast<std::uint64_t>(i) * kGiB, buf.data(), kTransferBytes, delay);
          end[i] = b.clock.now();
        }));
  }
  Fanin fanin("fanin");
  for (auto& i : inits) i->socket.bind(fanin.in);
  fanin.out.bind(b.memory.socket);
  sc_core::sc_start();

  const auto both = static_cast<Cycle>(latency_cycles(b.cfg) +
                                       std::ceil(2.0 * kTransferBytes / bytes_per_cycle(b.cfg)));
  EXPECT_EQ(end[0], both);
  EXPECT_EQ(end[1], both);
}

// Processor sharing, step by step: the first transfer runs alone until the second arrives, then
// both share the rate until the first completes (on a whole cycle, rounded up), then the second
// runs alone. The second initiator hands its start as a loosely-timed offset, which the memory
// must honour before the transfer.
TEST(OffChipMemoryTiming, StaggeredTransfersFollowProcessorSharing) {
  Bench b(test_config());
  const Cycle offset = 5000;
  Cycle end[2] = {0, 0};
  sc_core::sc_time left = sc_core::SC_ZERO_TIME;
  Initiator first("first", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(kTransferBytes);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_READ_COMMAND, 0, buf.data(), kTransferBytes, delay);
    end[0] = b.clock.now();
  });
  Initiator second("second", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(kTransferBytes);
    sc_core::sc_time delay = b.clock.time_of(offset);
    self.transport(tlm::TLM_READ_COMMAND, kGiB, buf.data(), kTransferBytes, delay);
    end[1] = b.clock.now();
    left = delay;
  });
  Fanin fanin("fanin");
  first.socket.bind(fanin.in);
  second.socket.bind(fanin.in);
  fanin.out.bind(b.memory.socket);
  sc_core::sc_start();

  const double rate = bytes_per_cycle(b.cfg);
  const double n = kTransferBytes;
  const double start1 = latency_cycles(b.cfg);
  const double start2 = static_cast<double>(offset) + latency_cycles(b.cfg);
  const double left1 = n - rate * (start2 - start1);
  ASSERT_GT(left1, 0) << "the second transfer must arrive while the first is running";
  const double done1 = std::ceil(start2 + left1 / (rate / 2));
  const double left2 = n - (rate / 2) * (done1 - start2);
  const double done2 = std::ceil(done1 + left2 / rate);
  EXPECT_EQ(end[0], static_cast<Cycle>(done1));
  EXPECT_EQ(end[1], static_cast<Cycle>(done2));
  EXPECT_EQ(left, sc_core::SC_ZERO_TIME);
}

// On Edge, off-chip memory is host memory across the link: parameter streaming and host
// transfers share one resource.
TEST(OffChipMemoryTiming, HostLinkKindSharesTheLinkWithHostTransfers) {
  ChipConfig cfg = test_config();
  cfg.off_chip_memory.kind = MemoryKind::HostLink;
  const Clock clock(cfg.clock_hz());
  BandwidthResource link("host_link", clock, cfg.host_link_bytes_per_s(), cfg.host_link.latency_ns);
  OffChipMemory memory("memory", cfg, clock, link);
  Cycle end[2] = {0, 0};
  Initiator streaming("streaming", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(kTransferBytes);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_READ_COMMAND, 0, buf.data(), kTransferBytes, delay);
    end[0] = clock.now();
  });
  Process host("host", [&] {
    link.transfer(kTransferBytes);
    end[1] = clock.now();
  });
  streaming.socket.bind(memory.socket);
  sc_core::sc_start();

  const double latency = std::ceil(cfg.host_link.latency_ns * cfg.clock_mhz / 1e3);
  const double rate = cfg.host_link.bandwidth_gbps * 1e3 / cfg.clock_mhz;
  const auto both = static_cast<Cycle>(latency + std::ceil(2.0 * kTransferBytes / rate));
  EXPECT_EQ(end[0], both);
  EXPECT_EQ(end[1], both);
  EXPECT_EQ(memory.memory_kind(), MemoryKind::HostLink);
}

// An in-order link (a USB bulk endpoint): transfers move one after another at the full rate in
// the order they arrive; one that arrives while the link is busy waits out its latency behind
// the bytes ahead of it, not after them, and one that arrives at an idle link pays its latency
// in full. The link is busy only while bytes move.
TEST(OffChipMemoryTiming, AnInOrderLinkServesTransfersOneAfterAnotherOverlappingTheirLatency) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  BandwidthResource link("usb", clock, cfg.host_link_bytes_per_s(), cfg.host_link.latency_ns,
                         LinkService::InOrder);
  const double latency = std::ceil(cfg.host_link.latency_ns * cfg.clock_mhz / 1e3);
  const double rate = cfg.host_link.bandwidth_gbps * 1e3 / cfg.clock_mhz;
  const double n = kTransferBytes;
  const auto later = static_cast<Cycle>(latency + n / rate);  // while the link is busy
  const auto idle_again = static_cast<Cycle>(latency + 4 * n / rate + 1000);
  Cycle end[4] = {0, 0, 0, 0};
  Process two("two", [&] {
    link.transfer_each(2, kTransferBytes);  // two together: the second right behind the first
    end[0] = clock.now();
  });
  Process third("third", [&] {
    clock.wait_until(later);
    link.transfer(kTransferBytes);
    end[1] = clock.now();
  });
  Process fourth("fourth", [&] {
    clock.wait_until(idle_again);
    link.transfer(kTransferBytes);
    end[2] = clock.now();
  });
  sc_core::sc_start();

  EXPECT_EQ(end[0], static_cast<Cycle>(std::ceil(latency + 2 * n / rate - 1e-9)));
  // The third's latency ended while the first two still moved: its bytes follow theirs.
  EXPECT_EQ(end[1], static_cast<Cycle>(std::ceil(latency + 3 * n / rate - 1e-9)));
  EXPECT_EQ(end[2], static_cast<Cycle>(
                        std::ceil(static_cast<double>(idle_again) + latency + n / rate - 1e-9)));
  EXPECT_EQ(link.bytes_moved(), 4 * n);
  EXPECT_EQ(link.busy_cycles().value(), static_cast<Cycle>(std::ceil(4 * n / rate - 1e-9)));
}

TEST(OffChipMemory, AnyByteOutsideGivesAddressErrorWithoutTime) {
  Bench b(test_config());
  const std::uint64_t cap = b.cfg.off_chip_memory.bytes;
  std::vector<tlm::tlm_response_status> got;
  Cycle end = 1;
  Initiator init("init", [&](Initiator& self) {
    std::uint8_t buf[8] = {};
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    got.push_back(self.transport(tlm::TLM_WRITE_COMMAND, cap - 4, buf, sizeof buf, delay));
    got.push_back(self.transport(tlm::TLM_READ_COMMAND, cap, buf, 1, delay));
    got.push_back(self.transport(tlm::TLM_READ_COMMAND, std::numeric_limits<std::uint64_t>::max(),
                                 buf, sizeof buf, delay));
    end = b.clock.now();
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();

  ASSERT_EQ(got.size(), 3U);
  for (const auto s : got) EXPECT_EQ(s, tlm::TLM_ADDRESS_ERROR_RESPONSE);
  EXPECT_EQ(end, 0U);
  EXPECT_EQ(b.bw.bytes_moved(), 0U);
  EXPECT_EQ(b.memory.bytes_read() + b.memory.bytes_written(), 0U);
  EXPECT_EQ(b.memory.allocated_bytes(), 0U);
}

// The driver loads memory images through debug transport at time zero.
TEST(OffChipMemory, DebugTransportTakesNoTimeAndIsNotCounted) {
  Bench b(test_config());
  const std::vector<std::uint8_t> image = pattern(3 * SparseMemory::kPageBytes + 5);
  const std::uint64_t at = 3 * kGiB + 77;
  std::vector<std::uint8_t> debug_read(image.size());
  std::vector<std::uint8_t> timed_read(image.size());
  unsigned int loaded = 0;
  Cycle after_debug = 1;
  Cycle after_timed = 0;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> out = image;
    const auto len = static_cast<unsigned int>(out.size());
    loaded = self.debug(tlm::TLM_WRITE_COMMAND, at, out.data(), len);
    self.debug(tlm::TLM_READ_COMMAND, at, debug_read.data(), len);
    after_debug = b.clock.now();
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_READ_COMMAND, at, timed_read.data(), len, delay);
    after_timed = b.clock.now();
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();

  EXPECT_EQ(loaded, image.size());
  EXPECT_EQ(debug_read, image);
  EXPECT_EQ(timed_read, image);
  EXPECT_EQ(after_debug, 0U);
  EXPECT_EQ(after_timed, b.bw.uncontended_cycles(image.size()).value());
  EXPECT_EQ(b.memory.bytes_written(), 0U);
  EXPECT_EQ(b.memory.bytes_read(), image.size());
}

TEST(OffChipMemory, GrantsNoDmi) {
  Bench b(test_config());
  bool granted = true;
  tlm::tlm_dmi dmi;
  Initiator init("init", [&](Initiator& self) {
    tlm::tlm_generic_payload gp;
    gp.set_command(tlm::TLM_READ_COMMAND);
    gp.set_address(0);
    granted = self.socket->get_direct_mem_ptr(gp, dmi);
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();
  EXPECT_FALSE(granted);
}

// Resident set size of this process (/proc/self/statm, in pages).
std::uint64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0;
  std::uint64_t resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

// A strided transaction (a weight tile whose stored rows lie apart) is its rows, each its own
// transfer, all started together: alone, n rows of b bytes take the latency once and n x b bytes
// at the rate; beside another transfer, the n + 1 transfers share the rate (processor sharing,
// as n + 1 initiators would). Each row lands at its own address.
TEST(OffChipMemoryTiming, StridedRowsAreTransfersStartedTogether) {
  Bench b(test_config());
  const std::uint32_t n = 16;
  const std::uint64_t row = 4096, pitch = 3 * row;
  std::vector<std::uint8_t> packed = pattern(n * row), back(n * row);
  Cycle end[3] = {0, 0, 0};
  std::vector<std::uint8_t> row5(row);
  Initiator init("init", [&](Initiator& self) {
    StridedRows rows;
    rows.rows = n, rows.row_bytes = row, rows.pitch = pitch;
    EXPECT_EQ(self.strided(tlm::TLM_WRITE_COMMAND, kGiB, packed.data(), rows),
              tlm::TLM_OK_RESPONSE);
    end[0] = b.clock.now();
    self.debug(tlm::TLM_READ_COMMAND, kGiB + 5 * pitch, row5.data(), row);
    EXPECT_EQ(self.strided(tlm::TLM_READ_COMMAND, kGiB, back.data(), rows), tlm::TLM_OK_RESPONSE);
    end[1] = b.clock.now();
  });
  const double rate = bytes_per_cycle(b.cfg), lat = latency_cycles(b.cfg);
  const auto written = static_cast<Cycle>(lat + std::ceil(n * row / rate));
  // Issued with the strided read (a loosely-timed offset): one more transfer in flight.
  Initiator other("other", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(kTransferBytes);
    sc_core::sc_time delay = b.clock.time_of(written);
    self.transport(tlm::TLM_READ_COMMAND, 0, buf.data(), kTransferBytes, delay);
    end[2] = b.clock.now();
  });
  Fanin fanin("fanin");
  init.socket.bind(fanin.in);
  other.socket.bind(fanin.in);
  fanin.out.bind(b.memory.socket);
  sc_core::sc_start();

  EXPECT_EQ(end[0], written);
  EXPECT_EQ(std::vector<std::uint8_t>(packed.begin() + 5 * row, packed.begin() + 6 * row), row5);
  EXPECT_EQ(back, packed);
  // Both start at end[0] + latency; the n rows, each as large as 1/(n+1) of the rate gives them,
  // finish together; then the other transfer runs alone.
  const double start = static_cast<double>(end[0]) + lat;
  const double rows_done = std::ceil(start + (n + 1) * row / rate);
  const double other_left = kTransferBytes - (rate / (n + 1)) * (rows_done - start);
  EXPECT_EQ(end[1], static_cast<Cycle>(rows_done));
  EXPECT_EQ(end[2], static_cast<Cycle>(std::ceil(rows_done + other_left / rate)));
  EXPECT_EQ(b.memory.bytes_read(), n * row + kTransferBytes);
  EXPECT_EQ(b.bw.bytes_moved(), 2 * n * row + kTransferBytes);
}

// The first row outside the memory is named, and nothing moves or takes time.
TEST(OffChipMemory, AStridedRowOutsideIsRefusedNamingItWithoutTime) {
  Bench b(test_config());
  StridedRows rows;
  rows.rows = 8, rows.row_bytes = 256, rows.pitch = 1024;
  tlm::tlm_response_status st = tlm::TLM_INCOMPLETE_RESPONSE;
  Cycle end = 1;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(8 * 256);
    st = self.strided(tlm::TLM_READ_COMMAND, b.cfg.off_chip_memory.bytes - 5 * 1024, buf.data(),
                      rows);
    end = b.clock.now();
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();
  EXPECT_EQ(st, tlm::TLM_ADDRESS_ERROR_RESPONSE);
  EXPECT_EQ(rows.refused_row, 5u);
  EXPECT_EQ(end, 0u);
  EXPECT_EQ(b.memory.bytes_read(), 0u);
}

// Timing only (SimOptions): the same time and counts, no byte kept: a read leaves the reader's
// buffer as it was and no page is allocated, by timed or debug writes.
TEST(OffChipMemory, TimingOnlyKeepsNoByteAndTakesTheSameTime) {
  SimOptions timing_only;
  timing_only.timing_only = true;
  Bench b(test_config(), timing_only);
  std::vector<std::uint8_t> read(kTransferBytes, 0x77);
  Cycle after_read = 0;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> out = pattern(kTransferBytes);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.debug(tlm::TLM_WRITE_COMMAND, 0, out.data(), kTransferBytes);
    self.transport(tlm::TLM_WRITE_COMMAND, 4 * kGiB, out.data(), kTransferBytes, delay);
    self.transport(tlm::TLM_READ_COMMAND, 4 * kGiB, read.data(), kTransferBytes, delay);
    after_read = b.clock.now();
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();
  const auto one = static_cast<Cycle>(latency_cycles(b.cfg) +
                                      std::ceil(kTransferBytes / bytes_per_cycle(b.cfg)));
  EXPECT_EQ(after_read, 2 * one);
  EXPECT_EQ(read, std::vector<std::uint8_t>(kTransferBytes, 0x77));
  EXPECT_EQ(b.memory.allocated_bytes(), 0u);
  EXPECT_EQ(b.memory.bytes_written(), kTransferBytes);
  EXPECT_EQ(b.memory.bytes_read(), kTransferBytes);
}

// DESIGN: "A 32 GiB HBM config must not allocate 32 GiB."
TEST(OffChipMemory, HbmCapacityIsAllocatedOnlyWhereWritten) {
  ChipConfig cfg = test_config();
  cfg.off_chip_memory.kind = MemoryKind::Hbm;
  cfg.off_chip_memory.bytes = 32 * kGiB;
  const std::uint64_t rss_before = rss_bytes();
  Bench b(cfg);
  const std::vector<std::uint64_t> addrs = {0, 7 * kGiB + 3, 20 * kGiB, 32 * kGiB - 1};
  Initiator init("init", [&](Initiator& self) {
    for (const std::uint64_t a : addrs) {
      std::uint8_t byte = 0xa5;
      self.debug(tlm::TLM_WRITE_COMMAND, a, &byte, 1);
    }
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();

  EXPECT_EQ(b.memory.capacity(), cfg.off_chip_memory.bytes);
  EXPECT_EQ(b.memory.allocated_bytes(), addrs.size() * SparseMemory::kPageBytes);
  // Far below the capacity: a thousandth of it is already more than the model itself needs.
  EXPECT_LT(rss_bytes() - rss_before, cfg.off_chip_memory.bytes / 1000);
}

// Structured memory (docs/memory-model.md): the shipped variants of the chips.
ChipConfig structured(const std::string& chip) {
  return load_chip_config(std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/structured-memory/" +
                          chip + ".json");
}

// The cycle a structured transfer ends: the first whole cycle at or after its last byte.
Cycle end_cycle(const ChipConfig& cfg, double ns) {
  return static_cast<Cycle>(std::ceil(ns * cfg.clock_mhz / 1e3 - 1e-9));
}
double ns_of(const ChipConfig& cfg, Cycle c) {
  return static_cast<double>(c) * 1e3 / cfg.clock_mhz;
}

TEST(OffChipMemoryStructured, TransfersPayTheLatencyThenTheirRowsOnTheChannels) {
  Bench b(structured("v1"));
  const WriteThenRead o = write_then_read(b);

  // The same accesses on a model of our own, at the cycles the latency leaves.
  DramTiming ref(dram_params(b.cfg));
  const auto lat = static_cast<Cycle>(latency_cycles(b.cfg));
  const Cycle w =
      end_cycle(b.cfg, ref.access(ns_of(b.cfg, lat), 4 * kGiB, kTransferBytes, DramAccess::Write));
  const Cycle r = end_cycle(
      b.cfg, ref.access(ns_of(b.cfg, w + lat), 4 * kGiB, kTransferBytes, DramAccess::Read));
  EXPECT_EQ(o.after_write, w);
  EXPECT_EQ(o.after_read, r);
  // Slower than the ideal memory: at least an activate more, never faster than the bandwidth.
  const auto ideal = static_cast<Cycle>(latency_cycles(b.cfg) +
                                        std::ceil(kTransferBytes / bytes_per_cycle(b.cfg)));
  EXPECT_GT(o.after_write, ideal);
  EXPECT_EQ(o.read, o.written);
  EXPECT_EQ(b.memory.bytes_written(), kTransferBytes);
  EXPECT_EQ(b.memory.bytes_read(), kTransferBytes);
  EXPECT_EQ(b.bw.bytes_moved(), 0U);  // the ideal resource carries nothing
  EXPECT_EQ(b.memory.dram_busy_cycles().value(), (w - lat) + (r - w - lat));
  ASSERT_NE(b.memory.dram(), nullptr);
  EXPECT_EQ(b.memory.dram()->stats().turnarounds, 2U);  // one per channel
}

TEST(OffChipMemoryStructured, StridedRowsAreBookedEachAtItsOwnAddress) {
  Bench b(structured("v3"));
  const std::uint32_t n = 64;
  const std::uint64_t row = 256, pitch = 8192;
  std::vector<std::uint8_t> packed = pattern(n * row), back(n * row);
  Cycle end[2] = {0, 0};
  Initiator init("init", [&](Initiator& self) {
    StridedRows rows;
    rows.rows = n, rows.row_bytes = row, rows.pitch = pitch;
    EXPECT_EQ(self.strided(tlm::TLM_WRITE_COMMAND, kGiB, packed.data(), rows),
              tlm::TLM_OK_RESPONSE);
    end[0] = b.clock.now();
    EXPECT_EQ(self.strided(tlm::TLM_READ_COMMAND, kGiB, back.data(), rows), tlm::TLM_OK_RESPONSE);
    end[1] = b.clock.now();
  });
  init.socket.bind(b.memory.socket);
  sc_core::sc_start();

  DramTiming ref(dram_params(b.cfg));
  const auto lat = static_cast<Cycle>(latency_cycles(b.cfg));
  auto rows_end = [&](Cycle start, DramAccess dir) {
    double done = ns_of(b.cfg, start);
    for (std::uint32_t i = 0; i < n; ++i)
      done = std::max(done, ref.access(ns_of(b.cfg, start), kGiB + i * pitch, row, dir));
    return end_cycle(b.cfg, done);
  };
  const Cycle w = rows_end(lat, DramAccess::Write);
  EXPECT_EQ(end[0], w);
  EXPECT_EQ(end[1], rows_end(w + lat, DramAccess::Read));
  EXPECT_EQ(back, packed);
}

TEST(OffChipMemoryStructured, HostLinkBytesCarryTheirPacketFraming) {
  const ChipConfig cfg = structured("edge");
  const Clock clock(cfg.clock_hz());
  BandwidthResource link("host_link", clock, cfg.host_link_bytes_per_s(), cfg.host_link.latency_ns);
  OffChipMemory memory("memory", cfg, clock, link);
  Cycle end = 0;
  Initiator streaming("streaming", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(kTransferBytes);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_READ_COMMAND, 0, buf.data(), kTransferBytes, delay);
    end = clock.now();
  });
  streaming.socket.bind(memory.socket);
  sc_core::sc_start();

  const PacketLinkParams p = packet_params(cfg);
  const std::uint64_t wire =
      kTransferBytes + kTransferBytes / p.payload_bytes * std::uint64_t{p.overhead_bytes};
  const double latency = std::ceil(cfg.host_link.latency_ns * cfg.clock_mhz / 1e3);
  const double rate = cfg.host_link.bandwidth_gbps * 1e3 / cfg.clock_mhz;
  EXPECT_EQ(end, static_cast<Cycle>(latency + std::ceil(static_cast<double>(wire) / rate)));
  EXPECT_EQ(memory.bytes_read(), kTransferBytes);  // the payload, as the reports count it
  EXPECT_EQ(memory.dram(), nullptr);
}

}  // namespace
}  // namespace tpu
