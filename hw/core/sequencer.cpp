#include "hw/core/sequencer.h"

#include <fmt/format.h>

#include "hw/common/error.h"
#include "hw/core/program_error.h"

namespace tpu {

// The host's instruction buffer per core. J17 gives no depth; 256 instructions (8 KiB) keep the
// core busy for thousands of cycles between host writes (a modelling assumption).
constexpr int kInstructionQueueDepth = 256;

// Unit ids for the scoreboard's same-unit rule.
enum : int { kUnitDma = 0, kUnitVector = 1, kUnitMxuBase = 2 };
constexpr int weights_unit(std::uint32_t m) { return kUnitMxuBase + 2 * static_cast<int>(m); }
constexpr int matmul_unit(std::uint32_t m) { return kUnitMxuBase + 2 * static_cast<int>(m) + 1; }

void CoreBarrier::arrive_and_wait() {
  const std::uint64_t gen = generation_;
  if (++arrived_ == cores_) {
    arrived_ = 0;
    ++generation_;
    released_.notify(sc_core::SC_ZERO_TIME);
  }
  while (generation_ == gen) sc_core::wait(released_);
}

Sequencer::Sequencer(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                     const CoreStorage& storage, const UnitQueues& queues, CoreBarrier& barrier,
                     LayerCounters& counters, std::string core_name)
    : sc_core::sc_module(name),
      instructions("instructions", kInstructionQueueDepth),
      cfg_(cfg),
      clock_(clock),
      storage_(storage),
      queues_(queues),
      barrier_(barrier),
      counters_(counters),
      core_name_(std::move(core_name)),
      array_(cfg.mxu),
      scoreboard_(clock),
      pending_tiles_(cfg.mxu.count),
      resident_tile_(cfg.mxu.count, {0, 0}) {
  SC_HAS_PROCESS(Sequencer);
  SC_THREAD(run);
}

void Sequencer::run() {
  while (true) {
    const InstructionWord w = instructions.read();
    const std::uint64_t index = index_++;
    isa::Instruction inst;
    try {
      inst = isa::decode(w.bytes);
    } catch (const InputError& e) {
      report_program_error(core_name_, index, e.what());
    }
    // One instruction decoded per cycle.
    clock_.wait_for(Cycles(1));
    if (const auto* t = std::get_if<isa::Tag>(&inst)) layer_ = t->id;
    ledger_layer_.push_back(layer_);
    ledger_done_.push_back(clock_.now());  // instructions that no unit runs finish at issue
    ledger_started_.push_back(kNoCycle);
    counters_.at(layer_).instructions += 1;
    issue(index, inst);
  }
}

void Sequencer::finish(Cycle end) {
  // Instruction i is the oldest unfinished one from max(done of 0..i-1) to max(done of 0..i).
  Cycle retired = 0;
  for (std::size_t i = 0; i < ledger_done_.size(); ++i)
    if (ledger_done_[i] > retired) {
      counters_.at(ledger_layer_[i]).cycles +=
          std::min(ledger_done_[i], end) - std::min(retired, end);
      retired = ledger_done_[i];
    }
  const std::uint32_t last = ledger_layer_.empty() ? 0 : ledger_layer_.back();
  if (end > retired) counters_.at(last).cycles += end - retired;
  for (std::size_t i = 0; i < ledger_started_.size(); ++i)
    if (ledger_started_[i] != kNoCycle) {
      Counters& c = counters_.at(ledger_layer_[i]);
      c.span_begin = std::min(c.span_begin, ledger_started_[i]);
      c.span_end = std::max(c.span_end, ledger_done_[i]);
    }
  ledger_done_.clear();
  ledger_layer_.clear();
  ledger_started_.clear();
}

void Sequencer::check_ub(const InFlight& f, const char* field, std::uint64_t lo,
                         std::uint64_t bytes) const {
  if (lo > storage_.ub_bytes || bytes > storage_.ub_bytes - lo)
    report_program_error(core_name_, f,
                         fmt::format("{} range {:#x} + {} bytes is outside the {}-byte unified "
                                     "buffer",
                                     field, lo, bytes, storage_.ub_bytes));
}

void Sequencer::check_acc(const InFlight& f, const char* field, std::uint64_t first,
                          std::uint64_t count) const {
  if (first > storage_.acc_entries || count > storage_.acc_entries - first)
    report_program_error(core_name_, f,
                         fmt::format("{} entries {} + {} are outside the {} accumulator entries",
                                     field, first, count, storage_.acc_entries));
}

void Sequencer::issue(std::uint64_t index, const isa::Instruction& inst) {
  auto f = std::make_shared<InFlight>();
  f->index = index;
  f->inst = inst;
  f->layer = layer_;
  f->window = window_;
  f->issued_at = clock_.now();
  f->trace = trace_;
  f->core = core_id_;
  const std::uint64_t acc_entry_bytes = storage_.acc_words_per_entry * 4ull;
  auto ub_read = [&](const char* field, std::uint64_t lo, std::uint64_t n) {
    check_ub(*f, field, lo, n);
    f->reads.push_back({Space::UnifiedBuffer, lo, lo + n});
  };
  auto ub_write = [&](const char* field, std::uint64_t lo, std::uint64_t n) {
    check_ub(*f, field, lo, n);
    f->writes.push_back({Space::UnifiedBuffer, lo, lo + n});
  };
  auto check_mxu = [&](std::uint32_t m) {
    if (m >= cfg_.mxu.count)
      report_program_error(
          core_name_, *f,
          fmt::format("mxu {} does not exist (this core has {})", m, cfg_.mxu.count));
  };
  UnitQueue* target = nullptr;

  std::visit(
      [&](const auto& i) {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, isa::Nop> || std::is_same_v<T, isa::Tag>) {
        } else if constexpr (std::is_same_v<T, isa::SetWindow>) {
          if (i.in_h == 0 || i.in_w == 0 || i.in_c == 0 || i.kernel_h == 0 || i.kernel_w == 0 ||
              i.stride_h == 0 || i.stride_w == 0 || i.out_h == 0 || i.out_w == 0)
            report_program_error(core_name_, *f,
                                 "in_h, in_w, in_c, kernel_h, kernel_w, stride_h, stride_w, "
                                 "out_h and out_w must all be >= 1");
          window_ = i;
        } else if constexpr (std::is_same_v<T, isa::Sync>) {
          const Cycle t0 = clock_.now();
          scoreboard_.drain();
          if (i.all_cores) barrier_.arrive_and_wait();
          if (trace_) trace_->add_stall(core_id_, index, layer_, Stall::Sync, 0, t0, clock_.now());
        } else if constexpr (std::is_same_v<T, isa::Halt>) {
          const Cycle t0 = clock_.now();
          scoreboard_.drain();
          if (trace_) trace_->add_stall(core_id_, index, layer_, Stall::Halt, 0, t0, clock_.now());
          ++halts_;
          halted_at_ = clock_.now();
          halted_event_.notify(sc_core::SC_ZERO_TIME);
        } else if constexpr (std::is_same_v<T, isa::ReadHost>) {
          ub_write("dst", i.dst.value(), i.bytes);
          f->unit = kUnitDma, target = queues_.dma;
        } else if constexpr (std::is_same_v<T, isa::WriteHost>) {
          ub_read("src", i.src.value(), i.bytes);
          f->unit = kUnitDma, target = queues_.dma;
        } else if constexpr (std::is_same_v<T, isa::ReadMem>) {
          ub_write("dst", i.dst.value(), i.bytes);
          f->reads.push_back({Space::OffChip, i.src.value(), i.src.value() + i.bytes});
          f->unit = kUnitDma, target = queues_.dma;
        } else if constexpr (std::is_same_v<T, isa::WriteMem>) {
          ub_read("src", i.src.value(), i.bytes);
          f->writes.push_back({Space::OffChip, i.dst.value(), i.dst.value() + i.bytes});
          f->unit = kUnitDma, target = queues_.dma;
        } else if constexpr (std::is_same_v<T, isa::ReadWeights>) {
          check_mxu(i.mxu);
          const std::uint64_t bytes = std::uint64_t{i.rows} * i.cols * size_of(cfg_.mxu.input_type);
          if (i.source == isa::WeightSource::UnifiedBuffer)
            ub_read("addr", i.addr, bytes);
          else
            f->reads.push_back({Space::OffChip, i.addr, i.addr + bytes});
          pending_tiles_[i.mxu].emplace_back(i.rows, i.cols);
          f->unit = weights_unit(i.mxu), target = queues_.weights[i.mxu];
        } else if constexpr (std::is_same_v<T, isa::MatMul>) {
          check_mxu(i.mxu);
          if (i.swap_weights) {
            if (pending_tiles_[i.mxu].empty())
              report_program_error(core_name_, *f,
                                   fmt::format("swap on mxu {} but no read_weights is pending "
                                               "for it",
                                               i.mxu));
            resident_tile_[i.mxu] = pending_tiles_[i.mxu].front();
            pending_tiles_[i.mxu].pop_front();
          }
          const auto [k, n] = resident_tile_[i.mxu];
          if (k == 0)
            report_program_error(core_name_, *f,
                                 fmt::format("mxu {} has no resident weights: swap in a tile "
                                             "loaded by read_weights first",
                                             i.mxu));
          InputSpec in;
          in.window = i.window, in.src = i.src.value(), in.rows = i.rows;
          in.src_stride = i.src_stride, in.first_pixel = i.first_pixel, in.k_first = i.k_first;
          in.geom = window_;
          const auto [lo, hi] = array_.input_extent(in, k);
          if (i.rows > 0) ub_read(i.window ? "window" : "src", lo, hi - lo);
          check_acc(*f, "dst", i.dst.value(), i.rows);
          const Region acc{Space::Accumulators, i.dst.value() * acc_entry_bytes,
                           (i.dst.value() + std::uint64_t{i.rows}) * acc_entry_bytes};
          f->writes.push_back(acc);
          if (i.accumulate) f->reads.push_back(acc);
          f->unit = matmul_unit(i.mxu), target = queues_.matmul[i.mxu];
        } else if constexpr (std::is_same_v<T, isa::Activate>) {
          check_acc(*f, "src", i.src.value(), i.rows);
          f->reads.push_back({Space::Accumulators, i.src.value() * acc_entry_bytes,
                              (i.src.value() + std::uint64_t{i.rows}) * acc_entry_bytes});
          ub_read("params", i.params.value(), 12ull * i.cols);
          if (i.rows > 0)
            ub_write("dst", i.dst.value(),
                     std::uint64_t{i.rows - 1} * i.dst_stride +
                         std::uint64_t{i.cols} * size_of(i.out_type));
          f->unit = kUnitVector, target = queues_.vector;
        } else if constexpr (std::is_same_v<T, isa::Pool>) {
          const std::uint64_t e = size_of(i.type);
          const std::uint64_t in_bytes = std::uint64_t{i.images} * i.in_h * i.in_w * i.channels * e;
          ub_read("src", i.src.value(), in_bytes);
          if (i.kernel_h >= 1 && i.kernel_w >= 1 && i.stride_h >= 1 && i.stride_w >= 1 &&
              i.kernel_h <= i.in_h && i.kernel_w <= i.in_w) {
            const std::uint64_t oh = (i.in_h - i.kernel_h) / i.stride_h + 1;
            const std::uint64_t ow = (i.in_w - i.kernel_w) / i.stride_w + 1;
            ub_write("dst", i.dst.value(), std::uint64_t{i.images} * oh * ow * i.channels * e);
          }  // otherwise the vector unit rejects the geometry, naming the field
          f->unit = kUnitVector, target = queues_.vector;
        } else if constexpr (std::is_same_v<T, isa::Eltwise>) {
          const std::uint64_t n = std::uint64_t{i.count} * size_of(i.type);
          ub_read("a", i.a.value(), n);
          ub_read("b", i.b.value(), n);
          ub_write("dst", i.dst.value(), n);
          f->unit = kUnitVector, target = queues_.vector;
        } else if constexpr (std::is_same_v<T, isa::Softmax>) {
          if (i.rows > 0) {
            const std::uint64_t row = std::uint64_t{i.cols} * 4;
            ub_read("src", i.src.value(), std::uint64_t{i.rows - 1} * i.src_stride + row);
            ub_write("dst", i.dst.value(), std::uint64_t{i.rows - 1} * i.dst_stride + row);
          }  // otherwise the vector unit rejects rows = 0
          f->unit = kUnitVector, target = queues_.vector;
        }
      },
      inst);

  if (target) {
    f->ledger = &ledger_done_;
    f->ledger_started = &ledger_started_;
    scoreboard_.issue(f);
    const Cycle t0 = clock_.now();
    target->write(f);
    if (trace_)
      trace_->add_stall(core_id_, index, layer_, Stall::QueueFull, track_of(inst), t0,
                        clock_.now());
  }
}

}  // namespace tpu
