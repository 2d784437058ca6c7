#include "sw/nn/float64_training.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "sw/ir/ops.h"
#include "sw/nn/taps.h"

namespace tpu::nn {
namespace {

using ir::Act;
using ir::GradKind;
using ir::Graph;
using ir::kGraphInput;
using ir::Op;
using ir::OpKind;
using ir::Role;
using ir::Shape;
using ir::TensorId;
using Tensor = std::vector<double>;  // n images, NHWC each, or a parameter

bool is_max_pool(const Op& l) {
  return l.kind == OpKind::MaxPooling2D || l.kind == OpKind::GlobalMaxPooling2D;
}

double activate(Act a, double x) {
  switch (a) {
    case Act::Linear: return x;
    case Act::Relu: return std::max(x, 0.0);
    case Act::Relu6: return std::min(std::max(x, 0.0), 6.0);
    case Act::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Act::Tanh: return std::tanh(x);
    case Act::Softmax:
    case Act::LeakyRelu:
    case Act::Elu: break;
  }
  throw std::logic_error("float64 training: activation without a gradient rule");
}
double activation_slope(Act a, double y) {
  switch (a) {
    case Act::Relu: return y > 0.0 ? 1.0 : 0.0;
    case Act::Relu6: return y > 0.0 && y < 6.0 ? 1.0 : 0.0;
    case Act::Sigmoid: return y * (1.0 - y);
    case Act::Tanh: return 1.0 - y * y;
    default: break;
  }
  throw std::logic_error("float64 training: activation without a gradient rule");
}

struct Run {
  const Graph& g;
  const Weights& w;
  std::size_t n;
  std::map<TensorId, Tensor> t;

  [[nodiscard]] Shape shape_of(std::size_t op) const {
    return op == kGraphInput ? g.input : g.ops[op].out;
  }
  Tensor& value(std::size_t op) { return t[{Role::Value, op}]; }
  [[nodiscard]] Tensor param(std::size_t op, ir::Param p) const {
    const std::vector<float>& f = tensor_of(w.layers[op], p);
    return Tensor(f.begin(), f.end());
  }

  // z = the weighted sum of op i (before its activation), for every image.
  Tensor weighted(std::size_t i) {
    const Op& l = g.ops[i];
    const Tensor& x = value(l.inputs[0]);
    const Tensor k = param(i, ir::Param::Kernel), b = param(i, ir::Param::Bias);
    const std::size_t in = l.in.size(), out = l.out.size(), co = l.out.c, ci = l.in.c;
    Tensor z(n * out);
    for (std::size_t img = 0; img < n; ++img) {
      const double* xi = &x[img * in];
      double* zi = &z[img * out];
      for (std::size_t p = 0; p < out; ++p) zi[p] = b[p % co];
      if (l.kind == OpKind::Dense) {
        for (std::size_t a = 0; a < in; ++a)
          for (std::size_t c = 0; c < co; ++c) zi[c] += xi[a] * k[a * co + c];
      } else {
        for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t tap) {
          for (std::size_t c = 0; c < ci; ++c)
            for (std::size_t o = 0; o < co; ++o)
              zi[op * co + o] += xi[ip * ci + c] * k[(tap * ci + c) * co + o];
        });
      }
    }
    return z;
  }

  Tensor pool(const Op& l, const Tensor& x) {
    const std::size_t in = l.in.size(), out = l.out.size(), c = l.in.c;
    const bool max = is_max_pool(l);
    Tensor y(n * out, max ? -std::numeric_limits<double>::infinity() : 0.0);
    std::vector<double> count(l.out.h * l.out.w, 0.0);
    for_taps(l, [&](std::size_t, std::size_t op, std::size_t) { count[op] += 1.0; });
    for (std::size_t img = 0; img < n; ++img)
      for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t) {
        for (std::size_t ch = 0; ch < c; ++ch) {
          double& o = y[img * out + op * c + ch];
          const double v = x[img * in + ip * c + ch];
          o = max ? std::max(o, v) : o + v / count[op];
        }
      });
    return y;
  }

  // ZeroPadding2D: each image inside a border of zeros; its gradient, the border cut off.
  Tensor pad(const Op& l, const Tensor& x) const {
    Tensor y(n * l.out.size(), 0.0);
    for_padded_pixels(
        l, n, [&](std::size_t in, std::size_t out) { std::copy_n(&x[in], l.in.c, &y[out]); });
    return y;
  }
  Tensor crop(const Op& l, const Tensor& dy) const {
    Tensor dx(n * l.in.size());
    for_padded_pixels(
        l, n, [&](std::size_t in, std::size_t out) { std::copy_n(&dy[out], l.in.c, &dx[in]); });
    return dx;
  }
  void forward() {
    for (std::size_t i = 0; i < g.ops.size(); ++i) {
      const Op& l = g.ops[i];
      Tensor out;
      switch (l.kind) {
        case OpKind::Conv2D:
        case OpKind::Dense: {
          Tensor z = weighted(i);
          out = z;
          if (l.activation == Act::Softmax)
            softmax(l.out.size(), out);
          else
            for (double& v : out) v = activate(l.activation, v);
          t[{Role::PreActivation, i}] = std::move(z);
          break;
        }
        case OpKind::Activation:
          out = value(l.inputs[0]);
          if (l.activation == Act::Softmax)
            softmax(l.out.size(), out);
          else
            for (double& v : out) v = activate(l.activation, v);
          break;
        case OpKind::Flatten:
        case OpKind::Reshape: out = value(l.inputs[0]); break;
        case OpKind::BatchNormalization: {
          const BatchNorm bn = batch_norm(i);
          const Tensor& x = value(l.inputs[0]);
          const Tensor gamma = scale_of(i), beta = shift_of(i);
          out.resize(x.size());
          for (std::size_t e = 0; e < x.size(); ++e) {
            const std::size_t c = e % l.out.c;
            out[e] = gamma[c] * (x[e] - bn.mean[c]) / std::sqrt(bn.var[c] + l.epsilon) + beta[c];
          }
          break;
        }
        case OpKind::Add:
          out = value(l.inputs[0]);
          for (std::size_t k = 1; k < l.inputs.size(); ++k) {
            const Tensor& b = value(l.inputs[k]);
            for (std::size_t e = 0; e < out.size(); ++e) out[e] += b[e];
          }
          break;
        case OpKind::MaxPooling2D:
        case OpKind::AveragePooling2D:
        case OpKind::GlobalAveragePooling2D:
        case OpKind::GlobalMaxPooling2D: out = pool(l, value(l.inputs[0])); break;
        case OpKind::ZeroPadding2D: out = pad(l, value(l.inputs[0])); break;
        default:
          throw std::logic_error("float64 training: " + std::string(ir::name_of(l.kind)) +
                                 " has no gradient rule");
      }
      value(i) = std::move(out);
    }
  }

  // BatchNormalization in training mode: each channel's mean and (biased) variance over every
  // image and pixel of the batch.
  struct BatchNorm {
    Tensor mean, var;
  };
  BatchNorm batch_norm(std::size_t i) {
    const Op& l = g.ops[i];
    const Tensor& x = value(l.inputs[0]);
    const std::size_t c = l.out.c;
    const double rows = static_cast<double>(x.size() / c);
    BatchNorm bn{Tensor(c, 0.0), Tensor(c, 0.0)};
    for (std::size_t e = 0; e < x.size(); ++e) bn.mean[e % c] += x[e] / rows;
    for (std::size_t e = 0; e < x.size(); ++e)
      bn.var[e % c] += (x[e] - bn.mean[e % c]) * (x[e] - bn.mean[e % c]) / rows;
    return bn;
  }
  // Ones without `scale`, zeros without `center` (nn::LayerWeights).
  [[nodiscard]] Tensor scale_of(std::size_t i) const {
    return Tensor(w.layers[i].gamma.begin(), w.layers[i].gamma.end());
  }
  [[nodiscard]] Tensor shift_of(std::size_t i) const {
    return Tensor(w.layers[i].beta.begin(), w.layers[i].beta.end());
  }

  // dgamma[c] = sum of dy xhat; dx = gamma / sigma (dy - mean(dy) - xhat mean(dy xhat)).
  Tensor batch_norm_grad(std::size_t i, const Tensor& x, const Tensor& dy, bool input) {
    const Op& l = g.ops[i];
    const BatchNorm bn = batch_norm(i);
    const std::size_t c = l.out.c;
    const double rows = static_cast<double>(x.size() / c);
    Tensor sigma(c), dbeta(c, 0.0), dgamma(c, 0.0);
    for (std::size_t k = 0; k < c; ++k) sigma[k] = std::sqrt(bn.var[k] + l.epsilon);
    const auto xhat = [&](std::size_t e) { return (x[e] - bn.mean[e % c]) / sigma[e % c]; };
    for (std::size_t e = 0; e < x.size(); ++e) {
      dbeta[e % c] += dy[e];
      dgamma[e % c] += dy[e] * xhat(e);
    }
    if (!input) return dgamma;
    const Tensor gamma = scale_of(i);
    Tensor dx(x.size());
    for (std::size_t e = 0; e < x.size(); ++e) {
      const std::size_t k = e % c;
      dx[e] = gamma[k] / sigma[k] * (dy[e] - dbeta[k] / rows - xhat(e) * dgamma[k] / rows);
    }
    return dx;
  }

  static void softmax(std::size_t k, Tensor& v) {
    for (std::size_t r = 0; r * k < v.size(); ++r) {
      double* z = &v[r * k];
      const double m = *std::max_element(z, z + k);
      double s = 0.0;
      for (std::size_t c = 0; c < k; ++c) s += (z[c] = std::exp(z[c] - m));
      for (std::size_t c = 0; c < k; ++c) z[c] /= s;
    }
  }

  // Mean cross-entropy and accuracy of the logits; their gradient when `grad` is given.
  std::pair<double, double> loss(const Tensor& z, const std::int32_t* labels, std::size_t k,
                                 Tensor* grad) const {
    double total = 0.0, correct = 0.0;
    if (grad) grad->assign(z.size(), 0.0);
    for (std::size_t r = 0; r < n; ++r) {
      const double* zr = &z[r * k];
      const std::size_t arg = std::max_element(zr, zr + k) - zr;
      const double m = zr[arg];
      double s = 0.0;
      for (std::size_t c = 0; c < k; ++c) s += std::exp(zr[c] - m);
      const auto label = static_cast<std::size_t>(labels[r]);
      total += std::log(s) - (zr[label] - m);
      correct += arg == label ? 1.0 : 0.0;
      if (grad)
        for (std::size_t c = 0; c < k; ++c)
          (*grad)[r * k + c] =
              (std::exp(zr[c] - m) / s - (c == label ? 1.0 : 0.0)) / static_cast<double>(n);
    }
    return {total / static_cast<double>(n), correct / static_cast<double>(n)};
  }

  [[nodiscard]] std::size_t per_image(const TensorId& id) const {
    switch (id.role) {
      case Role::Value:
      case Role::Gradient: return shape_of(id.op).size();
      case Role::PreActivation:
      case Role::PreActivationGradient: return g.ops[id.op].out.size();
      default: return 0;
    }
  }

  void backward(const ir::TrainingGraph& tg, const std::int32_t* labels, Float64Step& step) {
    for (const ir::GradOp& o : tg.ops) {
      const Op& l = g.ops[o.op];
      Tensor r;
      const auto in = [&](std::size_t k) -> const Tensor& { return t.at(o.inputs[k]); };
      switch (o.kind) {
        case GradKind::SoftmaxCrossEntropy: {
          const auto [loss_value, acc] = loss(in(0), labels, l.out.size(), &r);
          step.loss = loss_value;
          step.accuracy = acc;
          break;
        }
        case GradKind::Activation:
          r = in(1);
          for (std::size_t e = 0; e < r.size(); ++e) r[e] *= activation_slope(o.act, in(0)[e]);
          break;
        case GradKind::Pass: r = in(0); break;
        case GradKind::Pool: r = pool_grad(l, in(0), in(1)); break;
        case GradKind::ConvInput:
        case GradKind::DenseInput: r = input_grad(l, in(0), in(1)); break;
        case GradKind::ConvKernel:
        case GradKind::DenseKernel: r = kernel_grad(l, in(0), in(1)); break;
        case GradKind::BatchNormGamma: r = batch_norm_grad(o.op, in(0), in(1), false); break;
        case GradKind::BatchNormInput: r = batch_norm_grad(o.op, in(0), in(1), true); break;
        case GradKind::Crop: r = crop(l, in(0)); break;
        case GradKind::Bias: {
          r.assign(l.out.c, 0.0);
          const Tensor& dz = in(0);
          for (std::size_t e = 0; e < dz.size(); ++e) r[e % l.out.c] += dz[e];
          break;
        }
      }
      Tensor& dst = t[o.output];
      if (o.accumulate) {
        for (std::size_t e = 0; e < r.size(); ++e) dst[e] += r[e];
      } else {
        dst = std::move(r);
      }
    }
    for (const TensorId& p : tg.parameters) {
      const TensorId grad{Role::ParameterGradient, p.op, p.param};
      step.gradients[grad] = t.at(grad);
    }
  }

  Tensor pool_grad(const Op& l, const Tensor& x, const Tensor& dy) {
    const std::size_t in = l.in.size(), out = l.out.size(), c = l.in.c;
    Tensor dx(n * in, 0.0);
    std::vector<double> count(out / c, 0.0);
    for_taps(l, [&](std::size_t, std::size_t op, std::size_t) { count[op] += 1.0; });
    for (std::size_t img = 0; img < n; ++img) {
      if (!is_max_pool(l)) {
        for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t) {
          for (std::size_t ch = 0; ch < c; ++ch)
            dx[img * in + ip * c + ch] += dy[img * out + op * c + ch] / count[op];
        });
        continue;
      }
      // The first maximum of each window (taps in (ky, kx) order) takes the gradient.
      std::vector<std::size_t> best(out, 0);
      std::vector<bool> seen(out, false);
      for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t) {
        for (std::size_t ch = 0; ch < c; ++ch) {
          const std::size_t o = op * c + ch;
          const double v = x[img * in + ip * c + ch];
          if (!seen[o] || v > x[img * in + best[o] * c + ch]) best[o] = ip;
          seen[o] = true;
        }
      });
      for (std::size_t o = 0; o < out; ++o) dx[img * in + best[o] * c + o % c] += dy[img * out + o];
    }
    return dx;
  }

  Tensor input_grad(const Op& l, const Tensor& dz, const Tensor& k) {
    const std::size_t in = l.in.size(), out = l.out.size(), co = l.out.c, ci = l.in.c;
    Tensor dx(n * in, 0.0);
    for (std::size_t img = 0; img < n; ++img) {
      double* d = &dx[img * in];
      const double* dzi = &dz[img * out];
      if (l.kind == OpKind::Dense) {
        for (std::size_t a = 0; a < in; ++a)
          for (std::size_t c = 0; c < co; ++c) d[a] += dzi[c] * k[a * co + c];
        continue;
      }
      for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t tap) {
        for (std::size_t c = 0; c < ci; ++c)
          for (std::size_t o = 0; o < co; ++o)
            d[ip * ci + c] += dzi[op * co + o] * k[(tap * ci + c) * co + o];
      });
    }
    return dx;
  }

  Tensor kernel_grad(const Op& l, const Tensor& x, const Tensor& dz) {
    const std::size_t in = l.in.size(), out = l.out.size(), co = l.out.c, ci = l.in.c;
    Tensor dk(tensor_of(w.layers[&l - g.ops.data()], ir::Param::Kernel).size(), 0.0);
    for (std::size_t img = 0; img < n; ++img) {
      const double* xi = &x[img * in];
      const double* dzi = &dz[img * out];
      if (l.kind == OpKind::Dense) {
        for (std::size_t a = 0; a < in; ++a)
          for (std::size_t c = 0; c < co; ++c) dk[a * co + c] += xi[a] * dzi[c];
        continue;
      }
      for_taps(l, [&](std::size_t ip, std::size_t op, std::size_t tap) {
        for (std::size_t c = 0; c < ci; ++c)
          for (std::size_t o = 0; o < co; ++o)
            dk[(tap * ci + c) * co + o] += xi[ip * ci + c] * dzi[op * co + o];
      });
    }
    return dk;
  }
};

Run forward_run(const Graph& g, const Weights& w, const float* x, std::size_t n) {
  Run r{g, w, n, {}};
  r.value(kGraphInput) = Tensor(x, x + n * g.input.size());
  r.forward();
  return r;
}

// The logits the loss reads: the input of a final Activation(softmax), or the final layer's
// own pre-activation.
const Tensor& logits(Run& r) {
  const std::size_t last = r.g.ops.size() - 1;
  const Op& l = r.g.ops[last];
  if (l.kind == OpKind::Activation) return r.value(l.inputs[0]);
  return r.t.at({Role::PreActivation, last});
}

}  // namespace

double loss64(const Graph& g, const Weights& w, const float* x, const std::int32_t* labels,
              std::size_t n) {
  Run r = forward_run(g, w, x, n);
  return r.loss(logits(r), labels, g.output().size(), nullptr).first;
}

Float64Step step64(const Graph& g, const ir::TrainingGraph& t, const Weights& w, const float* x,
                   const std::int32_t* labels, std::size_t n) {
  Run r = forward_run(g, w, x, n);
  for (std::size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].has_parameters())
      for (const ir::ParamSpec& s : ir::op_info(g.ops[i].kind).params(g.ops[i]))
        r.t[{Role::Parameter, i, s.param}] = r.param(i, s.param);
  Float64Step step;
  r.backward(t, labels, step);
  return step;
}

}  // namespace tpu::nn
