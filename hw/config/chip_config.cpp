#include "hw/config/chip_config.h"

#include <fmt/format.h>

#include "hw/config/json_reader.h"

namespace tpu {
using nlohmann::json;

std::string_view name_of(MemoryKind k) {
  switch (k) {
    case MemoryKind::Ddr3: return "ddr3";
    case MemoryKind::Hbm: return "hbm";
    case MemoryKind::HostLink: return "host-link";
  }
  return "?";
}

std::string_view name_of(MemoryModel m) {
  return m == MemoryModel::Structured ? "structured" : "ideal";
}

namespace {

using config_reader::Context;
using config_reader::kMaxBandwidthGbps;
using config_reader::kMaxLatencyNs;
using config_reader::kMinBandwidthGbps;
using config_reader::ObjectReader;

// Limits that keep the model's host memory and integer arithmetic sane; each has its reason.
constexpr std::uint32_t kMaxCores = 64;  // cores are SystemC threads; more is no TPU
constexpr std::uint32_t kMaxMxus = 64;
constexpr std::uint32_t kMaxArrayDim = 4096;  // a 4096^2 fp32 tile buffer is 64 MiB of host RAM
constexpr std::uint64_t kMaxUbBytes = 1ull << 32;       // UbAddr is 32 bits (docs/isa.md)
constexpr std::uint32_t kMaxAccEntries = 1u << 24;      // AccAddr rows fit the 24-bit ISA field
constexpr std::uint64_t kMaxOffChipBytes = 1ull << 48;  // MemAddr is 48 bits in the ISA
constexpr double kMaxClockMhz = 4000;  // Clock: cycle<->ps round trip is exact up to 4 GHz
// Below 1 MHz a cycle is longer than a microsecond: no accelerator, and SystemC's 64-bit
// picosecond clock would run out after 2^64 ps / 1e6 ps per cycle = 1.8e13 cycles.
constexpr double kMinClockMhz = 1;
// Bandwidths and latencies: config_reader's limits, shared with the ICI of system configs.
// Energies per action up to a microjoule (DRAM is about 10^2 pJ/byte, a 45 nm fp32 multiply
// 3.7 pJ) and idle power up to a megawatt (a TPU v4 pod draws about that).
constexpr double kMaxActionPj = 1e6;
constexpr double kMaxIdleW = 1e6;

// `off_chip_memory.timing` of model "structured" (docs/memory-model.md): DRAM banks and times,
// or the host link's packets. Limits: a row of at most 1 GiB, times up to kMaxLatencyNs.
void read_timing(ObjectReader t, OffChipMemoryConfig& m, const Context& ctx) {
  OffChipTimingConfig& tm = m.timing;
  if (m.kind == MemoryKind::HostLink) {
    tm.packet_payload_bytes = t.u32("packet_payload_bytes", 1, 1u << 20);
    tm.packet_overhead_bytes = t.u32("packet_overhead_bytes", 0, 1u << 20);
    t.finish();
    return;
  }
  tm.banks = t.u32("banks", 1, 1024);
  tm.row_bytes = t.integer("row_bytes", 1, 1ull << 30);
  tm.interleave_bytes = t.integer("interleave_bytes", 1, 1ull << 30);
  tm.burst_bytes = t.integer("burst_bytes", 1, 1ull << 20);
  auto ns = [&](const char* key) { return t.number(key, 0, false, kMaxLatencyNs); };
  tm.t_rcd_ns = ns("t_rcd_ns");
  tm.t_rp_ns = ns("t_rp_ns");
  tm.t_ras_ns = ns("t_ras_ns");
  tm.t_rrd_ns = ns("t_rrd_ns");
  tm.t_faw_ns = ns("t_faw_ns");
  tm.write_to_read_ns = ns("write_to_read_ns");
  tm.read_to_write_ns = ns("read_to_write_ns");
  tm.t_refi_ns = ns("t_refi_ns");
  tm.t_rfc_ns = ns("t_rfc_ns");
  t.finish();
  // The address map needs whole bursts per stripe and whole stripes per row.
  if (tm.interleave_bytes % tm.burst_bytes != 0)
    ctx.bad(t.at("interleave_bytes"), tm.interleave_bytes,
            fmt::format("must be a multiple of burst_bytes {}", tm.burst_bytes));
  if (tm.row_bytes % tm.interleave_bytes != 0)
    ctx.bad(t.at("row_bytes"), tm.row_bytes,
            fmt::format("must be a multiple of interleave_bytes {}", tm.interleave_bytes));
  // A refresh interval holds its window, a re-activation and one row's data (one window pauses a
  // row segment at most; hw/memory/dram_timing.h). 0 turns refresh off.
  const double row_ns = static_cast<double>(tm.row_bytes) * m.channels / (m.bandwidth_gbps);
  const double least = tm.t_rfc_ns + tm.t_rcd_ns + tm.t_rrd_ns + row_ns;
  if (tm.t_refi_ns > 0 && tm.t_refi_ns <= least)
    ctx.bad(t.at("t_refi_ns"), tm.t_refi_ns,
            fmt::format("0 (no refresh) or more than t_rfc_ns + t_rcd_ns + t_rrd_ns + one row's "
                        "bus time = {:.6g}",
                        least));
}

ChipConfig parse_chip_config_impl(const json& doc, const Context& ctx) {
  ChipConfig c;
  c.file = ctx.top;
  ObjectReader top(doc, "", ctx);
  c.name = top.string("name");
  c.clock_mhz = top.number("clock_mhz", kMinClockMhz, false, kMaxClockMhz);
  c.tensor_cores = top.u32("tensor_cores", 1, kMaxCores);

  {
    ObjectReader m = top.object("mxu");
    c.mxu.count = m.u32("count", 1, kMaxMxus);
    c.mxu.rows = m.u32("rows", 1, kMaxArrayDim);
    c.mxu.cols = m.u32("cols", 1, kMaxArrayDim);
    c.mxu.input_type =
        m.choice<DType>("input_type", {{"int8", DType::Int8}, {"bf16", DType::Bf16}});
    c.mxu.acc_type = m.choice<DType>("acc_type", {{"int32", DType::Int32}, {"fp32", DType::Fp32}});
    // int8 x int8 products need an integer accumulator; bf16 products an fp32 one (DESIGN).
    const DType want = c.mxu.input_type == DType::Int8 ? DType::Int32 : DType::Fp32;
    if (c.mxu.acc_type != want)
      ctx.bad(m.at("acc_type"), std::string(name_of(c.mxu.acc_type)),
              fmt::format("input_type {} needs acc_type \"{}\"", name_of(c.mxu.input_type),
                          name_of(want)));
    c.mxu.weight_fifo_tiles = m.u32("weight_fifo_tiles", 1, 64);
    c.mxu.weight_buffers = m.u32("weight_buffers", 1, 2);
    if (m.has("impl"))
      c.mxu.impl = m.choice<MxuImpl>("impl", {{"tlm", MxuImpl::Tlm}, {"rtl", MxuImpl::Rtl}});
    m.finish({"impl"});  // impl defaults to "tlm": the RTL array is an opt-in cross-check
    // The RTL array (rtl/mxu/mxu_array.sv) is int8 x int8 -> int32 and double-buffered.
    if (c.mxu.impl == MxuImpl::Rtl && c.mxu.input_type != DType::Int8)
      ctx.bad(m.at("impl"), "rtl",
              fmt::format("the RTL array multiplies int8 only; input_type {} needs impl \"tlm\"",
                          name_of(c.mxu.input_type)));
    if (c.mxu.impl == MxuImpl::Rtl && c.mxu.weight_buffers != 2)
      ctx.bad(m.at("impl"), "rtl",
              fmt::format("the RTL array is double-buffered; weight_buffers {} needs impl \"tlm\"",
                          c.mxu.weight_buffers));
  }
  {
    ObjectReader u = top.object("unified_buffer");
    c.unified_buffer.bytes = u.integer("bytes", 1, kMaxUbBytes);
    c.unified_buffer.bytes_per_cycle = u.u32("bytes_per_cycle", 1, 1u << 20);
    u.finish();
  }
  {
    ObjectReader a = top.object("accumulators");
    c.accumulators.entries = a.u32("entries", 1, kMaxAccEntries);
    a.finish();
  }
  {
    ObjectReader v = top.object("vector_unit");
    c.vector_unit.lanes = v.u32("lanes", 1, 1u << 16);
    c.vector_unit.sublanes = v.u32("sublanes", 1, 1u << 10);
    c.vector_unit.latency_cycles = v.u32("latency_cycles", 0, 1u << 16);
    c.vector_unit.bytes_per_cycle = v.u32("bytes_per_cycle", 1, 1u << 20);
    v.finish();
  }
  {
    ObjectReader h = top.object("host_link");
    c.host_link.kind = h.string("kind");
    c.host_link.bandwidth_gbps =
        h.number("bandwidth_gbps", kMinBandwidthGbps, false, kMaxBandwidthGbps);
    c.host_link.latency_ns = h.number("latency_ns", 0, false, kMaxLatencyNs);
    // service defaults to "shared": a PCIe DMA engine keeps many reads outstanding and their
    // completions interleave; a USB bulk endpoint serves its transfers one after another.
    if (h.has("service"))
      c.host_link.service = h.choice<LinkService>(
          "service", {{"shared", LinkService::Shared}, {"in-order", LinkService::InOrder}});
    h.finish({"service"});
  }
  {
    ObjectReader o = top.object("off_chip_memory");
    c.off_chip_memory.kind = o.choice<MemoryKind>("kind", {{"ddr3", MemoryKind::Ddr3},
                                                           {"hbm", MemoryKind::Hbm},
                                                           {"host-link", MemoryKind::HostLink}});
    c.off_chip_memory.bytes = o.integer("bytes", 1, kMaxOffChipBytes);
    if (c.off_chip_memory.kind == MemoryKind::HostLink) {
      // Edge: parameters beyond the on-chip SRAM live in host memory and cross the host link,
      // so bandwidth and latency are the link's, never a second, independent figure.
      for (const char* k : {"bandwidth_gbps", "latency_ns", "channels"})
        if (o.has(k))
          ctx.bad(o.at(k), o.raw()[k],
                  "not allowed with kind \"host-link\": the host link's figures apply");
      c.off_chip_memory.bandwidth_gbps = c.host_link.bandwidth_gbps;
      c.off_chip_memory.latency_ns = c.host_link.latency_ns;
      c.off_chip_memory.channels = 1;
    } else {
      c.off_chip_memory.bandwidth_gbps =
          o.number("bandwidth_gbps", kMinBandwidthGbps, false, kMaxBandwidthGbps);
      c.off_chip_memory.latency_ns = o.number("latency_ns", 0, false, kMaxLatencyNs);
      c.off_chip_memory.channels = o.u32("channels", 1, 1024);
    }
    if (o.has("model"))
      c.off_chip_memory.model = o.choice<MemoryModel>(
          "model", {{"ideal", MemoryModel::Ideal}, {"structured", MemoryModel::Structured}});
    if (c.off_chip_memory.model == MemoryModel::Structured)
      read_timing(o.object("timing"), c.off_chip_memory, ctx);
    else if (o.has("timing"))
      ctx.bad(o.at("timing"), o.raw()["timing"], "only with \"model\": \"structured\"");
    o.finish({"model"});
  }
  {
    ObjectReader e = top.object("energy");
    auto& en = c.energy;
    en.scale_from_45nm = e.number("scale_from_45nm", 0, true, 10);
    auto pj = [&](const char* key) { return e.number(key, 0, false, kMaxActionPj); };
    en.mac_pj = pj("mac_pj_45nm") * en.scale_from_45nm;
    en.acc_pj_per_byte = pj("acc_pj_per_byte_45nm") * en.scale_from_45nm;
    en.ub_pj_per_byte = pj("ub_pj_per_byte_45nm") * en.scale_from_45nm;
    en.vector_op_pj = pj("vector_op_pj_45nm") * en.scale_from_45nm;
    en.instruction_pj = pj("instruction_pj_45nm") * en.scale_from_45nm;
    en.off_chip_pj_per_byte = pj("off_chip_pj_per_byte");
    en.host_link_pj_per_byte = pj("host_link_pj_per_byte");
    en.idle_w = e.number("idle_w", 0, false, kMaxIdleW);
    e.finish();
  }
  if (top.has("sources"))
    c.sources = config_reader::read_sources(doc, doc["sources"], ctx, "/clock_mhz");
  // Structured memory: every timing figure names its standard (issue 18: no uncited number).
  if (c.off_chip_memory.model == MemoryModel::Structured)
    for (const auto& [key, value] : doc["off_chip_memory"]["timing"].items()) {
      const std::string ptr = "/off_chip_memory/timing/" + config_reader::escape_key(key);
      if (c.sources.count(ptr) == 0)
        ctx.bad(ptr, value, fmt::format("needs its source: a \"{}\" entry under /sources", ptr));
    }
  top.finish({"sources", "description"});
  if (doc.contains("description") && !doc["description"].is_string())
    ctx.bad("/description", doc["description"], "must be a string");

  // Combinations that cannot work.
  const std::uint64_t row_bytes = std::uint64_t{c.mxu.rows} * size_of(c.mxu.input_type);
  if (c.unified_buffer.bytes < row_bytes)
    ctx.bad("/unified_buffer/bytes", c.unified_buffer.bytes,
            fmt::format("must hold at least one MXU input row of {} bytes", row_bytes));
  return c;
}

}  // namespace

json load_json_with_includes(const std::string& path) {
  config_reader::Origins origins;
  return config_reader::load_with_includes(path, "chip config", origins);
}

ChipConfig load_chip_config(const std::string& path) {
  config_reader::Origins origins;
  const json doc = config_reader::load_with_includes(path, "chip config", origins);
  return parse_chip_config_impl(doc, Context{path, &origins});
}

ChipConfig parse_chip_config(const json& doc, const std::string& origin) {
  return parse_chip_config_impl(doc, Context{origin, nullptr});
}

nlohmann::ordered_json chip_summary_json(const ChipConfig& c) {
  nlohmann::ordered_json j;
  j["name"] = c.name;
  j["clock_hz"] = c.clock_hz();
  j["tensor_cores"] = c.tensor_cores;
  j["mxus_per_core"] = c.mxu.count;
  j["mxu_rows"] = c.mxu.rows;
  j["mxu_cols"] = c.mxu.cols;
  j["input_type"] = name_of(c.mxu.input_type);
  j["acc_type"] = name_of(c.mxu.acc_type);
  j["peak_macs_per_cycle"] = c.peak_macs_per_cycle();
  j["peak_ops_per_s"] = c.peak_ops_per_s();
  j["on_chip_bytes"] = c.on_chip_bytes();
  j["off_chip_bytes_per_s"] = c.off_chip_bytes_per_s();
  j["host_link_bytes_per_s"] = c.host_link_bytes_per_s();
  j["ridge_macs_per_byte"] = c.ridge_macs_per_byte();
  j["idle_w"] = c.energy.idle_w;
  return j;
}

nlohmann::ordered_json to_json(const ChipConfig& c) {
  nlohmann::ordered_json j;
  j["file"] = c.file;
  j["name"] = c.name;
  j["clock_mhz"] = c.clock_mhz;
  j["tensor_cores"] = c.tensor_cores;
  j["mxu"] = {{"count", c.mxu.count},
              {"rows", c.mxu.rows},
              {"cols", c.mxu.cols},
              {"input_type", name_of(c.mxu.input_type)},
              {"acc_type", name_of(c.mxu.acc_type)},
              {"weight_fifo_tiles", c.mxu.weight_fifo_tiles},
              {"weight_buffers", c.mxu.weight_buffers},
              {"impl", c.mxu.impl == MxuImpl::Tlm ? "tlm" : "rtl"}};
  j["unified_buffer"] = {{"bytes", c.unified_buffer.bytes},
                         {"bytes_per_cycle", c.unified_buffer.bytes_per_cycle}};
  j["accumulators"] = {{"entries", c.accumulators.entries},
                       {"bytes", c.accumulator_bytes_per_core()}};
  j["vector_unit"] = {{"lanes", c.vector_unit.lanes},
                      {"sublanes", c.vector_unit.sublanes},
                      {"latency_cycles", c.vector_unit.latency_cycles},
                      {"bytes_per_cycle", c.vector_unit.bytes_per_cycle}};
  j["off_chip_memory"] = {{"kind", name_of(c.off_chip_memory.kind)},
                          {"bytes", c.off_chip_memory.bytes},
                          {"bandwidth_gbps", c.off_chip_memory.bandwidth_gbps},
                          {"latency_ns", c.off_chip_memory.latency_ns},
                          {"channels", c.off_chip_memory.channels}};
  // Only a structured model adds keys: the resolved ideal config prints as it always has.
  if (c.off_chip_memory.model == MemoryModel::Structured) {
    const OffChipTimingConfig& tm = c.off_chip_memory.timing;
    j["off_chip_memory"]["model"] = name_of(c.off_chip_memory.model);
    if (c.off_chip_memory.kind == MemoryKind::HostLink)
      j["off_chip_memory"]["timing"] = {{"packet_payload_bytes", tm.packet_payload_bytes},
                                        {"packet_overhead_bytes", tm.packet_overhead_bytes}};
    else
      j["off_chip_memory"]["timing"] = {{"banks", tm.banks},
                                        {"row_bytes", tm.row_bytes},
                                        {"interleave_bytes", tm.interleave_bytes},
                                        {"burst_bytes", tm.burst_bytes},
                                        {"t_rcd_ns", tm.t_rcd_ns},
                                        {"t_rp_ns", tm.t_rp_ns},
                                        {"t_ras_ns", tm.t_ras_ns},
                                        {"t_rrd_ns", tm.t_rrd_ns},
                                        {"t_faw_ns", tm.t_faw_ns},
                                        {"write_to_read_ns", tm.write_to_read_ns},
                                        {"read_to_write_ns", tm.read_to_write_ns},
                                        {"t_refi_ns", tm.t_refi_ns},
                                        {"t_rfc_ns", tm.t_rfc_ns}};
  }
  j["host_link"] = {
      {"kind", c.host_link.kind},
      {"bandwidth_gbps", c.host_link.bandwidth_gbps},
      {"latency_ns", c.host_link.latency_ns},
      {"service", c.host_link.service == LinkService::InOrder ? "in-order" : "shared"}};
  j["energy"] = {{"scale_from_45nm", c.energy.scale_from_45nm},
                 {"mac_pj", c.energy.mac_pj},
                 {"acc_pj_per_byte", c.energy.acc_pj_per_byte},
                 {"ub_pj_per_byte", c.energy.ub_pj_per_byte},
                 {"vector_op_pj", c.energy.vector_op_pj},
                 {"instruction_pj", c.energy.instruction_pj},
                 {"off_chip_pj_per_byte", c.energy.off_chip_pj_per_byte},
                 {"host_link_pj_per_byte", c.energy.host_link_pj_per_byte},
                 {"idle_w", c.energy.idle_w}};
  j["sources"] = c.sources;
  j["chip"] = chip_summary_json(c);
  return j;
}

}  // namespace tpu
