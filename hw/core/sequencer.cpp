#include "hw/core/sequencer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "hw/common/error.h"
#include "hw/isa/semantics.h"
#include "hw/unit/program_error.h"

namespace tpu {

// The host's instruction buffer per core. J17 gives no depth; 256 instructions (8 KiB) keep the
// core busy for thousands of cycles between host writes (a modelling assumption).
constexpr int kInstructionQueueDepth = 256;

// Unit ids for the scoreboard's same-unit rule.
enum : int { kUnitDma = 0, kUnitVector = 1, kUnitIci = 2, kUnitMxuBase = 3 };
constexpr int weights_unit(std::uint32_t m) { return kUnitMxuBase + 2 * static_cast<int>(m); }
constexpr int matmul_unit(std::uint32_t m) { return kUnitMxuBase + 2 * static_cast<int>(m) + 1; }

void ChipSync::signal(std::uint32_t sem) {
  ++arrivals_.at(sem);
  signalled_.notify(sc_core::SC_ZERO_TIME);
}

void ChipSync::take(std::uint32_t sem, std::uint32_t count) {
  while (arrivals_.at(sem) < count) sc_core::wait(signalled_);
  arrivals_.at(sem) -= count;
}

void ChipSync::arrive(Barrier& b, std::uint32_t cores) {
  const std::uint64_t gen = b.generation;
  if (++b.arrived == cores) {
    b.arrived = 0;
    ++b.generation;
    b.released.notify(sc_core::SC_ZERO_TIME);
  }
  while (b.generation == gen) sc_core::wait(b.released);
}

void ChipSync::arrive_and_wait() { arrive(sequencers_, cores_); }

void ChipSync::engine_barrier() { arrive(engines_, cores_); }

Sequencer::Sequencer(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                     const CoreStorage& storage, const UnitQueues& queues, ChipSync& sync,
                     LayerCounters& counters, std::string core_name)
    : sc_core::sc_module(name),
      instructions("instructions", kInstructionQueueDepth),
      cfg_(cfg),
      clock_(clock),
      storage_(storage),
      queues_(queues),
      sync_(sync),
      counters_(counters),
      core_name_(std::move(core_name)),
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
  retire_ledger(end);
  if (end > retired_) counters_.at(layer_).cycles += end - retired_;
  // A host that runs program after program (fit's steps) calls finish after each: the next
  // call charges from here.
  retired_ = std::max(end, retired_);
}

void Sequencer::count_busy() {
  // A sweep over the intervals' ends: per stretch between two ends, the layers running in it.
  struct Edge {
    Cycle at;
    std::uint32_t layer;
    int delta;
  };
  std::vector<Edge> edges;
  const auto add = [&](std::uint32_t layer, Cycle b, Cycle e) {
    if (e <= b) return;
    edges.push_back({b, layer, +1});
    edges.push_back({e, layer, -1});
  };
  for (std::size_t i = 0; i < ledger_started_.size(); ++i)
    if (ledger_started_[i] != kNoCycle) add(ledger_layer_[i], ledger_started_[i], ledger_done_[i]);
  for (const Wait& w : waits_) add(w.layer, w.begin, w.end);
  waits_.clear();
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.at < b.at; });
  std::map<std::uint32_t, int> running;  // layer -> intervals open
  for (std::size_t i = 0; i < edges.size();) {
    const Cycle at = edges[i].at;
    for (; i < edges.size() && edges[i].at == at; ++i)
      if ((running[edges[i].layer] += edges[i].delta) == 0) running.erase(edges[i].layer);
    if (i == edges.size() || running.empty()) continue;
    const Cycle len = edges[i].at - at;
    for (const auto& [layer, open] : running) {
      Counters& c = counters_.at(layer);
      c.busy_cycles += len;
      if (running.size() == 1) c.exposed_cycles += len;
    }
  }
}

void Sequencer::retire_ledger(Cycle end) {
  count_busy();
  // Instruction i is the oldest unfinished one from max(done of 0..i-1) to max(done of 0..i).
  for (std::size_t i = 0; i < ledger_done_.size(); ++i)
    if (ledger_done_[i] > retired_) {
      counters_.at(ledger_layer_[i]).cycles +=
          std::min(ledger_done_[i], end) - std::min(retired_, end);
      retired_ = ledger_done_[i];
    }
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

void Sequencer::check_acc(const InFlight& f, const char* field, std::uint64_t first,
                          std::uint64_t count) const {
  if (first > storage_.acc_entries || count > storage_.acc_entries - first)
    report_program_error(core_name_, f,
                         fmt::format("{} entries {} + {} are outside the {} accumulator entries",
                                     field, first, count, storage_.acc_entries));
}

namespace {

// The scoreboard's unit id: instructions of one unit complete in issue order (isa::Unit).
int unit_queue_id(const isa::Unit& u) {
  switch (u.kind) {
    case isa::UnitKind::Dma: return kUnitDma;
    case isa::UnitKind::Vector: return kUnitVector;
    case isa::UnitKind::Ici: return kUnitIci;
    case isa::UnitKind::MxuWeights: return weights_unit(u.mxu);
    case isa::UnitKind::MxuArray: return matmul_unit(u.mxu);
    case isa::UnitKind::Sequencer: break;
  }
  return -1;
}

}  // namespace

void Sequencer::issue(std::uint64_t index, const isa::Instruction& inst) {
  auto f = std::make_shared<InFlight>();
  f->index = index;
  f->inst = inst;
  f->layer = layer_;
  f->window = window_;
  f->issued_at = clock_.now();
  f->trace = trace_;
  f->core = core_id_;
  const isa::Unit unit = isa::unit_of(inst);
  if (unit.kind == isa::UnitKind::MxuWeights || unit.kind == isa::UnitKind::MxuArray)
    if (unit.mxu >= cfg_.mxu.count)
      report_program_error(
          core_name_, *f,
          fmt::format("mxu {} does not exist (this core has {})", unit.mxu, cfg_.mxu.count));

  // 1. What the sequencer itself does: the window and tile registers, sync and halt.
  std::visit(
      [&](const auto& i) {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, isa::SetWindow>) {
          if (i.in_h == 0 || i.in_w == 0 || i.in_c == 0 || i.kernel_h == 0 || i.kernel_w == 0 ||
              i.stride_h == 0 || i.stride_w == 0 || i.out_h == 0 || i.out_w == 0)
            report_program_error(core_name_, *f,
                                 "in_h, in_w, in_c, kernel_h, kernel_w, stride_h, stride_w, "
                                 "out_h and out_w must all be >= 1");
          window_ = i;
        } else if constexpr (std::is_same_v<T, isa::Sync>) {
          if (i.bytes > 0) {  // the region form: the ICI engine's
            if (!i.all_cores)
              report_program_error(core_name_, *f,
                                   "a sync over a region (bytes > 0) is a barrier of the chip's "
                                   "cores: it needs all_cores");
            return;
          }
          const Cycle t0 = clock_.now();
          scoreboard_.drain();
          if (i.all_cores) sync_.arrive_and_wait();
          waits_.push_back({layer_, t0, clock_.now()});
          if (trace_) trace_->add_stall(core_id_, index, layer_, Stall::Sync, 0, t0, clock_.now());
        } else if constexpr (std::is_same_v<T, isa::IciWait>) {
          if (i.sem >= isa::kIciSemaphores)
            report_program_error(core_name_, *f,
                                 fmt::format("sem {} does not exist (a chip has {} semaphores, "
                                             "0 to {})",
                                             i.sem, isa::kIciSemaphores, isa::kIciSemaphores - 1));
          if (i.bytes > 0) return;  // the region form: the ICI engine waits
          const Cycle t0 = clock_.now();
          sync_.take(i.sem, i.count);
          waits_.push_back({layer_, t0, clock_.now()});
          if (trace_) trace_->add_stall(core_id_, index, layer_, Stall::Sync, 0, t0, clock_.now());
        } else if constexpr (std::is_same_v<T, isa::Halt>) {
          const Cycle t0 = clock_.now();
          scoreboard_.drain();
          if (trace_) trace_->add_stall(core_id_, index, layer_, Stall::Halt, 0, t0, clock_.now());
          // Every instruction so far is done by now, and finish's end is at or after every
          // halt: their share of the cycles is final, and a long run (fit's thousands of
          // steps) does not keep a ledger entry per instruction.
          retire_ledger(clock_.now());
          ++halts_;
          halted_at_ = clock_.now();
          halted_event_.notify(sc_core::SC_ZERO_TIME);
        } else if constexpr (std::is_same_v<T, isa::ReadWeights>) {
          const isa::TileShape t = isa::weight_tile_shape(i);
          pending_tiles_[i.mxu].emplace_back(t.k, t.n);
        } else if constexpr (std::is_same_v<T, isa::MatMul>) {
          if (i.swap_weights) {
            if (pending_tiles_[i.mxu].empty())
              report_program_error(core_name_, *f,
                                   fmt::format("swap on mxu {} but no read_weights is pending "
                                               "for it",
                                               i.mxu));
            resident_tile_[i.mxu] = pending_tiles_[i.mxu].front();
            pending_tiles_[i.mxu].pop_front();
          }
          if (resident_tile_[i.mxu].first == 0)
            report_program_error(core_name_, *f,
                                 fmt::format("mxu {} has no resident weights: swap in a tile "
                                             "loaded by read_weights first",
                                             i.mxu));
        }
      },
      inst);
  if (unit.kind == isa::UnitKind::Sequencer) return;

  // 2. What it touches (isa::footprint): checked against the core's storage, then recorded for
  // the scoreboard. The host's memory is the driver's and is not ordered here.
  isa::FootprintContext ctx;
  ctx.acc_entry_bytes = storage_.acc_words_per_entry * 4ull;
  ctx.mxu_input_type = cfg_.mxu.input_type;
  ctx.window = window_;
  if (unit.kind == isa::UnitKind::MxuArray) ctx.tile_rows = resident_tile_[unit.mxu].first;
  for (const isa::Access& a : isa::footprint(inst, ctx)) {
    if (a.space == isa::Space::Host) continue;
    if (a.space == isa::Space::UnifiedBuffer)
      check_ub_range(core_name_, *f, storage_.ub_bytes, a.field, a.lo, a.hi - a.lo);
    if (a.space == isa::Space::Accumulators)
      check_acc(*f, a.field, a.lo / ctx.acc_entry_bytes, (a.hi - a.lo) / ctx.acc_entry_bytes);
    (a.write ? f->writes : f->reads).push_back(a);
  }

  // 3. Into the unit's queue, in order.
  UnitQueue* target = nullptr;
  switch (unit.kind) {
    case isa::UnitKind::Dma: target = queues_.dma; break;
    case isa::UnitKind::Ici: target = queues_.ici; break;
    case isa::UnitKind::Vector: target = queues_.vector; break;
    case isa::UnitKind::MxuWeights: target = queues_.weights[unit.mxu]; break;
    case isa::UnitKind::MxuArray: target = queues_.matmul[unit.mxu]; break;
    case isa::UnitKind::Sequencer: break;
  }
  f->unit = unit_queue_id(unit);
  f->ledger = &ledger_done_;
  f->ledger_started = &ledger_started_;
  f->ledger_slot = ledger_done_.size() - 1;  // run() recorded it before issuing
  scoreboard_.issue(f);
  const Cycle t0 = clock_.now();
  target->write(f);
  if (trace_)
    trace_->add_stall(core_id_, index, layer_, Stall::QueueFull, track_of(inst), t0, clock_.now());
}

}  // namespace tpu
