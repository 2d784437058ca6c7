#include "hw/mxu/mxu_factory.h"

#include <fmt/format.h>

#include "hw/common/error.h"
#include "hw/mxu/rtl_mxu.h"
#include "rtl/model/array_model.h"

namespace tpu {

std::unique_ptr<Mxu> make_mxu(const std::string& name, const ChipConfig& cfg, const Clock& clock,
                              const CoreStorage& storage, LayerCounters& counters,
                              const std::string& core_name, SimOptions options) {
  if (cfg.mxu.impl == MxuImpl::Tlm)
    return std::make_unique<Mxu>(name.c_str(), cfg, clock, storage, counters, core_name, options);
  std::unique_ptr<rtl::ArrayModel> array = rtl::make_array_model(cfg.mxu.rows, cfg.mxu.cols);
  if (!array) {
    const std::string where = cfg.file.empty() ? "chip config" : cfg.file;
    std::string built;
    for (const auto& [r, c] : rtl::array_model_sizes())
      built += fmt::format("{}{}x{}", built.empty() ? "" : ", ", r, c);
    if (built.empty())
      throw ConfigError(fmt::format(
          "{}: /mxu/impl = \"rtl\" (this build has no Verilated array: it was configured without "
          "Verilator 5 or with TPUSIM_BUILD_RTL=OFF; use impl \"tlm\" or rebuild)",
          where));
    throw ConfigError(fmt::format(
        "{}: /mxu/impl = \"rtl\" (this build has no Verilated array of {} x {}; it has {}. The "
        "build Verilates the size of every configs/chips/*.json and tb/rtl/configs/*.json whose "
        "mxu.impl is \"rtl\": add one and re-run cmake)",
        where, cfg.mxu.rows, cfg.mxu.cols, built));
  }
  return std::make_unique<RtlMxu>(name.c_str(), cfg, clock, storage, counters, core_name,
                                  std::move(array), options);
}

}  // namespace tpu
