#include "hw/system/ici_fabric.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace tpu {

namespace {

double checked_bandwidth(double link_bytes_per_s) {
  if (!(link_bytes_per_s > 0) || !std::isfinite(link_bytes_per_s))
    throw std::invalid_argument("ICI fabric: link bandwidth of " +
                                std::to_string(link_bytes_per_s) +
                                " bytes/s (must be finite and > 0)");
  return link_bytes_per_s;
}

// A flow's label in the network names its transfer's chips, for busy_intervals.
std::uint64_t endpoints_label(std::uint32_t from, std::uint32_t to) {
  return std::uint64_t{from} << 32 | to;
}

double checked_latency(double hop_latency_ns) {
  if (!(hop_latency_ns >= 0) || !std::isfinite(hop_latency_ns))
    throw std::invalid_argument("ICI fabric: hop latency of " + std::to_string(hop_latency_ns) +
                                " ns (must be finite and >= 0)");
  return hop_latency_ns;
}

}  // namespace

IciFabric::IciFabric(sc_core::sc_module_name name, const Clock& clock,
                     std::vector<std::uint32_t> dims, std::vector<bool> wraparound,
                     double link_bytes_per_s, double hop_latency_ns)
    : sc_core::sc_module(name),
      clock_(clock),
      topology_(std::move(dims), std::move(wraparound)),
      link_bytes_per_s_(checked_bandwidth(link_bytes_per_s)),
      hop_latency_(clock.ns_to_cycles(checked_latency(hop_latency_ns))),
      network_(std::vector<double>(topology_.link_count(), link_bytes_per_s / clock.hz())) {
  SC_HAS_PROCESS(IciFabric);
  SC_METHOD(reschedule);
  sensitive << wake_;
  dont_initialize();
}

Cycles IciFabric::uncontended_cycles(std::uint32_t from, std::uint32_t to,
                                     std::uint64_t bytes) const {
  const std::size_t hops = topology_.route(from, to).size();
  if (hops == 0) return Cycles(0);
  return Cycles(hops * hop_latency_.value()) +
         clock_.transfer_cycles(static_cast<double>(bytes), link_bytes_per_s_);
}

bool IciFabric::in_system(std::uint32_t from, std::uint32_t to) const {
  const std::uint32_t chips = topology_.chip_count();
  if (from < chips && to < chips) return true;
  SC_REPORT_ERROR("tpusim/ici", (std::string(name()) + ": a transfer from chip " +
                                 std::to_string(from) + " to chip " + std::to_string(to) +
                                 ", but the system has chips 0.." + std::to_string(chips - 1))
                                    .c_str());
  return false;
}

Cycles IciFabric::latency(std::uint32_t from, std::uint32_t to) const {
  return Cycles(topology_.route(from, to).size() * hop_latency_.value());
}

void IciFabric::transfer(std::uint32_t from, std::uint32_t to, std::uint64_t bytes) {
  if (!in_system(from, to)) return;
  std::vector<Link> path = topology_.route(from, to);
  if (path.empty()) return;  // the same chip: no link crossed
  // 1. The head crosses every hop (cut-through: each hop's latency once).
  clock_.wait_for(Cycles(path.size() * hop_latency_.value()));
  // 2. The bytes stream over all links of the path at once, at the max-min fair rate.
  stream_path(from, to, std::move(path), bytes);
}

void IciFabric::stream(std::uint32_t from, std::uint32_t to, std::uint64_t bytes) {
  if (!in_system(from, to)) return;
  std::vector<Link> path = topology_.route(from, to);
  if (!path.empty()) stream_path(from, to, std::move(path), bytes);
}

void IciFabric::stream_path(std::uint32_t from, std::uint32_t to, std::vector<Link> path,
                            std::uint64_t bytes) {
  if (bytes == 0) return;
  const FluidNetwork::FlowId id =
      network_.start(static_cast<double>(clock_.now()), static_cast<double>(bytes), std::move(path),
                     endpoints_label(from, to));
  wake_.notify(sc_core::SC_ZERO_TIME);
  while (network_.active(id)) sc_core::wait(changed_);
}

void IciFabric::reschedule() {
  const Cycle now = clock_.now();
  network_.advance(static_cast<double>(now));
  if (!network_.retire_finished().empty()) changed_.notify(sc_core::SC_ZERO_TIME);
  const double next = network_.next_completion();
  if (std::isfinite(next)) {
    // Completions land on whole cycles: round up, so no transfer beats its rate; and at least
    // one cycle on, so that time advances.
    const auto at = static_cast<Cycle>(std::ceil(next - 1e-9));
    wake_.cancel();
    wake_.notify(clock_.time_of(std::max(at, now + 1)) - sc_core::sc_time_stamp());
  }
}

std::uint64_t IciFabric::bytes_carried(Link l) const {
  return static_cast<std::uint64_t>(std::llround(network_.bytes_carried(l)));
}

void IciFabric::record_busy(bool on) {
  // The network advances lazily: bring it to now, so that recording starts (or stops) here.
  network_.advance(static_cast<double>(clock_.now()));
  network_.record_busy(on);
}

std::vector<IciFabric::BusyInterval> IciFabric::busy_intervals(Link l) const {
  std::vector<BusyInterval> out;
  for (const FluidNetwork::BusyInterval& b : network_.busy_intervals(l)) {
    BusyInterval& i = out.emplace_back(BusyInterval{b.begin, b.end, b.bytes, {}});
    for (const FluidNetwork::FlowBytes& f : b.flows)
      i.transfers.push_back(TransferBytes{static_cast<std::uint32_t>(f.label >> 32),
                                          static_cast<std::uint32_t>(f.label), f.bytes});
  }
  return out;
}

Cycles IciFabric::busy_cycles(Link l) const {
  return Cycles(static_cast<std::uint64_t>(std::ceil(network_.busy_time(l) - 1e-9)));
}

}  // namespace tpu
