// Interconnect: many initiators, one target. Off-chip memory is reached by every core's DMA,
// every MXU's weight path and the host interface; the host link by every core's DMA. Routing
// adds no time: the target (or the link port) models bandwidth.
#pragma once

#include <tlm_utils/multi_passthrough_target_socket.h>
#include <tlm_utils/simple_initiator_socket.h>

#include <systemc>
#include <tlm>

#include "hw/memory/bandwidth.h"

namespace tpu {

class Interconnect : public sc_core::sc_module {
 public:
  tlm_utils::multi_passthrough_target_socket<Interconnect> in;
  tlm_utils::simple_initiator_socket<Interconnect> out;

  // With `to_target` / `from_target` resources, writes wait on the first and reads on the
  // second before being forwarded (the host link: one resource per direction, PCIe being full
  // duplex).
  explicit Interconnect(sc_core::sc_module_name name, BandwidthResource* to_target = nullptr,
                        BandwidthResource* from_target = nullptr);

 private:
  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  unsigned int transport_dbg(int id, tlm::tlm_generic_payload& gp);

  BandwidthResource* to_target_;
  BandwidthResource* from_target_;
};

}  // namespace tpu
