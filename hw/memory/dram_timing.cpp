#include "hw/memory/dram_timing.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace tpu {

DramTimingParams dram_params(const ChipConfig& cfg) {
  const OffChipMemoryConfig& m = cfg.off_chip_memory;
  const OffChipTimingConfig& t = m.timing;
  DramTimingParams p;
  p.channels = m.channels;
  p.banks = t.banks;
  p.row_bytes = t.row_bytes;
  p.interleave_bytes = t.interleave_bytes;
  p.burst_bytes = t.burst_bytes;
  p.channel_bytes_per_ns = m.bandwidth_gbps / m.channels;  // 1 GB/s = 1 byte/ns
  p.t_rcd_ns = t.t_rcd_ns;
  p.t_rp_ns = t.t_rp_ns;
  p.t_ras_ns = t.t_ras_ns;
  p.t_rrd_ns = t.t_rrd_ns;
  p.t_faw_ns = t.t_faw_ns;
  p.write_to_read_ns = t.write_to_read_ns;
  p.read_to_write_ns = t.read_to_write_ns;
  p.t_refi_ns = t.t_refi_ns;
  p.t_rfc_ns = t.t_rfc_ns;
  return p;
}

PacketLinkParams packet_params(const ChipConfig& cfg) {
  return {cfg.off_chip_memory.timing.packet_payload_bytes,
          cfg.off_chip_memory.timing.packet_overhead_bytes};
}

const char* check(const DramTimingParams& p) {
  if (p.channels == 0 || p.banks == 0) return "channels and banks must be at least 1";
  if (p.burst_bytes == 0 || p.interleave_bytes == 0 || p.row_bytes == 0)
    return "burst_bytes, interleave_bytes and row_bytes must be at least 1";
  if (p.interleave_bytes % p.burst_bytes != 0)
    return "interleave_bytes must be a multiple of burst_bytes";
  if (p.row_bytes % p.interleave_bytes != 0)
    return "row_bytes must be a multiple of interleave_bytes";
  if (!(p.channel_bytes_per_ns > 0) || !std::isfinite(p.channel_bytes_per_ns))
    return "the channel's bandwidth must be positive";
  for (const double t : {p.t_rcd_ns, p.t_rp_ns, p.t_ras_ns, p.t_rrd_ns, p.t_faw_ns,
                         p.write_to_read_ns, p.read_to_write_ns, p.t_refi_ns, p.t_rfc_ns})
    if (!(t >= 0) || !std::isfinite(t)) return "every time must be a finite number >= 0";
  // A row segment is paused by at most one refresh window (dram_timing.h): a whole row, the
  // re-activation and the window fit in one interval.
  if (p.t_refi_ns > 0 &&
      p.t_rfc_ns + p.t_rcd_ns + p.bus_ns(p.row_bytes) + p.t_rrd_ns >= p.t_refi_ns)
    return "t_refi_ns must exceed t_rfc_ns + t_rcd_ns + t_rrd_ns + one row's bus time";
  return "";
}

DramTiming::DramTiming(const DramTimingParams& p) : p_(p) {
  if (const char* why = check(p); *why != '\0') throw std::invalid_argument(why);
  channels_.resize(p.channels);
  for (Channel& ch : channels_) {
    ch.banks.resize(p.banks);
    ch.acts.fill(-std::numeric_limits<double>::infinity());
  }
}

std::uint64_t DramTiming::epoch(double t) const {
  if (p_.t_refi_ns <= 0 || t < 0) return 0;
  return static_cast<std::uint64_t>(std::floor(t / p_.t_refi_ns));
}

bool DramTiming::in_window(double t) const {
  const std::uint64_t e = epoch(t);
  return e >= 1 && t < static_cast<double>(e) * p_.t_refi_ns + p_.t_rfc_ns;
}

double DramTiming::after_refresh(double t) const {
  return in_window(t) ? static_cast<double>(epoch(t)) * p_.t_refi_ns + p_.t_rfc_ns : t;
}

double DramTiming::activate(Channel& ch, double at) {
  at = std::max({at, ch.last_act_ns + p_.t_rrd_ns, ch.acts[ch.act_next] + p_.t_faw_ns});
  at = after_refresh(at);
  ch.acts[ch.act_next] = at;
  ch.act_next = (ch.act_next + 1) % 4;
  ch.last_act_ns = at;
  return at;
}

double DramTiming::access(double arrival_ns, std::uint64_t addr, std::uint64_t bytes,
                          DramAccess dir) {
  if (bytes == 0) return arrival_ns;
  // Channel c holds the interleave stripes s with s % C == c; its stripes within one contiguous
  // range are consecutive in its own address space, so each channel sees one contiguous range.
  const std::uint64_t c_n = p_.channels, g = p_.interleave_bytes;
  const std::uint64_t last = addr + bytes - 1;
  const std::uint64_t s0 = addr / g, s1 = last / g;
  double done = arrival_ns;
  for (std::uint64_t c = 0; c < c_n; ++c) {
    const std::uint64_t k0 = s0 + (c + c_n - s0 % c_n) % c_n;
    if (k0 > s1) continue;
    const std::uint64_t k1 = s1 - (s1 % c_n + c_n - c) % c_n;
    const std::uint64_t l0 = (k0 / c_n) * g + (k0 == s0 ? addr % g : 0);
    const std::uint64_t l1 = (k1 / c_n) * g + (k1 == s1 ? last % g + 1 : g);
    done = std::max(done, channel_access(channels_[c], arrival_ns, l0, l1, dir));
  }
  return done;
}

double DramTiming::channel_access(Channel& ch, double t0, std::uint64_t l0, std::uint64_t l1,
                                  DramAccess dir) {
  // 1. The bus after what was booked before, and the turnaround if the direction flips.
  double bus = std::max(ch.bus_free_ns, t0);
  if (ch.used && ch.last_dir != dir) {
    bus = std::max(bus, ch.bus_free_ns +
                            (dir == DramAccess::Read ? p_.write_to_read_ns : p_.read_to_write_ns));
    ++stats_.turnarounds;
  }
  ch.used = true;
  ch.last_dir = dir;
  const std::uint64_t rb = p_.row_bytes, bb = p_.burst_bytes;
  for (std::uint64_t a = l0; a < l1;) {
    const std::uint64_t r = a / rb;
    const std::uint64_t b = std::min(l1, (r + 1) * rb);
    Bank& k = ch.banks[r % p_.banks];
    const std::uint64_t row = r / p_.banks;
    const std::uint64_t moved = ((b + bb - 1) / bb - a / bb) * bb;  // whole bursts
    const double dur = p_.bus_ns(moved);
    bool hit = true;
    // 2. Open the row unless it is open: precharge the bank's other row (after its last data
    //    and tRAS), then activate.
    if (k.row != row) {
      double at = std::max(t0, k.free_ns);
      if (k.row != kNoRow && epoch(k.act_ns) == epoch(at))
        at = std::max(at, k.act_ns + p_.t_ras_ns) + p_.t_rp_ns;
      k.row = row;
      k.act_ns = activate(ch, at);
      k.ready_ns = k.act_ns + p_.t_rcd_ns;
      hit = false;
    }
    double s = std::max(bus, k.ready_ns);
    // 3. A refresh that closed the row before its data starts: activate again after it.
    if (p_.t_refi_ns > 0 && (in_window(s) || epoch(s) != epoch(k.act_ns))) {
      k.act_ns = activate(ch, static_cast<double>(epoch(s)) * p_.t_refi_ns + p_.t_rfc_ns);
      k.ready_ns = k.act_ns + p_.t_rcd_ns;
      s = std::max(s, k.ready_ns);
      hit = false;
      ++stats_.refresh_stalls;
    }
    double end = s + dur;
    // 4. Data that would cross the next window's start pauses there: refresh, activate, resume.
    if (p_.t_refi_ns > 0) {
      const double w = static_cast<double>(epoch(s) + 1) * p_.t_refi_ns;
      if (end > w) {
        k.act_ns = activate(ch, w + p_.t_rfc_ns);
        k.ready_ns = k.act_ns + p_.t_rcd_ns;
        end = k.ready_ns + (end - w);
        ++stats_.refresh_stalls;
      }
    }
    ++stats_.segments;
    ++(hit ? stats_.row_hits : stats_.row_misses);
    stats_.bus_bytes += moved;
    k.free_ns = end;
    bus = end;
    a = b;
  }
  ch.bus_free_ns = bus;
  return bus;
}

}  // namespace tpu
