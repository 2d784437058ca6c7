// The Activate and Map instructions' elementwise functions (isa::ActFunc, isa::MapFunc) on fp32:
// each is the numerics library's definition (numerics/activation.h; rsqrt numerics/batch_norm.h),
// which the reference inference in sw/nn follows too without this header. Softmax is a row function
// (numerics::softmax_row).
#pragma once

#include <cassert>

#include "hw/isa/isa.h"
#include "numerics/activation.h"
#include "numerics/batch_norm.h"

namespace tpu {

inline float activate_float(isa::ActFunc f, float x) {
  switch (f) {
    case isa::ActFunc::None: return x;
    case isa::ActFunc::Relu: return numerics::relu(x);
    case isa::ActFunc::Relu6: return numerics::relu6(x);
    case isa::ActFunc::Sigmoid: return numerics::sigmoid(x);
    case isa::ActFunc::Tanh: return numerics::tanh_act(x);
    case isa::ActFunc::Softmax: break;
  }
  assert(false && "softmax is a row function");
  return x;
}

// alpha is the channel record's (leaky_relu, elu, prelu); the other functions ignore it.
inline float map_float(isa::MapFunc f, float x, float alpha) {
  switch (f) {
    case isa::MapFunc::Identity: return x;
    case isa::MapFunc::Relu: return numerics::relu(x);
    case isa::MapFunc::Relu6: return numerics::relu6(x);
    case isa::MapFunc::LeakyRelu:
    case isa::MapFunc::Prelu: return numerics::leaky_relu(x, alpha);
    case isa::MapFunc::Elu: return numerics::elu(x, alpha);
    case isa::MapFunc::Sigmoid: return numerics::sigmoid(x);
    case isa::MapFunc::Tanh: return numerics::tanh_act(x);
    case isa::MapFunc::Rsqrt: return numerics::rsqrt(x);
  }
  assert(false && "map function out of range (the decoder rejects it)");
  return x;
}

}  // namespace tpu
