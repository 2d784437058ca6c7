// Bad-input rows for resource bounds (sw/sim/host_memory.h): models, image counts and chips
// whose run would need more host memory than the limit are refused up front, naming the size,
// before anything that large is allocated (the harness's time limit would catch an attempt).
#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

using nlohmann::json;

// `tpusim run` of the model in p.input on `chip`, with TPUSIM_HOST_MEMORY_LIMIT set to `limit`
// ("" leaves the default).
Outcome run_with(const Paths& p, const std::string& chip, const std::string& images,
                 const std::string& limit) {
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.push_back(limit.empty() ? "-u" : "TPUSIM_HOST_MEMORY_LIMIT=" + limit);
  if (limit.empty()) argv.push_back("TPUSIM_HOST_MEMORY_LIMIT");
  argv.insert(argv.end(), {std::string(TPUSIM_BINARY_DIR) + "/tpusim", "run", "--chip", chip,
                           "--model", p.input.string(), "--random-weights", "--images", images,
                           "--no-check", "--json", p.out.string()});
  return run_process(argv, kTimeLimitSeconds);
}

const std::string kV1 = source_path("configs/chips/v1.json");

const EntryPoint kDefaultLimit{"host memory (default limit)", "report.json",
                               [](const Paths& p) { return run_with(p, kV1, "1", ""); }};
const EntryPoint kManyImages{"host memory (2^32 images)", "report.json",
                             [](const Paths& p) { return run_with(p, kV1, "4294967296", ""); }};
const EntryPoint kOneMiB{"host memory (1 MiB limit)", "report.json",
                         [](const Paths& p) { return run_with(p, kV1, "10", "1M"); }};
// The generator writes the chip beside the model.
const EntryPoint kHugeChip{"host memory (huge chip)", "report.json", [](const Paths& p) {
                             return run_with(p, (p.dir / "chip.json").string(), "1", "");
                           }};
// The limit itself is the bad input: the generator names the variable.
Outcome run_bad_limit(const Paths& p, const std::string& limit) {
  const Paths shipped{p.dir, source_path("configs/models/fashion_mnist_cnn.json"), p.out};
  return run_with(shipped, kV1, "1", limit);
}
const EntryPoint kLimitWords{"host memory limit", "report.json",
                             [](const Paths& p) { return run_bad_limit(p, "lots"); }};
const EntryPoint kLimitUnit{"host memory limit", "report.json",
                            [](const Paths& p) { return run_bad_limit(p, "8GB"); }};
const EntryPoint kLimitZero{"host memory limit", "report.json",
                            [](const Paths& p) { return run_bad_limit(p, "0"); }};
const EntryPoint kLimitHuge{"host memory limit", "report.json",
                            [](const Paths& p) { return run_bad_limit(p, "99999999999T"); }};

json layer(const std::string& cls, const json& cfg) {
  return {{"class_name", cls}, {"config", cfg}};
}
Generator model(const json& input, const json& layers) {
  return file("model.json", json{{"name", "big"}, {"input", input}, {"layers", layers}}.dump());
}
Generator variable() {
  return [](const fs::path&) { return fs::path("TPUSIM_HOST_MEMORY_LIMIT"); };
}

std::vector<Case> cases() {
  const json flatten = layer("Flatten", json::object());
  const Generator cnn = [](const fs::path& d) {
    return write_bytes(d / "model.json",
                       read_bytes(source_path("configs/models/fashion_mnist_cnn.json")));
  };
  return {
      // 65536 x 32768 = 2^31 parameters, 16 host bytes each.
      Case{&kDefaultLimit,
           "dense_layer_of_2_pow_31_weights",
           model(json::array({256, 256, 1}),
                 json::array({flatten, layer("Dense", {{"units", 32768}})})),
           {"of host memory", "weights 32.0 GiB", "more than the limit"}},
      // 8192 x 8192 x 3 pixels: the 256 calibration images alone are 192 GiB of fp32.
      Case{&kDefaultLimit,
           "convolution_of_a_giant_image",
           model(json::array({8192, 8192, 3}),
                 json::array({layer("Conv2D", {{"filters", 16}, {"kernel_size", 3}})})),
           {"of host memory", "inputs 19", "more than the limit"}},
      Case{&kManyImages, "four_billion_images", cnn, {"4294967296 image(s)", "more than"}},
      Case{&kOneMiB,
           "shipped_cnn_under_a_one_mib_limit",
           cnn,
           {"more than the limit of 1.0 MiB (TPUSIM_HOST_MEMORY_LIMIT"}},
      Case{&kHugeChip,
           "sixty_four_cores_of_4_gib_unified_buffer",
           [cnn](const fs::path& d) {
             json chip = json::parse(read_bytes(kV1));
             chip["tensor_cores"] = 64;
             chip["unified_buffer"]["bytes"] = 4294967296ull;
             write_bytes(d / "chip.json", chip.dump());
             return cnn(d);
           },
           {"chip 256.", "more than the limit"}},
      Case{&kLimitWords, "limit_not_a_number", variable(), {"=lots: not a size"}},
      Case{&kLimitUnit, "limit_with_an_unknown_unit", variable(), {"=8GB: not a size"}},
      Case{&kLimitZero, "limit_zero", variable(), {"=0: not a size"}},
      Case{&kLimitHuge, "limit_past_64_bits", variable(), {"=99999999999T: not a size"}},
  };
}

INSTANTIATE_TEST_SUITE_P(HostMemory, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
