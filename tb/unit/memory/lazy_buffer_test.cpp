#include "hw/memory/lazy_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "hw/common/error.h"

namespace tpu {
namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

std::uint64_t host_page_bytes() { return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)); }

// Host pages of the buffer that are backed by memory (mincore), in bytes.
std::uint64_t resident_bytes(const LazyBuffer& buf) {
  const std::uint64_t page = host_page_bytes();
  std::vector<unsigned char> flags((buf.size() + page - 1) / page);
  if (::mincore(const_cast<std::uint8_t*>(buf.data()), buf.size(), flags.data()) != 0) return ~0ULL;
  const auto pages =
      std::count_if(flags.begin(), flags.end(), [](unsigned char f) { return f & 1; });
  return static_cast<std::uint64_t>(pages) * page;
}

TEST(LazyBuffer, StartsZeroFilled) {
  const LazyBuffer buf(3 * host_page_bytes() + 5);
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_TRUE(
      std::all_of(buf.data(), buf.data() + buf.size(), [](std::uint8_t b) { return b == 0; }));
}

// DESIGN "allocated on touch": a 24 MiB unified buffer of which 1 MiB is touched costs 1 MiB.
TEST(LazyBuffer, OnlyTouchedPagesAreResident) {
  LazyBuffer buf(24 * kMiB);
  EXPECT_EQ(resident_bytes(buf), 0U);
  const std::uint64_t touched = 1 * kMiB;
  const std::uint64_t at = 5 * kMiB;
  std::memset(buf.data() + at, 0x5a, touched);
  EXPECT_EQ(resident_bytes(buf), touched);
  EXPECT_EQ(buf.data()[at + touched - 1], 0x5a);
  EXPECT_EQ(buf.data()[at + touched], 0);
}

TEST(LazyBuffer, MoveTransfersTheStorage) {
  LazyBuffer a(host_page_bytes());
  a.data()[7] = 42;
  const std::uint8_t* p = a.data();
  LazyBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[7], 42);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is defined
  EXPECT_EQ(a.size(), 0U);
  LazyBuffer c(2 * host_page_bytes());
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), host_page_bytes());
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
}

TEST(LazyBuffer, EmptyBufferHasNoStorage) {
  const LazyBuffer buf(0);
  EXPECT_EQ(buf.data(), nullptr);
  EXPECT_EQ(buf.size(), 0U);
}

TEST(LazyBuffer, SizeBeyondTheAddressSpaceIsAConfigErrorNamingTheSize) {
  // 2^62 bytes exceeds every x86-64 and AArch64 user address space.
  const std::uint64_t huge = std::uint64_t{1} << 62;
  try {
    const LazyBuffer buf(huge);
    FAIL() << "mapped " << buf.size() << " bytes";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpu
