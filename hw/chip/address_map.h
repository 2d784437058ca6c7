// The chip's address map as the host sees it through the host interface (docs/isa.md).
//   [0, off_chip_memory.bytes)                 off-chip memory window (weights, images)
//   kCoreBase + c * kCoreStride + kQueue        core c's instruction queue (write whole
//                                               32-byte instructions; blocks while full)
//   kCoreBase + c * kCoreStride + kStatus       core c's status block, read-only, 64-bit words:
//                                               [0] halts, [1] instructions issued,
//                                               [2] free instruction-queue slots,
//                                               [3] current layer tag, [4] cycle of last halt
//   kCoreBase + c * kCoreStride + kUbWindow     core c's unified buffer (byte addresses)
//   kCoreBase + c * kCoreStride + kAccWindow    core c's accumulators (entry * cols * 4 + col * 4)
// And the other way, the chip's interrupts (its `irq` socket, chip -> host): when core c retires
// a Halt it writes its halt count (one 64-bit word) to interrupt_vector(c) in the host's
// interrupt table, as a PCIe device's message-signalled interrupt (MSI-X) does.
#pragma once

#include <cstdint>

namespace tpu::address_map {

inline constexpr std::uint64_t kCoreBase = 1ull << 48;  // above any off-chip memory (48-bit)
inline constexpr std::uint64_t kCoreStride = 1ull << 40;
inline constexpr std::uint64_t kQueue = 0x0;
inline constexpr std::uint64_t kQueueBytes = 0x10000;  // any write inside pushes instructions
inline constexpr std::uint64_t kStatus = 0x10000;
inline constexpr std::uint64_t kStatusWords = 5;
inline constexpr std::uint64_t kUbWindow = 1ull << 32;   // UbAddr is 32 bits
inline constexpr std::uint64_t kAccWindow = 1ull << 36;  // 2^24 entries x 4096 cols x 4 B

inline constexpr std::uint64_t queue_address(std::uint32_t core) {
  return kCoreBase + core * kCoreStride + kQueue;
}
inline constexpr std::uint64_t status_address(std::uint32_t core) {
  return kCoreBase + core * kCoreStride + kStatus;
}
inline constexpr std::uint64_t ub_address(std::uint32_t core, std::uint64_t a) {
  return kCoreBase + core * kCoreStride + kUbWindow + a;
}
inline constexpr std::uint64_t acc_address(std::uint32_t core, std::uint64_t a) {
  return kCoreBase + core * kCoreStride + kAccWindow + a;
}

inline constexpr std::uint64_t kInterruptBytes = 8;
inline constexpr std::uint64_t interrupt_vector(std::uint32_t core) {
  return core * kInterruptBytes;
}

}  // namespace tpu::address_map
