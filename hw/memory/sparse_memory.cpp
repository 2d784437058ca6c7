#include "hw/memory/sparse_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "hw/common/error.h"

namespace tpu {

SparseMemory::SparseMemory(std::uint64_t capacity_bytes) : capacity_(capacity_bytes) {
  if (capacity_bytes > kMaxCapacity) {
    throw ConfigError(
        fmt::format("off-chip memory of {} bytes is larger than the {} bytes the "
                    "sparse store addresses (2^48)",
                    capacity_bytes, kMaxCapacity));
  }
}

void SparseMemory::check(std::uint64_t addr, std::uint64_t n, const char* what) const {
  if (!in_range(addr, n)) {
    throw ProgramError(
        fmt::format("{} of {} bytes at address {:#x} is outside the memory of {} "
                    "bytes (allowed: address + length <= capacity)",
                    what, n, addr, capacity_));
  }
}

void SparseMemory::read(std::uint64_t addr, void* dst, std::uint64_t n) const {
  check(addr, n, "read");
  auto* out = static_cast<std::uint8_t*>(dst);
  while (n > 0) {
    const std::uint64_t offset = addr % kPageBytes;
    const std::uint64_t chunk = std::min(n, kPageBytes - offset);
    const auto it = pages_.find(addr / kPageBytes);
    if (it == pages_.end()) {
      std::memset(out, 0, chunk);
    } else {
      std::memcpy(out, it->second.get() + offset, chunk);
    }
    out += chunk;
    addr += chunk;
    n -= chunk;
  }
}

void SparseMemory::write(std::uint64_t addr, const void* src, std::uint64_t n) {
  check(addr, n, "write");
  const auto* in = static_cast<const std::uint8_t*>(src);
  while (n > 0) {
    const std::uint64_t offset = addr % kPageBytes;
    const std::uint64_t chunk = std::min(n, kPageBytes - offset);
    std::unique_ptr<std::uint8_t[]>& page = pages_[addr / kPageBytes];
    if (!page) {
      // A page the write covers whole needs no zero fill.
      page.reset(new std::uint8_t[kPageBytes]);
      if (chunk != kPageBytes) std::memset(page.get(), 0, kPageBytes);
    }
    std::memcpy(page.get() + offset, in, chunk);
    in += chunk;
    addr += chunk;
    n -= chunk;
  }
}

}  // namespace tpu
