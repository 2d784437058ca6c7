// Bad-input rows for chip configs (hw/config), fed to `tpusim run --chip` as a user would.
#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

using nlohmann::json;

const EntryPoint kChipConfig{
    "chip config", "report.json", [](const Paths& p) {
      return run_tpusim({"run", "--chip", p.input.string(), "--random-weights", "--images", "1",
                         "--no-check", "--json", p.out.string()});
    }};

json v1() { return json::parse(read_bytes(source_path("configs/chips/v1.json"))); }

Case row(std::string name, Generator make, std::string expect) {
  return Case{&kChipConfig, std::move(name), std::move(make), {std::move(expect)}};
}
Case text(std::string name, std::string bytes, std::string expect) {
  return row(std::move(name), file("chip.json", std::move(bytes)), std::move(expect));
}
// v1.json with one field's value replaced by literal text.
Case raw(std::string name, const std::string& pointer, const std::string& value,
         std::string expect) {
  return text(std::move(name), with_raw(v1(), pointer, value), std::move(expect));
}
Case set(std::string name, const std::string& pointer, const json& value, std::string expect) {
  return text(std::move(name), with_value(v1(), pointer, value), std::move(expect));
}

std::vector<Case> cases() {
  const std::string whole = read_bytes(source_path("configs/chips/v1.json"));
  return {
      // The file as a whole.
      text("empty_file", "", "file is empty"),
      text("only_whitespace", " \n\t\r\n", "file is empty"),
      text("binary_garbage", garbage(4096, 1), "not valid JSON"),
      text("nul_bytes", std::string(64, '\0'), "not valid JSON"),
      text("truncated_in_the_middle", whole.substr(0, whole.size() / 2), "not valid JSON"),
      text("key_given_twice", whole.substr(0, whole.rfind('}')) + ", \"name\": \"tpu-v9\"}\n",
           "/name appears twice"),
      text("truncated_by_one_byte", whole.substr(0, whole.size() - 2), "not valid JSON"),
      text("top_level_array", "[1, 2, 3]", "must be a JSON object"),
      text("top_level_string", "\"tpu-v1\"", "must be a JSON object"),
      text("nested_a_million_deep", nested_arrays(1000000), "nested"),
      text("invalid_utf8_in_a_string", with_raw(v1(), "/name", "\"tpu\xff\xfe\""),
           "not valid JSON"),
      row(
          "no_such_file", [](const fs::path& d) { return d / "missing.json"; }, "no such file"),
      row(
          "a_directory",
          [](const fs::path& d) {
            fs::create_directory(d / "chip.json");
            return d / "chip.json";
          },
          "is a directory"),
      // Numbers JSON cannot hold, or that overflow what a field allows.
      raw("clock_nan", "/clock_mhz", "NaN", "not valid JSON"),
      raw("clock_infinity", "/clock_mhz", "Infinity", "not valid JSON"),
      raw("clock_overflows_a_double", "/clock_mhz", "1e400", "1e400"),
      raw("clock_underflows_to_zero", "/clock_mhz", "1e-400", "/clock_mhz"),
      set("clock_negative", "/clock_mhz", -700, "/clock_mhz"),
      set("clock_zero", "/clock_mhz", 0, "/clock_mhz"),
      set("clock_beyond_the_exact_range", "/clock_mhz", 1e9, "/clock_mhz"),
      set("clock_as_string", "/clock_mhz", "700", "/clock_mhz"),
      set("clock_null", "/clock_mhz", nullptr, "/clock_mhz"),
      set("rows_zero", "/mxu/rows", 0, "/mxu/rows"),
      set("rows_negative", "/mxu/rows", -256, "/mxu/rows"),
      set("rows_fraction", "/mxu/rows", 255.5, "/mxu/rows"),
      raw("rows_past_64_bits", "/mxu/rows", "18446744073709551616", "/mxu/rows"),
      raw("rows_int64_min", "/mxu/rows", "-9223372036854775808", "/mxu/rows"),
      set("rows_past_the_limit", "/mxu/rows", 4097, "/mxu/rows"),
      set("rows_as_string", "/mxu/rows", "256", "/mxu/rows"),
      set("cols_bool", "/mxu/cols", true, "/mxu/cols"),
      set("cols_array", "/mxu/cols", json::array({256}), "/mxu/cols"),
      set("mxu_count_zero", "/mxu/count", 0, "/mxu/count"),
      set("mxu_count_2_pow_32", "/mxu/count", 4294967296ull, "/mxu/count"),
      set("tensor_cores_past_the_limit", "/tensor_cores", 65, "/tensor_cores"),
      set("weight_buffers_three", "/mxu/weight_buffers", 3, "/mxu/weight_buffers"),
      set("input_type_unknown", "/mxu/input_type", "int4", "/mxu/input_type"),
      set("accumulator_type_mismatch", "/mxu/acc_type", "fp32", "/mxu/acc_type"),
      set("unified_buffer_past_32_bit_addresses", "/unified_buffer/bytes", 4294967297ull,
          "/unified_buffer/bytes"),
      set("unified_buffer_smaller_than_a_row", "/unified_buffer/bytes", 255,
          "/unified_buffer/bytes"),
      set("accumulators_past_24_bit_addresses", "/accumulators/entries", 16777217,
          "/accumulators/entries"),
      set("off_chip_past_48_bit_addresses", "/off_chip_memory/bytes", 281474976710657ull,
          "/off_chip_memory/bytes"),
      set("off_chip_bandwidth_zero", "/off_chip_memory/bandwidth_gbps", 0,
          "/off_chip_memory/bandwidth_gbps"),
      set("off_chip_latency_negative", "/off_chip_memory/latency_ns", -1,
          "/off_chip_memory/latency_ns"),
      // Absurd values of the right type: each would hang or overflow the simulation (a transfer
      // of zero cycles forever, picoseconds past 64 bits); refused by range (issue 12, row 20).
      set("off_chip_bandwidth_1e300", "/off_chip_memory/bandwidth_gbps", 1e300,
          "must be a number >= 0.001 and <= 1000000"),
      set("off_chip_bandwidth_2_pow_63", "/off_chip_memory/bandwidth_gbps", 9223372036854775808ull,
          "/off_chip_memory/bandwidth_gbps"),
      set("off_chip_bandwidth_1e_minus_300", "/off_chip_memory/bandwidth_gbps", 1e-300,
          "/off_chip_memory/bandwidth_gbps"),
      set("off_chip_latency_1e300", "/off_chip_memory/latency_ns", 1e300,
          "/off_chip_memory/latency_ns"),
      set("host_link_bandwidth_1e300", "/host_link/bandwidth_gbps", 1e300,
          "/host_link/bandwidth_gbps"),
      set("host_link_latency_2_pow_63", "/host_link/latency_ns", 9223372036854775808ull,
          "/host_link/latency_ns"),
      set("clock_below_one_megahertz", "/clock_mhz", 1e-300, "/clock_mhz"),
      set("energy_per_mac_1e300", "/energy/mac_pj_45nm", 1e300, "/energy/mac_pj_45nm"),
      set("idle_power_1e300", "/energy/idle_w", 1e300, "/energy/idle_w"),
      set("off_chip_channels_zero", "/off_chip_memory/channels", 0, "/off_chip_memory/channels"),
      set("off_chip_kind_unknown", "/off_chip_memory/kind", "sram", "/off_chip_memory/kind"),
      set("host_link_kind_empty", "/host_link/kind", "", "/host_link/kind"),
      set("host_link_service_unknown", "/host_link/service", "fifo",
          "/host_link/service = \"fifo\" (must be one of \"shared\", \"in-order\")"),
      set("energy_negative", "/energy/idle_w", -28, "/energy/idle_w"),
      set("energy_scale_zero", "/energy/scale_from_45nm", 0, "/energy/scale_from_45nm"),
      set("vector_lanes_zero", "/vector_unit/lanes", 0, "/vector_unit/lanes"),
      // Shape of the document.
      set("mxu_not_an_object", "/mxu", "256x256", "/mxu"),
      text("mxu_missing", without(v1(), "/mxu"), "/mxu is missing"),
      text("rows_missing", without(v1(), "/mxu/rows"), "/mxu/rows is missing"),
      set("unknown_top_level_key", "/clock_ghz", 0.7, "/clock_ghz is not a known key"),
      set("unknown_nested_key", "/mxu/row", 256, "/mxu/row is not a known key"),
      set("description_not_a_string", "/description", 42, "/description"),
      set("source_names_no_field", "/sources/~1mxu~1depth", "J17", "/sources/~1mxu~1depth"),
      set("source_not_a_string", "/sources/~1clock_mhz", 7, "/sources/~1clock_mhz"),
      // A megabyte name is legal; with zero rows the message must still be short.
      text("zero_rows_beside_a_megabyte_name",
           with_value(json::parse(with_value(v1(), "/name", std::string(1 << 20, 'x'))),
                      "/mxu/rows", 0),
           "/mxu/rows"),
      // Includes.
      set("include_not_a_string", "/include", 3, "/include"),
      set("include_missing_file", "/include", "nowhere.json", "no such file"),
      row(
          "include_cycle",
          [](const fs::path& d) {
            write_bytes(d / "b.json", R"({"include": "chip.json"})");
            return write_bytes(d / "chip.json", R"({"include": "b.json"})");
          },
          "include cycle"),
      row(
          "include_of_an_array",
          [](const fs::path& d) {
            write_bytes(d / "list.json", "[1, 2]");
            return write_bytes(d / "chip.json", R"({"include": "list.json", "name": "x"})");
          },
          "must hold a JSON object"),
      row(
          "include_of_garbage",
          [](const fs::path& d) {
            write_bytes(d / "junk.json", garbage(512, 2));
            write_bytes(d / "chip.json", R"({"include": "junk.json"})");
            return d / "junk.json";
          },
          "not valid JSON"),
      row(
          "includes_nested_too_deep",
          [](const fs::path& d) {
            for (int i = 0; i < 40; ++i)
              write_bytes(d / ("inc" + std::to_string(i) + ".json"),
                          R"({"include": "inc)" + std::to_string(i + 1) + R"(.json"})");
            write_bytes(d / "inc40.json", "{}");
            return write_bytes(d / "chip.json", R"({"include": "inc0.json"})");
          },
          "nested deeper"),
  };
}

INSTANTIATE_TEST_SUITE_P(ChipConfig, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
