#include "hw/memory/lazy_buffer.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "hw/common/error.h"

namespace tpu {

LazyBuffer::LazyBuffer(std::uint64_t bytes) {
  if (bytes == 0) return;
  // MAP_NORESERVE: the whole array is address space only; anonymous pages read as zero and are
  // backed by host memory on first write.
  void* p = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw ConfigError(
        fmt::format("cannot reserve {} bytes of host memory for an on-chip buffer: {}", bytes,
                    std::strerror(errno)));
  }
  // Residency follows the touched 4 KiB pages even where the host enables transparent huge pages
  // for every mapping, so the host memory a run uses does not depend on the host's settings.
  // Advice only: a kernel without THP refuses it and nothing changes.
  ::madvise(p, static_cast<std::size_t>(bytes), MADV_NOHUGEPAGE);
  data_ = static_cast<std::uint8_t*>(p);
  size_ = bytes;
}

LazyBuffer::~LazyBuffer() { release(); }

LazyBuffer::LazyBuffer(LazyBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

LazyBuffer& LazyBuffer::operator=(LazyBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void LazyBuffer::release() noexcept {
  if (data_ != nullptr) ::munmap(data_, static_cast<std::size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tpu
