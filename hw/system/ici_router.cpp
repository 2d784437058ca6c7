#include "hw/system/ici_router.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "hw/common/ici_route.h"
#include "hw/common/tlm_util.h"

namespace tpu {

IciRouter::IciRouter(sc_core::sc_module_name name, IciFabric& fabric, std::uint64_t memory_bytes,
                     bool mirrored, std::vector<MirroredRing> rings)
    : sc_core::sc_module(name),
      in("in"),
      out("out"),
      fabric_(fabric),
      memory_bytes_(memory_bytes),
      mirrored_(mirrored),
      rings_(std::move(rings)) {
  in.register_b_transport(this, &IciRouter::b_transport);
  if (mirrored_) {
    const std::vector<std::uint32_t>& dims = fabric_.topology().dims();
    for (std::size_t d = 0; d < dims.size(); ++d)
      ring_edge_.push_back(ring_latency(d, dims[d], false));
    for (const MirroredRing& r : rings_) {
      std::vector<Cycles> edge;
      for (std::size_t d = 0; d < dims.size(); ++d)
        edge.push_back(ring_latency(d, d < r.box.size() ? r.box[d] : 1, true));
      chain_edge_.push_back(std::move(edge));
    }
  }
  SC_HAS_PROCESS(IciRouter);
  SC_THREAD(deliver);
}

void IciRouter::b_transport(int, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  IciRoute* route = gp.get_extension<IciRoute>();
  if (route == nullptr) {
    gp.set_response_status(tlm::TLM_GENERIC_ERROR_RESPONSE);
    return;
  }
  const std::uint32_t chips = fabric_.chip_count();
  if (route->to >= chips) {
    route->refusal =
        fmt::format("ici_write: chip {} does not exist (the system has {} chips, 0 to {})",
                    route->to, chips, chips - 1);
    gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  if (!within_destination_memory(gp, *route, memory_bytes_)) return;
  sc_core::wait(delay);
  delay = sc_core::SC_ZERO_TIME;
  fabric_.stream(route->from, route->to, gp.get_data_length());
  // The last byte has left: the rest is the route's latency.
  auto a = std::make_unique<Arrival>();
  a->order = posted_++;
  a->sem = route->sem;
  if (mirrored_) {
    a->at = fabric_.clock().now() + ring_edge_latency(route->to, route->sem).value();
    a->from = route->to, a->to = route->from;  // chip 0's predecessor is its image
  } else {
    a->at = fabric_.clock().now() + fabric_.latency(route->from, route->to).value();
    a->from = route->from, a->to = route->to;
  }
  a->addr = gp.get_address();
  a->bytes.assign(gp.get_data_ptr(), gp.get_data_ptr() + gp.get_data_length());
  pending_.push(std::move(a));
  posted_event_.notify(sc_core::SC_ZERO_TIME);
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
}

Cycles IciRouter::ring_latency(std::size_t d, std::uint32_t n, bool chain) const {
  // The edges c -> c + 1 (mod n) of the ring of the first n chips along axis d (chip 0's). A
  // pipelined ring: their mean. A chain: a phase is n - 1 steps of one message, each waiting for
  // its predecessor's, and ends with its slowest member, whose chain of n - 1 consecutive edges
  // is the longest: that chain's latency spread over its edges. Rounded.
  if (n < 2) return Cycles{0};
  const std::vector<std::uint32_t>& dims = fabric_.topology().dims();
  std::vector<std::uint32_t> a(dims.size(), 0), b(dims.size(), 0);
  std::vector<std::uint64_t> edge(n);
  for (std::uint32_t c = 0; c < n; ++c) {
    a[d] = c, b[d] = (c + 1) % n;
    edge[c] = fabric_.latency(fabric_.chip_at(a), fabric_.chip_at(b)).value();
  }
  if (!chain) {
    std::uint64_t sum = 0;
    for (std::uint64_t e : edge) sum += e;
    return Cycles{(sum + n / 2) / n};
  }
  std::uint64_t longest = 0;
  for (std::uint32_t s = 0; s < n; ++s) {
    std::uint64_t sum = 0;
    for (std::uint32_t j = 0; j + 1 < n; ++j) sum += edge[(s + j) % n];
    longest = std::max(longest, sum);
  }
  return Cycles{(longest + (n - 1) / 2) / (n - 1)};
}

Cycles IciRouter::ring_edge_latency(std::uint32_t to, std::uint32_t sem) const {
  const std::vector<std::uint32_t> at = fabric_.coordinates(to);
  const std::vector<Cycles>* edge = &ring_edge_;
  for (std::size_t r = 0; r < rings_.size(); ++r)
    if (sem >= rings_[r].first_semaphore && sem < rings_[r].first_semaphore + rings_[r].semaphores)
      edge = &chain_edge_[r];
  for (std::size_t d = 0; d < at.size(); ++d)
    if (at[d] != 0) return (*edge)[d];
  return fabric_.latency(0, to);  // chip 0 itself
}

void IciRouter::deliver() {
  const Clock& clock = fabric_.clock();
  while (true) {
    if (pending_.empty()) {
      sc_core::wait(posted_event_);
      continue;
    }
    const Cycle at = pending_.top()->at;
    if (at > clock.now()) {
      // Until the earliest arrival, or a new posting that may arrive sooner.
      sc_core::wait(clock.time_of(at) - sc_core::sc_time_stamp(), posted_event_);
      continue;
    }
    std::unique_ptr<Arrival> a = std::move(const_cast<std::unique_ptr<Arrival>&>(pending_.top()));
    pending_.pop();
    tlm::tlm_generic_payload gp;
    gp.set_command(tlm::TLM_WRITE_COMMAND);
    gp.set_address(a->addr);
    gp.set_data_ptr(a->bytes.data());
    gp.set_data_length(static_cast<unsigned int>(a->bytes.size()));
    gp.set_streaming_width(static_cast<unsigned int>(a->bytes.size()));
    gp.set_byte_enable_ptr(nullptr);
    gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    IciRoute route;
    route.from = a->from, route.to = a->to, route.sem = a->sem;
    gp.set_extension(&route);
    sc_core::sc_time zero = sc_core::SC_ZERO_TIME;
    out[static_cast<int>(a->to)]->b_transport(gp, zero);
    gp.clear_extension(&route);
    if (gp.get_response_status() != tlm::TLM_OK_RESPONSE)
      SC_REPORT_ERROR("tpusim/ici",
                      (std::string(name()) + ": " +
                       (route.refusal.empty() ? "an arrival was refused" : route.refusal))
                          .c_str());
  }
}

}  // namespace tpu
