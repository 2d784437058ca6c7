// IciTopology (hw/system/ici_topology.h): chip numbering, the links of a torus or mesh, and
// dimension-order routing. Plain C++, no elaboration.
#include "hw/system/ici_topology.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace tpu {
namespace {

using Link = IciTopology::Link;

// The links a route should cross: from `chip`, `hops` times along `dim` in `dir`.
std::vector<Link> walk(const IciTopology& t, std::uint32_t chip, std::uint32_t dim, Direction dir,
                       std::uint32_t hops) {
  std::vector<Link> links;
  for (std::uint32_t h = 0; h < hops; ++h) {
    links.push_back(t.link_of(chip, dim, dir));
    chip = t.link(links.back()).to;
  }
  return links;
}

std::vector<Link> concat(std::vector<Link> a, const std::vector<Link>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(IciTopology, ChipsAreNumberedRowMajorWithTheLastDimensionFastest) {
  const std::vector<std::uint32_t> dims = {2, 3, 4};
  const IciTopology t(dims, {true, false, true});
  ASSERT_EQ(t.chip_count(), dims[0] * dims[1] * dims[2]);
  EXPECT_EQ(t.chip_at({1, 2, 3}), 1 * dims[1] * dims[2] + 2 * dims[2] + 3);
  EXPECT_EQ(t.coordinates(1), (std::vector<std::uint32_t>{0, 0, 1}));
  for (std::uint32_t chip = 0; chip < t.chip_count(); ++chip)
    EXPECT_EQ(t.chip_at(t.coordinates(chip)), chip);
  EXPECT_THROW((void)t.coordinates(t.chip_count()), std::out_of_range);
  EXPECT_THROW((void)t.chip_at({0, dims[1], 0}), std::out_of_range);
  EXPECT_THROW((void)t.chip_at({0, 0}), std::out_of_range);
}

TEST(IciTopology, ATorusChipHasAPlusAndAMinusLinkOnEveryAxisLongerThanOne) {
  const std::vector<std::uint32_t> dims = {4, 1, 3};
  const IciTopology t(dims, {true, true, true});
  const std::uint32_t axes_with_links = 2;  // the axis of extent 1 has none
  EXPECT_EQ(t.link_count(), std::size_t{t.chip_count()} * axes_with_links * 2);
  for (std::uint32_t chip = 0; chip < t.chip_count(); ++chip) {
    const std::vector<std::uint32_t> c = t.coordinates(chip);
    EXPECT_FALSE(t.has_link(chip, 1, Direction::Plus));
    EXPECT_FALSE(t.has_link(chip, 1, Direction::Minus));
    for (const std::uint32_t d : {0U, 2U}) {
      const IciLink& plus = t.link(t.link_of(chip, d, Direction::Plus));
      const IciLink& minus = t.link(t.link_of(chip, d, Direction::Minus));
      std::vector<std::uint32_t> up = c;
      std::vector<std::uint32_t> down = c;
      up[d] = (c[d] + 1) % dims[d];
      down[d] = (c[d] + dims[d] - 1) % dims[d];
      EXPECT_EQ(plus.from, chip);
      EXPECT_EQ(plus.to, t.chip_at(up));
      EXPECT_EQ(minus.to, t.chip_at(down));
      EXPECT_EQ(plus.dim, d);
      EXPECT_EQ(minus.direction, Direction::Minus);
    }
  }
  EXPECT_FALSE(t.wraps(1));  // an axis of one chip has no wraparound link whatever it asks
}

TEST(IciTopology, MeshEndChipsLackTheOutwardLink) {
  const std::uint32_t n = 5;
  const IciTopology t({n}, {false});
  EXPECT_EQ(t.link_count(), std::size_t{2} * (n - 1));
  EXPECT_FALSE(t.has_link(0, 0, Direction::Minus));
  EXPECT_FALSE(t.has_link(n - 1, 0, Direction::Plus));
  EXPECT_TRUE(t.has_link(0, 0, Direction::Plus));
  EXPECT_TRUE(t.has_link(n - 1, 0, Direction::Minus));
  EXPECT_THROW((void)t.link_of(n - 1, 0, Direction::Plus), std::out_of_range);
}

TEST(IciTopology, AnAxisOfTwoThatWrapsHasDistinctPlusAndMinusLinksToTheSameChip) {
  const IciTopology torus({2}, {true});
  ASSERT_EQ(torus.link_count(), 4U);
  for (std::uint32_t chip = 0; chip < 2; ++chip) {
    const Link plus = torus.link_of(chip, 0, Direction::Plus);
    const Link minus = torus.link_of(chip, 0, Direction::Minus);
    EXPECT_NE(plus, minus);
    EXPECT_EQ(torus.link(plus).to, 1 - chip);
    EXPECT_EQ(torus.link(minus).to, 1 - chip);
  }
  const IciTopology mesh({2}, {false});
  EXPECT_EQ(mesh.link_count(), 2U);  // 0 +x and 1 -x
}

TEST(IciTopology, LinksAreNamedByChipDirectionAndAxis) {
  const IciTopology t({2, 2, 2}, {false, false, false});
  EXPECT_EQ(t.link_name(t.link_of(3, 0, Direction::Plus)), "chip 3 +x");
  EXPECT_EQ(t.link_name(t.link_of(3, 1, Direction::Minus)), "chip 3 -y");
  EXPECT_EQ(t.link_name(t.link_of(0, 2, Direction::Plus)), "chip 0 +z");
}

TEST(IciTopology, RejectsAShapeWithoutChipsOrWithTheWrongNumberOfWraparoundFlags) {
  EXPECT_THROW(IciTopology({}, {}), std::invalid_argument);
  EXPECT_THROW(IciTopology({4, 0}, {true, true}), std::invalid_argument);
  EXPECT_THROW(IciTopology({4, 4}, {true}), std::invalid_argument);
  EXPECT_THROW(IciTopology({65536, 65536}, {true, true}), std::invalid_argument);
}

TEST(IciRouting, ARouteToTheSameChipCrossesNoLink) {
  const IciTopology t({4, 4}, {true, true});
  EXPECT_TRUE(t.route(5, 5).empty());
}

TEST(IciRouting, ATorusAxisIsCrossedTheShorterWayRoundAndATieGoesPlus) {
  const std::uint32_t n = 8;
  const IciTopology t({n}, {true});
  EXPECT_EQ(t.route(0, 3), walk(t, 0, 0, Direction::Plus, 3));
  EXPECT_EQ(t.route(0, n - 3), walk(t, 0, 0, Direction::Minus, 3));
  EXPECT_EQ(t.route(0, n / 2), walk(t, 0, 0, Direction::Plus, n / 2));  // tie
  EXPECT_EQ(t.route(n - 1, 0), walk(t, n - 1, 0, Direction::Plus, 1));  // over the wrap link
}

TEST(IciRouting, AMeshAxisIsCrossedStraightTowardsTheDestination) {
  const std::uint32_t n = 8;
  const IciTopology t({n}, {false});
  EXPECT_EQ(t.route(0, n - 1), walk(t, 0, 0, Direction::Plus, n - 1));
  EXPECT_EQ(t.route(n - 1, 0), walk(t, n - 1, 0, Direction::Minus, n - 1));
  EXPECT_EQ(t.route(6, 2), walk(t, 6, 0, Direction::Minus, 4));
}

TEST(IciRouting, AnAxisOfTwoThatWrapsIsCrossedInThePlusDirection) {
  const IciTopology t({2}, {true});
  EXPECT_EQ(t.route(0, 1), std::vector<Link>{t.link_of(0, 0, Direction::Plus)});
  EXPECT_EQ(t.route(1, 0), std::vector<Link>{t.link_of(1, 0, Direction::Plus)});
}

TEST(IciRouting, DimensionZeroIsRoutedFirst) {
  const IciTopology t({4, 4}, {false, false});
  const std::uint32_t from = t.chip_at({0, 3});
  const std::uint32_t to = t.chip_at({2, 1});
  const std::uint32_t corner = t.chip_at({2, 3});  // x done first, then y
  EXPECT_EQ(t.route(from, to),
            concat(walk(t, from, 0, Direction::Plus, 2), walk(t, corner, 1, Direction::Minus, 2)));
}

TEST(IciRouting, A3DTorusIsRoutedXThenYThenZEachTheShortWay) {
  const IciTopology t({4, 4, 4}, {true, true, true});
  const std::uint32_t from = t.chip_at({0, 0, 0});
  const std::uint32_t to = t.chip_at({3, 2, 1});
  // x: 0 → 3 is one hop down over the wrap; y: 0 → 2 is a tie, so up; z: one hop up.
  const std::vector<Link> x = walk(t, from, 0, Direction::Minus, 1);
  const std::vector<Link> y = walk(t, t.chip_at({3, 0, 0}), 1, Direction::Plus, 2);
  const std::vector<Link> z = walk(t, t.chip_at({3, 2, 0}), 2, Direction::Plus, 1);
  EXPECT_EQ(t.route(from, to), concat(concat(x, y), z));
}

// For every pair of chips of a mixed torus/mesh: the route is a chain of links from the source to
// the destination, its length is the sum of each axis's distance (shortest way round where the
// axis wraps), and the axes it crosses come in dimension order.
TEST(IciRouting, EveryRouteIsAContiguousShortestDimensionOrderPath) {
  const std::vector<std::uint32_t> dims = {3, 4, 2};
  const std::vector<bool> wrap = {true, false, true};
  const IciTopology t(dims, wrap);
  for (std::uint32_t from = 0; from < t.chip_count(); ++from) {
    for (std::uint32_t to = 0; to < t.chip_count(); ++to) {
      const std::vector<Link> path = t.route(from, to);
      const std::vector<std::uint32_t> a = t.coordinates(from);
      const std::vector<std::uint32_t> b = t.coordinates(to);
      std::size_t distance = 0;
      for (std::size_t d = 0; d < dims.size(); ++d) {
        const auto delta =
            static_cast<std::uint32_t>(std::abs(static_cast<int>(a[d]) - static_cast<int>(b[d])));
        distance += wrap[d] ? std::min(delta, dims[d] - delta) : delta;
      }
      ASSERT_EQ(path.size(), distance) << from << " -> " << to;
      std::uint32_t at = from;
      std::uint32_t last_dim = 0;
      for (const Link l : path) {
        EXPECT_EQ(t.link(l).from, at);
        EXPECT_GE(t.link(l).dim, last_dim);
        last_dim = t.link(l).dim;
        at = t.link(l).to;
      }
      EXPECT_EQ(at, to);
    }
  }
}

}  // namespace
}  // namespace tpu
