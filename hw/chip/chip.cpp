#include "hw/chip/chip.h"

#include <fmt/format.h>

namespace tpu {

BandwidthResource* Chip::make_off_chip_bw(const ChipConfig& cfg, const Clock& clock) {
  if (cfg.off_chip_memory.kind == MemoryKind::HostLink) return nullptr;
  return new BandwidthResource("off_chip_bw", clock, cfg.off_chip_bytes_per_s(),
                               cfg.off_chip_memory.latency_ns);
}

Chip::Chip(sc_core::sc_module_name name, ChipConfig cfg, std::optional<std::uint32_t> system_chip,
           SimOptions options)
    : sc_core::sc_module(name),
      cfg_(std::move(cfg)),
      clock_(cfg_.clock_hz()),
      options_(options),
      host_link_in("host_link_in", clock_, cfg_.host_link_bytes_per_s(), cfg_.host_link.latency_ns,
                   cfg_.host_link.service),
      host_link_out("host_link_out", clock_, cfg_.host_link_bytes_per_s(),
                    cfg_.host_link.latency_ns, cfg_.host_link.service),
      off_chip_bw(make_off_chip_bw(cfg_, clock_)),
      memory("memory", cfg_, clock_, off_chip_bw ? *off_chip_bw : host_link_in, options_),
      mem_ic("mem_ic"),
      host_ic("host_ic", &host_link_out, &host_link_in),
      sync(cfg_.tensor_cores),
      ici_port("ici_port", system_chip),
      ici_inbox("ici_inbox", sync, cfg_.off_chip_memory.bytes, system_chip.has_value()) {
  mem_ic.out.bind(memory.socket);
  ici_inbox.ici2mem.bind(mem_ic.in);
  std::vector<Sequencer*> seqs;
  for (std::uint32_t c = 0; c < cfg_.tensor_cores; ++c) {
    cores.push_back(std::make_unique<TensorCore>(fmt::format("core{}", c).c_str(), cfg_, clock_, c,
                                                 sync, options_));
    TensorCore& core = *cores.back();
    core.dma.dma2mem.bind(mem_ic.in);
    core.dma.dma2host.bind(host_ic.in);
    core.dma.dma2ici.bind(ici_port.in);
    // The ICI engine runs ici_write only; its memory and host ends are bound as the DMA's.
    core.ici.dma2mem.bind(mem_ic.in);
    core.ici.dma2host.bind(host_ic.in);
    core.ici.dma2ici.bind(ici_port.in);
    for (auto& m : core.mxus) m->mxu2mem_weights.bind(mem_ic.in);
    seqs.push_back(core.sequencer.get());
  }
  hif = std::make_unique<HostInterface>("hif", cfg_, clock_, seqs, host_link_in, host_link_out);
  hif->hif2mem.bind(mem_ic.in);
  for (std::uint32_t c = 0; c < cfg_.tensor_cores; ++c) {
    hif->hif2ub[c]->bind(cores[c]->ub.socket);
    hif->hif2acc[c]->bind(cores[c]->acc.socket);
  }
}

LayerCounters Chip::counters() const {
  LayerCounters all;
  for (const auto& c : cores) all += c->counters();
  Counters& host = all.at(0);
  const std::uint64_t instructions = hif->instruction_bytes() - taken_instruction_bytes_;
  const std::uint64_t written = hif->memory_bytes_written() - taken_bytes_written_;
  const std::uint64_t read = hif->memory_bytes_read() - taken_bytes_read_;
  host.host_bytes_in += instructions + written;
  host.host_bytes_out += read;
  host.off_chip_bytes_written += written;
  host.off_chip_bytes_read += read;
  // What other chips wrote into this one's memory over the ICI: its memory's work.
  host.off_chip_bytes_written += ici_inbox.bytes_in() - taken_ici_bytes_in_;
  return all;
}

LayerCounters Chip::take_counters(Cycle end) {
  finish(end);
  LayerCounters all = counters();
  for (auto& c : cores) c->reset_counters();
  taken_instruction_bytes_ = hif->instruction_bytes();
  taken_bytes_written_ = hif->memory_bytes_written();
  taken_bytes_read_ = hif->memory_bytes_read();
  taken_ici_bytes_in_ = ici_inbox.bytes_in();
  return all;
}

void Chip::enable_trace(Trace& trace, std::uint32_t first_core) {
  for (auto& c : cores) c->sequencer->set_trace(&trace, first_core + c->id());
}

void Chip::disable_trace() {
  for (auto& c : cores) c->sequencer->set_trace(nullptr, c->id());
}

void Chip::finish(Cycle end) {
  for (auto& c : cores) c->finish(end);
}

}  // namespace tpu
