// The side band of an ici_write's transaction (docs/systems.md): which chip it comes from and
// goes to, and which of the destination's semaphores counts its arrival. The transaction's
// address is the destination chip's off-chip memory address, its data the bytes to write. A
// link, port or chip that refuses the transaction says why in `refusal`.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <tlm>

#include "hw/common/tlm_util.h"

namespace tpu {

struct IciRoute : CopiedExtension<IciRoute> {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::uint32_t sem = 0;
  std::string refusal;
};

// Whether the write's range lies in the destination's `memory_bytes` of off-chip memory; if not,
// the transaction is refused (response status and `route.refusal` set).
inline bool within_destination_memory(tlm::tlm_generic_payload& gp, IciRoute& route,
                                      std::uint64_t memory_bytes) {
  const tlm::tlm_response_status st = check_memory_payload(gp, memory_bytes);
  if (st == tlm::TLM_OK_RESPONSE) return true;
  route.refusal = fmt::format(
      "ici_write: dst range {:#x} + {} bytes is outside chip {}'s {}-byte off-chip memory",
      gp.get_address(), gp.get_data_length(), route.to, memory_bytes);
  gp.set_response_status(st);
  return false;
}

}  // namespace tpu
