// Bad-input rows for model JSON (sw/nn/model.cpp), fed to `tpusim run --model`.
#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

using nlohmann::json;

const EntryPoint kModel{
    "model", "report.json", [](const Paths& p) {
      return run_tpusim({"run", "--chip", source_path("configs/chips/v1.json"), "--model",
                         p.input.string(), "--random-weights", "--images", "1", "--no-check",
                         "--json", p.out.string()});
    }};

json cnn() { return json::parse(read_bytes(source_path("configs/models/fashion_mnist_cnn.json"))); }

Case text(std::string name, std::string bytes, std::string expect) {
  return Case{&kModel, std::move(name), file("model.json", std::move(bytes)), {std::move(expect)}};
}
Case raw(std::string name, const std::string& pointer, const std::string& value,
         std::string expect) {
  return text(std::move(name), with_raw(cnn(), pointer, value), std::move(expect));
}
Case set(std::string name, const std::string& pointer, const json& value, std::string expect) {
  return text(std::move(name), with_value(cnn(), pointer, value), std::move(expect));
}
// A model of the given input and layers.
Case model(std::string name, const json& input, const json& layers, std::string expect) {
  return text(std::move(name), json{{"name", "m"}, {"input", input}, {"layers", layers}}.dump(),
              std::move(expect));
}
json layer(const std::string& cls, const json& cfg) {
  return {{"class_name", cls}, {"config", cfg}};
}

std::vector<Case> cases() {
  const std::string whole = read_bytes(source_path("configs/models/fashion_mnist_cnn.json"));
  const json flatten = layer("Flatten", json::object());
  return {
      text("empty_file", "", "file is empty"),
      text("brace_then_binary_garbage", "{" + garbage(4096, 3), "not valid JSON"),
      text("truncated", whole.substr(0, whole.size() / 3), "not valid JSON"),
      text("key_given_twice", whole.substr(0, whole.rfind('}')) + ", \"name\": \"other\"}\n",
           "/name appears twice"),
      text("nested_a_million_deep", nested_arrays(1000000), "nested"),
      text("top_level_array", "[1, 2]", "must be a JSON object"),
      Case{&kModel,
           "no_such_file",
           [](const fs::path& d) { return d / "missing.json"; },
           {"no such file"}},
      raw("filters_nan", "/layers/0/config/filters", "NaN", "not valid JSON"),
      raw("filters_overflow_a_double", "/layers/0/config/filters", "1e400", "1e400"),
      raw("filters_past_64_bits", "/layers/0/config/filters", "18446744073709551616",
          "/layers/0/config/filters"),
      set("filters_zero", "/layers/0/config/filters", 0, "/layers/0/config/filters"),
      set("filters_negative", "/layers/0/config/filters", -64, "/layers/0/config/filters"),
      set("filters_fraction", "/layers/0/config/filters", 6.5, "/layers/0/config/filters"),
      set("filters_as_string", "/layers/0/config/filters", "64", "/layers/0/config/filters"),
      set("filters_past_the_limit", "/layers/0/config/filters", 4294967296ull,
          "/layers/0/config/filters"),
      text("filters_missing", without(cnn(), "/layers/0/config/filters"),
           "/layers/0/config/filters is missing"),
      set("kernel_zero", "/layers/0/config/kernel_size", json::array({0, 3}),
          "/layers/0/config/kernel_size"),
      set("kernel_three_axes", "/layers/0/config/kernel_size", json::array({3, 3, 3}),
          "/layers/0/config/kernel_size"),
      set("kernel_larger_than_the_input", "/layers/0/config/kernel_size", 29, "does not fit"),
      set("strides_negative", "/layers/0/config/strides", -1, "/layers/0/config/strides"),
      set("padding_unknown", "/layers/0/config/padding", "full", "/layers/0/config/padding"),
      set("activation_unknown", "/layers/0/config/activation", "gelu",
          "/layers/0/config/activation"),
      set("use_bias_as_string", "/layers/0/config/use_bias", "yes", "/layers/0/config/use_bias"),
      set("channels_first", "/layers/0/config/data_format", "channels_first",
          "/layers/0/config/data_format"),
      set("zero_dilation", "/layers/0/config/dilation_rate", 0, "/layers/0/config/dilation_rate"),
      set("grouped_convolution", "/layers/0/config/groups", 2, "/layers/0/config/groups"),
      set("unknown_layer_argument", "/layers/0/config/filterz", 64, "filterz"),
      set("unknown_layer_class", "/layers/0/class_name", "Conv3D", "/layers/0/class_name"),
      set("class_name_not_a_string", "/layers/0/class_name", 7, "/layers/0/class_name"),
      set("config_not_an_object", "/layers/0/config", json::array(), "/layers/0/config"),
      set("layer_not_an_object", "/layers/1", "MaxPooling2D", "/layers/1"),
      set("layers_empty", "/layers", json::array(), "/layers"),
      set("layers_not_an_array", "/layers", json::object(), "/layers"),
      text("layers_missing", without(cnn(), "/layers"), "/layers is missing"),
      set("unknown_top_level_key", "/inputs", json::array({28, 28, 1}), "/inputs"),
      set("name_with_a_slash", "/layers/0/config/name", "conv/2d", "/layers/0/config/name"),
      set("name_with_a_control_character", "/layers/0/config/name", "conv\n2d",
          "/layers/0/config/name"),
      set("name_too_long", "/layers/0/config/name", std::string(100000, 'n'),
          "/layers/0/config/name"),
      set("duplicate_layer_names", "/layers/2/config/name", "conv2d", "must be unique"),
      set("model_name_empty", "/name", "", "/name"),
      set("input_four_axes", "/input", json::array({1, 28, 28, 1}), "/input"),
      set("input_zero", "/input", json::array({28, 0, 1}), "/input/1"),
      set("input_negative", "/input", json::array({28, -28, 1}), "/input/1"),
      set("input_past_the_limit", "/input", json::array({28, 65537, 1}), "/input/1"),
      // Dimensions each legal whose products overflow 32 bits: refused before any allocation.
      model("input_of_2_pow_32_elements", json::array({65536, 65536, 1}), json::array({flatten}),
            "/input"),
      model("conv_output_past_2_pow_31_elements", json::array({65536, 32768, 1}),
            json::array({layer("Conv2D", {{"filters", 4}, {"kernel_size", 1}})}), "elements"),
      model("dense_kernel_past_2_pow_31_elements", json::array({256, 256, 1}),
            json::array({flatten, layer("Dense", {{"units", 65536}})}), "elements"),
      model("dense_on_an_image", json::array({28, 28, 1}),
            json::array({layer("Dense", {{"units", 10}})}), "Flatten"),
      set("batch_input_shape_mismatch", "/layers/0/config/batch_input_shape",
          json::array({nullptr, 32, 32, 1}), "batch_input_shape"),
      text("a_chip_config_instead", read_bytes(source_path("configs/chips/v1.json")),
           "unknown key"),
  };
}

INSTANTIATE_TEST_SUITE_P(Model, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
