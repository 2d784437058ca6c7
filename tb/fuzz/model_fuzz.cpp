// Model files (tpusim's JSON, Keras's to_json, ONNX, SCALE-Sim topology CSV): any bytes either
// load or raise InputError; anything else is a finding. A loaded model's figures must be
// computable.
#include "fuzz_file.h"
#include "hw/common/error.h"
#include "sw/import/import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = tpu::fuzz::write_input("model.json", data, size);
  try {
    const tpu::ir::Graph m = tpu::importers::load_model(path);
    (void)m.macs_per_image();
    (void)m.output().size();
  } catch (const tpu::InputError&) {
  }
  return 0;
}
