#include "hw/unit/program_error.h"

#include <fmt/format.h>

#include <systemc>

#include "hw/common/error.h"

namespace tpu {

void report_program_error(const std::string& core, std::uint64_t index, const std::string& what) {
  const std::string msg = fmt::format("{} instruction {}: {}", core, index, what);
  SC_REPORT_ERROR(kProgramErrorType, msg.c_str());
  // SC_REPORT_ERROR throws under the default actions; if a user changed them, still stop here.
  throw ProgramError(msg);
}

void report_program_error(const std::string& core, const InFlight& f, const std::string& what) {
  const std::string msg = fmt::format("{} instruction {} ({}): {}", core, f.index,
                                      isa::mnemonic(isa::opcode_of(f.inst)), what);
  SC_REPORT_ERROR(kProgramErrorType, msg.c_str());
  throw ProgramError(msg);
}

void check_ub_range(const std::string& core, const InFlight& f, std::uint64_t ub_bytes,
                    const char* field, std::uint64_t lo, std::uint64_t bytes) {
  if (lo > ub_bytes || bytes > ub_bytes - lo)
    report_program_error(core, f,
                         fmt::format("{} range {:#x} + {} bytes is outside the {}-byte unified "
                                     "buffer",
                                     field, lo, bytes, ub_bytes));
}

}  // namespace tpu
