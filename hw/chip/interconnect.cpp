#include "hw/chip/interconnect.h"

namespace tpu {

Interconnect::Interconnect(sc_core::sc_module_name name, BandwidthResource* to_target,
                           BandwidthResource* from_target)
    : sc_core::sc_module(name),
      in("in"),
      out("out"),
      to_target_(to_target),
      from_target_(from_target) {
  in.register_b_transport(this, &Interconnect::b_transport);
  in.register_transport_dbg(this, &Interconnect::transport_dbg);
}

void Interconnect::b_transport(int, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  BandwidthResource* link = gp.is_write() ? to_target_ : from_target_;
  if (link) {
    sc_core::wait(delay);
    delay = sc_core::SC_ZERO_TIME;
    link->transfer(gp.get_data_length());
  }
  out->b_transport(gp, delay);
}

unsigned int Interconnect::transport_dbg(int, tlm::tlm_generic_payload& gp) {
  return out->transport_dbg(gp);
}

}  // namespace tpu
