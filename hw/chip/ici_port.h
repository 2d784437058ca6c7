// A chip's ends of the inter-chip interconnect (docs/systems.md). IciPort: the cores' ici_writes
// leave through it (`chip2ici`), stamped with this chip's id; a chip that is not part of a system
// refuses them, naming why. IciInbox: another chip's ici_write arrives through `ici2chip` once
// the fabric has carried its last byte; its bytes go into this chip's off-chip memory (untimed
// here: the links were the slower side) and its semaphore counts one. A chip alone binds both
// ends to idle ends of its own; a system binds them to its fabric.
#pragma once

#include <tlm_utils/multi_passthrough_target_socket.h>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <systemc>
#include <tlm>

#include "hw/core/sequencer.h"

namespace tpu {

class IciPort : public sc_core::sc_module {
 public:
  tlm_utils::multi_passthrough_target_socket<IciPort> in;  // every core's DMA
  tlm_utils::simple_initiator_socket<IciPort> chip2ici;    // to the system's fabric

  // `chip`: this chip's id in its system, whose fabric binds chip2ici; none: a chip alone.
  IciPort(sc_core::sc_module_name name, std::optional<std::uint32_t> chip);

 private:
  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  // Alone, chip2ici ends here: every ici_write is refused.
  void refuse(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);

  std::optional<std::uint32_t> chip_;
  std::unique_ptr<tlm_utils::simple_target_socket<IciPort>> alone_;
};

class IciInbox : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<IciInbox> ici2chip;    // from the system's fabric
  tlm_utils::simple_initiator_socket<IciInbox> ici2mem;  // into this chip's off-chip memory

  // `in_system`: a system's fabric binds ici2chip; alone, nothing arrives (an idle end).
  IciInbox(sc_core::sc_module_name name, ChipSync& sync, std::uint64_t memory_bytes,
           bool in_system);

  // Bytes other chips wrote into this one's memory so far.
  [[nodiscard]] std::uint64_t bytes_in() const { return bytes_in_; }

 private:
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);

  std::unique_ptr<tlm_utils::simple_initiator_socket<IciInbox>> alone_;
  ChipSync& sync_;
  std::uint64_t memory_bytes_;
  std::uint64_t bytes_in_ = 0;
};

}  // namespace tpu
