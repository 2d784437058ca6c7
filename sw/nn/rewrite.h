// Graph rewrites that hold for every chip and both references, applied to a model before it runs.
#pragma once

#include "sw/ir/graph.h"

namespace tpu::nn {

// The model as inference computes it: every layer that is the identity at inference (Dropout
// and its kin, ir::OpKind::Dropout) removed, its readers reading its input instead. Throws
// InputError when nothing but identities is left, or when the model's output is an identity
// whose input is not the last layer that remains (the output would move).
ir::Graph inference_graph(ir::Graph m);

// What the references and the compiler say if an identity reaches them: a bug in tpusim.
inline constexpr const char* kIdentityRemoved =
    "a Dropout layer reached the references or the compiler; inference_graph removes them first";

}  // namespace tpu::nn
