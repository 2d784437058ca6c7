#include "hw/mxu/mxu.h"

#include <fmt/format.h>

#include <cstring>

// sc_spawn: <systemc> includes it only under SC_INCLUDE_DYNAMIC_PROCESSES.
#include <sysc/kernel/sc_dynamic_processes.h>

#include "hw/common/error.h"
#include "hw/common/strided_rows.h"
#include "hw/common/tlm_util.h"
#include "hw/isa/semantics.h"
#include "hw/unit/program_error.h"

namespace tpu {

Mxu::Mxu(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
         const CoreStorage& storage, LayerCounters& counters, std::string core_name,
         SimOptions options)
    : Mxu(name, cfg, clock, storage, counters, std::move(core_name), options, ArrayElsewhere{}) {
  SC_HAS_PROCESS(Mxu);
  SC_THREAD(compute);
  if (cfg_.mxu.weight_buffers == 2) SC_THREAD(shift_weights);
}

Mxu::Mxu(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
         const CoreStorage& storage, LayerCounters& counters, std::string core_name,
         SimOptions options, ArrayElsewhere)
    : sc_core::sc_module(name),
      mxu2mem_weights("mxu2mem_weights"),
      weight_queue("weight_queue", kUnitQueueDepth),
      matmul_queue("matmul_queue", kUnitQueueDepth),
      cfg_(cfg),
      clock_(clock),
      storage_(storage),
      counters_(counters),
      core_name_(std::move(core_name)),
      timing_only_(options.timing_only),
      array_(cfg.mxu) {
  // Uninitialised: the memory never writes it, so its pages are never touched.
  if (timing_only_)
    fetch_scratch_.reset(
        new std::uint8_t[std::size_t{cfg.mxu.rows} * cfg.mxu.cols * size_of(cfg.mxu.input_type)]);
  SC_HAS_PROCESS(Mxu);
  SC_THREAD(load_weights);
}

Cycles Mxu::drain_cycles() const { return Cycles(cfg_.mxu.rows + cfg_.mxu.cols - 1); }

Cycles Mxu::feed_cycles(std::uint32_t rows, std::uint32_t k) const {
  // One input row enters per cycle unless the row is wider than a UB port delivers per cycle.
  const std::uint64_t row_bytes = std::uint64_t{k} * size_of(cfg_.mxu.input_type);
  const std::uint64_t per_cycle = cfg_.unified_buffer.bytes_per_cycle;
  const std::uint64_t port = (std::uint64_t{rows} * row_bytes + per_cycle - 1) / per_cycle;
  return Cycles(std::max<std::uint64_t>(rows, port));
}

void Mxu::add_bucket(std::uint64_t MxuBuckets::*bucket, std::uint32_t layer, std::uint64_t cycles) {
  buckets_.*bucket += cycles;
  counters_.at(layer).mxu.*bucket += cycles;
}

void Mxu::account_feed(InFlight& f, const isa::MatMul& mm, std::uint32_t k, std::uint32_t n,
                       Cycle start, Cycle end) {
  const std::uint32_t elem = size_of(cfg_.mxu.input_type);
  const std::uint32_t acc_bytes = size_of(cfg_.mxu.acc_type);
  Counters& c = counters_.at(f.layer);
  add_bucket(&MxuBuckets::active, f.layer, mm.rows);
  add_bucket(&MxuBuckets::input_stall, f.layer, end - start - mm.rows);
  c.macs += std::uint64_t{mm.rows} * k * n;
  c.ub_bytes_read += std::uint64_t{mm.rows} * k * elem;
  c.mxu_input_bytes += std::uint64_t{mm.rows} * k * elem;
  c.acc_bytes_written += std::uint64_t{mm.rows} * n * acc_bytes;
  if (mm.accumulate) c.acc_bytes_read += std::uint64_t{mm.rows} * n * acc_bytes;
  f.started_at = start;
  f.busy_until = end;
  last_feed_end_ = end;
}

InputSpec Mxu::input_spec(const InFlight& f, const isa::MatMul& mm) {
  InputSpec in;
  in.window = mm.window;
  in.src = mm.src.value();
  in.rows = mm.rows;
  in.src_stride = mm.src_stride;
  in.first_pixel = mm.first_pixel;
  in.k_first = mm.k_first;
  in.geom = f.window;
  in.transpose = mm.transpose;
  return in;
}

void Mxu::check_acc_range(const InFlight& f, const isa::MatMul& mm) const {
  if (mm.dst.value() > storage_.acc_entries || mm.rows > storage_.acc_entries - mm.dst.value())
    report_program_error(core_name_, f,
                         fmt::format("dst {} + rows {} is outside the {} accumulator entries",
                                     mm.dst.value(), mm.rows, storage_.acc_entries));
}

void Mxu::finish(Cycle end) {
  const Cycle from = std::max(last_feed_end_, accounted_until_);
  if (end > from) add_bucket(&MxuBuckets::idle, last_layer_, end - from);
  accounted_until_ = std::max(end, from);
}

namespace {

// The tile a ReadWeights makes resident from its stored matrix S (rows x cols, dense in `tile`):
// S itself, or with `transpose` W = S^T, W[k][n] = S[n][k]. The transpose unit sits on the
// weight path (docs/timing-model.md), so the FIFO holds tiles as the array takes them.
template <class E>  // an element: std::uint8_t (int8) or std::uint16_t (bf16)
void transpose_elements(const std::uint8_t* s, std::uint32_t rows, std::uint32_t cols,
                        std::uint8_t* d) {
  for (std::uint32_t i = 0; i < rows; ++i)
    for (std::uint32_t j = 0; j < cols; ++j)
      std::memcpy(d + (std::size_t{j} * rows + i) * sizeof(E),
                  s + (std::size_t{i} * cols + j) * sizeof(E), sizeof(E));
}

// Without bytes (timing only), the shape alone.
void orient(WeightTile& tile, const isa::ReadWeights& rw, std::uint32_t elem) {
  tile.rows = rw.rows;
  tile.cols = rw.cols;
  if (!rw.transpose) return;
  if (tile.bytes.empty()) {
    std::swap(tile.rows, tile.cols);
    return;
  }
  std::vector<std::uint8_t> w(tile.bytes.size());
  if (elem == 2)
    transpose_elements<std::uint16_t>(tile.bytes.data(), rw.rows, rw.cols, w.data());
  else
    transpose_elements<std::uint8_t>(tile.bytes.data(), rw.rows, rw.cols, w.data());
  tile.bytes = std::move(w);
  tile.rows = rw.cols;
  tile.cols = rw.rows;
}

}  // namespace

void Mxu::check_weights(const InFlight& f, const isa::ReadWeights& rw) const {
  const std::uint32_t elem = size_of(cfg_.mxu.input_type);
  const isa::TileShape t = isa::weight_tile_shape(rw);
  if (t.k == 0 || t.n == 0 || t.k > cfg_.mxu.rows || t.n > cfg_.mxu.cols) {
    if (!rw.transpose)
      report_program_error(core_name_, f,
                           fmt::format("tile of {} x {} does not fit the {} x {} array (rows and "
                                       "cols must be 1..array size)",
                                       rw.rows, rw.cols, cfg_.mxu.rows, cfg_.mxu.cols));
    report_program_error(core_name_, f,
                         fmt::format("transposed tile of {} x {} (cols {} x rows {}) does not fit "
                                     "the {} x {} array (with transpose, cols must be 1..{} and "
                                     "rows 1..{})",
                                     t.k, t.n, rw.cols, rw.rows, cfg_.mxu.rows, cfg_.mxu.cols,
                                     cfg_.mxu.rows, cfg_.mxu.cols));
  }
  if (rw.stride != 0 && rw.stride < std::uint64_t{rw.cols} * elem)
    report_program_error(core_name_, f,
                         fmt::format("stride = {} bytes (must be 0 for dense rows or >= cols {} x "
                                     "{} bytes = {}: stored rows may not overlap)",
                                     rw.stride, rw.cols, elem, std::uint64_t{rw.cols} * elem));
}

void Mxu::load_weights() {
  const std::uint32_t elem = size_of(cfg_.mxu.input_type);
  while (true) {
    std::shared_ptr<InFlight> f = weight_queue.read();
    const auto& rw = std::get<isa::ReadWeights>(f->inst);
    f->wait_deps(clock_);
    check_weights(*f, rw);
    while (fifo_reserved_ >= cfg_.mxu.weight_fifo_tiles) sc_core::wait(weights_changed_);
    ++fifo_reserved_;
    f->started_at = clock_.now();

    auto fetch = std::make_shared<Fetch>();
    const std::uint64_t bytes = std::uint64_t{rw.rows} * rw.cols * elem;
    const std::uint64_t row_bytes = std::uint64_t{rw.cols} * elem;
    const std::uint64_t pitch = isa::weight_row_pitch(rw, elem);
    const std::uint64_t extent = isa::weight_extent(rw, elem);
    if (!timing_only_) fetch->tile.bytes.resize(bytes);
    fetching_.push_back(fetch);
    Counters& c = counters_.at(f->layer);
    c.weight_tiles += 1;
    c.weight_bytes += bytes;
    if (rw.source == isa::WeightSource::OffChip) {
      // J17 §2: the weight FIFO is filled by requests to off-chip memory; like any DMA engine
      // this path keeps several in flight (one per free FIFO slot), so the memory's latency
      // overlaps and back-to-back tiles stream at its bandwidth (docs/timing-model.md).
      sc_core::sc_spawn([this, f, fetch] { fetch_off_chip(f, fetch); });
      continue;
    }
    if (rw.addr > storage_.ub_bytes || extent > storage_.ub_bytes - rw.addr)
      report_program_error(core_name_, *f,
                           fmt::format("addr {:#x} + {} bytes is outside the {}-byte unified "
                                       "buffer",
                                       rw.addr, extent, storage_.ub_bytes));
    if (!timing_only_)
      for (std::uint32_t i = 0; i < rw.rows; ++i)
        std::copy_n(storage_.ub + rw.addr + i * pitch, row_bytes,
                    &fetch->tile.bytes[i * row_bytes]);
    // The port delivers bytes_per_cycle from any addresses, as for a MatMul's strided rows.
    clock_.wait_for(Cycles((bytes + cfg_.unified_buffer.bytes_per_cycle - 1) /
                           cfg_.unified_buffer.bytes_per_cycle));
    c.ub_bytes_read += bytes;
    orient(fetch->tile, rw, elem);
    fetch->ready = true;
    f->complete_at(clock_, clock_.now());
    deliver_fetched();
  }
}

void Mxu::fetch_off_chip(std::shared_ptr<InFlight> f, std::shared_ptr<Fetch> fetch) {
  const auto& rw = std::get<isa::ReadWeights>(f->inst);
  const std::uint32_t elem = size_of(cfg_.mxu.input_type);
  const std::uint64_t bytes = std::uint64_t{rw.rows} * rw.cols * elem;
  const std::uint64_t row_bytes = std::uint64_t{rw.cols} * elem;
  const std::uint64_t pitch = isa::weight_row_pitch(rw, elem);
  std::uint8_t* const into = timing_only_ ? fetch_scratch_.get() : fetch->tile.bytes.data();
  if (pitch == row_bytes) {
    // Dense: one transfer of the whole tile.
    const auto status = tlm_transfer(mxu2mem_weights, tlm::TLM_READ_COMMAND, rw.addr, into, bytes);
    if (status != tlm::TLM_OK_RESPONSE)
      report_program_error(core_name_, *f,
                           fmt::format("off-chip memory answered {} for {} bytes at {:#x}",
                                       response_name(status), bytes, rw.addr));
  } else {
    // Strided: one transfer per stored row, all requested at once (the weight path keeps
    // requests in flight, as it does across tiles): their latencies overlap and they share the
    // bandwidth, so the tile takes what one transfer of its bytes takes (docs/timing-model.md).
    // One transaction carries them (StridedRows), so that no process is made per row.
    StridedRows rows;
    rows.rows = rw.rows;
    rows.row_bytes = row_bytes;
    rows.pitch = pitch;
    const auto status =
        tlm_transfer(mxu2mem_weights, tlm::TLM_READ_COMMAND, rw.addr, into, bytes, &rows);
    if (status != tlm::TLM_OK_RESPONSE) {
      const std::uint32_t i = rows.refused_row.value_or(0);
      report_program_error(
          core_name_, *f,
          fmt::format("off-chip memory answered {} for row {}: {} bytes at "
                      "{:#x} (addr {:#x} + {} x stride {})",
                      response_name(status), i, row_bytes, rw.addr + i * pitch, rw.addr, i, pitch));
    }
  }
  orient(fetch->tile, rw, elem);
  Counters& c = counters_.at(f->layer);
  c.off_chip_bytes_read += bytes;
  c.weight_bytes_off_chip += bytes;
  // Fetches overlap; a trace draws each from where the previous one ended (docs/trace.md).
  f->started_at = std::max(f->started_at, last_fetch_end_);
  last_fetch_end_ = clock_.now();
  fetch->ready = true;
  f->complete_at(clock_, clock_.now());
  deliver_fetched();
}

void Mxu::deliver_fetched() {
  while (!fetching_.empty() && fetching_.front()->ready) {
    fifo_.push_back(std::move(fetching_.front()->tile));
    fetching_.pop_front();
  }
  weights_changed_.notify(sc_core::SC_ZERO_TIME);
}

void Mxu::shift_weights() {
  while (true) {
    while (fifo_.empty() || shadow_) sc_core::wait(weights_changed_);
    // The buffer the last swap left is free once that swap's first input row is in the array:
    // rows still in flight finish with it (docs/timing-model.md, "The MXU cycle formula").
    clock_.wait_until(shadow_free_at_);
    // J17 §2: a tile shifts in over `rows` cycles into the second buffer while the first computes.
    shadow_ = std::move(fifo_.front());
    fifo_.pop_front();
    --fifo_reserved_;
    shadow_ready_ = clock_.now() + shift_cycles().value();
    weights_changed_.notify(sc_core::SC_ZERO_TIME);
    clock_.wait_until(shadow_ready_);
    weights_changed_.notify(sc_core::SC_ZERO_TIME);
  }
}

// Makes the next tile resident, charging the wait to weight_stall (the tile has not reached the
// array yet) or weight_shift (it is shifting in).
void Mxu::take_weights(const InFlight& f) {
  if (cfg_.mxu.weight_buffers == 2) {
    while (!shadow_ || clock_.now() < shadow_ready_) {
      const Cycle t0 = clock_.now();
      if (!shadow_) {
        sc_core::wait(weights_changed_);
        add_bucket(&MxuBuckets::weight_stall, f.layer, clock_.now() - t0);
      } else {
        clock_.wait_until(shadow_ready_);
        add_bucket(&MxuBuckets::weight_shift, f.layer, clock_.now() - t0);
      }
    }
    resident_ = std::move(shadow_);
    shadow_.reset();
    // The swap takes effect with the first input row, which enters once the unified-buffer port
    // has delivered it.
    shadow_free_at_ = clock_.now() + feed_cycles(1, resident_->rows).value() - 1;
  } else {
    // One buffer: the tile shifts into the cells the inputs use, so nothing overlaps.
    const Cycle t0 = clock_.now();
    while (fifo_.empty()) sc_core::wait(weights_changed_);
    add_bucket(&MxuBuckets::weight_stall, f.layer, clock_.now() - t0);
    resident_ = std::move(fifo_.front());
    fifo_.pop_front();
    --fifo_reserved_;
    const Cycle t1 = clock_.now();
    clock_.wait_for(shift_cycles());
    add_bucket(&MxuBuckets::weight_shift, f.layer, clock_.now() - t1);
  }
  weights_changed_.notify(sc_core::SC_ZERO_TIME);
}

void Mxu::wait_for_operands(InFlight& f) {
  // 1. Nothing was queued since the last feed ended (or the last finish, which charged the
  // cycles before it): idle (non-matrix work).
  const Cycle idle_from = std::max(last_feed_end_, accounted_until_);
  if (clock_.now() > idle_from) add_bucket(&MxuBuckets::idle, f.layer, clock_.now() - idle_from);
  // 2. Operands still being produced or read by another unit.
  const Cycle t = clock_.now();
  f.wait_deps(clock_);
  add_bucket(&MxuBuckets::data_hazard, f.layer, clock_.now() - t);
}

void Mxu::compute() {
  while (true) {
    std::shared_ptr<InFlight> f = matmul_queue.read();
    const auto& mm = std::get<isa::MatMul>(f->inst);
    last_layer_ = f->layer;

    // 1-2. Idle since the last feed, then waiting for operands.
    wait_for_operands(*f);
    // 3. Weights.
    if (mm.swap_weights) take_weights(*f);
    if (!resident_)
      report_program_error(core_name_, *f,
                           "no resident weights: the first matmul of an MXU must swap in a tile "
                           "loaded by read_weights");
    const WeightTile& w = *resident_;
    check_acc_range(*f, mm);

    // 4. The math, at issue: later readers are ordered after us by the scoreboard. Timing
    //    only: its checks alone.
    try {
      if (timing_only_)
        array_.check_multiply(w, input_spec(*f, mm), storage_.ub_bytes);
      else
        array_.multiply(w, input_spec(*f, mm), storage_.ub, storage_.ub_bytes,
                        storage_.acc + std::uint64_t{mm.dst.value()} * storage_.acc_words_per_entry,
                        storage_.acc_words_per_entry, mm.accumulate);
    } catch (const InputError& e) {
      report_program_error(core_name_, *f, e.what());
    }

    // 5. Stream the rows: active for B cycles, input_stall for what the UB port adds.
    const Cycle start = clock_.now();
    clock_.wait_for(feed_cycles(mm.rows, w.rows));
    account_feed(*f, mm, w.rows, w.cols, start, clock_.now());
    f->complete_at(clock_, last_feed_end_ + drain_cycles().value());
  }
}

}  // namespace tpu
