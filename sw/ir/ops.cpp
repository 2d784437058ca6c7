#include "sw/ir/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include "hw/common/error.h"
#include "sw/ir/autodiff.h"

namespace tpu::ir {
namespace {

constexpr std::size_t kAny = std::numeric_limits<std::size_t>::max();

std::uint64_t no_macs(const Op&) { return 0; }

// Keras's conv_output_length with the window's dilated extent: "valid" keeps the windows that
// fit, "same" is ceil(in / stride), explicit padding adds its zeros first.
InferredShape window(const Op& l, const Shape& in, std::uint32_t channels,
                     const char* window_argument) {
  const std::uint64_t kh = dilated_kernel_h(l), kw = dilated_kernel_w(l);
  if (l.padding == Padding::Same)
    return Shape{(in.h + l.stride_h - 1) / l.stride_h, (in.w + l.stride_w - 1) / l.stride_w,
                 channels};
  const bool explicit_pads = l.padding == Padding::Explicit;
  const std::uint64_t h = std::uint64_t{in.h} + (explicit_pads ? l.pad_top + l.pad_bottom : 0);
  const std::uint64_t w = std::uint64_t{in.w} + (explicit_pads ? l.pad_left + l.pad_right : 0);
  if (kh > h || kw > w)
    return ShapeProblem{
        window_argument,
        fmt::format("the {}x{} window{} does not fit the {}{} input", l.kernel_h, l.kernel_w,
                    kh != l.kernel_h || kw != l.kernel_w
                        ? fmt::format(" (dilated to {}x{})", kh, kw)
                        : std::string(),
                    explicit_pads ? "padded " : "", show_shape(in)) +
            (explicit_pads ? "" : " with \"valid\" padding")};
  return Shape{static_cast<std::uint32_t>((h - kh) / l.stride_h + 1),
               static_cast<std::uint32_t>((w - kw) / l.stride_w + 1), channels};
}

InferredShape same_shape(const Op&, const std::vector<Shape>& in) { return in[0]; }

// Add, Multiply, Subtract: operands of one shape.
InferredShape elementwise(const Op& l, const std::vector<Shape>& in) {
  for (std::size_t k = 1; k < in.size(); ++k)
    if (!(in[k] == in[0]))
      return ShapeProblem{std::string(kInputsArgument),
                          fmt::format("layer {} ({}): input {} is {}, input 0 is {}; {} needs "
                                      "equal shapes",
                                      l.name, name_of(l.kind), k, show_shape(in[k]),
                                      show_shape(in[0]), name_of(l.kind))};
  return in[0];
}

// Keras's Reshape: one -1 takes what the others leave. Per image, [n] is 1x1xn, [w, c] is 1xwxc
// (a sequence of w steps) and [h, w, c] itself.
InferredShape reshape(const Op& l, const std::vector<Shape>& in) {
  const std::uint64_t size = in[0].size();
  std::uint64_t known = 1;
  for (std::int64_t d : l.target_shape)
    if (d > 0) known *= static_cast<std::uint64_t>(d);
  std::vector<std::uint32_t> dims;
  for (std::int64_t d : l.target_shape) {
    if (d > 0) {
      dims.push_back(static_cast<std::uint32_t>(d));
    } else if (known <= size && size % known == 0) {
      // At most kMaxTensorElements, as Flatten's output: fits 32 bits.
      dims.push_back(static_cast<std::uint32_t>(size / known));
      known = size;
    } else {
      known = 0;  // no whole dimension fills the -1
    }
  }
  std::uint64_t total = 1;
  for (std::uint32_t d : dims) total *= d;
  if (known == 0 || total != size)
    return ShapeProblem{"target_shape",
                        fmt::format("the input {} has {} elements per image, which this shape "
                                    "cannot hold",
                                    show_shape(in[0]), size)};
  while (dims.size() < 3) dims.insert(dims.begin(), 1u);
  return Shape{dims[0], dims[1], dims[2]};
}

// A sequence of steps: 1 x T x features per image (Keras's [T, features]).
std::optional<ShapeProblem> not_a_sequence(const Op& l, const Shape& in) {
  if (in.h == 1) return std::nullopt;
  return ShapeProblem{std::string(kClassArgument),
                      fmt::format("{} needs a sequence (1 x steps x features per image) but gets "
                                  "{}",
                                  name_of(l.kind), show_shape(in))};
}

double receptive(const Op& l) { return static_cast<double>(l.kernel_h) * l.kernel_w; }

std::vector<ParamSpec> no_params(const Op&) { return {}; }

// The specs of a weighted operation's kernels, then its bias of n values when it has one.
std::vector<ParamSpec> with_bias(const Op& l, std::vector<ParamSpec> v, std::uint32_t n) {
  if (l.use_bias) v.push_back({Param::Bias, "bias", {n}, Init::Zeros});
  return v;
}

// Gradient rules (autodiff.h, docs/training.md "Gradient rules"): each carries the gradient at
// operation i's output to its inputs and parameters.
TensorId value_of(std::size_t t) { return {Role::Value, t}; }
TensorId gradient_of(std::size_t i) { return {Role::Gradient, i}; }

void grad_pass(Backward& b, std::size_t i) {
  for (std::size_t t : b.graph().ops[i].inputs)
    b.to_input(t, {GradKind::Pass, i, {gradient_of(i)}, {}});
}

// A rule that cannot differentiate still passes a gradient on, so that differentiate() reaches
// and names every layer that cannot be trained, not only the last one.
void no_grad(Backward& b, std::size_t i) {
  b.cannot(i, "fit has no gradient rule for this kind of layer yet");
  grad_pass(b, i);
}

void grad_dropout(Backward& b, std::size_t i) {
  b.cannot(i, "fit does not apply Dropout's random mask yet (remove the layer to train)");
  grad_pass(b, i);
}

void grad_pool(Backward& b, std::size_t i) {
  const Op& l = b.graph().ops[i];
  b.to_input(l.inputs[0], {GradKind::Pool, i, {value_of(l.inputs[0]), gradient_of(i)}, {}});
}

void grad_activation(Backward& b, std::size_t i) {
  const Op& l = b.graph().ops[i];
  if (l.activation == Act::Linear) return grad_pass(b, i);
  if (auto op = b.activation_gradient(i))
    b.to_input(l.inputs[0], std::move(*op));
  else
    grad_pass(b, i);
}

// Conv2D and Dense: the bias, the kernel, then the input.
void grad_weighted(Backward& b, std::size_t i, GradKind input, GradKind kernel) {
  const Op& l = b.graph().ops[i];
  const TensorId dz = b.pre_activation_gradient(i);
  if (l.use_bias) b.to_parameter(i, Param::Bias, {GradKind::Bias, i, {dz}, {}});
  b.to_parameter(i, Param::Kernel, {kernel, i, {value_of(l.inputs[0]), dz}, {}});
  b.to_input(l.inputs[0], {input, i, {dz, {Role::Parameter, i, Param::Kernel}}, {}});
}
void grad_conv2d(Backward& b, std::size_t i) {
  grad_weighted(b, i, GradKind::ConvInput, GradKind::ConvKernel);
}
void grad_dense(Backward& b, std::size_t i) {
  grad_weighted(b, i, GradKind::DenseInput, GradKind::DenseKernel);
}

// BatchNormalization in training mode (batch statistics): beta's gradient is a bias's, gamma's
// and the input's need the pass's statistics (GradKind::BatchNormGamma, BatchNormInput).
void grad_batch_norm(Backward& b, std::size_t i) {
  const Op& l = b.graph().ops[i];
  const TensorId dy = b.pre_activation_gradient(i);
  if (l.use_bias) b.to_parameter(i, Param::Beta, {GradKind::Bias, i, {dy}, {}});
  if (l.scale)
    b.to_parameter(i, Param::Gamma, {GradKind::BatchNormGamma, i, {value_of(l.inputs[0]), dy}, {}});
  b.to_input(l.inputs[0], {GradKind::BatchNormInput, i, {value_of(l.inputs[0]), dy}, {}});
}

// ZeroPadding2D: the input's gradient is the output's without the border.
void grad_zero_padding(Backward& b, std::size_t i) {
  b.to_input(b.graph().ops[i].inputs[0], {GradKind::Crop, i, {gradient_of(i)}, {}});
}

const std::vector<OpInfo> kOpInfos{
    {OpKind::Conv2D, "Conv2D", 1, 1, true, true, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], l.filters, "kernel_size");
     },
     [](const Op& l) { return l.out.size() * l.kernel_h * l.kernel_w * l.in.c; },
     [](const Op& l) {
       return with_bias(l,
                        {{Param::Kernel,
                          "kernel",
                          {l.kernel_h, l.kernel_w, l.in.c, l.out.c},
                          Init::Glorot,
                          receptive(l) * l.in.c,
                          receptive(l) * l.out.c}},
                        l.out.c);
     },
     grad_conv2d},
    {OpKind::MaxPooling2D, "MaxPooling2D", 1, 1, false, false, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], in[0].c, "pool_size");
     },
     no_macs, no_params, grad_pool},
    {OpKind::AveragePooling2D, "AveragePooling2D", 1, 1, false, false, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], in[0].c, "pool_size");
     },
     no_macs, no_params, grad_pool},
    {OpKind::Activation, "Activation", 1, 1, false, false, false, same_shape, no_macs, no_params,
     grad_activation},
    {OpKind::Flatten, "Flatten", 1, 1, false, false, true,
     [](const Op&, const std::vector<Shape>& in) -> InferredShape {
       // Every resolved shape holds at most kMaxTensorElements, which fits 32 bits.
       return Shape{1, 1, static_cast<std::uint32_t>(in[0].size())};
     },
     no_macs, no_params, grad_pass},
    {OpKind::Reshape, "Reshape", 1, 1, false, false, true, reshape, no_macs, no_params, grad_pass},
    {OpKind::Dense, "Dense", 1, 1, true, true, false,
     [](const Op& l, const std::vector<Shape>& in) -> InferredShape {
       // Keras applies Dense to the last axis of a 3-D input; tpusim's chips and references
       // treat Dense as a matrix product over the whole flat input, so the two would
       // disagree.
       if (in[0].h != 1 || in[0].w != 1)
         return ShapeProblem{std::string(kClassArgument),
                             fmt::format("Dense needs a flat input (h = w = 1) but gets {}; "
                                         "insert a Flatten before it (Keras would apply it to "
                                         "the last axis only)",
                                         show_shape(in[0]))};
       return Shape{1, 1, l.filters};
     },
     [](const Op& l) { return l.in.size() * l.out.c; },
     [](const Op& l) {
       const auto in = static_cast<std::uint32_t>(l.in.size());
       return with_bias(
           l, {{Param::Kernel, "kernel", {in, l.out.c}, Init::Glorot, double(in), double(l.out.c)}},
           l.out.c);
     },
     grad_dense},
    {OpKind::BatchNormalization, "BatchNormalization", 1, 1, false, true, false, same_shape,
     no_macs,
     [](const Op& l) {
       // Keras's order; a layer without scale (center) has no gamma (beta) in the file.
       std::vector<ParamSpec> v;
       if (l.scale) v.push_back({Param::Gamma, "gamma", {l.out.c}, Init::Ones});
       if (l.use_bias) v.push_back({Param::Beta, "beta", {l.out.c}, Init::Zeros});
       v.push_back({Param::MovingMean, "moving_mean", {l.out.c}, Init::Zeros});
       v.push_back({Param::MovingVariance, "moving_variance", {l.out.c}, Init::Ones});
       return v;
     },
     grad_batch_norm},
    {OpKind::ZeroPadding2D, "ZeroPadding2D", 1, 1, false, false, false,
     [](const Op& l, const std::vector<Shape>& in) -> InferredShape {
       const Shape out{in[0].h + l.pad_top + l.pad_bottom, in[0].w + l.pad_left + l.pad_right,
                       in[0].c};
       if (out.h > kMaxDim || out.w > kMaxDim)
         return ShapeProblem{"padding", fmt::format("the padded image must stay within {} "
                                                    "pixels a side",
                                                    kMaxDim)};
       return out;
     },
     no_macs, no_params, grad_zero_padding},
    {OpKind::GlobalAveragePooling2D, "GlobalAveragePooling2D", 1, 1, false, false, false,
     [](const Op&, const std::vector<Shape>& in) -> InferredShape {
       return Shape{1, 1, in[0].c};
     },
     no_macs, no_params, grad_pool},
    {OpKind::GlobalMaxPooling2D, "GlobalMaxPooling2D", 1, 1, false, false, false,
     [](const Op&, const std::vector<Shape>& in) -> InferredShape {
       return Shape{1, 1, in[0].c};
     },
     no_macs, no_params, grad_pool},
    {OpKind::Add, "Add", 2, kAny, false, false, false, elementwise, no_macs, no_params, grad_pass},
    {OpKind::Dropout, "Dropout", 1, 1, false, false, false, same_shape, no_macs, no_params,
     grad_dropout},
    // A tensor the chip holds in off-chip memory: its shape is its own argument.
    {OpKind::Constant, "Constant", 0, 0, false, false, false,
     [](const Op& l, const std::vector<Shape>&) -> InferredShape { return l.out; }, no_macs,
     no_params, no_grad},
    {OpKind::DepthwiseConv2D, "DepthwiseConv2D", 1, 1, true, true, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], in[0].c * l.depth_multiplier, "kernel_size");
     },
     [](const Op& l) { return l.out.size() * l.kernel_h * l.kernel_w; },
     [](const Op& l) {
       // Keras's fans of a [kh, kw, cin, multiplier] kernel.
       return with_bias(l,
                        {{Param::Kernel,
                          "depthwise_kernel",
                          {l.kernel_h, l.kernel_w, l.in.c, l.depth_multiplier},
                          Init::Glorot,
                          receptive(l) * l.in.c,
                          receptive(l) * l.depth_multiplier}},
                        l.out.c);
     },
     no_grad},
    {OpKind::SeparableConv2D, "SeparableConv2D", 1, 1, true, true, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], l.filters, "kernel_size");
     },
     [](const Op& l) {
       const std::uint64_t mid = std::uint64_t{l.in.c} * l.depth_multiplier;
       return std::uint64_t{l.out.h} * l.out.w * mid * (l.kernel_h * l.kernel_w + l.out.c);
     },
     [](const Op& l) {
       const std::uint32_t mid = l.in.c * l.depth_multiplier;
       return with_bias(l,
                        {{Param::Kernel,
                          "depthwise_kernel",
                          {l.kernel_h, l.kernel_w, l.in.c, l.depth_multiplier},
                          Init::Glorot,
                          receptive(l) * l.in.c,
                          receptive(l) * l.depth_multiplier},
                         {Param::PointwiseKernel,
                          "pointwise_kernel",
                          {1, 1, mid, l.out.c},
                          Init::Glorot,
                          double(mid),
                          double(l.out.c)}},
                        l.out.c);
     },
     no_grad},
    {OpKind::Concatenate, "Concatenate", 2, kAny, false, false, false,
     [](const Op& l, const std::vector<Shape>& in) -> InferredShape {
       Shape out = in[0];
       for (std::size_t k = 1; k < in.size(); ++k) {
         if (in[k].h != in[0].h || in[k].w != in[0].w)
           return ShapeProblem{std::string(kInputsArgument),
                               fmt::format("layer {} (Concatenate): input {} is {}, input 0 is "
                                           "{}; they must agree in all but the channels",
                                           l.name, k, show_shape(in[k]), show_shape(in[0]))};
         out.c += in[k].c;
       }
       if (out.c > kMaxDim)
         return ShapeProblem{std::string(kInputsArgument),
                             fmt::format("layer {} (Concatenate): {} channels (at most {})", l.name,
                                         out.c, kMaxDim)};
       return out;
     },
     no_macs, no_params, no_grad},
    {OpKind::Multiply, "Multiply", 2, kAny, false, false, false, elementwise, no_macs, no_params,
     no_grad},
    {OpKind::Subtract, "Subtract", 2, 2, false, false, false, elementwise, no_macs, no_params,
     no_grad},
    {OpKind::PReLU, "PReLU", 1, 1, false, true, false, same_shape, no_macs,
     [](const Op& l) {
       // One alpha per channel (shared over the image's rows and columns): [1, 1, c], or
       // [c] on a flat input.
       std::vector<std::uint32_t> dims = {l.out.c};
       if (l.out.h != 1 || l.out.w != 1) dims = {1, 1, l.out.c};
       return std::vector<ParamSpec>{{Param::Alpha, "alpha", dims, Init::Zeros}};
     },
     no_grad},
    {OpKind::Embedding, "Embedding", 1, 1, false, true, false,
     [](const Op& l, const std::vector<Shape>& in) -> InferredShape {
       if (in[0].h != 1 || in[0].w != 1)
         return ShapeProblem{std::string(kClassArgument),
                             fmt::format("Embedding needs a flat sequence of token ids (1 x 1 x "
                                         "steps per image) but gets {}",
                                         show_shape(in[0]))};
       return Shape{1, in[0].c, l.filters};
     },
     no_macs,
     [](const Op& l) {
       return std::vector<ParamSpec>{
           {Param::Kernel, "embeddings", {l.input_dim, l.filters}, Init::Embedding}};
     },
     no_grad},
    {OpKind::LSTM, "LSTM", 1, 1, false, true, false,
     [](const Op& l, const std::vector<Shape>& in) -> InferredShape {
       if (auto problem = not_a_sequence(l, in[0])) return *problem;
       return Shape{1, l.return_sequences ? in[0].w : 1u, l.filters};
     },
     [](const Op& l) {
       // Per step: the input and the previous output, each times its kernel of 4 * units.
       return std::uint64_t{l.in.w} * (std::uint64_t{l.in.c} + l.filters) * 4 * l.filters;
     },
     [](const Op& l) {
       const std::uint32_t u = l.filters, g = 4 * l.filters;
       std::vector<ParamSpec> v = {
           {Param::Kernel, "kernel", {l.in.c, g}, Init::Glorot, double(l.in.c), double(g)},
           {Param::RecurrentKernel,
            "recurrent_kernel",
            {u, g},
            Init::Glorot,
            double(u),
            double(g)}};
       if (l.use_bias) v.push_back({Param::Bias, "bias", {g}, Init::LstmBias});
       return v;
     },
     no_grad},
};

}  // namespace

const std::vector<OpInfo>& op_infos() { return kOpInfos; }

const OpInfo& op_info(OpKind k) {
  for (const OpInfo& op : kOpInfos)
    if (op.kind == k) return op;
  throw std::logic_error(
      fmt::format("layer kind {} has no entry in the operation table", static_cast<int>(k)));
}

std::optional<ShapeProblem> infer_shapes(Op& l, const std::vector<Shape>& inputs) {
  const OpInfo& op = op_info(l.kind);
  if (inputs.size() < op.min_inputs || inputs.size() > op.max_inputs) {
    const bool exact = op.min_inputs == op.max_inputs;
    return ShapeProblem{std::string(kInputsArgument),
                        fmt::format("layer {} ({}) takes {}{} input{}, it names {}", l.name,
                                    op.name, op.min_inputs, exact ? "" : " or more",
                                    exact && op.min_inputs == 1 ? "" : "s", inputs.size())};
  }
  InferredShape out = op.infer(l, inputs);
  if (auto* problem = std::get_if<ShapeProblem>(&out)) return std::move(*problem);
  l.out = std::get<Shape>(out);
  l.in = inputs.empty() ? l.out : inputs[0];
  return std::nullopt;
}

std::uint32_t dilated_kernel_h(const Op& op) { return (op.kernel_h - 1) * op.dilation_h + 1; }
std::uint32_t dilated_kernel_w(const Op& op) { return (op.kernel_w - 1) * op.dilation_w + 1; }

Pads window_pads(const Op& op) {
  if (op.padding == Padding::Explicit)
    return Pads{op.pad_top, op.pad_bottom, op.pad_left, op.pad_right};
  if (op.padding == Padding::Valid) return Pads{};
  auto split = [](std::uint32_t in, std::uint32_t out, std::uint32_t k, std::uint32_t s) {
    const std::int64_t total =
        std::max<std::int64_t>(std::int64_t{out - 1} * s + k - std::int64_t{in}, 0);
    return std::pair{static_cast<std::uint32_t>(total / 2),
                     static_cast<std::uint32_t>(total - total / 2)};
  };
  const auto [top, bottom] = split(op.in.h, op.out.h, dilated_kernel_h(op), op.stride_h);
  const auto [left, right] = split(op.in.w, op.out.w, dilated_kernel_w(op), op.stride_w);
  return Pads{top, bottom, left, right};
}

void refuse(const Graph& g, const Op& op, const std::string& why) {
  throw InputError(fmt::format("{}: layer {} ({}): {}", g.file, op.name, name_of(op.kind), why));
}

std::string show_shape(const Shape& s) { return fmt::format("{}x{}x{}", s.h, s.w, s.c); }

std::string_view name_of(OpKind k) { return op_info(k).name; }

bool Op::has_weights() const { return op_info(kind).weights; }
bool Op::has_parameters() const { return op_info(kind).parameters; }
bool Op::is_view() const { return op_info(kind).view; }
std::uint64_t Op::macs() const { return op_info(kind).macs(*this); }

}  // namespace tpu::ir
