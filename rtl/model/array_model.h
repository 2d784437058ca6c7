// rtl::ArrayModel: the Verilated mxu_array (rtl/mxu/mxu_array.sv) behind plain C++, so that
// nothing outside rtl/ includes a Verilator header. One implementation per array size that the
// build Verilated (rtl/CMakeLists.txt); make_array_model picks it at run time.
//
// Contract: one clock cycle is
//   1. set the inputs in `pins`, then settle(): the outputs are those the rising edge will see,
//      so `valid && ready` now is a handshake of this cycle;
//   2. tick(): the rising edge; registered outputs (out_valid, shadow_full, busy) are then the
//      next cycle's.
// Inputs follow the valid/ready rules of mxu_array.sv; its assertions are compiled in, and a
// failed one makes settle() or tick() throw std::logic_error (Verilator prints which one).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tpu::rtl {

struct ArrayPins {
  // Inputs.
  bool rst_n = true;
  bool w_valid = false;
  std::vector<std::int8_t> w_data;  // cols weights: one tile row, array row rows-1 first
  bool in_valid = false;
  bool in_swap = false;
  std::vector<std::int8_t> in_data;  // rows elements: one input vector
  bool out_ready = true;
  // Outputs.
  bool w_ready = false;
  bool in_ready = false;
  bool out_valid = false;
  std::vector<std::int32_t> out_data;  // cols column sums
  bool shadow_full = false;
  bool busy = false;
};

class ArrayModel {
 public:
  virtual ~ArrayModel() = default;
  ArrayModel(const ArrayModel&) = delete;
  ArrayModel& operator=(const ArrayModel&) = delete;

  [[nodiscard]] std::uint32_t rows() const { return rows_; }
  [[nodiscard]] std::uint32_t cols() const { return cols_; }

  ArrayPins pins;

  // Holds reset through one rising edge; the array then has no tile and nothing in flight.
  void reset() {
    pins.rst_n = false;
    settle();
    tick();
    pins.rst_n = true;
    settle();
  }
  virtual void settle() = 0;
  virtual void tick() = 0;
  // Lets `n` cycles pass without clock edges. Exact only while the array is idle (busy low and
  // no handshake pending): mxu_array's registers then hold their values across edges.
  virtual void skip_idle(std::uint64_t n) = 0;
  // Cycles since construction, counting skipped ones: the waveform's time axis.
  [[nodiscard]] virtual std::uint64_t cycle() const = 0;
  // Writes every later settle() and tick() to a VCD file (GTKWave); throws InputError if the
  // file cannot be written.
  virtual void trace_vcd(const std::string& path) = 0;

 protected:
  ArrayModel(std::uint32_t rows, std::uint32_t cols) : rows_(rows), cols_(cols) {
    pins.w_data.assign(cols, 0);
    pins.in_data.assign(rows, 0);
    pins.out_data.assign(cols, 0);
  }

 private:
  std::uint32_t rows_;
  std::uint32_t cols_;
};

// A reset model of `rows` x `cols`, or nullptr if this build did not Verilate that size.
std::unique_ptr<ArrayModel> make_array_model(std::uint32_t rows, std::uint32_t cols);
// The sizes this build Verilated, {rows, cols}, ascending; empty without Verilator.
std::vector<std::pair<std::uint32_t, std::uint32_t>> array_model_sizes();

}  // namespace tpu::rtl
