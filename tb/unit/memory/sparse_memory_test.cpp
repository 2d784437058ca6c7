#include "hw/memory/sparse_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "hw/common/error.h"

namespace tpu {
namespace {

constexpr std::uint64_t kPage = SparseMemory::kPageBytes;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(byte(gen));
  return v;
}

TEST(SparseMemory, ReadAfterWriteAcrossPageBoundaries) {
  SparseMemory mem(16 * kPage);
  // Starts 100 bytes before a page ends and spans two more boundaries.
  const std::uint64_t at = kPage - 100;
  const auto data = random_bytes(2 * kPage + 300, 1);
  mem.write(at, data.data(), data.size());

  // Reference: a flat window around the write, zero elsewhere.
  std::vector<std::uint8_t> expected(5 * kPage, 0);
  std::copy(data.begin(), data.end(), expected.begin() + static_cast<std::ptrdiff_t>(at));
  std::vector<std::uint8_t> got(expected.size(), 0xff);
  mem.read(0, got.data(), got.size());
  EXPECT_EQ(got, expected);
  EXPECT_EQ(mem.allocated_bytes(), 4 * kPage);  // pages 0..3 hold bytes of the write
}

TEST(SparseMemory, PartialPageWriteLeavesTheRestOfThePageZero) {
  SparseMemory mem(4 * kPage);
  const auto data = random_bytes(10, 2);
  mem.write(kPage + 7, data.data(), data.size());
  std::vector<std::uint8_t> page(kPage, 0xff);
  mem.read(kPage, page.data(), page.size());
  std::vector<std::uint8_t> expected(kPage, 0);
  std::copy(data.begin(), data.end(), expected.begin() + 7);
  EXPECT_EQ(page, expected);
}

TEST(SparseMemory, UnwrittenReadsAreZeroAndAllocateNothing) {
  SparseMemory mem(8 * kGiB);
  std::vector<std::uint8_t> got(3 * kPage + 17, 0xff);
  mem.read(5 * kGiB + 3, got.data(), got.size());
  EXPECT_EQ(got, std::vector<std::uint8_t>(got.size(), 0));
  EXPECT_EQ(mem.allocated_bytes(), 0U);
}

// DESIGN: "A 32 GiB HBM config must not allocate 32 GiB."
TEST(SparseMemory, ScatteredWritesIn32GiBAllocateOnlyTheirPages) {
  SparseMemory mem(32 * kGiB);
  const std::vector<std::uint64_t> addrs = {0, 3 * kGiB + 12345, 17 * kGiB, 32 * kGiB - 8};
  const std::uint64_t word = 0x0123456789abcdefULL;
  for (const std::uint64_t a : addrs) mem.write(a, &word, sizeof word);
  EXPECT_EQ(mem.allocated_bytes(), addrs.size() * kPage);
  for (const std::uint64_t a : addrs) {
    std::uint64_t back = 0;
    mem.read(a, &back, sizeof back);
    EXPECT_EQ(back, word) << "at " << a;
  }
}

TEST(SparseMemory, InRangeRejectsRangesPastTheEndWithoutOverflow) {
  const std::uint64_t cap = 32 * kGiB;
  const SparseMemory mem(cap);
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  EXPECT_TRUE(mem.in_range(0, cap));
  EXPECT_TRUE(mem.in_range(cap - 1, 1));
  EXPECT_TRUE(mem.in_range(cap, 0));
  EXPECT_FALSE(mem.in_range(cap, 1));
  EXPECT_FALSE(mem.in_range(cap - 1, 2));
  EXPECT_FALSE(mem.in_range(0, cap + 1));
  EXPECT_FALSE(mem.in_range(max, 2));  // addr + n wraps to 1
  EXPECT_FALSE(mem.in_range(2, max));  // addr + n wraps to 1
  EXPECT_FALSE(mem.in_range(max, 0));
}

TEST(SparseMemory, OutOfRangeAccessIsAProgramError) {
  SparseMemory mem(2 * kPage);
  std::uint8_t b[2] = {};
  EXPECT_THROW(mem.write(2 * kPage - 1, b, 2), ProgramError);
  EXPECT_THROW(mem.read(std::numeric_limits<std::uint64_t>::max(), b, 2), ProgramError);
  EXPECT_EQ(mem.allocated_bytes(), 0U);
}

TEST(SparseMemory, CapacityAbove2To48IsAConfigError) {
  EXPECT_NO_THROW(SparseMemory(SparseMemory::kMaxCapacity));
  EXPECT_THROW(SparseMemory(SparseMemory::kMaxCapacity + 1), ConfigError);
}

}  // namespace
}  // namespace tpu
