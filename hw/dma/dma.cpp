#include "hw/dma/dma.h"

#include <fmt/format.h>

#include "hw/common/ici_route.h"
#include "hw/common/tlm_util.h"
#include "hw/isa/window.h"
#include "hw/unit/program_error.h"

namespace tpu {

Cycles Dma::ub_port_cycles(std::uint64_t bytes) const {
  const std::uint64_t per_cycle = cfg_.unified_buffer.bytes_per_cycle;
  return Cycles((bytes + per_cycle - 1) / per_cycle);
}

Dma::Dma(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
         const CoreStorage& storage, LayerCounters& counters, std::string core_name,
         SimOptions options, int queue_depth)
    : sc_core::sc_module(name),
      dma2mem("dma2mem"),
      dma2host("dma2host"),
      dma2ici("dma2ici"),
      queue("queue", queue_depth),
      cfg_(cfg),
      clock_(clock),
      storage_(storage),
      counters_(counters),
      core_name_(std::move(core_name)),
      timing_only_(options.timing_only) {
  SC_HAS_PROCESS(Dma);
  SC_THREAD(run);
}

void Dma::run() {
  while (true) {
    std::shared_ptr<InFlight> f = queue.read();
    f->wait_deps(clock_);
    Counters& c = counters_.at(f->layer);
    f->started_at = clock_.now();
    if (const auto* g = std::get_if<isa::Gather>(&f->inst)) {
      gather(*f, *g, c);
      f->complete_at(clock_, clock_.now());
      continue;
    }
    // The region forms of ici_wait and sync: the wait holds this engine's queue, not the
    // sequencer; the scoreboard orders the region around them.
    if (const auto* w = std::get_if<isa::IciWait>(&f->inst)) {
      if (!engine_sync_) report_program_error(core_name_, *f, "this engine takes no ici_wait");
      engine_sync_->take(w->sem, w->count);
      f->complete_at(clock_, clock_.now());
      continue;
    }
    if (std::holds_alternative<isa::Sync>(f->inst)) {
      if (!engine_sync_) report_program_error(core_name_, *f, "this engine takes no sync");
      engine_sync_->engine_barrier();
      f->complete_at(clock_, clock_.now());
      continue;
    }
    if (const auto* w = std::get_if<isa::IciWrite>(&f->inst)) {
      ici_write(*f, *w, c);
      f->complete_at(clock_, clock_.now());
      continue;
    }

    // Each transfer: (UB address, far address, bytes, command seen from the far side, socket).
    std::uint64_t ub = 0, far = 0, bytes = 0;
    tlm::tlm_command cmd = tlm::TLM_READ_COMMAND;
    bool to_host = false;
    std::visit(
        [&](const auto& i) {
          using T = std::decay_t<decltype(i)>;
          if constexpr (std::is_same_v<T, isa::ReadHost>) {
            ub = i.dst.value(), far = i.src.value(), bytes = i.bytes, to_host = true;
            c.host_bytes_in += bytes, c.ub_bytes_written += bytes;
          } else if constexpr (std::is_same_v<T, isa::WriteHost>) {
            ub = i.src.value(), far = i.dst.value(), bytes = i.bytes, to_host = true;
            cmd = tlm::TLM_WRITE_COMMAND;
            c.host_bytes_out += bytes, c.ub_bytes_read += bytes;
          } else if constexpr (std::is_same_v<T, isa::ReadMem>) {
            ub = i.dst.value(), far = i.src.value(), bytes = i.bytes;
            c.off_chip_bytes_read += bytes, c.ub_bytes_written += bytes;
          } else if constexpr (std::is_same_v<T, isa::WriteMem>) {
            ub = i.src.value(), far = i.dst.value(), bytes = i.bytes;
            cmd = tlm::TLM_WRITE_COMMAND;
            c.off_chip_bytes_written += bytes, c.ub_bytes_read += bytes;
          }
        },
        f->inst);
    transfer(*f, to_host, cmd, far, ub, bytes);
    f->complete_at(clock_, clock_.now());
  }
}

void Dma::transfer(const InFlight& f, bool to_host, tlm::tlm_command cmd, std::uint64_t far,
                   std::uint64_t ub, std::uint64_t bytes) {
  const Cycle start = clock_.now();
  check_ub_range(core_name_, f, storage_.ub_bytes, "unified-buffer", ub, bytes);
  const auto status = to_host ? tlm_transfer(dma2host, cmd, far, storage_.ub + ub, bytes)
                              : tlm_transfer(dma2mem, cmd, far, storage_.ub + ub, bytes);
  if (status != tlm::TLM_OK_RESPONSE)
    report_program_error(core_name_, f,
                         fmt::format("{} answered {} for {} bytes at {:#x}",
                                     to_host ? "host memory" : "off-chip memory",
                                     response_name(status), bytes, far));
  // The UB port streams concurrently with the far side; it only lengthens the transfer when
  // it is the slower of the two.
  const Cycle ub_done = start + ub_port_cycles(bytes).value();
  clock_.wait_until(ub_done);
}

void Dma::ici_write(const InFlight& f, const isa::IciWrite& w, Counters& c) {
  check_ub_range(core_name_, f, storage_.ub_bytes, "src", w.src.value(), w.bytes);
  if (w.sem >= isa::kIciSemaphores)
    report_program_error(core_name_, f,
                         fmt::format("sem {} does not exist (a chip has {} semaphores, 0 to {})",
                                     w.sem, isa::kIciSemaphores, isa::kIciSemaphores - 1));
  const Cycle start = clock_.now();
  tlm::tlm_generic_payload gp;
  gp.set_command(tlm::TLM_WRITE_COMMAND);
  gp.set_address(w.dst.value());
  gp.set_data_ptr(storage_.ub + w.src.value());
  gp.set_data_length(w.bytes);
  gp.set_streaming_width(w.bytes);
  gp.set_byte_enable_ptr(nullptr);
  gp.set_dmi_allowed(false);
  gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  IciRoute route;
  route.to = w.chip;
  route.sem = w.sem;
  gp.set_extension(&route);
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  dma2ici->b_transport(gp, delay);
  gp.clear_extension(&route);
  if (delay > sc_core::SC_ZERO_TIME) sc_core::wait(delay);
  if (gp.get_response_status() != tlm::TLM_OK_RESPONSE)
    report_program_error(
        core_name_, f,
        route.refusal.empty()
            ? fmt::format("the ICI answered {} for {} bytes to chip {} at {:#x}",
                          response_name(gp.get_response_status()), w.bytes, w.chip, w.dst.value())
            : route.refusal);
  c.ici_bytes_out += w.bytes;
  c.ub_bytes_read += w.bytes;
  // The UB port streams while the links carry the bytes, as for any transfer.
  clock_.wait_until(start + ub_port_cycles(w.bytes).value());
}

void Dma::gather(const InFlight& f, const isa::Gather& g, Counters& c) {
  const std::uint64_t index_bytes = 4ull * g.count;
  const std::uint64_t row_bytes = g.row_bytes;
  check_ub_range(core_name_, f, storage_.ub_bytes, "indices", g.indices.value(), index_bytes);
  check_ub_range(core_name_, f, storage_.ub_bytes, "dst", g.dst.value(), g.count * row_bytes);
  // 1. Every index, little-endian int32, checked against the table and its row against off-chip
  //    memory before any row moves, so a bad index stops the run with nothing written.
  //    Timing only: every index is 0, unread and unchecked (dma.h).
  const std::uint64_t mem_bytes = cfg_.off_chip_memory.bytes;
  std::vector<std::uint64_t> addr(g.count);
  for (std::uint32_t r = 0; r < g.count; ++r) {
    const std::uint64_t at = g.indices.value() + 4ull * r;
    const std::uint8_t* p = storage_.ub + at;
    const auto idx =
        timing_only_
            ? std::int32_t{0}
            : static_cast<std::int32_t>(std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 |
                                        std::uint32_t{p[2]} << 16 | std::uint32_t{p[3]} << 24);
    if (!timing_only_ && (idx < 0 || static_cast<std::uint32_t>(idx) >= g.rows))
      report_program_error(core_name_, f,
                           fmt::format("gather: index {} (indices[{}] at {:#x}) is outside the "
                                       "table's rows [0, {})",
                                       idx, r, at, g.rows));
    addr[r] = isa::sat_add(g.table.value(), static_cast<std::uint64_t>(idx) * row_bytes);
    if (addr[r] > mem_bytes || row_bytes > mem_bytes - addr[r])
      report_program_error(core_name_, f,
                           fmt::format("gather: row {} (indices[{}]) at {:#x} + {} bytes is "
                                       "outside the {}-byte off-chip memory",
                                       idx, r, addr[r], row_bytes, mem_bytes));
  }
  // 2. The indices stream in through the UB port before the first row's address is known.
  clock_.wait_for(ub_port_cycles(index_bytes));
  c.ub_bytes_read += index_bytes;
  // 3. One off-chip transfer per row, as a read_mem of row_bytes: the rows lie anywhere in the
  //    table, so they cannot be merged into one burst.
  for (std::uint32_t r = 0; r < g.count; ++r)
    transfer(f, false, tlm::TLM_READ_COMMAND, addr[r], g.dst.value() + r * row_bytes, row_bytes);
  c.off_chip_bytes_read += g.count * row_bytes;
  c.ub_bytes_written += g.count * row_bytes;
}

}  // namespace tpu
