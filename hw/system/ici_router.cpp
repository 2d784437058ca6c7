#include "hw/system/ici_router.h"

#include <fmt/format.h>

#include "hw/common/ici_route.h"

namespace tpu {

IciRouter::IciRouter(sc_core::sc_module_name name, IciFabric& fabric)
    : sc_core::sc_module(name), in("in"), out("out"), fabric_(fabric) {
  in.register_b_transport(this, &IciRouter::b_transport);
}

void IciRouter::b_transport(int, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  IciRoute* route = gp.get_extension<IciRoute>();
  if (route == nullptr) {
    gp.set_response_status(tlm::TLM_GENERIC_ERROR_RESPONSE);
    return;
  }
  const std::uint32_t chips = fabric_.chip_count();
  if (route->to >= chips) {
    route->refusal = fmt::format("ici_write: chip {} does not exist (the system has {} chips, 0 to {})",
                                 route->to, chips, chips - 1);
    gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  sc_core::wait(delay);
  delay = sc_core::SC_ZERO_TIME;
  fabric_.transfer(route->from, route->to, gp.get_data_length());
  out[static_cast<int>(route->to)]->b_transport(gp, delay);
}

}  // namespace tpu
