// The chip's address map as the host sees it through the host interface (docs/isa.md).
//   [0, off_chip_memory.bytes)                 off-chip memory window (weights, images)
//   kCoreBase + c * kCoreStride + kQueue        core c's instruction queue (write whole
//                                               32-byte instructions; blocks while full)
//   kCoreBase + c * kCoreStride + kStatus       core c's status block, read-only, 64-bit words:
//                                               [0] halts, [1] instructions issued,
//                                               [2] free instruction-queue slots,
//                                               [3] current layer tag, [4] cycle of last halt
#pragma once

#include <cstdint>

namespace tpu::address_map {

inline constexpr std::uint64_t kCoreBase = 1ull << 48;  // above any off-chip memory (48-bit)
inline constexpr std::uint64_t kCoreStride = 1ull << 20;
inline constexpr std::uint64_t kQueue = 0x0;
inline constexpr std::uint64_t kQueueBytes = 0x10000;  // any write inside pushes instructions
inline constexpr std::uint64_t kStatus = 0x10000;
inline constexpr std::uint64_t kStatusWords = 5;

inline constexpr std::uint64_t queue_address(std::uint32_t core) {
  return kCoreBase + core * kCoreStride + kQueue;
}
inline constexpr std::uint64_t status_address(std::uint32_t core) {
  return kCoreBase + core * kCoreStride + kStatus;
}

}  // namespace tpu::address_map
