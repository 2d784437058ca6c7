#include "hw/memory/off_chip_memory.h"

#include <algorithm>
#include <cmath>

#include "hw/common/tlm_util.h"

namespace tpu {

OffChipMemory::OffChipMemory(sc_core::sc_module_name name, const ChipConfig& cfg,
                             const Clock& clock, BandwidthResource& bandwidth, SimOptions options)
    : sc_core::sc_module(name),
      socket("socket"),
      kind_(cfg.off_chip_memory.kind),
      clock_(clock),
      bandwidth_(bandwidth),
      timing_only_(options.timing_only),
      store_(cfg.off_chip_memory.bytes),
      latency_(clock.ns_to_cycles(cfg.off_chip_memory.latency_ns)) {
  if (cfg.off_chip_memory.model == MemoryModel::Structured) {
    if (kind_ == MemoryKind::HostLink)
      link_ = packet_params(cfg);
    else
      dram_ = std::make_unique<DramTiming>(dram_params(cfg));
  }
  socket.register_b_transport(this, &OffChipMemory::b_transport);
  socket.register_get_direct_mem_ptr(this, &OffChipMemory::get_direct_mem_ptr);
  socket.register_transport_dbg(this, &OffChipMemory::transport_dbg);
}

tlm::tlm_response_status OffChipMemory::check_rows(const tlm::tlm_generic_payload& gp,
                                                   StridedRows& s) const {
  if (gp.get_data_length() != s.rows * s.row_bytes) return tlm::TLM_GENERIC_ERROR_RESPONSE;
  // The base protocol's checks with the range left to the rows.
  if (const auto st = check_memory_payload(gp, ~std::uint64_t{0}); st != tlm::TLM_OK_RESPONSE)
    return st;
  for (std::uint32_t i = 0; i < s.rows; ++i) {
    const std::uint64_t at = gp.get_address() + i * s.pitch;
    if (at < gp.get_address() || !store_.in_range(at, s.row_bytes)) {
      s.refused_row = i;
      return tlm::TLM_ADDRESS_ERROR_RESPONSE;
    }
  }
  return tlm::TLM_OK_RESPONSE;
}

void OffChipMemory::b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  const std::uint64_t addr = gp.get_address();
  const std::uint64_t len = gp.get_data_length();
  StridedRows* rows = gp.get_extension<StridedRows>();
  if (const auto st = rows ? check_rows(gp, *rows) : check_memory_payload(gp, store_.capacity());
      st != tlm::TLM_OK_RESPONSE) {
    gp.set_response_status(st);
    return;
  }
  if (gp.is_read() || gp.is_write()) {
    // 1. Reach the initiator's local time, then the next whole cycle: the bandwidth resource
    //    counts in whole cycles of the chip clock.
    sc_core::wait(delay);
    delay = sc_core::SC_ZERO_TIME;
    const sc_core::sc_time now = sc_core::sc_time_stamp();
    Cycle start = clock_.cycle_of(now);
    if (clock_.time_of(start) < now) ++start;
    clock_.wait_until(start);
    // 2. Latency, then the bytes at the shared rate: one transfer, or one per row.
    const std::uint64_t pieces = rows ? rows->rows : 1, piece = rows ? rows->row_bytes : len;
    const std::uint64_t pitch = rows ? rows->pitch : 0;
    if (dram_)
      structured_transfer(addr, pieces, piece, pitch, gp.is_read());
    else if (link_)
      bandwidth_.transfer_each(pieces, wire_bytes(*link_, piece));
    else if (rows)
      bandwidth_.transfer_each(rows->rows, rows->row_bytes);
    else
      bandwidth_.transfer(len);
    // 3. The data moves when the transfer completes.
    unsigned char* data = gp.get_data_ptr();
    if (!timing_only_)
      for (std::uint64_t i = 0; i < pieces; ++i) {
        if (gp.is_read())
          store_.read(addr + i * pitch, data + i * piece, piece);
        else
          store_.write(addr + i * pitch, data + i * piece, piece);
      }
    (gp.is_read() ? bytes_read_ : bytes_written_) += len;
  }
  gp.set_dmi_allowed(false);
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
}

void OffChipMemory::structured_transfer(std::uint64_t addr, std::uint64_t pieces,
                                        std::uint64_t piece, std::uint64_t pitch, bool read) {
  // 1. The access latency, as the ideal model pays it, before any byte moves.
  clock_.wait_for(latency_);
  const Cycle start = clock_.now();
  const double ns_per_cycle = 1e9 / clock_.hz();
  const double at = static_cast<double>(start) * ns_per_cycle;
  // 2. Every piece booked on its channels at once, in address order.
  double done = at;
  const DramAccess dir = read ? DramAccess::Read : DramAccess::Write;
  for (std::uint64_t i = 0; i < pieces; ++i)
    done = std::max(done, dram_->access(at, addr + i * pitch, piece, dir));
  // 3. Completion on the first whole cycle at or after the last byte (never beats the bus).
  const auto end = std::max(start, static_cast<Cycle>(std::ceil(done / ns_per_cycle - 1e-9)));
  // Busy time is the union of the transfers' spans (starts never decrease).
  if (end > dram_busy_until_) {
    dram_busy_cycles_ += end - std::max(start, dram_busy_until_);
    dram_busy_until_ = end;
  }
  clock_.wait_until(end);
}

bool OffChipMemory::get_direct_mem_ptr(tlm::tlm_generic_payload&, tlm::tlm_dmi& dmi) {
  // Deny the whole address space, so initiators do not ask again.
  dmi.set_start_address(0);
  dmi.set_end_address(store_.capacity() == 0 ? 0 : store_.capacity() - 1);
  return false;
}

unsigned int OffChipMemory::transport_dbg(tlm::tlm_generic_payload& gp) {
  const std::uint64_t addr = gp.get_address();
  if (addr >= store_.capacity() || gp.get_data_ptr() == nullptr) return 0;
  const auto len = static_cast<unsigned int>(
      std::min<std::uint64_t>(gp.get_data_length(), store_.capacity() - addr));
  if (!gp.is_read() && !gp.is_write()) return 0;
  if (timing_only_) return len;
  if (gp.is_read())
    store_.read(addr, gp.get_data_ptr(), len);
  else
    store_.write(addr, gp.get_data_ptr(), len);
  return len;
}

}  // namespace tpu
