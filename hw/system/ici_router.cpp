#include "hw/system/ici_router.h"

#include <fmt/format.h>

#include <cstring>

#include "hw/common/ici_route.h"
#include "hw/common/tlm_util.h"

namespace tpu {

IciRouter::IciRouter(sc_core::sc_module_name name, IciFabric& fabric, std::uint64_t memory_bytes)
    : sc_core::sc_module(name), in("in"), out("out"), fabric_(fabric), memory_bytes_(memory_bytes) {
  in.register_b_transport(this, &IciRouter::b_transport);
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
  a->at = fabric_.clock().now() + fabric_.latency(route->from, route->to).value();
  a->order = posted_++;
  a->from = route->from, a->to = route->to, a->sem = route->sem;
  a->addr = gp.get_address();
  a->bytes.assign(gp.get_data_ptr(), gp.get_data_ptr() + gp.get_data_length());
  pending_.push(std::move(a));
  posted_event_.notify(sc_core::SC_ZERO_TIME);
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
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
