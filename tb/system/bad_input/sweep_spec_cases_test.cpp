// Bad-input rows for sweep specs (sw/sweep), fed to `tpusim sweep SPEC --out DIR` as a user would:
// every row must stop before the output directory exists (docs/sweeps.md: validation before
// anything runs).
#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

using nlohmann::json;

const EntryPoint kSweepSpec{
    "sweep spec", "results", [](const Paths& p) {
      return run_tpusim({"sweep", p.input.string(), "--out", p.out.string(), "-j", "1"});
    }};

// A small valid spec with absolute paths, so it can be written anywhere.
json spec() {
  return json{{"name", "bad"},
              {"base", source_path("configs/chips/v1.json")},
              {"axes", json::array({json{{"name", "array"},
                                         {"pointer", "/mxu/rows"},
                                         {"tied", json::array({"/mxu/cols"})},
                                         {"values", json::array({64, 128})}}})},
              {"workloads",
               json::array({json{{"name", "cnn"},
                                 {"model", source_path("configs/models/fashion_mnist_cnn.json")},
                                 {"images", 8}}})}};
}

// A small valid system sweep: slices of the v3 pod, one CNN training step each.
json system_spec() {
  return json{
      {"name", "bad_system"},
      {"base", source_path("configs/systems/v3-8.json")},
      {"axes",
       json::array({json{{"name", "slice"},
                         {"pointers", {"/ici/topology/dims", "/ici/topology/wraparound"}},
                         {"values", {{{1, 1}, {false, false}}, {{2, 2}, {false, false}}}}}})},
      {"workloads",
       json::array({json{{"name", "cnn"},
                         {"command", "fit"},
                         {"model", source_path("configs/models/fashion_mnist_cnn.json")},
                         {"batch_per_chip", 8},
                         {"scale_out", true}}})}};
}

Case text(std::string name, std::string bytes, std::string expect) {
  return Case{
      &kSweepSpec, std::move(name), file("spec.json", std::move(bytes)), {std::move(expect)}};
}
Case set(std::string name, const std::string& pointer, const json& value, std::string expect) {
  return text(std::move(name), with_value(spec(), pointer, value), std::move(expect));
}
Case system_set(std::string name, const std::string& pointer, const json& value,
                std::string expect) {
  return text(std::move(name), with_value(system_spec(), pointer, value), std::move(expect));
}
Case raw(std::string name, const std::string& pointer, const std::string& value,
         std::string expect) {
  return text(std::move(name), with_raw(spec(), pointer, value), std::move(expect));
}

std::vector<Case> cases() {
  const std::string whole = spec().dump(2);
  json checked_timing_only = system_spec();
  checked_timing_only["check"] = true;
  checked_timing_only["workloads"][0]["timing_only"] = true;
  return {
      text("sweep_empty_file", "", "not valid JSON"),
      text("sweep_binary_garbage", garbage(4096, 21), "not valid JSON"),
      text("sweep_truncated", whole.substr(0, whole.size() / 2), "not valid JSON"),
      text("sweep_nested_100000_deep", nested_arrays(100000), "nested 100000 levels"),
      text("sweep_not_an_object", "[1, 2, 3]", "spec.json"),
      text("sweep_duplicate_key", whole.substr(0, whole.rfind('}')) + ", \"name\": \"other\"}",
           "/name appears twice"),
      raw("sweep_value_past_a_double", "/axes/0/values/0", "1e400", "not valid JSON"),
      raw("sweep_value_nan", "/axes/0/values/0", "NaN", "not valid JSON"),
      set("sweep_base_missing_file", "/base", "no/such/chip.json", "no/such/chip.json"),
      set("sweep_axes_not_an_array", "/axes", "rows", "/axes"),
      set("sweep_axis_empty", "/axes/0/values", json::array(), "/axes/0/values"),
      set("sweep_pointer_naming_no_key", "/axes/0/pointer", "/mxu/rowz", "/mxu/rowz"),
      set("sweep_tied_pointer_naming_no_key", "/axes/0/tied/0", "/mxu/colz", "/mxu/colz"),
      set("sweep_axis_value_the_config_rejects", "/axes/0/values/0", 0, "/mxu/rows = 0"),
      set("sweep_axis_value_of_the_wrong_type", "/axes/0/values/1", "wide", "/mxu/rows"),
      set("sweep_axis_value_past_64_bits", "/axes/0/values/0", 1e30, "/mxu/rows"),
      set("sweep_range_step_zero", "/axes/0",
          json{{"pointer", "/mxu/rows"}, {"range", {{"from", 32}, {"to", 64}, {"step", 0}}}},
          "/axes/0/range"),
      set("sweep_range_of_a_billion_values", "/axes/0",
          json{{"pointer", "/mxu/rows"}, {"range", {{"from", 1}, {"to", 1000000000}, {"step", 1}}}},
          "/axes/0"),
      // Ranges whose value count does not fit an integer (issue 12, row 18): refused, never an
      // axis of one value.
      set("sweep_range_step_1e_minus_20", "/axes/0",
          json{{"pointer", "/clock_mhz"}, {"range", {{"from", 700}, {"to", 701}, {"step", 1e-20}}}},
          "more than 10000 values"),
      set("sweep_range_step_smallest_double", "/axes/0",
          json{{"pointer", "/clock_mhz"},
               {"range", {{"from", 700}, {"to", 701}, {"step", 5e-324}}}},
          "more than 10000 values"),
      set("sweep_range_past_int64", "/axes/0",
          json{{"pointer", "/off_chip_memory/bytes"},
               {"range",
                {{"from", 9223372036854775000ull},
                 {"to", 18446744073709551000ull},
                 {"step", 4611686018427387904ull}}}},
          "2^63"),
      // Names the table or the directory layout already uses (rows 16 and 17).
      set("sweep_workload_named_chip", "/workloads/0/name", "chip", "reserved"),
      set("sweep_axis_named_point", "/axes/0/name", "point", "axis name \"point\""),
      set("sweep_axis_named_like_a_metric_column", "/axes/0/name", "cnn.cycles",
          "axis name \"cnn.cycles\""),
      set("sweep_base_a_directory", "/base", source_path("configs/chips"), "is a directory"),
      set("sweep_combine_unknown", "/combine", "cartesian", "/combine"),
      set("sweep_unknown_key", "/axis", json::array(), "/axis"),
      set("sweep_name_with_a_slash", "/name", "../escape", "/name"),
      set("sweep_workloads_empty", "/workloads", json::array(), "/workloads"),
      set("sweep_workload_model_missing_file", "/workloads/0/model", "no/such/model.json",
          "no/such/model.json"),
      set("sweep_workload_zero_images", "/workloads/0/images", 0, "/workloads/0/images"),
      set("sweep_workload_negative_batch", "/workloads/0/batch", -4, "/workloads/0/batch"),
      // System sweeps (a system config as the base, fit workloads).
      system_set("sweep_system_dims_zero", "/axes/0/values/1", json{{0, 2}, {false, false}},
                 "/ici/topology/dims/0 = 0"),
      system_set("sweep_system_dims_past_the_chip_limit", "/axes/0/values/1",
                 json{{65536, 65536}, {false, false}}, "/ici/topology/dims"),
      system_set("sweep_system_wraparound_too_short", "/axes/0/values/1", json{{2, 2}, {false}},
                 "/ici/topology/wraparound"),
      system_set("sweep_system_wraparound_on_extent_1", "/axes/0/values/0",
                 json{{1, 1}, {true, false}}, "extent 1"),
      system_set("sweep_system_value_not_a_pair", "/axes/0/values/0", json{{1, 1}},
                 "each value is an array of 2"),
      text(
          "sweep_system_run_workload_with_images",
          [] {
            json j = system_spec();
            j["workloads"][0] = {
                {"command", "run"}, {"model", j["workloads"][0]["model"]}, {"images", 64}};
            return j.dump(2);
          }(),
          "images_per_chip"),
      system_set("sweep_system_lars_eta_without_lars", "/workloads/0/lars_eta", 0.001,
                 "/workloads/0/lars_eta"),
      system_set("sweep_system_command_unknown", "/workloads/0/command", "train",
                 "/workloads/0/command"),
      system_set("sweep_system_batch_per_chip_zero", "/workloads/0/batch_per_chip", 0,
                 "/workloads/0/batch_per_chip"),
      system_set("sweep_system_batch_per_chip_string", "/workloads/0/batch_per_chip", "32",
                 "/workloads/0/batch_per_chip"),
      system_set("sweep_system_global_batch_given", "/workloads/0/batch", 64, "/workloads/0/batch"),
      system_set("sweep_system_steps_zero", "/workloads/0/steps", 0, "/workloads/0/steps"),
      system_set("sweep_system_optimizer_unknown", "/workloads/0/optimizer", "adamw",
                 "/workloads/0/optimizer"),
      system_set("sweep_system_learning_rate_negative", "/workloads/0/learning_rate", -0.1,
                 "/workloads/0/learning_rate"),
      system_set("sweep_system_scale_out_not_a_boolean", "/workloads/0/scale_out", "yes",
                 "/workloads/0/scale_out"),
      system_set("sweep_system_workload_named_system", "/workloads/0/name", "system", "reserved"),
      system_set("sweep_system_axis_named_chips", "/axes/0/name", "chips", "\"chips\""),
      system_set("sweep_system_topology_workload", "/workloads/0/topology", "x.csv",
                 "/workloads/0/topology"),
      text("sweep_system_timing_only_with_check", checked_timing_only.dump(2),
           "/workloads/0/timing_only"),
      set("sweep_chip_fit_workload", "/workloads/0/command", "fit", "needs a system config"),
  };
}

INSTANTIATE_TEST_SUITE_P(SweepSpec, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
