// Byte layout shared by the compiler's passes: region alignment in the unified buffer and the
// memories, and the first-fit allocator that gives tensors homes in off-chip memory while they
// live (docs/compiler.md).
#pragma once

#include <cstdint>
#include <map>

namespace tpu::compiler {

inline constexpr std::uint64_t kAlign = 64;  // region alignment in the UB and memories

inline std::uint64_t align(std::uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
inline std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// First-fit allocation of aligned byte ranges from 0 up; a released range joins its free
// neighbours. high() is the end of the highest range ever given out.
class Arena {
 public:
  std::uint64_t alloc(std::uint64_t bytes);
  void release(std::uint64_t at, std::uint64_t bytes);
  [[nodiscard]] std::uint64_t high() const { return high_; }

 private:
  std::map<std::uint64_t, std::uint64_t> free_;  // start -> bytes
  std::uint64_t high_ = 0;
};

}  // namespace tpu::compiler
