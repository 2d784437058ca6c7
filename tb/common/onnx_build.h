// Building small ONNX models in tests with libonnx's generated classes (the importer under test,
// sw/import/onnx.cpp, reads what they serialize). Tests that include this link onnx_proto.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace tpu::test {

// A dimension written as this is the symbolic batch (dim_param "batch").
inline constexpr std::int64_t kOnnxBatch = -1;

// Declares `v` a FLOAT tensor `name` of `dims`.
inline void onnx_value(onnx::ValueInfoProto* v, const std::string& name,
                       const std::vector<std::int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto_DataType_FLOAT);
  for (std::int64_t d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (d == kOnnxBatch)
      dim->set_dim_param("batch");
    else
      dim->set_dim_value(d);
  }
}

// Appends node `op` reading `in` and writing `out`; unnamed when `name` is empty.
inline onnx::NodeProto* onnx_node(onnx::GraphProto* g, const std::string& op,
                                  const std::vector<std::string>& in, const std::string& out,
                                  const std::string& name = "") {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  if (!name.empty()) n->set_name(name);
  for (const auto& s : in) n->add_input(s);
  n->add_output(out);
  return n;
}

inline void onnx_attr_int(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}

inline void onnx_attr_ints(onnx::NodeProto* n, const std::string& name,
                           const std::vector<std::int64_t>& v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (std::int64_t x : v) a->add_ints(x);
}

}  // namespace tpu::test
