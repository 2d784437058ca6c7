// LazyBuffer: a zero-filled byte array whose host pages are allocated on first touch
// (DESIGN "Memory sized by the config, allocated on touch"): an anonymous private mapping, so a
// 24 MiB unified buffer of which a program touches 1 MiB costs about 1 MiB of host memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpu {

class LazyBuffer {
 public:
  // Maps `bytes` zero bytes (none when 0). Throws ConfigError naming the size if the host
  // cannot reserve the address space.
  explicit LazyBuffer(std::uint64_t bytes);
  ~LazyBuffer();

  LazyBuffer(const LazyBuffer&) = delete;
  LazyBuffer& operator=(const LazyBuffer&) = delete;
  LazyBuffer(LazyBuffer&& other) noexcept;
  LazyBuffer& operator=(LazyBuffer&& other) noexcept;

  // Page aligned (so any scalar type may be laid over it); nullptr when size() is 0.
  [[nodiscard]] std::uint8_t* data() { return data_; }
  [[nodiscard]] const std::uint8_t* data() const { return data_; }
  [[nodiscard]] std::uint64_t size() const { return size_; }

 private:
  void release() noexcept;

  std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace tpu
