// The Activate instruction's elementwise functions (isa::ActFunc) on fp32: each is the numerics
// library's definition (numerics/activation.h), which the reference inference in sw/nn follows
// too without this header. Softmax is a row function (numerics::softmax_row).
#pragma once

#include <cassert>

#include "hw/isa/isa.h"
#include "numerics/activation.h"

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

}  // namespace tpu
