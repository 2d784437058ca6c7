// Bad-input rows for ONNX models (sw/import/onnx.cpp, docs/onnx.md), fed to `tpusim run --model`:
// files that are not protobuf, protobuf that is not a model, and models whose tensors, nodes or
// attributes lie about themselves. Each is built from a small valid model (a convolution, a ReLU,
// a Flatten and a Gemm on a 1x1x6x6 input) with one thing broken.
#include <limits>

#include "bad_input.h"
#include "common/onnx_build.h"
#include "onnx/onnx_pb.h"

namespace tpu::test::bad_input {
namespace {

const EntryPoint kOnnx{
    "onnx", "report.json", [](const Paths& p) {
      return run_tpusim({"run", "--chip", source_path("configs/chips/v1.json"), "--model",
                         p.input.string(), "--images", "1", "--json", p.out.string()});
    }};

onnx::TensorProto floats(const std::string& name, std::vector<std::int64_t> dims, float value) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto_DataType_FLOAT);
  std::int64_t n = 1;
  for (std::int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  for (std::int64_t k = 0; k < n; ++k) t.add_float_data(value * static_cast<float>(k % 7 - 3));
  return t;
}

onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op,
                      const std::vector<std::string>& in, const std::string& out) {
  return onnx_node(g, op, in, out, out + "_node");
}

// x [1, 1, 6, 6] -> Conv 3x3, 2 filters -> Relu -> Flatten -> Gemm to 3 -> y [1, 3].
onnx::ModelProto good_model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("tpusim bad-input table");
  auto* opset = m.add_opset_import();
  opset->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("small");
  onnx_value(g->add_input(), "x", {1, 1, 6, 6});
  onnx_value(g->add_output(), "y", {1, 3});
  *g->add_initializer() = floats("w", {2, 1, 3, 3}, 0.1f);
  *g->add_initializer() = floats("b", {2}, 0.2f);
  *g->add_initializer() = floats("d", {3, 32}, 0.05f);
  node(g, "Conv", {"x", "w", "b"}, "c");
  node(g, "Relu", {"c"}, "r");
  node(g, "Flatten", {"r"}, "f");
  onnx_attr_int(node(g, "Gemm", {"f", "d"}, "y"), "transB", 1);
  return m;
}

std::string bytes_of(const onnx::ModelProto& m) { return m.SerializeAsString(); }

Case row(const std::string& name, std::string bytes, std::vector<std::string> expect) {
  expect.insert(expect.begin(), "model.onnx: ");
  return Case{&kOnnx, name, file("model.onnx", std::move(bytes)), std::move(expect)};
}

Case edited(const std::string& name, const std::function<void(onnx::ModelProto&)>& edit,
            std::vector<std::string> expect) {
  onnx::ModelProto m = good_model();
  edit(m);
  return row(name, bytes_of(m), std::move(expect));
}

// A graph attribute nested `depth` levels deep: If's then_branch holding an If, and so on.
std::string nested_graphs(int depth) {
  onnx::ModelProto m = good_model();
  onnx::GraphProto inner;
  for (int k = 0; k < depth; ++k) {
    onnx::GraphProto outer;
    onnx::NodeProto* n = outer.add_node();
    n->set_op_type("If");
    auto* a = n->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto_AttributeType_GRAPH);
    *a->mutable_g() = inner;
    inner = std::move(outer);
  }
  auto* a = m.mutable_graph()->mutable_node(1)->add_attribute();
  a->set_name("deep");
  a->set_type(onnx::AttributeProto_AttributeType_GRAPH);
  *a->mutable_g() = inner;
  return bytes_of(m);
}

std::vector<Case> cases() {
  const std::string good = bytes_of(good_model());
  return {
      // Not protobuf at all, or not a whole one.
      row("garbage", std::string("\x08\x07\xff\xff", 4) + garbage(4096, 11),
          {"not an ONNX model", "do not parse as a protobuf onnx.ModelProto"}),
      row("truncated_protobuf", good.substr(0, good.size() / 2),
          {"not an ONNX model", "truncated"}),
      row("cut_inside_the_last_tensor", good.substr(0, good.size() - 3), {"not an ONNX model"}),
      row("graphs_nested_past_protobufs_depth_limit", nested_graphs(150),
          {"not an ONNX model", "do not parse"}),
      // A model in name only.
      edited("a_model_with_no_graph", [](onnx::ModelProto& m) { m.clear_graph(); },
             {"without a graph"}),
      edited("a_graph_with_no_nodes", [](onnx::ModelProto& m) { m.mutable_graph()->clear_node(); },
             {"has no nodes"}),
      edited("no_opset_import", [](onnx::ModelProto& m) { m.clear_opset_import(); },
             {"no opset_import for the ONNX domain"}),
      edited("opset_from_the_future",
             [](onnx::ModelProto& m) { m.mutable_opset_import(0)->set_version(99); },
             {"opset_import version 99"}),
      // Initializers that disagree with themselves.
      edited("an_initializer_whose_size_disagrees_with_its_dims",
             [](onnx::ModelProto& m) { m.mutable_graph()->mutable_initializer(0)->add_dims(2); },
             {"initializer \"w\"", "dims [2, 1, 3, 3, 2] hold 36 values, its float_data holds 18"}),
      edited("raw_data_of_the_wrong_length",
             [](onnx::ModelProto& m) {
               auto* t = m.mutable_graph()->mutable_initializer(1);
               t->clear_float_data();
               t->set_raw_data(std::string(7, '\0'));
             },
             {"initializer \"b\"", "hold 2 values of 4 bytes, its raw_data has 7 bytes"}),
      edited("dims_of_two_to_the_62",
             [](onnx::ModelProto& m) {
               auto* t = m.mutable_graph()->mutable_initializer(0);
               t->clear_dims();
               t->add_dims(std::int64_t{1} << 31);
               t->add_dims(std::int64_t{1} << 31);
             },
             {"initializer \"w\"", "more than 2147483648 elements"}),
      edited(
          "a_negative_dim",
          [](onnx::ModelProto& m) { m.mutable_graph()->mutable_initializer(0)->set_dims(0, -2); },
          {"initializer \"w\"", "dims -2, 1, 3, 3"}),
      edited("data_in_an_external_file",
             [](onnx::ModelProto& m) {
               auto* t = m.mutable_graph()->mutable_initializer(0);
               t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
               auto* e = t->add_external_data();
               e->set_key("location");
               e->set_value("/etc/passwd");
             },
             {"initializer \"w\"", "data in an external file"}),
      edited("a_string_initializer",
             [](onnx::ModelProto& m) {
               m.mutable_graph()->mutable_initializer(1)->set_data_type(
                   onnx::TensorProto_DataType_STRING);
             },
             {"initializer \"b\"", "data_type STRING"}),
      edited("a_nan_weight",
             [](onnx::ModelProto& m) {
               m.mutable_graph()->mutable_initializer(0)->set_float_data(
                   4, std::numeric_limits<float>::quiet_NaN());
             },
             {"node 0 (Conv \"c_node\")", "parameters must be finite"}),
      // Graphs that do not hold together.
      edited("a_node_reading_a_value_nothing_makes",
             [](onnx::ModelProto& m) { m.mutable_graph()->mutable_node(1)->set_input(0, "ghost"); },
             {"value \"ghost\": no earlier node, initializer or graph input makes it"}),
      edited("an_output_nothing_makes",
             [](onnx::ModelProto& m) { m.mutable_graph()->mutable_output(0)->set_name("nowhere"); },
             {"graph output \"nowhere\": no node, initializer or input makes it"}),
      edited("two_graph_inputs",
             [](onnx::ModelProto& m) {
               onnx_value(m.mutable_graph()->add_input(), "x2", {1, 3});
             },
             {"graph has 2 inputs besides its initializers: \"x\", \"x2\""}),
      edited("a_symbolic_image_size",
             [](onnx::ModelProto& m) {
               auto* d = m.mutable_graph()
                             ->mutable_input(0)
                             ->mutable_type()
                             ->mutable_tensor_type()
                             ->mutable_shape()
                             ->mutable_dim(2);
               d->set_dim_param("height");
             },
             {"graph input \"x\": dimension 2 is \"height\"",
              "only the first, the batch, may be symbolic"}),
      edited("an_input_without_a_shape",
             [](onnx::ModelProto& m) {
               m.mutable_graph()
                   ->mutable_input(0)
                   ->mutable_type()
                   ->mutable_tensor_type()
                   ->clear_shape();
             },
             {"graph input \"x\": no shape"}),
      // Nodes the IR cannot express, all named in one message.
      edited(
          "three_unsupported_nodes",
          [](onnx::ModelProto& m) {
            auto* g = m.mutable_graph();
            g->mutable_node(1)->set_op_type("Softplus");
            onnx_attr_int(g->mutable_node(0), "group", 3);
            g->mutable_node(3)->set_domain("com.example");
          },
          {"3 ONNX nodes cannot be expressed in tpusim's graph IR",
           "node 0 (Conv \"c_node\"): group = 3",
           "node 1 (Softplus \"r_node\"): operator Softplus is not supported",
           "node 3 (Gemm \"y_node\"): operator Gemm of domain \"com.example\" is not supported"}),
      edited("a_gemm_whose_weight_does_not_fit",
             [](onnx::ModelProto& m) {
               auto* t = m.mutable_graph()->mutable_initializer(2);
               t->set_dims(1, 31);
               t->mutable_float_data()->Truncate(93);
             },
             {"node 3 (Gemm \"y_node\")", "the inner dimensions differ"}),
      edited("a_name_with_control_bytes",
             [](onnx::ModelProto& m) {
               m.mutable_graph()->mutable_node(1)->set_op_type(std::string("Re\x01lu\xff", 6));
             },
             {"operator Re\\x01lu\\xff is not supported"}),
  };
}

INSTANTIATE_TEST_SUITE_P(Onnx, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
