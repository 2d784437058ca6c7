// A chip's ends of the inter-chip interconnect (docs/systems.md). IciPort: the cores' ici_writes
// leave through it (`chip2ici`), stamped with this chip's id; a chip that is not part of a system
// refuses them, naming why. IciInbox: another chip's ici_write arrives through `ici2chip` once
// the fabric has carried its last byte; its bytes go into this chip's off-chip memory (untimed
// here: the links were the slower side) and its semaphore counts one.
#pragma once

#include <tlm_utils/multi_passthrough_target_socket.h>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include <cstdint>
#include <systemc>
#include <tlm>

#include "hw/core/sequencer.h"

namespace tpu {

class IciPort : public sc_core::sc_module {
 public:
  tlm_utils::multi_passthrough_target_socket<IciPort> in;  // every core's DMA
  tlm_utils::simple_initiator_socket<IciPort> chip2ici;    // to the system's fabric

  explicit IciPort(sc_core::sc_module_name name);
  // This chip is chip `id` of a system, which binds chip2ici.
  void join_system(std::uint32_t id);

 private:
  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void before_end_of_elaboration() override;
  // Alone, chip2ici ends here: every ici_write is refused.
  void refuse(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);

  tlm_utils::simple_target_socket<IciPort> alone_;
  bool joined_ = false;
  std::uint32_t id_ = 0;
};

class IciInbox : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<IciInbox> ici2chip;     // from the system's fabric
  tlm_utils::simple_initiator_socket<IciInbox> ici2mem;  // into this chip's off-chip memory

  IciInbox(sc_core::sc_module_name name, ChipSync& sync, std::uint64_t memory_bytes);
  // A system binds ici2chip; alone, nothing arrives (the socket is bound to an idle end).
  void join_system() { joined_ = true; }

  // Bytes other chips wrote into this one's memory so far.
  [[nodiscard]] std::uint64_t bytes_in() const { return bytes_in_; }

 private:
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void before_end_of_elaboration() override;

  tlm_utils::simple_initiator_socket<IciInbox> alone_;
  bool joined_ = false;
  ChipSync& sync_;
  std::uint64_t memory_bytes_;
  std::uint64_t bytes_in_ = 0;
};

}  // namespace tpu
