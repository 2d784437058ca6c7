// Chip configs: any bytes either load or raise InputError (ConfigError); anything else — another
// exception, a crash, a sanitizer finding — is a finding.
#include "fuzz_file.h"
#include "hw/common/error.h"
#include "hw/config/chip_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = tpu::fuzz::write_input("chip.json", data, size);
  try {
    (void)tpu::load_chip_config(path);
  } catch (const tpu::InputError&) {
  }
  return 0;
}
