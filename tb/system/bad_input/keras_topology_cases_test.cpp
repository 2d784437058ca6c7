// Bad-input rows for the other model formats sw/nn reads: Keras's model.to_json() (fed to
// `tpusim run --model`) and SCALE-Sim topology CSV (fed to `tpusim run --topology`).
#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

using nlohmann::json;

const std::string kV1 = source_path("configs/chips/v1.json");

const EntryPoint kKeras{
    "Keras to_json", "report.json", [](const Paths& p) {
      return run_tpusim({"run", "--chip", kV1, "--model", p.input.string(), "--random-weights",
                         "--images", "1", "--no-check", "--json", p.out.string()});
    }};
const EntryPoint kTopology{
    "topology CSV", "report.json", [](const Paths& p) {
      return run_tpusim({"run", "--chip", kV1, "--topology", p.input.string(), "--images", "1",
                         "--no-check", "--json", p.out.string()});
    }};

json functional() {
  return json::parse(read_bytes(source_path("tb/system/run/data/keras_functional.json")));
}
// The fixture with three layers of classes tpusim does not run.
json three_unsupported_layers() {
  json doc = functional();
  doc["config"]["layers"][2]["class_name"] = "SimpleRNN";
  doc["config"]["layers"][3]["class_name"] = "GRU";
  doc["config"]["layers"][4]["class_name"] = "Conv3D";
  return doc;
}
Case keras(std::string name, const std::string& pointer, const json& value, std::string expect) {
  return Case{&kKeras,
              std::move(name),
              file("model.json", with_value(functional(), pointer, value)),
              {std::move(expect)}};
}

const std::string kConvHeader =
    "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
    "Strides,\n";
const std::string kGemmHeader = "Layer, M, N, K,\n";
Case csv(std::string name, std::string text, std::string expect) {
  return Case{
      &kTopology, std::move(name), file("topology.csv", std::move(text)), {std::move(expect)}};
}

std::vector<Case> cases() {
  return {
      keras("keras_unknown_model_class", "/class_name", "Graph", "/class_name"),
      keras("keras_layers_not_an_array", "/config/layers", json::object(), "/config/layers"),
      keras("keras_layers_empty", "/config/layers", json::array(), "/config/layers"),
      keras("keras_inbound_node_of_an_unknown_layer", "/config/layers/1/inbound_nodes",
            json::parse(R"([[["nowhere", 0, 0, {}]]])"), "/config/layers/1/inbound_nodes"),
      keras("keras_layer_reading_itself", "/config/layers/1/inbound_nodes",
            json::parse(R"([[["conv1_pad", 0, 0, {}]]])"), "/config/layers/1/inbound_nodes"),
      keras("keras_inbound_nodes_not_a_list", "/config/layers/2/inbound_nodes", "x",
            "/config/layers/2/inbound_nodes"),
      keras("keras_input_of_zero_rows", "/config/layers/0/config/batch_input_shape",
            json::parse("[null, 0, 20, 3]"), "/config/layers/0/config/batch_input_shape"),
      keras("keras_unsupported_layer", "/config/layers/2/class_name", "GRU",
            "/config/layers/2/class_name"),
      Case{&kKeras,
           "keras_three_unsupported_layers_named_at_once",
           file("model.json", three_unsupported_layers().dump()),
           {"3 layers cannot run", "/config/layers/2 SimpleRNN", "/config/layers/3 GRU",
            "/config/layers/4 Conv3D"}},
      keras("keras_output_of_an_unknown_layer", "/config/output_layers",
            json::parse(R"([["ghost", 0, 0]])"), "/config/output_layers"),
      Case{&kKeras,
           "keras_config_missing",
           file("model.json", without(functional(), "/config")),
           {"/config is missing"}},
      csv("topology_empty_file", "", "file is empty"),
      csv("topology_header_only", kConvHeader, "no layer rows"),
      csv("topology_not_a_header", "Conv1, 30, 30, 3, 3, 3, 16, 2,\n", "line 1"),
      csv("topology_binary_garbage", "\x01" + garbage(2048, 8), "line 1"),
      csv("topology_zero_filters", kConvHeader + "Conv1, 30, 30, 3, 3, 3, 0, 2,\n",
          "Num Filter = \"0\""),
      csv("topology_negative_height", kConvHeader + "Conv1, -30, 30, 3, 3, 3, 16, 2,\n",
          "IFMAP Height = \"-30\""),
      csv("topology_missing_field", kConvHeader + "Conv1, 30, 30, 3, 3, 3, 16\n", "7 fields"),
      csv("topology_filter_larger_than_the_map", kConvHeader + "Conv1, 30, 30, 31, 3, 3, 16, 2,\n",
          "larger than the 30x30 IFMAP"),
      csv("topology_gemm_past_32_bits", kGemmHeader + "fc1, 64, 99999999999, 300,\n",
          "N = \"99999999999\""),
      csv("topology_gemm_not_a_number", kGemmHeader + "fc1, 64, abc, 300,\n", "N = \"abc\""),
      csv("topology_gemm_of_2_pow_48_elements", kGemmHeader + "fc1, 65536, 65536, 65536,\n",
          "more than 2147483648 elements"),
      csv("topology_gemm_extra_field", kGemmHeader + "fc1, 64, 10, 200, 7,\n", "5 fields"),
  };
}

INSTANTIATE_TEST_SUITE_P(KerasAndTopology, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
