#include "hw/memory/accumulators.h"

#include <fmt/format.h>

#include <string>

#include "hw/common/error.h"

namespace tpu {

namespace {

std::uint32_t checked_words_per_entry(const ChipConfig& cfg) {
  const std::string& origin = cfg.file.empty() ? cfg.name : cfg.file;
  if (cfg.mxu.cols == 0) {
    throw ConfigError(
        fmt::format("{}: /mxu/cols = 0 (an accumulator entry holds mxu.cols "
                    "values; must be >= 1)",
                    origin));
  }
  if (size_of(cfg.mxu.acc_type) != Accumulators::kWordBytes) {
    throw ConfigError(
        fmt::format("{}: /mxu/acc_type = {} (accumulators hold 4-byte values: "
                    "int32 or fp32)",
                    origin, name_of(cfg.mxu.acc_type)));
  }
  return cfg.mxu.cols;
}

}  // namespace

Accumulators::Accumulators(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock,
                           SimOptions options)
    : sc_core::sc_module(name),
      socket("socket"),
      entries_(cfg.accumulators.entries),
      words_per_entry_(checked_words_per_entry(cfg)),
      sram_(std::uint64_t{entries_} * words_per_entry_ * kWordBytes,
            std::uint64_t{words_per_entry_} * kWordBytes, clock, options) {
  socket.register_b_transport(this, &Accumulators::b_transport);
  socket.register_get_direct_mem_ptr(this, &Accumulators::get_direct_mem_ptr);
  socket.register_transport_dbg(this, &Accumulators::transport_dbg);
}

}  // namespace tpu
