// Structured off-chip memory timing (issue 18 item 4), plain C++ without the kernel: channels with
// addresses interleaved over them, banks with one open row each, one data bus per channel,
// read/write turnaround and all-bank refresh. OffChipMemory uses it when
// `off_chip_memory.model` is "structured"; "ideal" keeps the shared BandwidthResource.
// Derivation of every formula and each parameter's source: docs/memory-model.md.
//
// Contract: access() is called with non-decreasing arrival times (simulation time only moves
// forward) and returns the time the transfer's last byte leaves the channel's data bus. The
// controller is first come, first served per channel: a transfer's row segments are booked on
// each channel's bus in address order after everything booked before it. A bank may precharge and
// activate while the bus still carries earlier data (bank parallelism), in activation order, and
// no faster than tRRD apart and four per tFAW. The cost is one step per row segment (a run of
// consecutive bytes in one row of one bank), never one per burst or per cycle.
//
// Refresh is deterministic from time 0: on every channel at once, every tREFI a window of tRFC
// closes every row and stops the bus. Data that would cross a window's start pauses there and
// resumes tRFC + tRCD later (the refresh, then the row activated again).
//
// Times are in nanoseconds (double); the caller converts to and from cycles once per transfer.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "hw/config/chip_config.h"

namespace tpu {

enum class DramAccess : std::uint8_t { Read, Write };

struct DramTimingParams {
  std::uint32_t channels = 1;
  std::uint32_t banks = 1;             // per channel
  std::uint64_t row_bytes = 0;         // one bank's row (page) over the channel's whole width
  std::uint64_t interleave_bytes = 0;  // consecutive bytes on one channel before the next
  std::uint64_t burst_bytes = 0;       // one column access (BL x width); the smallest unit
  double channel_bytes_per_ns = 0;     // one channel's data bus: config bandwidth / channels
  double t_rcd_ns = 0;                 // activate -> column command
  double t_rp_ns = 0;                  // precharge -> activate
  double t_ras_ns = 0;                 // activate -> precharge
  double t_rrd_ns = 0;                 // activate -> activate, different banks
  double t_faw_ns = 0;                 // window holding at most four activates
  double write_to_read_ns = 0;         // data-bus gap, last write data -> first read data
  double read_to_write_ns = 0;         // data-bus gap, last read data -> first write data
  double t_refi_ns = 0;                // refresh interval (0: no refresh)
  double t_rfc_ns = 0;                 // refresh cycle time

  // Time one segment of `bytes` (a whole number of bursts) holds the data bus.
  [[nodiscard]] double bus_ns(std::uint64_t bytes) const {
    return static_cast<double>(bytes) / channel_bytes_per_ns;
  }
};

// The structured model of a chip config (kind ddr3 or hbm, model structured): the timing object
// with the channels and each channel's share of the configured bandwidth, which is therefore the
// peak the model can never exceed.
DramTimingParams dram_params(const ChipConfig& cfg);

// The reasons the parameters cannot work, or "" (for the config loader's messages).
const char* check(const DramTimingParams& p);

struct DramStats {
  std::uint64_t segments = 0;
  std::uint64_t row_hits = 0;        // the bank had the row open
  std::uint64_t row_misses = 0;      // activate needed (closed, other row, or closed by refresh)
  std::uint64_t turnarounds = 0;     // direction flips on a channel's bus
  std::uint64_t refresh_stalls = 0;  // segments paused or delayed by a refresh window
  std::uint64_t bus_bytes = 0;       // whole bursts moved (>= the bytes asked for)
};

class DramTiming {
 public:
  // Throws std::invalid_argument with check()'s text when the parameters cannot work.
  explicit DramTiming(const DramTimingParams& p);

  // Moves `bytes` from `addr` (any alignment), arriving at `arrival_ns`; returns when the last
  // byte has moved (== arrival_ns for 0 bytes).
  double access(double arrival_ns, std::uint64_t addr, std::uint64_t bytes, DramAccess dir);

  [[nodiscard]] const DramTimingParams& params() const { return p_; }
  [[nodiscard]] const DramStats& stats() const { return stats_; }

 private:
  static constexpr std::uint64_t kNoRow = std::numeric_limits<std::uint64_t>::max();
  struct Bank {
    std::uint64_t row = kNoRow;
    double act_ns = 0;    // when the open row was activated
    double ready_ns = 0;  // act_ns + tRCD
    double free_ns = 0;   // end of the last data it moved (precharge may follow)
  };
  struct Channel {
    double bus_free_ns = 0;
    bool used = false;
    DramAccess last_dir = DramAccess::Read;
    std::array<double, 4> acts{};  // the last four activates (a ring), for tFAW
    std::uint32_t act_next = 0;
    double last_act_ns = -std::numeric_limits<double>::infinity();
    std::vector<Bank> banks;
  };

  // Bytes [l0, l1) of channel `c`'s own address space.
  double channel_access(Channel& ch, double t0, std::uint64_t l0, std::uint64_t l1, DramAccess dir);
  // Books an activate no earlier than `at` (tRRD, tFAW, outside refresh windows); returns it.
  double activate(Channel& ch, double at);
  [[nodiscard]] std::uint64_t epoch(double t) const;   // refresh windows started by `t`
  [[nodiscard]] bool in_window(double t) const;        // inside a refresh window
  [[nodiscard]] double after_refresh(double t) const;  // t, or the end of its window

  DramTimingParams p_;
  std::vector<Channel> channels_;
  DramStats stats_;
};

// A packet link in place of DRAM (Edge TPU: host memory over USB 3.0): no banks; each packet of
// up to `payload_bytes` carries `overhead_bytes` of framing, header and CRC on the wire.
struct PacketLinkParams {
  std::uint32_t payload_bytes = 0;
  std::uint32_t overhead_bytes = 0;
};

PacketLinkParams packet_params(const ChipConfig& cfg);

// Bytes on the wire for `bytes` of payload: every packet, the last one short, pays the overhead.
inline std::uint64_t wire_bytes(const PacketLinkParams& p, std::uint64_t bytes) {
  const std::uint64_t packets = (bytes + p.payload_bytes - 1) / p.payload_bytes;
  return bytes + packets * p.overhead_bytes;
}

}  // namespace tpu
