// The side band of an ici_write's transaction (docs/systems.md): which chip it comes from and
// goes to, and which of the destination's semaphores counts its arrival. The transaction's
// address is the destination chip's off-chip memory address, its data the bytes to write. A
// link, port or chip that refuses the transaction says why in `refusal`.
#pragma once

#include <cstdint>
#include <string>
#include <tlm>

namespace tpu {

struct IciRoute : tlm::tlm_extension<IciRoute> {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::uint32_t sem = 0;
  std::string refusal;

  [[nodiscard]] tlm::tlm_extension_base* clone() const override { return new IciRoute(*this); }
  void copy_from(const tlm::tlm_extension_base& other) override {
    *this = static_cast<const IciRoute&>(other);
  }
};

}  // namespace tpu
