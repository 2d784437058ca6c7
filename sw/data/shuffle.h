// A seeded shuffle that gives the same order on every platform: Fisher-Yates over our own
// mapping of mt19937_64 to [0, n), where std::shuffle and std::uniform_int_distribution leave
// their algorithms to the library. The trainers draw a new order of the training set every
// epoch, as Keras's fit(shuffle=True) does.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace tpu::data {

// The shuffle's generator is seeded with the run's seed XOR this, a stream apart from the
// initial weights' (nn::random_weights), in both trainers (tpusim fit and tpusim train).
inline constexpr std::uint64_t kShuffleStream = 0x53485546464c45ull;  // "SHUFFLE"

// Uniform in [0, n), n >= 1, by rejection.
inline std::uint64_t bounded(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - max % n;
  std::uint64_t r = 0;
  do r = rng();
  while (r >= limit);
  return r % n;
}

// Fisher-Yates from the back: element i - 1 swaps with a uniform one of [0, i).
template <class T>
void shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (std::size_t i = v.size(); i > 1; --i)
    std::swap(v[i - 1], v[static_cast<std::size_t>(bounded(rng, i))]);
}

}  // namespace tpu::data
