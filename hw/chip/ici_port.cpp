#include "hw/chip/ici_port.h"

#include <fmt/format.h>

#include "hw/common/ici_route.h"
#include "hw/common/tlm_util.h"
#include "hw/isa/isa.h"

namespace tpu {

IciPort::IciPort(sc_core::sc_module_name name, std::optional<std::uint32_t> chip)
    : sc_core::sc_module(name), in("in"), chip2ici("chip2ici"), chip_(chip) {
  in.register_b_transport(this, &IciPort::b_transport);
  if (!chip_) {
    alone_ = std::make_unique<tlm_utils::simple_target_socket<IciPort>>("alone");
    alone_->register_b_transport(this, &IciPort::refuse);
    chip2ici.bind(*alone_);
  }
}

void IciPort::b_transport(int, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  if (IciRoute* route = gp.get_extension<IciRoute>()) route->from = chip_.value_or(0);
  chip2ici->b_transport(gp, delay);
}

void IciPort::refuse(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
  if (IciRoute* route = gp.get_extension<IciRoute>())
    route->refusal =
        "ici_write: this chip is not part of a system (a system config joins chips with ICI "
        "links: tpusim fit --system, docs/systems.md)";
  gp.set_response_status(tlm::TLM_COMMAND_ERROR_RESPONSE);
}

IciInbox::IciInbox(sc_core::sc_module_name name, ChipSync& sync, std::uint64_t memory_bytes,
                   bool in_system)
    : sc_core::sc_module(name),
      ici2chip("ici2chip"),
      ici2mem("ici2mem"),
      sync_(sync),
      memory_bytes_(memory_bytes) {
  ici2chip.register_b_transport(this, &IciInbox::b_transport);
  if (!in_system) {
    alone_ = std::make_unique<tlm_utils::simple_initiator_socket<IciInbox>>("alone");
    alone_->bind(ici2chip);
  }
}

void IciInbox::b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
  IciRoute* route = gp.get_extension<IciRoute>();
  if (route == nullptr || route->sem >= isa::kIciSemaphores) {
    gp.set_response_status(tlm::TLM_GENERIC_ERROR_RESPONSE);
    return;
  }
  if (!within_destination_memory(gp, *route, memory_bytes_)) return;
  if (gp.get_data_length() > 0) {
    tlm_debug(ici2mem, tlm::TLM_WRITE_COMMAND, gp.get_address(), gp.get_data_ptr(),
              gp.get_data_length());
    bytes_in_ += gp.get_data_length();
  }
  sync_.signal(route->sem);
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
}

}  // namespace tpu
