// The side band of a strided read or write (a ReadWeights tile whose stored rows lie `pitch`
// bytes apart, docs/timing-model.md): the payload's address is the first row's, its data the
// `rows` rows of `row_bytes` packed one after the other (data length rows x row_bytes). Row i
// lies at address + i x pitch, and each row is its own transfer of row_bytes, all requested at
// once: one transaction instead of one per row from a process of its own, with the same timing.
// A target that refuses a row names it in `refused_row`.
#pragma once

#include <cstdint>
#include <optional>
#include <tlm>

#include "hw/common/tlm_util.h"

namespace tpu {

struct StridedRows : CopiedExtension<StridedRows> {
  std::uint32_t rows = 0;
  std::uint64_t row_bytes = 0;
  std::uint64_t pitch = 0;
  std::optional<std::uint32_t> refused_row;
};

}  // namespace tpu
