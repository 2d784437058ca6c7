// SparseMemory: byte-addressed storage of up to 2^48 bytes whose pages exist only once written
// (DESIGN "Memory sized by the config, allocated on touch": a 32 GiB HBM config must not
// allocate 32 GiB). Reads of never-written pages return zeros and allocate nothing.
//
// Pages are 64 KiB: one 256x256 int8 weight tile (J17 §2), so a tile or an activation block
// written anywhere costs about its own size, while a large sequential copy is one hash lookup
// and one memcpy per 64 KiB, i.e. memcpy speed. Pages live in a hash map keyed by page number
// rather than a page table: its size follows the pages written, not the capacity, and the one
// lookup per 64 KiB segment is negligible next to the copy.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

namespace tpu {

class SparseMemory {
 public:
  static constexpr std::uint64_t kPageBytes = std::uint64_t{1} << 16;
  static constexpr std::uint64_t kMaxCapacity = std::uint64_t{1} << 48;

  // Throws ConfigError if `capacity_bytes` exceeds kMaxCapacity.
  explicit SparseMemory(std::uint64_t capacity_bytes);

  [[nodiscard]] std::uint64_t capacity() const { return capacity_; }
  // True when [addr, addr + n) lies inside the memory; never overflows.
  [[nodiscard]] bool in_range(std::uint64_t addr, std::uint64_t n) const {
    return n <= capacity_ && addr <= capacity_ - n;
  }

  // Both throw ProgramError naming the range and the capacity when !in_range(addr, n).
  void read(std::uint64_t addr, void* dst, std::uint64_t n) const;
  void write(std::uint64_t addr, const void* src, std::uint64_t n);

  // Host bytes held by written pages (a multiple of kPageBytes).
  [[nodiscard]] std::uint64_t allocated_bytes() const { return pages_.size() * kPageBytes; }

 private:
  void check(std::uint64_t addr, std::uint64_t n, const char* what) const;

  std::uint64_t capacity_;
  std::unordered_map<std::uint64_t, std::unique_ptr<std::uint8_t[]>> pages_;
};

}  // namespace tpu
