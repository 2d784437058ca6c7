// What each instruction means to the machine beyond its encoding (docs/isa.md §5): which unit
// executes it, and which bytes of which memory it reads and writes. One place, used by the
// sequencer (bounds checks, hazards), the trace (tracks) and the compiler's checks; a new
// instruction adds its case here, next to its encoding, and nowhere in the core.
#pragma once

#include <cstdint>
#include <vector>

#include "hw/common/dtype.h"
#include "hw/isa/isa.h"

namespace tpu::isa {

// Who executes an instruction. `Sequencer`: the sequencer itself (nop, tag, set_window, sync,
// halt, ici_wait); `Ici`: the core's DMA engine for the inter-chip links (ici_write), beside the
// one for memory and host transfers. Each unit runs its instructions in issue order.
enum class UnitKind : std::uint8_t { Sequencer, Dma, Vector, MxuWeights, MxuArray, Ici };
struct Unit {
  UnitKind kind = UnitKind::Sequencer;
  std::uint8_t mxu = 0;    // MxuWeights, MxuArray: which MXU
  bool host_link = false;  // Dma: the transfer crosses the host link (read_host, write_host)
  friend bool operator==(const Unit& a, const Unit& b) {
    return a.kind == b.kind && a.mxu == b.mxu;
  }
};
Unit unit_of(const Instruction& inst);

// The memories an instruction addresses. Accumulator addresses are bytes: entry * entry bytes.
enum class Space : std::uint8_t { UnifiedBuffer, Accumulators, OffChip, Host };

// A byte range [lo, hi) of one space, read or written, and the field that names it.
struct Access {
  Space space = Space::UnifiedBuffer;
  std::uint64_t lo = 0, hi = 0;
  bool write = false;
  const char* field = "";
  [[nodiscard]] bool overlaps(const Access& o) const {
    return space == o.space && lo < o.hi && o.lo < hi;
  }
};

// What the footprint of an instruction depends on beyond its fields: the chip's geometry and the
// core's state at issue.
struct FootprintContext {
  std::uint64_t acc_entry_bytes = 0;  // bytes per accumulator entry (columns x 4)
  DType mxu_input_type = DType::Int8;
  SetWindow window;             // the window registers (windowed MatMul)
  std::uint32_t tile_rows = 0;  // MatMul: rows (K) of the resident weight tile
};

// The tile a ReadWeights makes resident: K rows (input elements) x N columns (outputs), after
// the transpose: rows x cols, or cols x rows with `transpose`.
struct TileShape {
  std::uint32_t k = 0;
  std::uint32_t n = 0;
};
TileShape weight_tile_shape(const ReadWeights& rw);
// Bytes between the starts of consecutive stored rows: stride, or cols * elem_bytes when it is 0.
std::uint64_t weight_row_pitch(const ReadWeights& rw, std::uint32_t elem_bytes);
// Bytes from addr to the end of the last stored row, (rows - 1) * pitch + cols * elem_bytes; 0
// when rows or cols is 0.
std::uint64_t weight_extent(const ReadWeights& rw, std::uint32_t elem_bytes);

// Every access of `inst`, in the order of its fields (the order the sequencer checks them in).
// Ranges follow the definitions in isa.h; an instruction with an impossible geometry (a pool
// window larger than its input) lists what can be computed and leaves the rest to the unit,
// which rejects it naming the field.
std::vector<Access> footprint(const Instruction& inst, const FootprintContext& ctx);

}  // namespace tpu::isa
