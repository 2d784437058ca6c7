// The shape of a TPU system's inter-chip interconnect (ICI): chips on a 1D, 2D or 3D grid whose
// axes each either wrap around (a torus axis, a ring) or do not (a mesh axis, a line), joined by
// directed links to their neighbours, and the route a transfer takes. Plain C++ (no SystemC): the
// IciFabric (hw/system/ici_fabric.h) times transfers over it; docs/systems.md, "The ICI fabric".
//
// Numbering: chips are numbered row-major over the dimensions, the first dimension slowest and
// the last fastest (as a C array dims[0][dims[1]]...): with dims {d0, d1, d2} the chip at
// (c0, c1, c2) is c0·d1·d2 + c1·d2 + c2. Dimensions 0, 1, 2 are called x, y, z in names.
//
// Links: every chip has, on every axis of extent > 1, a link to its + neighbour (coordinate + 1)
// and one to its - neighbour (coordinate - 1), one per direction (full duplex: the two directions
// are separate links). On a wrapping axis the neighbours are taken modulo the extent; on an axis
// of extent 2 that wraps, the + and - neighbours are the same chip but its + and - links are
// distinct. On a mesh axis the chip at coordinate 0 has no - link on it and the last chip no +
// link. Links are numbered chip by chip, dimension by dimension, + before -, skipping the absent.
//
// Routing: dimension order (dimension 0 first, then 1, ...). Along a wrapping axis the shorter
// way round (on a tie, the + direction); along a mesh axis straight towards the destination.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpu {

enum class Direction : std::uint8_t { Plus, Minus };

struct IciLink {
  std::uint32_t from = 0;  // the chip the link leaves
  std::uint32_t to = 0;    // the chip it enters
  std::uint32_t dim = 0;
  Direction direction = Direction::Plus;
};

class IciTopology {
 public:
  using Link = std::size_t;

  // Throws std::invalid_argument for no dimensions, an extent of 0, a wraparound list of another
  // length, or more than 2^32 - 1 chips.
  IciTopology(std::vector<std::uint32_t> dims, std::vector<bool> wraparound);

  [[nodiscard]] const std::vector<std::uint32_t>& dims() const { return dims_; }
  // Whether the axis has wraparound links (never for an axis of extent 1, which has no links).
  [[nodiscard]] bool wraps(std::uint32_t dim) const;
  [[nodiscard]] std::uint32_t chip_count() const { return chips_; }

  // Throw std::out_of_range for a chip or coordinates outside the grid.
  [[nodiscard]] std::vector<std::uint32_t> coordinates(std::uint32_t chip) const;
  [[nodiscard]] std::uint32_t chip_at(const std::vector<std::uint32_t>& coords) const;

  [[nodiscard]] bool has_link(std::uint32_t chip, std::uint32_t dim, Direction dir) const;
  // The link leaving `chip` along `dim` in `dir`; throws std::out_of_range if there is none.
  [[nodiscard]] Link link_of(std::uint32_t chip, std::uint32_t dim, Direction dir) const;
  [[nodiscard]] std::size_t link_count() const { return links_.size(); }
  [[nodiscard]] const IciLink& link(Link l) const { return links_.at(l); }
  // "chip 3 +x", "chip 0 -z" (dimensions past z: "d3").
  [[nodiscard]] const std::string& link_name(Link l) const { return names_.at(l); }

  // The links a transfer from `from` to `to` crosses, in order (empty when from == to).
  [[nodiscard]] std::vector<Link> route(std::uint32_t from, std::uint32_t to) const;

 private:
  void check_chip(std::uint32_t chip) const;
  [[nodiscard]] std::size_t slot(std::uint32_t chip, std::uint32_t dim, Direction dir) const;

  std::vector<std::uint32_t> dims_;
  std::vector<bool> wraps_;
  std::uint32_t chips_ = 1;
  std::vector<IciLink> links_;
  std::vector<std::string> names_;
  static constexpr Link kNoLink = ~Link{0};
  std::vector<Link> slots_;  // (chip, dim, direction) -> link, or kNoLink
};

}  // namespace tpu
