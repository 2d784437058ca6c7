// Bad-input rows for system configs (hw/config/system_config), fed to `tpusim info --system` as
// a user would. The hostile file is v3-2048.json with one thing changed; its chip is named by
// an absolute path, so the file works from the case's directory.
#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

using nlohmann::json;

const EntryPoint kSystemConfig{
    "system config", "info.json", [](const Paths& p) {
      return run_tpusim({"info", "--system", p.input.string(), "--json"});
    }};

json pod() {
  json doc = json::parse(read_bytes(source_path("configs/systems/v3-2048.json")));
  doc["chip"] = source_path("configs/chips/v3.json");
  return doc;
}

Case row(std::string name, Generator make, std::string expect) {
  return Case{&kSystemConfig, std::move(name), std::move(make), {std::move(expect)}};
}
Case text(std::string name, std::string bytes, std::string expect) {
  return row(std::move(name), file("system.json", std::move(bytes)), std::move(expect));
}
// The pod with one field's value replaced by literal text.
Case raw(std::string name, const std::string& pointer, const std::string& value,
         std::string expect) {
  return text(std::move(name), with_raw(pod(), pointer, value), std::move(expect));
}
Case set(std::string name, const std::string& pointer, const json& value, std::string expect) {
  return text(std::move(name), with_value(pod(), pointer, value), std::move(expect));
}
// The pod with its topology replaced.
Case topology(std::string name, const json& dims, const json& wraparound, std::string expect) {
  json doc = pod();
  doc["ici"]["topology"] = {{"dims", dims}, {"wraparound", wraparound}};
  return text(std::move(name), doc.dump(2), std::move(expect));
}
// system.json, the pod naming chip.json, which `make_chip` makes from its path.
Case chip(std::string name, std::function<void(const fs::path&)> make_chip, std::string expect) {
  return row(
      std::move(name),
      [make_chip](const fs::path& d) {
        json doc = pod();
        doc["chip"] = "chip.json";
        write_bytes(d / "system.json", doc.dump(2));
        make_chip(d / "chip.json");
        return d / "system.json";
      },
      std::move(expect));
}
// pod.json (the pod) and system.json, which includes it and adds `overlay`.
Case slice(std::string name, const json& overlay, std::string expect) {
  return row(
      std::move(name),
      [overlay](const fs::path& d) {
        write_bytes(d / "pod.json", pod().dump(2));
        json doc = overlay;
        doc["include"] = "pod.json";
        return write_bytes(d / "system.json", doc.dump(2));
      },
      std::move(expect));
}

std::vector<Case> cases() {
  const std::string whole = pod().dump(2);
  return {
      // The file as a whole.
      text("empty_file", "", "file is empty"),
      text("binary_garbage", garbage(4096, 3), "not valid JSON"),
      text("truncated_in_the_middle", whole.substr(0, whole.size() / 2), "not valid JSON"),
      text("top_level_array", "[32, 32]", "must be a JSON object"),
      text("key_given_twice", whole.substr(0, whole.rfind('}')) + ", \"name\": \"v3-9\"}\n",
           "/name appears twice"),
      text("nested_a_million_deep", nested_arrays(1000000), "nested"),
      row(
          "no_such_file", [](const fs::path& d) { return d / "missing.json"; },
          "cannot read the system config (no such file"),
      text("a_chip_config_given_as_a_system", read_bytes(source_path("configs/chips/v1.json")),
           "/chip is missing"),
      // The chip it names.
      text("chip_missing", without(pod(), "/chip"), "/chip is missing"),
      set("chip_not_a_string", "/chip", 3, "/chip = 3"),
      set("chip_empty", "/chip", "", "/chip = \"\""),
      set("chip_no_such_file", "/chip", "nowhere.json", "/chip = \"nowhere.json\""),
      chip(
          "chip_a_directory", [](const fs::path& c) { fs::create_directory(c); }, "is a directory"),
      chip(
          "chip_is_garbage", [](const fs::path& c) { write_bytes(c, garbage(512, 4)); },
          "chip.json: not valid JSON"),
      chip(
          "chip_with_zero_rows",
          [](const fs::path& c) {
            json v2 = json::parse(read_bytes(source_path("configs/chips/v2.json")));
            v2["mxu"]["rows"] = 0;
            write_bytes(c, v2.dump(2));
          },
          "chip.json: /mxu/rows = 0"),
      chip(
          "chip_is_a_system_config",
          [](const fs::path& c) { write_bytes(c, read_bytes(c.parent_path() / "system.json")); },
          "/clock_mhz is missing"),
      // Names and hosts.
      set("name_empty", "/name", "", "/name"),
      set("description_not_a_string", "/description", 42, "/description"),
      set("chips_per_host_zero", "/chips_per_host", 0, "/chips_per_host = 0"),
      set("chips_per_host_fraction", "/chips_per_host", 4.5, "/chips_per_host = 4.5"),
      set("chips_per_host_past_the_limit", "/chips_per_host", 65537, "/chips_per_host"),
      set("chips_per_host_leaves_a_remainder", "/chips_per_host", 3, "must divide the 1024 chips"),
      // Links.
      set("ici_not_an_object", "/ici", "32x32 torus", "/ici = \"32x32 torus\""),
      text("ici_missing", without(pod(), "/ici"), "/ici is missing"),
      set("bandwidth_zero", "/ici/bandwidth_gbps", 0, "/ici/bandwidth_gbps = 0"),
      set("bandwidth_negative", "/ici/bandwidth_gbps", -83, "/ici/bandwidth_gbps"),
      set("bandwidth_1e300", "/ici/bandwidth_gbps", 1e300,
          "must be a number >= 0.001 and <= 1000000"),
      set("bandwidth_as_string", "/ici/bandwidth_gbps", "83", "/ici/bandwidth_gbps"),
      raw("bandwidth_nan", "/ici/bandwidth_gbps", "NaN", "not valid JSON"),
      raw("bandwidth_overflows_a_double", "/ici/bandwidth_gbps", "1e400", "1e400"),
      set("latency_negative", "/ici/latency_ns", -1, "/ici/latency_ns"),
      set("latency_2_pow_63", "/ici/latency_ns", 9223372036854775808ull, "/ici/latency_ns"),
      set("links_per_chip_fraction", "/ici/links_per_chip", 3.5, "/ici/links_per_chip"),
      set("links_per_chip_past_the_limit", "/ici/links_per_chip", 65, "/ici/links_per_chip"),
      set("links_per_chip_too_few_for_the_torus", "/ici/links_per_chip", 3,
          "fewer than the 4 links per chip"),
      text("links_per_chip_missing", without(pod(), "/ici/links_per_chip"),
           "/ici/links_per_chip is missing"),
      // The topology.
      set("topology_not_an_object", "/ici/topology", json::array({32, 32}), "/ici/topology"),
      text("dims_missing", without(pod(), "/ici/topology/dims"), "/ici/topology/dims is missing"),
      topology("dims_empty", json::array(), json::array(), "/ici/topology/dims = []"),
      topology("dims_of_four_axes", {2, 2, 2, 2}, {false, false, false, false}, "1 to 3 integers"),
      topology("dims_not_an_array", 1024, json::array({true}), "/ici/topology/dims = 1024"),
      topology("dims_zero", {32, 0}, {true, false}, "/ici/topology/dims/1 = 0"),
      topology("dims_negative", {-32, 32}, {true, true}, "/ici/topology/dims/0 = -32"),
      topology("dims_fraction", {32, 1.5}, {true, true}, "/ici/topology/dims/1 = 1.5"),
      topology("dims_as_strings", {"32", "32"}, {true, true}, "/ici/topology/dims/0"),
      topology("dims_past_2_pow_32", {4294967296ull, 1}, {false, false},
               "/ici/topology/dims/0 = 4294967296"),
      topology("dims_product_past_the_limit", {256, 257}, {true, true}, "65792 chips"),
      topology("dims_product_past_32_bits", {65536, 65536}, {true, true}, "4294967296 chips"),
      topology("wraparound_shorter_than_dims", {32, 32}, {true}, "2 booleans"),
      topology("wraparound_not_booleans", {32, 32}, {1, 1}, "/ici/topology/wraparound/0 = 1"),
      topology("wraparound_on_an_axis_of_one_chip", {32, 1}, {true, true},
               "/ici/topology/wraparound/1 = true"),
      text("wraparound_missing", without(pod(), "/ici/topology/wraparound"),
           "/ici/topology/wraparound is missing"),
      set("unknown_topology_key", "/ici/topology/shape", "torus",
          "/ici/topology/shape is not a known key"),
      set("unknown_ici_key", "/ici/bandwidth_gbs", 100, "/ici/bandwidth_gbs is not a known key"),
      set("unknown_top_level_key", "/chips_per_tray", 4, "/chips_per_tray is not a known key"),
      // Sources.
      set("source_names_no_field", "/sources/~1ici~1links", "A: x", "/sources/~1ici~1links"),
      set("source_not_a_string", "/sources/~1chips_per_host", 4, "/sources/~1chips_per_host"),
      // Includes: a slice of the pod.
      slice("slice_sets_dims_without_wraparound", {{"ici", {{"topology", {{"dims", {4, 4}}}}}}},
            "/ici/topology/wraparound is missing"),
      slice("slice_needs_more_links_than_the_pods_chips",
            {{"ici", {{"topology", {{"dims", {4, 4, 4}}, {"wraparound", {true, true, true}}}}}}},
            "fewer than the 6 links per chip"),
      slice("slice_leaves_the_pods_hosts_a_remainder",
            {{"ici", {{"topology", {{"dims", {3, 3}}, {"wraparound", {true, true}}}}}}},
            "must divide the 9 chips"),
      set("include_missing_file", "/include", "nowhere.json", "no such file"),
      row(
          "include_cycle",
          [](const fs::path& d) {
            write_bytes(d / "b.json", R"({"include": "system.json"})");
            return write_bytes(d / "system.json", R"({"include": "b.json"})");
          },
          "include cycle"),
  };
}

INSTANTIATE_TEST_SUITE_P(SystemConfig, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
