// Each TEST that elaborates modules must run in its own process (one elaboration per process).
#include "hw/memory/unified_buffer.h"

#include <gtest/gtest.h>
#include <tlm_utils/simple_initiator_socket.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <systemc>
#include <tlm>
#include <utility>
#include <vector>

#include "hw/common/clock.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"

namespace tpu {
namespace {

// Shaped like TPU v1 (J17 Table 2: 700 MHz, 24 MiB unified buffer, 256-byte rows).
ChipConfig test_config() {
  ChipConfig cfg;
  cfg.name = "unified-buffer-test";
  cfg.clock_mhz = 700;
  cfg.tensor_cores = 1;
  cfg.mxu.count = 1;
  cfg.mxu.rows = 256;
  cfg.mxu.cols = 256;
  cfg.unified_buffer.bytes = 24ULL << 20;
  cfg.unified_buffer.bytes_per_cycle = 256;
  cfg.accumulators.entries = 4096;
  return cfg;
}

class Initiator : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Initiator> socket;

  Initiator(sc_core::sc_module_name name, std::function<void(Initiator&)> body)
      : sc_core::sc_module(name), socket("socket"), body_(std::move(body)) {
    SC_HAS_PROCESS(Initiator);
    SC_THREAD(run);
  }

  // One b_transport; `delay` is the initiator's local-time offset, updated by the target.
  tlm::tlm_response_status transport(tlm::tlm_command cmd, std::uint64_t addr, std::uint8_t* data,
                                     unsigned int len, sc_core::sc_time& delay,
                                     unsigned char* byte_enables = nullptr) {
    tlm::tlm_generic_payload gp;
    gp.set_command(cmd);
    gp.set_address(addr);
    gp.set_data_ptr(data);
    gp.set_data_length(len);
    gp.set_streaming_width(len);
    gp.set_byte_enable_ptr(byte_enables);
    gp.set_byte_enable_length(byte_enables != nullptr ? len : 0);
    gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    socket->b_transport(gp, delay);
    last_dmi_allowed = gp.is_dmi_allowed();
    return gp.get_response_status();
  }

  bool last_dmi_allowed = false;

 private:
  void run() { body_(*this); }
  std::function<void(Initiator&)> body_;
};

std::vector<std::uint8_t> pattern(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  std::iota(v.begin(), v.end(), std::uint8_t{3});
  return v;
}

TEST(UnifiedBuffer, WriteThenReadReturnsTheBytesAndCountsThem) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  UnifiedBuffer ub("ub", cfg, clock);
  const std::uint64_t addr = cfg.unified_buffer.bytes / 3;
  const std::vector<std::uint8_t> written = pattern(3 * cfg.unified_buffer.bytes_per_cycle + 7);
  std::vector<std::uint8_t> read(written.size());
  tlm::tlm_response_status wr = tlm::TLM_INCOMPLETE_RESPONSE;
  tlm::tlm_response_status rd = tlm::TLM_INCOMPLETE_RESPONSE;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> out = written;
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    wr = self.transport(tlm::TLM_WRITE_COMMAND, addr, out.data(),
                        static_cast<unsigned int>(out.size()), delay);
    rd = self.transport(tlm::TLM_READ_COMMAND, addr, read.data(),
                        static_cast<unsigned int>(read.size()), delay);
  });
  init.socket.bind(ub.socket);
  sc_core::sc_start();

  EXPECT_EQ(wr, tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(rd, tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(read, written);
  EXPECT_TRUE(std::equal(written.begin(), written.end(), ub.data() + addr));
  EXPECT_EQ(ub.bytes(), cfg.unified_buffer.bytes);
  EXPECT_EQ(ub.bytes_written(), written.size());
  EXPECT_EQ(ub.bytes_read(), read.size());
}

// Timing only (SimOptions): the port's time and the counts as always, no byte moved either way.
TEST(UnifiedBuffer, TimingOnlyMovesNoByteAndTakesThePortsTime) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  SimOptions timing_only;
  timing_only.timing_only = true;
  UnifiedBuffer ub("ub", cfg, clock, timing_only);
  const unsigned int len = 3 * cfg.unified_buffer.bytes_per_cycle + 7;
  std::vector<std::uint8_t> read(len, 0x77);
  Cycle after = 0;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> out = pattern(len);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_WRITE_COMMAND, 64, out.data(), len, delay);
    self.transport(tlm::TLM_READ_COMMAND, 64, read.data(), len, delay);
    sc_core::wait(delay);
    after = clock.now();
  });
  init.socket.bind(ub.socket);
  sc_core::sc_start();
  EXPECT_EQ(after,
            2 * static_cast<Cycle>(std::ceil(len / double(cfg.unified_buffer.bytes_per_cycle))));
  EXPECT_EQ(read, std::vector<std::uint8_t>(len, 0x77));
  for (unsigned int i = 0; i < len; ++i) ASSERT_EQ(ub.data()[64 + i], 0) << i;
  EXPECT_EQ(ub.bytes_written(), len);
  EXPECT_EQ(ub.bytes_read(), len);
}

TEST(UnifiedBufferTiming, TransferTakesLengthOverBytesPerCycleRoundedUp) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  UnifiedBuffer ub("ub", cfg, clock);
  const double per_cycle = cfg.unified_buffer.bytes_per_cycle;
  const unsigned int first = 5 * cfg.unified_buffer.bytes_per_cycle + 1;  // a partial last beat
  const unsigned int second = 2 * cfg.unified_buffer.bytes_per_cycle;
  const auto first_cycles = static_cast<Cycle>(std::ceil(first / per_cycle));
  const auto second_cycles = static_cast<Cycle>(std::ceil(second / per_cycle));
  Cycle after_first = 0;
  Cycle after_second = 0;
  Cycle annotated = 0;
  bool dmi_allowed = false;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(first);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_WRITE_COMMAND, 0, buf.data(), first, delay);
    dmi_allowed = self.last_dmi_allowed;
    sc_core::wait(delay);
    after_first = clock.now();
    // Loosely timed: a second transaction annotated on top of an unsynchronised offset.
    delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_READ_COMMAND, 0, buf.data(), first, delay);
    self.transport(tlm::TLM_READ_COMMAND, 0, buf.data(), second, delay);
    annotated = clock.cycle_of(delay);
    sc_core::wait(delay);
    after_second = clock.now();
  });
  init.socket.bind(ub.socket);
  sc_core::sc_start();

  EXPECT_EQ(after_first, first_cycles);
  EXPECT_EQ(annotated, first_cycles + second_cycles);
  EXPECT_EQ(after_second, 2 * first_cycles + second_cycles);
  EXPECT_TRUE(dmi_allowed);
}

TEST(UnifiedBuffer, AnyByteOutsideGivesAddressErrorWithoutTime) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  UnifiedBuffer ub("ub", cfg, clock);
  const std::uint64_t size = cfg.unified_buffer.bytes;
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  struct Case {
    std::uint64_t addr;
    unsigned int len;
  };
  // Last byte one past the end; start at the end; addr + len wrapping past 2^64.
  const std::vector<Case> cases = {{size - 3, 4}, {size, 1}, {max - 1, 4}, {max, 1}};
  std::vector<tlm::tlm_response_status> got;
  tlm::tlm_response_status last_byte = tlm::TLM_INCOMPLETE_RESPONSE;
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(4);
    for (const Case& c : cases) {
      got.push_back(self.transport(tlm::TLM_WRITE_COMMAND, c.addr, buf.data(), c.len, delay));
      got.push_back(self.transport(tlm::TLM_READ_COMMAND, c.addr, buf.data(), c.len, delay));
    }
    sc_core::sc_time ok_delay = sc_core::SC_ZERO_TIME;
    last_byte = self.transport(tlm::TLM_WRITE_COMMAND, size - 1, buf.data(), 1, ok_delay);
  });
  init.socket.bind(ub.socket);
  sc_core::sc_start();

  ASSERT_EQ(got.size(), 2 * cases.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], tlm::TLM_ADDRESS_ERROR_RESPONSE) << "case " << i / 2;
  }
  EXPECT_EQ(delay, sc_core::SC_ZERO_TIME);
  EXPECT_EQ(last_byte, tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(ub.bytes_written(), 1U);
  EXPECT_EQ(ub.bytes_read(), 0U);
}

TEST(UnifiedBuffer, ByteEnablesGiveByteEnableError) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  UnifiedBuffer ub("ub", cfg, clock);
  tlm::tlm_response_status got = tlm::TLM_INCOMPLETE_RESPONSE;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(8, 1);
    std::vector<unsigned char> enables(buf.size(), TLM_BYTE_ENABLED);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    got = self.transport(tlm::TLM_WRITE_COMMAND, 0, buf.data(),
                         static_cast<unsigned int>(buf.size()), delay, enables.data());
  });
  init.socket.bind(ub.socket);
  sc_core::sc_start();
  EXPECT_EQ(got, tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE);
  EXPECT_EQ(ub.data()[0], 0);
}

TEST(UnifiedBuffer, DmiCoversTheWholeBufferAndSeesTransportWrites) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  UnifiedBuffer ub("ub", cfg, clock);
  const std::uint64_t addr = cfg.unified_buffer.bytes - 64;
  const std::vector<std::uint8_t> written = pattern(64);
  bool granted = false;
  tlm::tlm_dmi dmi;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> out = written;
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_WRITE_COMMAND, addr, out.data(), static_cast<unsigned int>(out.size()),
                   delay);
    tlm::tlm_generic_payload gp;
    gp.set_command(tlm::TLM_READ_COMMAND);
    gp.set_address(0);
    granted = self.socket->get_direct_mem_ptr(gp, dmi);
  });
  init.socket.bind(ub.socket);
  sc_core::sc_start();

  ASSERT_TRUE(granted);
  EXPECT_EQ(dmi.get_start_address(), 0U);
  EXPECT_EQ(dmi.get_end_address(), cfg.unified_buffer.bytes - 1);
  EXPECT_TRUE(dmi.is_read_write_allowed());
  EXPECT_EQ(dmi.get_read_latency(), clock.time_of(1));
  EXPECT_EQ(dmi.get_write_latency(), clock.time_of(1));
  EXPECT_TRUE(std::equal(written.begin(), written.end(), dmi.get_dmi_ptr() + addr));
}

TEST(UnifiedBuffer, DebugTransportCopiesWithoutTimeOrCounting) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  UnifiedBuffer ub("ub", cfg, clock);
  const std::vector<std::uint8_t> written = pattern(1000);
  std::vector<std::uint8_t> read(written.size());
  unsigned int wrote = 0;
  unsigned int clipped = 0;
  Cycle end = 1;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> out = written;
    tlm::tlm_generic_payload gp;
    gp.set_command(tlm::TLM_WRITE_COMMAND);
    gp.set_address(100);
    gp.set_data_ptr(out.data());
    gp.set_data_length(static_cast<unsigned int>(out.size()));
    wrote = self.socket->transport_dbg(gp);
    gp.set_command(tlm::TLM_READ_COMMAND);
    gp.set_data_ptr(read.data());
    self.socket->transport_dbg(gp);
    // A debug access straddling the end moves only the bytes inside.
    std::vector<std::uint8_t> tail(written.size());
    gp.set_address(cfg.unified_buffer.bytes - 10);
    gp.set_data_ptr(tail.data());
    clipped = self.socket->transport_dbg(gp);
    end = clock.now();
  });
  init.socket.bind(ub.socket);
  sc_core::sc_start();

  EXPECT_EQ(wrote, written.size());
  EXPECT_EQ(read, written);
  EXPECT_EQ(clipped, 10U);
  EXPECT_EQ(end, 0U);
  EXPECT_EQ(ub.bytes_read() + ub.bytes_written(), 0U);
}

TEST(UnifiedBuffer, ZeroBytesPerCycleIsAConfigError) {
  ChipConfig cfg = test_config();
  cfg.unified_buffer.bytes_per_cycle = 0;
  const Clock clock(cfg.clock_hz());
  EXPECT_THROW(UnifiedBuffer("ub", cfg, clock), ConfigError);
}

}  // namespace
}  // namespace tpu
