#include "sw/compiler/memory.h"

#include <algorithm>
#include <iterator>

namespace tpu::compiler {

std::uint64_t Arena::alloc(std::uint64_t bytes) {
  bytes = align(std::max<std::uint64_t>(bytes, 1));
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->second >= bytes) {
      const std::uint64_t at = it->first, left = it->second - bytes;
      free_.erase(it);
      if (left) free_[at + bytes] = left;
      return at;
    }
  const std::uint64_t at = high_;
  high_ += bytes;
  return at;
}

void Arena::release(std::uint64_t at, std::uint64_t bytes) {
  bytes = align(std::max<std::uint64_t>(bytes, 1));
  auto it = free_.emplace(at, bytes).first;
  if (auto next = std::next(it); next != free_.end() && at + bytes == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin())
    if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
}

}  // namespace tpu::compiler
