#include "sw/ir/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include "hw/common/error.h"

namespace tpu::ir {
namespace {

constexpr std::size_t kAny = std::numeric_limits<std::size_t>::max();

std::uint64_t no_macs(const Op&) { return 0; }

// Keras's conv_output_length: "valid" keeps the windows that fit, "same" is ceil(in / stride).
InferredShape window(const Op& l, const Shape& in, std::uint32_t channels,
                     const char* window_argument) {
  if (l.padding == Padding::Explicit) {
    const std::uint64_t h = std::uint64_t{in.h} + l.pad_top + l.pad_bottom;
    const std::uint64_t w = std::uint64_t{in.w} + l.pad_left + l.pad_right;
    if (l.kernel_h > h || l.kernel_w > w)
      return ShapeProblem{window_argument,
                          fmt::format("the {}x{} window does not fit the padded {} input",
                                      l.kernel_h, l.kernel_w, show_shape(in))};
    return Shape{static_cast<std::uint32_t>((h - l.kernel_h) / l.stride_h + 1),
                 static_cast<std::uint32_t>((w - l.kernel_w) / l.stride_w + 1), channels};
  }
  if (l.padding == Padding::Same)
    return Shape{(in.h + l.stride_h - 1) / l.stride_h, (in.w + l.stride_w - 1) / l.stride_w,
                 channels};
  if (l.kernel_h > in.h || l.kernel_w > in.w)
    return ShapeProblem{window_argument,
                        fmt::format("the {}x{} window does not fit the {} input with \"valid\" "
                                    "padding",
                                    l.kernel_h, l.kernel_w, show_shape(in))};
  return Shape{(in.h - l.kernel_h) / l.stride_h + 1, (in.w - l.kernel_w) / l.stride_w + 1,
               channels};
}

InferredShape same_shape(const Op&, const std::vector<Shape>& in) { return in[0]; }

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

const std::vector<OpInfo> kOpInfos = {
    {OpKind::Conv2D, "Conv2D", 1, 1, true, true, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], l.filters, "kernel_size");
     },
     [](const Op& l) { return l.out.size() * l.kernel_h * l.kernel_w * l.in.c; }},
    {OpKind::MaxPooling2D, "MaxPooling2D", 1, 1, false, false, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], in[0].c, "pool_size");
     },
     no_macs},
    {OpKind::AveragePooling2D, "AveragePooling2D", 1, 1, false, false, false,
     [](const Op& l, const std::vector<Shape>& in) {
       return window(l, in[0], in[0].c, "pool_size");
     },
     no_macs},
    {OpKind::Activation, "Activation", 1, 1, false, false, false, same_shape, no_macs},
    {OpKind::Flatten, "Flatten", 1, 1, false, false, true,
     [](const Op&, const std::vector<Shape>& in) -> InferredShape {
       // Every resolved shape holds at most kMaxTensorElements, which fits 32 bits.
       return Shape{1, 1, static_cast<std::uint32_t>(in[0].size())};
     },
     no_macs},
    {OpKind::Reshape, "Reshape", 1, 1, false, false, true, reshape, no_macs},
    {OpKind::Dense, "Dense", 1, 1, true, true, false,
     [](const Op& l, const std::vector<Shape>& in) -> InferredShape {
       // Keras applies Dense to the last axis of a 3-D input; tpusim's chips and references
       // treat Dense as a matrix product over the whole flat input, so the two would disagree.
       if (in[0].h != 1 || in[0].w != 1)
         return ShapeProblem{std::string(kClassArgument),
                             fmt::format("Dense needs a flat input (h = w = 1) but gets {}; "
                                         "insert a Flatten before it (Keras would apply it to "
                                         "the last axis only)",
                                         show_shape(in[0]))};
       return Shape{1, 1, l.filters};
     },
     [](const Op& l) { return l.in.size() * l.out.c; }},
    {OpKind::BatchNormalization, "BatchNormalization", 1, 1, false, true, false, same_shape,
     no_macs},
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
     no_macs},
    {OpKind::GlobalAveragePooling2D, "GlobalAveragePooling2D", 1, 1, false, false, false,
     [](const Op&, const std::vector<Shape>& in) -> InferredShape {
       return Shape{1, 1, in[0].c};
     },
     no_macs},
    {OpKind::GlobalMaxPooling2D, "GlobalMaxPooling2D", 1, 1, false, false, false,
     [](const Op&, const std::vector<Shape>& in) -> InferredShape {
       return Shape{1, 1, in[0].c};
     },
     no_macs},
    {OpKind::Add, "Add", 2, kAny, false, false, false,
     [](const Op& l, const std::vector<Shape>& in) -> InferredShape {
       for (std::size_t k = 1; k < in.size(); ++k)
         if (!(in[k] == in[0]))
           return ShapeProblem{std::string(kInputsArgument),
                               fmt::format("layer {} (Add): input {} is {}, input 0 is {}; Add "
                                           "needs equal shapes",
                                           l.name, k, show_shape(in[k]), show_shape(in[0]))};
       return in[0];
     },
     no_macs},
    {OpKind::Dropout, "Dropout", 1, 1, false, false, false, same_shape, no_macs},
    // A tensor the chip holds in off-chip memory: its shape is its own argument.
    {OpKind::Constant, "Constant", 0, 0, false, false, false,
     [](const Op& l, const std::vector<Shape>&) -> InferredShape { return l.out; }, no_macs},
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
  const auto [top, bottom] = split(op.in.h, op.out.h, op.kernel_h, op.stride_h);
  const auto [left, right] = split(op.in.w, op.out.w, op.kernel_w, op.stride_w);
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
