// Each TEST that elaborates modules must run in its own process (one elaboration per process).
#include "hw/memory/accumulators.h"

#include <gtest/gtest.h>
#include <tlm_utils/simple_initiator_socket.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <systemc>
#include <tlm>
#include <utility>
#include <vector>

#include "hw/common/clock.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"

namespace tpu {
namespace {

// Shaped like TPU v1 (J17 Table 2: 700 MHz, 4096 accumulator entries of 256 int32 values).
ChipConfig test_config() {
  ChipConfig cfg;
  cfg.name = "accumulators-test";
  cfg.clock_mhz = 700;
  cfg.tensor_cores = 1;
  cfg.mxu.count = 1;
  cfg.mxu.rows = 256;
  cfg.mxu.cols = 256;
  cfg.mxu.input_type = DType::Int8;
  cfg.mxu.acc_type = DType::Int32;
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

 private:
  void run() { body_(*this); }
  std::function<void(Initiator&)> body_;
};

// The byte address of entry `e`, column `c` as the accumulator layout defines it.
std::uint64_t byte_address(const ChipConfig& cfg, std::uint64_t e, std::uint64_t c) {
  return e * cfg.mxu.cols * sizeof(std::uint32_t) + c * sizeof(std::uint32_t);
}

TEST(Accumulators, SizedByTheConfig) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  Accumulators acc("acc", cfg, clock);
  EXPECT_EQ(acc.entries(), cfg.accumulators.entries);
  EXPECT_EQ(acc.words_per_entry(), cfg.mxu.cols);
  EXPECT_EQ(acc.bytes(), cfg.accumulator_bytes_per_core());
}

TEST(Accumulators, ByteAddressIsEntryTimesColsTimesFourPlusColumnTimesFour) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  Accumulators acc("acc", cfg, clock);
  const std::uint32_t entry = cfg.accumulators.entries - 3;
  const std::uint32_t col = cfg.mxu.cols - 5;
  const std::int32_t written = -123456789;
  const float backdoor = -2.5F;  // fp32 accumulators keep the float's bits
  std::uint32_t backdoor_bits = 0;
  std::memcpy(&backdoor_bits, &backdoor, sizeof backdoor);
  acc.words()[std::uint64_t{entry - 1} * acc.words_per_entry() + col + 1] = backdoor_bits;
  float read_back = 0;
  tlm::tlm_response_status wr = tlm::TLM_INCOMPLETE_RESPONSE;
  tlm::tlm_response_status rd = tlm::TLM_INCOMPLETE_RESPONSE;
  Initiator init("init", [&](Initiator& self) {
    std::int32_t v = written;
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    wr = self.transport(tlm::TLM_WRITE_COMMAND, byte_address(cfg, entry, col), &v, sizeof v, delay);
    rd = self.transport(tlm::TLM_READ_COMMAND, byte_address(cfg, entry - 1, col + 1), &read_back,
                        sizeof read_back, delay);
  });
  init.socket.bind(acc.socket);
  sc_core::sc_start();

  ASSERT_EQ(wr, tlm::TLM_OK_RESPONSE);
  ASSERT_EQ(rd, tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(static_cast<std::int32_t>(acc.words()[std::uint64_t{entry} * cfg.mxu.cols + col]),
            written);
  EXPECT_EQ(read_back, backdoor);
  EXPECT_EQ(acc.bytes_written(), sizeof written);
  EXPECT_EQ(acc.bytes_read(), sizeof read_back);
}

TEST(AccumulatorsTiming, OneEntryPerCycle) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  Accumulators acc("acc", cfg, clock);
  const double entry_bytes = cfg.mxu.cols * sizeof(std::uint32_t);
  // Two whole entries and one word of a third.
  const auto len = static_cast<unsigned int>(2 * entry_bytes + sizeof(std::uint32_t));
  const auto expected = static_cast<Cycle>(std::ceil(len / entry_bytes));
  Cycle end = 0;
  Initiator init("init", [&](Initiator& self) {
    std::vector<std::uint8_t> buf(len);
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    self.transport(tlm::TLM_READ_COMMAND, byte_address(cfg, 1, 0), buf.data(), len, delay);
    sc_core::wait(delay);
    end = clock.now();
  });
  init.socket.bind(acc.socket);
  sc_core::sc_start();
  EXPECT_EQ(end, expected);
}

TEST(Accumulators, AnyByteOutsideGivesAddressError) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  Accumulators acc("acc", cfg, clock);
  const std::uint64_t end = byte_address(cfg, cfg.accumulators.entries, 0);
  std::vector<tlm::tlm_response_status> got;
  Initiator init("init", [&](Initiator& self) {
    std::uint32_t w[2] = {};
    sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
    got.push_back(self.transport(tlm::TLM_WRITE_COMMAND, end, w, sizeof w[0], delay));
    got.push_back(self.transport(tlm::TLM_WRITE_COMMAND, end - sizeof w[0], w, sizeof w, delay));
    got.push_back(self.transport(tlm::TLM_READ_COMMAND, std::numeric_limits<std::uint64_t>::max(),
                                 w, sizeof w, delay));
  });
  init.socket.bind(acc.socket);
  sc_core::sc_start();
  for (const auto s : got) EXPECT_EQ(s, tlm::TLM_ADDRESS_ERROR_RESPONSE);
  EXPECT_EQ(got.size(), 3U);
}

TEST(Accumulators, DmiCoversEveryEntry) {
  const ChipConfig cfg = test_config();
  const Clock clock(cfg.clock_hz());
  Accumulators acc("acc", cfg, clock);
  bool granted = false;
  tlm::tlm_dmi dmi;
  Initiator init("init", [&](Initiator& self) {
    tlm::tlm_generic_payload gp;
    gp.set_command(tlm::TLM_WRITE_COMMAND);
    gp.set_address(0);
    granted = self.socket->get_direct_mem_ptr(gp, dmi);
  });
  init.socket.bind(acc.socket);
  sc_core::sc_start();
  ASSERT_TRUE(granted);
  EXPECT_EQ(dmi.get_dmi_ptr(), reinterpret_cast<unsigned char*>(acc.words()));
  EXPECT_EQ(dmi.get_end_address(), byte_address(cfg, cfg.accumulators.entries, 0) - 1);
  EXPECT_TRUE(dmi.is_read_write_allowed());
  EXPECT_EQ(dmi.get_read_latency(), clock.time_of(1));
}

TEST(Accumulators, ValuesNarrowerThanFourBytesAreAConfigError) {
  ChipConfig cfg = test_config();
  cfg.mxu.acc_type = DType::Bf16;
  const Clock clock(cfg.clock_hz());
  EXPECT_THROW(Accumulators("acc", cfg, clock), ConfigError);
}

}  // namespace
}  // namespace tpu
