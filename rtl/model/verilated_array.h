// VerilatedArray: rtl::ArrayModel around one Verilated size of mxu_array. Included only by the
// generated table of models (rtl/model/array_models.cpp.in); the only C++ that sees Verilator.
#pragma once

#include <verilated.h>
#include <verilated_vcd_c.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "hw/common/error.h"
#include "rtl/model/array_model.h"

namespace tpu::rtl {

// V is the Verilated class of an array of Rows x Cols (-GROWS=Rows -GCOLS=Cols).
template <class V, std::uint32_t Rows, std::uint32_t Cols>
class VerilatedArray final : public ArrayModel {
 public:
  VerilatedArray() : ArrayModel(Rows, Cols), context_(std::make_unique<VerilatedContext>()) {
    // A failed assertion must reach the caller as an exception, not end the process.
    context_->fatalOnError(false);
    context_->traceEverOn(true);
    model_ = std::make_unique<V>(context_.get(), "mxu_array");
    reset();
  }
  ~VerilatedArray() override {
    // Verilator 5.006 tears a model's scopes down through the thread's current context, which is
    // whichever model last evaluated (perhaps one already destroyed): make it this one's.
    Verilated::threadContextp(context_.get());
    if (vcd_) vcd_->close();
    model_->final();
    vcd_.reset();
    model_.reset();
  }

  void settle() override {
    V& m = *model_;
    m.clk = 0;
    m.rst_n = pins.rst_n;
    m.w_valid = pins.w_valid;
    for (std::uint32_t n = 0; n < Cols; ++n) m.w_data[n] = static_cast<CData>(pins.w_data[n]);
    m.in_valid = pins.in_valid;
    m.in_swap = pins.in_swap;
    for (std::uint32_t k = 0; k < Rows; ++k) m.in_data[k] = static_cast<CData>(pins.in_data[k]);
    m.out_ready = pins.out_ready;
    eval(2 * cycle_);
  }

  void tick() override {
    model_->clk = 1;
    eval(2 * cycle_ + 1);
    ++cycle_;
  }

  void skip_idle(std::uint64_t n) override { cycle_ += n; }
  [[nodiscard]] std::uint64_t cycle() const override { return cycle_; }

  void trace_vcd(const std::string& path) override {
    auto vcd = std::make_unique<VerilatedVcdC>();
    model_->trace(vcd.get(), 99);
    vcd->open(path.c_str());
    if (!vcd->isOpen()) throw InputError(path + ": cannot write the waveform (VCD) file");
    vcd_ = std::move(vcd);
  }

 private:
  void eval(std::uint64_t time) {
    context_->time(time);
    model_->eval();
    if (vcd_) vcd_->dump(time);
    if (context_->gotError())
      throw std::logic_error("mxu_array " + std::to_string(Rows) + "x" + std::to_string(Cols) +
                             ": an assertion failed in cycle " + std::to_string(cycle_) +
                             " (the message above names it)");
    const V& m = *model_;
    pins.w_ready = m.w_ready;
    pins.in_ready = m.in_ready;
    pins.out_valid = m.out_valid;
    for (std::uint32_t n = 0; n < Cols; ++n)
      pins.out_data[n] = static_cast<std::int32_t>(m.out_data[n]);
    pins.shadow_full = m.shadow_full;
    pins.busy = m.busy;
  }

  std::unique_ptr<VerilatedContext> context_;
  std::unique_ptr<V> model_;
  std::unique_ptr<VerilatedVcdC> vcd_;
  std::uint64_t cycle_ = 0;
};

}  // namespace tpu::rtl
