// The MXU's math, without the kernel: a weight-stationary systolic array of rows x cols
// multiply-accumulate cells. Inputs enter from the left one row per cycle; the resident weight
// tile (K x N) stays in the cells; each column sums its K products top to bottom, in row order,
// starting from zero, and the column's sum is then written to, or added into, the accumulator.
// That order is the contract the bf16 reference in sw/nn follows bit for bit:
//   int8 x int8 -> int32:  psum = sum_k x[k]*w[k][n] (exact), acc = acc + psum (wrapping int32)
//   bf16 x bf16 -> fp32:   psum = ((0 + x0*w0) + x1*w1) + ... in fp32 (each product exact),
//                          acc = acc + psum in fp32.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "hw/config/chip_config.h"
#include "hw/isa/isa.h"
#include "hw/isa/window.h"

namespace tpu {

// A weight tile as the array holds it: rows x cols elements of the MXU input type, row-major,
// dense (int8: one byte each; bf16: two bytes each, little-endian).
struct WeightTile {
  std::uint32_t rows = 0;  // K
  std::uint32_t cols = 0;  // N
  std::vector<std::uint8_t> bytes;
};

// Where the B input rows of one MatMul come from in the unified buffer (hw/isa/window.h).
using InputSpec = isa::MatMulInput;

class SystolicArray {
 public:
  explicit SystolicArray(const MxuConfig& cfg);

  // The half-open range [lo, hi) of UB bytes that reading `in` for a K-row tile may touch
  // (isa::matmul_input_extent for this array's input type).
  [[nodiscard]] std::pair<std::uint64_t, std::uint64_t> input_extent(const InputSpec& in,
                                                                     std::uint32_t k) const;

  // Computes the B x N result of in (B x K) times tile (K x N) and writes or accumulates it:
  // result row r, column n goes to acc[r * acc_stride + n] (32-bit words: int32 or fp32 bits);
  // columns n >= tile.cols are left untouched. `ub` is the unified buffer base (ub_bytes long).
  // Windowed reads outside the image read zero. Throws ProgramError if the input extent leaves
  // the unified buffer.
  void multiply(const WeightTile& tile, const InputSpec& in, const std::uint8_t* ub,
                std::uint64_t ub_bytes, std::uint32_t* acc, std::uint32_t acc_stride,
                bool accumulate) const;

  // The B rows of k elements that multiply() would read for a k-row tile, as stored in the unified
  // buffer (input_type elements), row after row; windowed reads outside the image, and between
  // the pixels of an input-dilated image, are zero; a transposed input is gathered as its
  // isa::transposed_view and transposed.
  // Throws ProgramError for the same inputs as multiply().
  [[nodiscard]] std::vector<std::uint8_t> gather(const InputSpec& in, std::uint32_t k,
                                                 const std::uint8_t* ub,
                                                 std::uint64_t ub_bytes) const;

  // The checks of multiply() and of gather() alone, reading no value (timing-only runs, whose
  // tiles carry their shape and no bytes): the same ProgramErrors for the same inputs.
  void check_multiply(const WeightTile& tile, const InputSpec& in, std::uint64_t ub_bytes) const;
  void check_gather(const InputSpec& in, std::uint32_t k, std::uint64_t ub_bytes) const;

  [[nodiscard]] const MxuConfig& config() const { return cfg_; }

 private:
  void check_tile(const WeightTile& tile) const;
  void check_input(const InputSpec& in, std::uint32_t k, std::uint64_t ub_bytes) const;
  // gather() of an untransposed input, without its checks (k may exceed the array: the view of
  // a transposed input has B elements per row).
  [[nodiscard]] std::vector<std::uint8_t> gather_rows(const InputSpec& in, std::uint32_t k,
                                                      const std::uint8_t* ub) const;

  MxuConfig cfg_;
};

}  // namespace tpu
