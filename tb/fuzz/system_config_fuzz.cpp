// System configs: any bytes either load or raise InputError (ConfigError); anything else — another
// exception, a crash, a sanitizer finding — is a finding. The input is configs/systems/fuzz.json
// in a private copy of the shipped configs, so "chip": "../chips/v3.json" and
// "include": "v3-2048.json" resolve as they do for the shipped files.
#include <filesystem>

#include "fuzz_file.h"
#include "hw/common/error.h"
#include "hw/config/system_config.h"

namespace {

void copy_shipped_configs() {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(tpu::fuzz::private_dir().path()) / "configs";
  fs::create_directories(root);
  for (const char* sub : {"chips", "memory", "systems"})
    fs::copy(fs::path(TPUSIM_SOURCE_DIR) / "configs" / sub, root / sub,
             fs::copy_options::recursive);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool copied = (copy_shipped_configs(), true);
  (void)copied;
  const std::string path = tpu::fuzz::write_input("configs/systems/fuzz.json", data, size);
  try {
    (void)tpu::load_system_config(path);
  } catch (const tpu::InputError&) {
  }
  return 0;
}
