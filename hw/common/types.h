// Strong types for quantities that are easy to mix up: cycle counts, byte counts and the
// address spaces of the chip. Passing an accumulator address where a unified-buffer address
// is expected does not compile.
#pragma once

#include <cstdint>
#include <functional>

namespace tpu {

template <class Tag, class Rep = std::uint64_t>
class Strong {
 public:
  using rep = Rep;
  constexpr Strong() = default;
  constexpr explicit Strong(Rep v) : v_(v) {}
  [[nodiscard]] constexpr Rep value() const { return v_; }

  friend constexpr bool operator==(Strong a, Strong b) { return a.v_ == b.v_; }
  friend constexpr bool operator!=(Strong a, Strong b) { return a.v_ != b.v_; }
  friend constexpr bool operator<(Strong a, Strong b) { return a.v_ < b.v_; }
  friend constexpr bool operator<=(Strong a, Strong b) { return a.v_ <= b.v_; }
  friend constexpr bool operator>(Strong a, Strong b) { return a.v_ > b.v_; }
  friend constexpr bool operator>=(Strong a, Strong b) { return a.v_ >= b.v_; }

 private:
  Rep v_{};
};

// Quantities: adding two of them is meaningful.
template <class Tag>
class Quantity : public Strong<Tag> {
 public:
  using Strong<Tag>::Strong;
  constexpr Quantity(Strong<Tag> s) : Strong<Tag>(s) {}  // NOLINT(google-explicit-constructor)
  friend constexpr Quantity operator+(Quantity a, Quantity b) {
    return Quantity(a.value() + b.value());
  }
  friend constexpr Quantity operator-(Quantity a, Quantity b) {
    return Quantity(a.value() - b.value());
  }
  constexpr Quantity& operator+=(Quantity b) { return *this = *this + b; }
  constexpr Quantity& operator-=(Quantity b) { return *this = *this - b; }
};

// Addresses: an address plus a byte or row offset is an address of the same space.
template <class Tag, class Rep = std::uint64_t>
class Address : public Strong<Tag, Rep> {
 public:
  using Strong<Tag, Rep>::Strong;
  constexpr Address(Strong<Tag, Rep> s) : Strong<Tag, Rep>(s) {}  // NOLINT
  friend constexpr Address operator+(Address a, std::uint64_t off) {
    return Address(static_cast<Rep>(a.value() + off));
  }
};

struct CyclesTag {};
struct BytesTag {};
struct UbAddrTag {};
struct AccAddrTag {};
struct MemAddrTag {};
struct HostAddrTag {};

using Cycles = Quantity<CyclesTag>;  // clock cycles of the chip clock
using Bytes = Quantity<BytesTag>;
using UbAddr = Address<UbAddrTag, std::uint32_t>;      // byte address in a core's unified buffer
using AccAddr = Address<AccAddrTag, std::uint32_t>;    // accumulator entry (row) index
using MemAddr = Address<MemAddrTag, std::uint64_t>;    // byte address in off-chip memory
using HostAddr = Address<HostAddrTag, std::uint64_t>;  // byte address in host memory

// A point on the chip-clock time line (cycle 0 = start of simulation).
using Cycle = std::uint64_t;

// How a shared link serves transfers that overlap (docs/timing-model.md, "Shared resources"):
// Shared, processor sharing (each of n transfers in flight moves at 1/n of the rate); InOrder,
// one after another in the order they arrive, each one's latency overlapping the transfers ahead
// of it (a USB bulk endpoint).
enum class LinkService : std::uint8_t { Shared, InOrder };

}  // namespace tpu
