#include "hw/system/ici_topology.h"

#include <limits>
#include <stdexcept>
#include <utility>

namespace tpu {

namespace {

std::string dim_name(std::uint32_t dim) {
  static const char* const kNames[] = {"x", "y", "z"};
  return dim < 3 ? kNames[dim] : "d" + std::to_string(dim);
}

std::string shape_of(const std::vector<std::uint32_t>& dims) {
  std::string s;
  for (std::size_t d = 0; d < dims.size(); ++d) s += (d == 0 ? "" : "x") + std::to_string(dims[d]);
  return s;
}

}  // namespace

IciTopology::IciTopology(std::vector<std::uint32_t> dims, std::vector<bool> wraparound)
    : dims_(std::move(dims)), wraps_(std::move(wraparound)) {
  if (dims_.empty()) throw std::invalid_argument("ICI topology: no dimensions");
  if (wraps_.size() != dims_.size())
    throw std::invalid_argument("ICI topology: " + std::to_string(dims_.size()) +
                                " dimensions but " + std::to_string(wraps_.size()) +
                                " wraparound flags (one per dimension)");
  std::uint64_t chips = 1;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (dims_[d] == 0)
      throw std::invalid_argument("ICI topology " + shape_of(dims_) + ": dimension " +
                                  dim_name(static_cast<std::uint32_t>(d)) +
                                  " has extent 0 (must be >= 1)");
    chips *= dims_[d];
    if (chips > std::numeric_limits<std::uint32_t>::max())
      throw std::invalid_argument("ICI topology " + shape_of(dims_) + ": more than 2^32 - 1 chips");
    if (dims_[d] == 1) wraps_[d] = false;  // a single chip on the axis: no links along it
  }
  chips_ = static_cast<std::uint32_t>(chips);

  const auto n_dims = static_cast<std::uint32_t>(dims_.size());
  slots_.assign(static_cast<std::size_t>(chips_) * n_dims * 2, kNoLink);
  for (std::uint32_t chip = 0; chip < chips_; ++chip) {
    const std::vector<std::uint32_t> c = coordinates(chip);
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint32_t n = dims_[d];
      if (n == 1) continue;
      for (const Direction dir : {Direction::Plus, Direction::Minus}) {
        const bool plus = dir == Direction::Plus;
        const bool at_end = plus ? c[d] == n - 1 : c[d] == 0;
        if (at_end && !wraps_[d]) continue;
        std::vector<std::uint32_t> next = c;
        next[d] = plus ? (c[d] + 1) % n : (c[d] + n - 1) % n;
        slots_[slot(chip, d, dir)] = links_.size();
        links_.push_back(IciLink{chip, chip_at(next), d, dir});
        names_.push_back("chip " + std::to_string(chip) + " " + (plus ? "+" : "-") + dim_name(d));
      }
    }
  }
}

bool IciTopology::wraps(std::uint32_t dim) const { return wraps_.at(dim); }

void IciTopology::check_chip(std::uint32_t chip) const {
  if (chip >= chips_)
    throw std::out_of_range("ICI topology " + shape_of(dims_) + ": no chip " +
                            std::to_string(chip) + " (chips 0.." + std::to_string(chips_ - 1) +
                            ")");
}

std::vector<std::uint32_t> IciTopology::coordinates(std::uint32_t chip) const {
  check_chip(chip);
  std::vector<std::uint32_t> c(dims_.size());
  for (std::size_t d = dims_.size(); d-- > 0;) {  // the last dimension varies fastest
    c[d] = chip % dims_[d];
    chip /= dims_[d];
  }
  return c;
}

std::uint32_t IciTopology::chip_at(const std::vector<std::uint32_t>& coords) const {
  if (coords.size() != dims_.size())
    throw std::out_of_range("ICI topology " + shape_of(dims_) + ": " +
                            std::to_string(coords.size()) + " coordinates for " +
                            std::to_string(dims_.size()) + " dimensions");
  std::uint32_t chip = 0;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    if (coords[d] >= dims_[d])
      throw std::out_of_range("ICI topology " + shape_of(dims_) + ": coordinate " +
                              std::to_string(coords[d]) + " along " +
                              dim_name(static_cast<std::uint32_t>(d)) + " (0.." +
                              std::to_string(dims_[d] - 1) + ")");
    chip = chip * dims_[d] + coords[d];
  }
  return chip;
}

std::size_t IciTopology::slot(std::uint32_t chip, std::uint32_t dim, Direction dir) const {
  return (static_cast<std::size_t>(chip) * dims_.size() + dim) * 2 +
         (dir == Direction::Plus ? 0 : 1);
}

bool IciTopology::has_link(std::uint32_t chip, std::uint32_t dim, Direction dir) const {
  return chip < chips_ && dim < dims_.size() && slots_[slot(chip, dim, dir)] != kNoLink;
}

IciTopology::Link IciTopology::link_of(std::uint32_t chip, std::uint32_t dim, Direction dir) const {
  check_chip(chip);
  if (dim >= dims_.size())
    throw std::out_of_range("ICI topology " + shape_of(dims_) + ": no dimension " +
                            std::to_string(dim));
  const Link l = slots_[slot(chip, dim, dir)];
  if (l == kNoLink)
    throw std::out_of_range("ICI topology " + shape_of(dims_) + ": chip " + std::to_string(chip) +
                            " has no " + (dir == Direction::Plus ? "+" : "-") + dim_name(dim) +
                            " link (" +
                            (dims_[dim] == 1 ? "the axis has extent 1"
                                             : "it is at the end of an axis without wraparound") +
                            ")");
  return l;
}

std::vector<IciTopology::Link> IciTopology::route(std::uint32_t from, std::uint32_t to) const {
  std::vector<std::uint32_t> at = coordinates(from);
  const std::vector<std::uint32_t> dest = coordinates(to);
  std::vector<Link> path;
  std::uint32_t chip = from;
  for (std::uint32_t d = 0; d < dims_.size(); ++d) {
    if (at[d] == dest[d]) continue;
    const std::uint32_t n = dims_[d];
    Direction dir = Direction::Plus;
    std::uint32_t hops = 0;
    if (wraps_[d]) {
      const std::uint32_t up = (dest[d] + n - at[d]) % n;  // hops the + way round
      const std::uint32_t down = n - up;
      dir = up <= down ? Direction::Plus : Direction::Minus;
      hops = up <= down ? up : down;
    } else {
      dir = dest[d] > at[d] ? Direction::Plus : Direction::Minus;
      hops = dest[d] > at[d] ? dest[d] - at[d] : at[d] - dest[d];
    }
    for (std::uint32_t h = 0; h < hops; ++h) {
      const Link l = link_of(chip, d, dir);
      path.push_back(l);
      chip = links_[l].to;
    }
    at[d] = dest[d];
  }
  return path;
}

}  // namespace tpu
