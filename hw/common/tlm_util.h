// Small helpers for the blocking transactions our initiators issue.
#pragma once

#include <cstdint>
#include <string>
#include <systemc>
#include <tlm>

namespace tpu {

// A side band carried by value (a generic payload's extension): clone and copy_from are the
// struct's own copy. `struct Mine : CopiedExtension<Mine> { ... };`
template <class T>
struct CopiedExtension : tlm::tlm_extension<T> {
  [[nodiscard]] tlm::tlm_extension_base* clone() const override {
    return new T(static_cast<const T&>(*this));
  }
  void copy_from(const tlm::tlm_extension_base& other) override {
    static_cast<T&>(*this) = static_cast<const T&>(other);
  }
};

// One blocking read or write of `len` bytes at `addr`, carrying `extensions` (side band, e.g.
// StridedRows) for the call; returns the target's response status.
template <class Socket, class... Extensions>
tlm::tlm_response_status tlm_transfer(Socket& socket, tlm::tlm_command cmd, std::uint64_t addr,
                                      void* data, std::uint64_t len, Extensions*... extensions) {
  tlm::tlm_generic_payload gp;
  gp.set_command(cmd);
  gp.set_address(addr);
  gp.set_data_ptr(static_cast<unsigned char*>(data));
  gp.set_data_length(static_cast<unsigned int>(len));
  gp.set_streaming_width(static_cast<unsigned int>(len));
  gp.set_byte_enable_ptr(nullptr);
  gp.set_dmi_allowed(false);
  gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  (gp.set_extension(extensions), ...);
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  socket->b_transport(gp, delay);
  (gp.clear_extension(extensions), ...);
  if (delay > sc_core::SC_ZERO_TIME) sc_core::wait(delay);
  return gp.get_response_status();
}

// Untimed (debug) access, e.g. loading a memory image before the run; returns bytes moved.
template <class Socket>
unsigned int tlm_debug(Socket& socket, tlm::tlm_command cmd, std::uint64_t addr, void* data,
                       std::uint64_t len) {
  tlm::tlm_generic_payload gp;
  gp.set_command(cmd);
  gp.set_address(addr);
  gp.set_data_ptr(static_cast<unsigned char*>(data));
  gp.set_data_length(static_cast<unsigned int>(len));
  return socket->transport_dbg(gp);
}

// The checks every memory target makes before it moves data, in this order: the whole range
// inside a target of `capacity` bytes (no overflow of addr + len), no byte enables, streaming
// width equal to the length, a data pointer. Returns TLM_OK_RESPONSE or the error to answer with.
inline tlm::tlm_response_status check_memory_payload(const tlm::tlm_generic_payload& gp,
                                                     std::uint64_t capacity) {
  const std::uint64_t addr = gp.get_address();
  const std::uint64_t len = gp.get_data_length();
  if (len > capacity || addr > capacity - len) return tlm::TLM_ADDRESS_ERROR_RESPONSE;
  if (gp.get_byte_enable_ptr() != nullptr) return tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE;
  if (gp.get_streaming_width() != len) return tlm::TLM_BURST_ERROR_RESPONSE;
  if (len > 0 && gp.get_data_ptr() == nullptr) return tlm::TLM_GENERIC_ERROR_RESPONSE;
  return tlm::TLM_OK_RESPONSE;
}

inline std::string response_name(tlm::tlm_response_status s) {
  switch (s) {
    case tlm::TLM_OK_RESPONSE: return "ok";
    case tlm::TLM_INCOMPLETE_RESPONSE: return "incomplete";
    case tlm::TLM_GENERIC_ERROR_RESPONSE: return "generic error";
    case tlm::TLM_ADDRESS_ERROR_RESPONSE: return "address error";
    case tlm::TLM_COMMAND_ERROR_RESPONSE: return "command error";
    case tlm::TLM_BURST_ERROR_RESPONSE: return "burst error";
    case tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE: return "byte-enable error";
  }
  return "unknown";
}

}  // namespace tpu
