// The Verilated array on its own (rtl::ArrayModel), driven pin by pin: its streams under stalls
// and back-pressure, its assertions, its idle behaviour and its waveform. Expected results come
// from a scalar multiply in the test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "rtl/model/array_model.h"

namespace tpu {
namespace {

using Tile = std::vector<std::int8_t>;  // rows x cols, row-major, as the array holds it

// Drives one array: tiles in, rows in (each tagged with the tile it must meet), results out.
// Producers raise valid at random and hold it until accepted; the consumer takes results at
// random. Checks every result row against the scalar product.
struct Driver {
  rtl::ArrayModel& a;
  std::mt19937_64 rng;
  std::deque<Tile> tiles_to_send;
  std::uint32_t beat = 0;
  struct Row {
    std::vector<std::int8_t> x;
    bool swap = false;
  };
  std::deque<Row> rows_to_send;
  std::vector<Tile> tile_of_tag;
  std::deque<std::pair<std::vector<std::int8_t>, std::size_t>> expected;  // row, tile index
  std::size_t swaps_sent = 0;
  std::size_t results = 0;
  std::vector<std::uint64_t> result_cycles;  // a.cycle() of each result handshake
  bool w_up = false, in_up = false;

  Driver(rtl::ArrayModel& array, std::uint64_t seed) : a(array), rng(seed) {}

  Tile random_tile() {
    Tile t(std::size_t{a.rows()} * a.cols());
    for (auto& v : t) v = static_cast<std::int8_t>(rng());
    return t;
  }
  void add_multiply(const Tile& t, std::uint32_t b) {
    tiles_to_send.push_back(t);
    tile_of_tag.push_back(t);
    for (std::uint32_t r = 0; r < b; ++r) {
      Row row;
      row.x.resize(a.rows());
      for (auto& v : row.x) v = static_cast<std::int8_t>(rng());
      row.swap = r == 0;
      rows_to_send.push_back(row);
    }
  }

  // One cycle with random valid and ready; returns false on a wrong result.
  bool cycle(double p_valid, double p_ready) {
    std::bernoulli_distribution valid(p_valid), ready(p_ready);
    rtl::ArrayPins& p = a.pins;
    w_up = !tiles_to_send.empty() && (w_up || valid(rng));
    in_up = !rows_to_send.empty() && (in_up || valid(rng));
    p.w_valid = w_up;
    if (w_up) {
      const Tile& t = tiles_to_send.front();
      const std::uint32_t row = a.rows() - 1 - beat;
      for (std::uint32_t n = 0; n < a.cols(); ++n) p.w_data[n] = t[std::size_t{row} * a.cols() + n];
    }
    p.in_valid = in_up;
    if (in_up) {
      p.in_swap = rows_to_send.front().swap;
      p.in_data = rows_to_send.front().x;
    }
    p.out_ready = ready(rng);
    a.settle();
    bool ok = true;
    if (p.out_valid && p.out_ready) {
      const auto& [x, t] = expected.front();
      for (std::uint32_t n = 0; n < a.cols(); ++n) {
        std::int32_t want = 0;
        for (std::uint32_t k = 0; k < a.rows(); ++k)
          want += std::int32_t{x[k]} * tile_of_tag[t][std::size_t{k} * a.cols() + n];
        ok = ok && p.out_data[n] == want;
      }
      expected.pop_front();
      ++results;
      result_cycles.push_back(a.cycle());
    }
    if (p.in_valid && p.in_ready) {
      if (rows_to_send.front().swap) ++swaps_sent;
      expected.emplace_back(rows_to_send.front().x, swaps_sent - 1);
      rows_to_send.pop_front();
      in_up = false;
    }
    if (p.w_valid && p.w_ready) {
      if (++beat == a.rows()) {
        beat = 0;
        tiles_to_send.pop_front();
      }
      w_up = false;
    }
    a.tick();
    return ok;
  }
};

std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes() { return rtl::array_model_sizes(); }

TEST(MxuArray, EverySizeMultipliesCorrectlyUnderRandomStallsAndBackPressure) {
  ASSERT_FALSE(sizes().empty());
  for (const auto& [rows, cols] : sizes()) {
    auto a = rtl::make_array_model(rows, cols);
    ASSERT_TRUE(a) << rows << "x" << cols;
    Driver d(*a, rows * 131 + cols);
    std::size_t total = 0;
    for (std::uint32_t b : {1u, rows, rows + cols + 1, 3u, 2 * rows}) {
      d.add_multiply(d.random_tile(), b);
      total += b;
    }
    for (int c = 0; c < 200000 && d.results < total; ++c)
      ASSERT_TRUE(d.cycle(0.6, 0.7)) << rows << "x" << cols << ": wrong result row " << d.results;
    EXPECT_EQ(d.results, total) << rows << "x" << cols;
    EXPECT_FALSE(a->pins.busy);
  }
}

TEST(MxuArray, AssertionCatchesAValidDroppedBeforeReady) {
  const auto [rows, cols] = sizes().front();
  auto a = rtl::make_array_model(rows, cols);
  rtl::ArrayPins& p = a->pins;
  // Fill the shadow buffer, then offer one more beat: w_ready stays low for it.
  p.w_valid = true;
  for (std::uint32_t i = 0; i < rows + 1; ++i) {
    a->settle();
    a->tick();
  }
  a->settle();
  ASSERT_FALSE(p.w_ready);
  a->tick();
  p.w_valid = false;  // the rule: hold valid until ready
  EXPECT_THROW(
      {
        a->settle();
        a->tick();
      },
      std::logic_error);
}

TEST(MxuArray, IdleArrayHoldsItsStateSoSkippedCyclesChangeNothing) {
  const auto [rows, cols] = sizes().back();
  auto clocked = rtl::make_array_model(rows, cols);
  auto skipped = rtl::make_array_model(rows, cols);
  Driver dc(*clocked, 7), ds(*skipped, 7);
  const Tile t = dc.random_tile();
  ds.random_tile();
  dc.add_multiply(t, rows);
  ds.add_multiply(t, rows);
  while (dc.results < rows) ASSERT_TRUE(dc.cycle(1, 1));
  while (ds.results < rows) ASSERT_TRUE(ds.cycle(1, 1));
  ASSERT_FALSE(clocked->pins.busy);
  // Idle: one model is clocked with nothing to do, the other lets the cycles pass unclocked.
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(dc.cycle(1, 1));
  skipped->skip_idle(50);
  // Then both multiply the same rows by the resident tile: right results, in the same cycles.
  for (Driver* d : {&dc, &ds}) {
    for (std::uint32_t r = 0; r < cols; ++r) {
      Driver::Row row;
      row.x.assign(rows, static_cast<std::int8_t>(r + 1));
      d->rows_to_send.push_back(row);
    }
    while (d->results < rows + cols) ASSERT_TRUE(d->cycle(1, 1));
  }
  EXPECT_EQ(dc.result_cycles, ds.result_cycles);
}

TEST(MxuArray, WaveformIsAVcdFileWithTheInterfaceSignals) {
  const auto [rows, cols] = sizes().front();
  auto a = rtl::make_array_model(rows, cols);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mxu_array_test_" + std::to_string(getpid()) + ".vcd"))
                               .string();
  a->trace_vcd(path);
  Driver d(*a, 3);
  d.add_multiply(d.random_tile(), 2);
  while (d.results < 2) ASSERT_TRUE(d.cycle(1, 1));
  a = nullptr;  // closes the file
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  for (const char* s : {"$enddefinitions", "in_ready", "w_ready", "out_valid", "shadow_full"})
    EXPECT_NE(text.str().find(s), std::string::npos) << s;
}

TEST(MxuArray, NoModelForASizeNoChipAskedFor) { EXPECT_EQ(rtl::make_array_model(3, 5), nullptr); }

}  // namespace
}  // namespace tpu
