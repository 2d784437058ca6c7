// The native anchor of issue 16: the host's own int8 inference of the Fashion-MNIST CNN through
// oneDNN, what a checked `tpusim run` on v1 is measured against (tb/bench/checked_run.py,
// docs/performance.md). The network and its int8 scales are those tpusim runs on v1
// (compiler::prepare on the first 256 test images); the arithmetic is oneDNN's own (s8
// convolution with per-channel output scales, s8 max pooling and ReLU, s8 inner product to fp32,
// softmax), on --threads cores (default: OpenMP's, all of them), batch after batch. Its outputs are
// not the chip's bits (oneDNN rounds its own way); its top-1 is printed as a sanity check.
//
//   build/tb/bench/fashion_mnist_native [--images N] [--batch B] [--threads T]
//
// prints one line: native_seconds=<s> images=<N> batch=<B> threads=<T> top1=<fraction>; the
// time covers the inference only (quantizing the input to the last softmax), not loading.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "sw/compiler/compiler.h"
#include "sw/compiler/rewrite.h"
#include "sw/data/idx.h"
#include "sw/import/import.h"
#include "sw/nn/quantized.h"
#include "sw/nn/weights.h"

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;
using dim = memory::dim;

struct Layers {
  const tpu::ir::Op *conv = nullptr, *pool = nullptr, *dense = nullptr;
  const tpu::nn::QuantizedLayer *qconv = nullptr, *qdense = nullptr;
};

// The CNN as tpusim quantizes it: Conv2D, MaxPooling2D, ReLU, Flatten, Dense + softmax.
Layers find_layers(const tpu::nn::QuantizedModel& q) {
  using tpu::ir::OpKind;
  Layers l;
  for (std::size_t i = 0; i < q.graph.ops.size(); ++i) {
    const tpu::ir::Op& op = q.graph.ops[i];
    if (op.kind == OpKind::Conv2D) l.conv = &op, l.qconv = &q.layers[i];
    if (op.kind == OpKind::MaxPooling2D) l.pool = &op;
    if (op.kind == OpKind::Dense) l.dense = &op, l.qdense = &q.layers[i];
  }
  if (!l.conv || !l.pool || !l.dense || l.conv->stride_h != 1 || l.conv->out.h + 2 != 28)
    throw std::runtime_error("fashion_mnist_native: not the Fashion-MNIST CNN it was written for");
  return l;
}

// The primitives and buffers of one batch size.
struct Net {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::reorder quantize;
  dnnl::convolution_forward conv;
  dnnl::pooling_forward pool;
  dnnl::eltwise_forward relu;
  dnnl::inner_product_forward dense;
  dnnl::softmax_forward softmax;
  memory in_f32, in_s8, conv_w, conv_b, conv_out, pool_out, dense_w, dense_b, logits;

  Net(const tpu::nn::QuantizedModel& q, const Layers& l, dim b) {
    const dim oc = l.conv->out.c, ph = l.pool->out.h, pw = l.pool->out.w;
    const dim classes = l.dense->out.c;
    // 1. Input: fp32 pixels to s8 on the input scale.
    const memory::desc in_md({b, 1, 28, 28}, dt::f32, tag::nhwc);
    const memory::desc in_s8_md({b, 1, 28, 28}, dt::s8, tag::nhwc);
    in_f32 = memory(in_md, engine);
    in_s8 = memory(in_s8_md, engine);
    dnnl::primitive_attr qa;
    qa.set_output_scales(0, {1.0f / q.input_scale});
    quantize = dnnl::reorder(dnnl::reorder::primitive_desc(in_f32, in_s8, qa));
    // 2. Conv2D: s8 x s8 + s32 bias, requantized per channel onto the output's scale.
    const memory::desc conv_out_md({b, oc, 26, 26}, dt::s8, tag::nhwc);
    const memory::desc w_any({oc, 1, 3, 3}, dt::s8, tag::any);
    const memory::desc b_md({oc}, dt::s32, tag::x);
    std::vector<float> conv_scales(static_cast<std::size_t>(oc));
    for (std::size_t c = 0; c < conv_scales.size(); ++c)
      conv_scales[c] = q.input_scale * l.qconv->weight_scale[c] / l.qconv->out_scale;
    dnnl::primitive_attr ca;
    ca.set_output_scales(1 << 1, conv_scales);
    const dnnl::convolution_forward::primitive_desc cpd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, in_s8_md, w_any, b_md,
                                        conv_out_md, {1, 1}, {0, 0}, {0, 0}),
        ca, engine);
    conv = dnnl::convolution_forward(cpd);
    conv_w = reordered(cpd.weights_desc(), {oc, 1, 3, 3}, tag::hwio, l.qconv->kernel_i8.data());
    conv_b = memory(b_md, engine, const_cast<std::int32_t*>(l.qconv->bias_i32.data()));
    conv_out = memory(conv_out_md, engine);
    // 3. MaxPooling2D 2x2/2 and the ReLU, on s8.
    const memory::desc pool_md({b, oc, ph, pw}, dt::s8, tag::nhwc);
    const dnnl::pooling_forward::primitive_desc ppd(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference,
                                    dnnl::algorithm::pooling_max, conv_out_md, pool_md, {2, 2},
                                    {2, 2}, {0, 0}, {0, 0}),
        engine);
    pool = dnnl::pooling_forward(ppd);
    pool_out = memory(pool_md, engine);
    relu = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference,
                                    dnnl::algorithm::eltwise_relu, pool_md, 0.0f),
        engine));
    // 4. Dense (Flatten's h, w, c order is the kernel's [h][w][c][out]) to fp32 logits.
    const memory::desc dw_any({classes, oc, ph, pw}, dt::s8, tag::any);
    const memory::desc db_md({classes}, dt::s32, tag::x);
    const memory::desc logits_md({b, classes}, dt::f32, tag::nc);
    std::vector<float> dense_scales(static_cast<std::size_t>(classes));
    for (std::size_t c = 0; c < dense_scales.size(); ++c) dense_scales[c] = l.qdense->scale_f32[c];
    dnnl::primitive_attr da;
    da.set_output_scales(1 << 1, dense_scales);
    const dnnl::inner_product_forward::primitive_desc dpd(
        dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_inference, pool_md, dw_any,
                                          db_md, logits_md),
        da, engine);
    dense = dnnl::inner_product_forward(dpd);
    dense_w =
        reordered(dpd.weights_desc(), {classes, oc, ph, pw}, tag::hwio, l.qdense->kernel_i8.data());
    dense_b = memory(db_md, engine, const_cast<std::int32_t*>(l.qdense->bias_i32.data()));
    logits = memory(logits_md, engine);
    // 5. Softmax over the classes, in place.
    softmax = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, logits_md, 1), engine));
  }

  memory reordered(const memory::desc& want, const memory::dims& dims, tag t,
                   const std::int8_t* data) {
    memory user({dims, dt::s8, t}, engine, const_cast<std::int8_t*>(data));
    memory m(want, engine);
    dnnl::reorder(user, m).execute(stream, user, m);
    stream.wait();
    return m;
  }

  // One batch: pixels in, probabilities out.
  void run(const float* pixels, std::size_t count, float* probabilities) {
    std::memcpy(in_f32.get_data_handle(), pixels, count * 28 * 28 * sizeof(float));
    quantize.execute(stream, in_f32, in_s8);
    conv.execute(stream, {{DNNL_ARG_SRC, in_s8},
                          {DNNL_ARG_WEIGHTS, conv_w},
                          {DNNL_ARG_BIAS, conv_b},
                          {DNNL_ARG_DST, conv_out}});
    pool.execute(stream, {{DNNL_ARG_SRC, conv_out}, {DNNL_ARG_DST, pool_out}});
    relu.execute(stream, {{DNNL_ARG_SRC, pool_out}, {DNNL_ARG_DST, pool_out}});
    dense.execute(stream, {{DNNL_ARG_SRC, pool_out},
                           {DNNL_ARG_WEIGHTS, dense_w},
                           {DNNL_ARG_BIAS, dense_b},
                           {DNNL_ARG_DST, logits}});
    softmax.execute(stream, {{DNNL_ARG_SRC, logits}, {DNNL_ARG_DST, logits}});
    stream.wait();
    const auto* p = static_cast<const float*>(logits.get_data_handle());
    std::copy(p, p + count * 10, probabilities);
  }
};

std::size_t arg(int argc, char** argv, const std::string& name, std::size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return std::strtoul(argv[i + 1], nullptr, 10);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tpu;
  const std::size_t images = arg(argc, argv, "--images", 10000);
  const std::size_t batch = arg(argc, argv, "--batch", 256);
  if (const std::size_t threads = arg(argc, argv, "--threads", 0); threads > 0)
    omp_set_num_threads(static_cast<int>(threads));
  const std::string root = TPUSIM_SOURCE_DIR;
  const ir::Graph model = compiler::remove_identities(
      importers::load_model(root + "/configs/models/fashion_mnist_cnn.json"));
  const nn::Weights weights =
      nn::load_weights(root + "/configs/weights/fashion_mnist_cnn.bin", model);
  const data::Dataset ds = data::load_fashion_mnist(data::kDefaultFashionMnistDir, "t10k");
  if (images == 0 || batch == 0 || images > ds.images.count) {
    std::fprintf(stderr, "fashion_mnist_native: --images 1..%u, --batch >= 1\n", ds.images.count);
    return 2;
  }
  std::vector<float> pixels(ds.images.pixels.begin(), ds.images.pixels.end());
  // v1's quantization: calibrated on the first 256 test images, as `tpusim run` does.
  const std::size_t n_cal = std::min<std::size_t>(nn::calibration_images(model), ds.images.count);
  const nn::QuantizedModel q =
      compiler::prepare(model, weights, DType::Int8, 256, pixels.data(), n_cal);
  const Layers layers = find_layers(q);
  Net full(q, layers, static_cast<dim>(std::min(batch, images)));
  Net tail(q, layers, static_cast<dim>(images % batch == 0 ? 1 : images % batch));
  std::vector<float> probabilities(images * 10);
  full.run(pixels.data(), std::min(batch, images), probabilities.data());  // JIT warm-up

  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t b = 0; b < images; b += batch) {
    const std::size_t count = std::min(batch, images - b);
    (count == batch ? full : tail)
        .run(pixels.data() + b * 28 * 28, count, probabilities.data() + b * 10);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::size_t correct = 0;
  for (std::size_t i = 0; i < images; ++i) {
    const float* p = &probabilities[i * 10];
    correct += static_cast<std::size_t>(std::max_element(p, p + 10) - p) == ds.labels[i];
  }
  std::printf("native_seconds=%.4f images=%zu batch=%zu threads=%d top1=%.4f\n", seconds, images,
              batch, omp_get_max_threads(),
              static_cast<double>(correct) / static_cast<double>(images));
  return 0;
}
