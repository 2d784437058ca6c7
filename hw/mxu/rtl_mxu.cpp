#include "hw/mxu/rtl_mxu.h"

#include <fmt/format.h>
#include <sysc/kernel/sc_dynamic_processes.h>

#include <algorithm>
#include <map>

#include "hw/common/error.h"
#include "hw/unit/program_error.h"

namespace tpu {

// Steps every RTL array of one clock, one cycle at a time, at the end of each time step in which
// one of them has work. One thread for all of them: a thread that waits for the end of the time
// step (no other process runnable) would wait forever for another such thread.
class RtlClock {
 public:
  explicit RtlClock(const Clock& clock) : clock_(clock) {
    sc_core::sc_spawn([this] { run(); }, "rtl_clock");
  }

  // The clock thread of `clock`'s RTL arrays, started by the first one (during elaboration).
  static std::shared_ptr<RtlClock> of(const Clock& clock) {
    static std::map<const Clock*, std::weak_ptr<RtlClock>> clocks;
    std::shared_ptr<RtlClock> c = clocks[&clock].lock();
    if (!c) {
      c = std::make_shared<RtlClock>(clock);
      clocks[&clock] = c;
    }
    return c;
  }

  void add(RtlMxu* m) { mxus_.push_back(m); }
  void remove(RtlMxu* m) { mxus_.erase(std::remove(mxus_.begin(), mxus_.end(), m), mxus_.end()); }
  // A MatMul reached an array.
  void wake() { work_.notify(sc_core::SC_ZERO_TIME); }

 private:
  [[nodiscard]] bool any_active() const {
    return std::any_of(mxus_.begin(), mxus_.end(), [](const RtlMxu* m) { return m->active(); });
  }

  void run() {
    while (true) {
      // 1. Nothing to clock: sleep until a tile reaches a FIFO or a MatMul reaches an array.
      if (!any_active()) {
        sc_core::sc_event_or_list inputs;
        inputs |= work_;
        for (const RtlMxu* m : mxus_) inputs |= m->tiles_changed();
        sc_core::wait(inputs);
      }
      // 2. Each cycle is evaluated once: inputs arriving in an evaluated cycle wait for the next.
      clock_.wait_until(next_);
      // 3. The end of the time step: every other process has run at this time, so this
      //    cycle's inputs are final.
      while (sc_core::sc_pending_activity_at_current_time()) sc_core::wait(sc_core::SC_ZERO_TIME);
      const Cycle now = clock_.now();
      for (RtlMxu* m : mxus_) m->step(now);
      next_ = now + 1;
    }
  }

  const Clock& clock_;
  std::vector<RtlMxu*> mxus_;
  sc_core::sc_event work_;
  Cycle next_ = 0;
};

RtlMxu::RtlMxu(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
               const CoreStorage& storage, LayerCounters& counters, std::string core_name,
               std::unique_ptr<rtl::ArrayModel> array, SimOptions options)
    : Mxu(name, cfg, clock, storage, counters, std::move(core_name), options, ArrayElsewhere{}),
      rtl_(std::move(array)) {
  rtl_clock_ = RtlClock::of(clock);
  rtl_clock_->add(this);
  SC_HAS_PROCESS(RtlMxu);
  SC_THREAD(compute);
}

RtlMxu::~RtlMxu() { rtl_clock_->remove(this); }

bool RtlMxu::active() const {
  const rtl::ArrayPins& p = rtl_->pins;  // registered outputs, as of the last edge
  if (p.busy) return true;
  if ((shifting_ || !fifo_.empty()) && !p.shadow_full) return true;  // a beat would enter
  if (feeding_ && feeding_->fed < feeding_->rows)                    // a row would enter
    return !(feeding_->swap && feeding_->fed == 0) || p.shadow_full;
  return false;
}

// Row r of a MatMul has arrived from the unified buffer once its port, delivering
// unified_buffer.bytes_per_cycle from the first cycle the array could take the first row, has
// delivered rows 0..r.
bool RtlMxu::row_delivered(const Job& j, Cycle now) const {
  const std::uint64_t need = (std::uint64_t{j.fed} + 1) * j.k * size_of(cfg_.mxu.input_type);
  return need <= (now - *j.feed_start + 1) * cfg_.unified_buffer.bytes_per_cycle;
}

void RtlMxu::step(Cycle now) {
  if (!active()) return;
  rtl::ArrayModel& a = *rtl_;
  rtl::ArrayPins& p = a.pins;
  if (now > next_cycle_) a.skip_idle(now - next_cycle_);
  next_cycle_ = now + 1;

  // 1. Weights: the next row of the tile shifting in, or the first row of the FIFO's head. The
  //    array takes a tile bottom row first: beat i is array row rows-1-i.
  const WeightTile* tile = shifting_ ? &*shifting_ : fifo_.empty() ? nullptr : &fifo_.front();
  p.w_valid = tile != nullptr;
  if (tile) {
    const std::uint32_t row = cfg_.mxu.rows - 1 - (shifting_ ? beats_ : 0);
    std::fill(p.w_data.begin(), p.w_data.end(), 0);
    if (row < tile->rows && !tile->bytes.empty())
      for (std::uint32_t n = 0; n < tile->cols; ++n)
        p.w_data[n] = static_cast<std::int8_t>(tile->bytes[std::size_t{row} * tile->cols + n]);
  }

  // 2. Inputs: the next row of the MatMul, once the array can take its first row (a swap waits
  //    for the whole tile) and the unified-buffer port has delivered it.
  p.in_valid = false;
  p.in_swap = false;
  if (feeding_ && feeding_->fed < feeding_->rows) {
    Job& j = *feeding_;
    const bool swap_row = j.swap && j.fed == 0;
    if (!j.feed_start && (!swap_row || p.shadow_full)) j.feed_start = now;
    if (j.feed_start && row_delivered(j, now)) {
      p.in_valid = true;
      p.in_swap = swap_row;
      std::fill(p.in_data.begin(), p.in_data.end(), 0);
      if (!j.x.empty()) {
        const std::uint8_t* x = &j.x[std::size_t{j.fed} * j.k];
        for (std::uint32_t k = 0; k < j.k; ++k) p.in_data[k] = static_cast<std::int8_t>(x[k]);
      }
    }
  }
  p.out_ready = true;  // the accumulators take one entry per cycle

  // 3. The handshakes of this cycle, then its rising edge.
  a.settle();
  const bool row_in = p.in_valid && p.in_ready;
  const bool beat_in = p.w_valid && p.w_ready;
  if (p.out_valid && p.out_ready) take_result(now);
  if (row_in) take_row(now);
  if (beat_in) take_beat(now);
  a.tick();
}

// A swap row makes the shadow tile resident as it enters (mxu_array.sv); the cycle after the
// last row is the end of the feed.
void RtlMxu::take_row(Cycle now) {
  Job& j = *feeding_;
  if (j.fed == 0 && j.swap) {
    resident_tile_ = shadow_tile_;
    shadow_tile_.reset();
  }
  if (++j.fed == j.rows) {
    feed_start_ = *j.feed_start;
    feed_end_ = now + 1;
    feed_done_.notify(clock_.time_of(feed_end_) - sc_core::sc_time_stamp());
    feeding_ = nullptr;
  }
}

// The first beat of a tile takes it out of the FIFO (its slot frees now, as in the TLM Mxu); after
// mxu.rows beats it waits in the shadow buffer.
void RtlMxu::take_beat(Cycle now) {
  if (!shifting_) {
    shifting_ = std::move(fifo_.front());
    fifo_.pop_front();
    --fifo_reserved_;
    shift_start_ = now;
    beats_ = 0;
    weights_changed_.notify(sc_core::SC_ZERO_TIME);
  }
  if (++beats_ == cfg_.mxu.rows) {
    shadow_tile_ = TileInfo{shifting_->rows, shifting_->cols, shift_start_};
    shifting_.reset();
  }
}

// Result rows leave in issue order; columns past the tile's are not the MatMul's and stay as
// they are. The row is in the accumulators at the end of this cycle.
void RtlMxu::take_result(Cycle now) {
  Job& j = jobs_.front();
  const std::vector<std::int32_t>& sums = rtl_->pins.out_data;
  std::uint32_t* acc = storage_.acc + (std::uint64_t{j.dst} + j.out) * storage_.acc_words_per_entry;
  if (!timing_only_)
    for (std::uint32_t n = 0; n < j.n; ++n) {
      const auto v = static_cast<std::uint32_t>(sums[n]);
      acc[n] = j.accumulate ? acc[n] + v : v;
    }
  if (++j.out == j.rows) {
    j.f->complete_at(clock_, now + 1);
    jobs_.pop_front();
  }
}

void RtlMxu::compute() {
  while (true) {
    std::shared_ptr<InFlight> f = matmul_queue.read();
    const auto& mm = std::get<isa::MatMul>(f->inst);
    last_layer_ = f->layer;

    // 1-2. Idle since the last feed, then waiting for operands (as the TLM Mxu).
    wait_for_operands(*f);
    const Cycle ready = clock_.now();

    // 3. The tile the rows will meet: the resident one, or for a swap the next one to enter
    //    the array (in the shadow buffer, shifting in, or at the head of the FIFO).
    if (mm.rows == 0)
      report_program_error(core_name_, *f,
                           "matmul of 0 rows: the RTL array swaps tiles with a row (mxu.impl "
                           "\"rtl\" needs rows >= 1)");
    if (mm.swap_weights)
      while (!shadow_tile_ && !shifting_ && fifo_.empty()) sc_core::wait(weights_changed_);
    if (!mm.swap_weights && !resident_tile_)
      report_program_error(core_name_, *f,
                           "no resident weights: the first matmul of an MXU must swap in a tile "
                           "loaded by read_weights");
    std::uint32_t k = 0, n = 0;
    if (!mm.swap_weights) {
      k = resident_tile_->rows, n = resident_tile_->cols;
    } else if (shadow_tile_) {
      k = shadow_tile_->rows, n = shadow_tile_->cols;
    } else {
      const WeightTile& next = shifting_ ? *shifting_ : fifo_.front();
      k = next.rows, n = next.cols;
    }
    check_acc_range(*f, mm);

    // 4. Gather the rows, then stream them through the array.
    Job j;
    try {
      if (timing_only_)
        array_.check_gather(input_spec(*f, mm), k, storage_.ub_bytes);
      else
        j.x = array_.gather(input_spec(*f, mm), k, storage_.ub, storage_.ub_bytes);
    } catch (const InputError& e) {
      report_program_error(core_name_, *f, e.what());
    }
    j.f = f;
    j.rows = mm.rows;
    j.k = k;
    j.n = n;
    j.swap = mm.swap_weights;
    j.dst = mm.dst.value();
    j.accumulate = mm.accumulate;
    jobs_.push_back(std::move(j));
    feeding_ = &jobs_.back();
    rtl_clock_->wake();
    sc_core::wait(feed_done_);

    // 5. Before the feed: waiting for the tile to reach the array (weight_stall), then for it
    //    to shift in (weight_shift).
    if (mm.swap_weights) {
      const Cycle shift_start = std::clamp(resident_tile_->shift_start, ready, feed_start_);
      add_bucket(&MxuBuckets::weight_stall, f->layer, shift_start - ready);
      add_bucket(&MxuBuckets::weight_shift, f->layer, feed_start_ - shift_start);
    }
    account_feed(*f, mm, k, n, feed_start_, feed_end_);
  }
}

}  // namespace tpu
