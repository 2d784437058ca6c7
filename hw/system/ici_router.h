// IciRouter: where the chips' ICI ends meet the fabric. An ici_write's transaction leaves its
// chip through chip2ici into `in`; the router names a destination outside the system in the
// transaction's refusal, else lets the fabric carry the bytes (IciFabric::transfer: the route's
// hops and its links' shared bandwidth) and hands the transaction to the destination chip's
// ici2chip through `out`, bound in chip order.
#pragma once

#include <tlm_utils/multi_passthrough_initiator_socket.h>
#include <tlm_utils/multi_passthrough_target_socket.h>

#include <cstdint>
#include <systemc>
#include <tlm>

#include "hw/system/ici_fabric.h"

namespace tpu {

class IciRouter : public sc_core::sc_module {
 public:
  tlm_utils::multi_passthrough_target_socket<IciRouter> in;
  tlm_utils::multi_passthrough_initiator_socket<IciRouter> out;

  IciRouter(sc_core::sc_module_name name, IciFabric& fabric);

 private:
  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);

  IciFabric& fabric_;
};

}  // namespace tpu
