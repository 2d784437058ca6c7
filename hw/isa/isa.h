// The tpusim instruction set: TPU v1's CISC instructions (J17 §2: Read_Host_Memory,
// Read_Weights, MatrixMultiply/Convolve, Activate, Write_Host_Memory, synchronise, halt,
// set-configuration, debug-tag, nop) plus what pooling, HBM-resident activations and several
// cores need. Every instruction encodes to 32 little-endian bytes; docs/isa.md is the reference.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "hw/common/dtype.h"
#include "hw/common/types.h"

namespace tpu::isa {

inline constexpr std::size_t kInstructionBytes = 32;
using Word = std::array<std::uint8_t, kInstructionBytes>;

enum class Opcode : std::uint8_t {
  Nop = 0x00,
  ReadHost = 0x01,     // host memory -> unified buffer (host link)
  WriteHost = 0x02,    // unified buffer -> host memory (host link)
  ReadMem = 0x03,      // off-chip memory -> unified buffer
  WriteMem = 0x04,     // unified buffer -> off-chip memory
  ReadWeights = 0x05,  // off-chip memory or unified buffer -> an MXU's weight FIFO
  SetWindow = 0x06,    // convolution window geometry for following windowed MatMuls
  MatMul = 0x07,       // unified buffer rows x resident weight tile -> accumulators
  Activate = 0x08,     // accumulators -> bias, scale, nonlinearity -> unified buffer
  Pool = 0x09,         // unified buffer -> max/avg pooling -> unified buffer
  Eltwise = 0x0a,      // unified buffer (a, b) -> elementwise op -> unified buffer
  Sync = 0x0b,         // wait until every earlier instruction of this core (or all cores) is done
  Tag = 0x0c,          // debug tag: attributes following work to a layer id in the counters
  Softmax = 0x0d,      // unified buffer fp32 rows -> softmax across each row -> unified buffer
  Halt = 0x0f,         // end of this core's program
  Copy = 0x10,         // unified buffer rows -> strided 2-D copy -> unified buffer
  Map = 0x11,          // unified buffer -> x*a+b per channel, function, type -> unified buffer
  Reduce = 0x12,       // unified buffer fp32 rows -> sum or max down each column -> unified buffer
  PoolGrad = 0x13,     // pool's backward: dY (and X for max) -> dX, window from set_window
  Gather = 0x20,       // off-chip table rows picked by unified-buffer indices -> unified buffer
  IciWrite = 0x21,     // unified buffer -> a chip's off-chip memory over the ICI links; a signal
  IciWait = 0x22,      // wait until this chip's semaphore has counted arrivals
  Xent = 0x14,         // fp32 logits + int32 labels -> softmax cross-entropy, gradient, loss
  Update = 0x15,       // fp32 weights, gradients, slots -> one optimizer step, in place
};

enum class WeightSource : std::uint8_t { OffChip = 0, UnifiedBuffer = 1 };
enum class ActFunc : std::uint8_t {
  None = 0,
  Relu = 1,
  Relu6 = 2,
  Sigmoid = 3,
  Tanh = 4,
  Softmax = 5
};
enum class PoolKind : std::uint8_t { Max = 0, Avg = 1 };
// The *_grad ops are the activations' backward on fp32: a is the forward activation's output y,
// b the incoming gradient dy (numerics/gradient.h). Div is one IEEE-754 fp32 division (fp32 only,
// as the *_grad ops): BatchNormalization's training arithmetic divides per element.
enum class EltOp : std::uint8_t {
  Add = 0,
  Mul = 1,
  Max = 2,
  Min = 3,
  Sub = 4,
  ReluGrad = 5,
  Relu6Grad = 6,
  SigmoidGrad = 7,
  TanhGrad = 8,
  Div = 9
};
enum class ReduceOp : std::uint8_t { Sum = 0, Max = 1, SumSquares = 2 };
// Map's functions; leaky_relu, elu and prelu take the channel record's alpha (prelu is leaky_relu
// by another name: the compiler writes one alpha per channel for PReLU, the same alpha in every
// record for LeakyReLU). rsqrt (numerics::rsqrt, fp32 in and out only) is BatchNormalization's
// 1/sqrt(variance + epsilon) in training mode: a = 1, b = epsilon per channel.
enum class MapFunc : std::uint8_t {
  Identity = 0,
  Relu = 1,
  Relu6 = 2,
  LeakyRelu = 3,
  Elu = 4,
  Sigmoid = 5,
  Tanh = 6,
  Prelu = 7,
  Rsqrt = 8
};
// Update's optimizers and the fp32 record each reads at `params`.
enum class UpdateKind : std::uint8_t {
  Sgd = 0,       // {lr}
  Momentum = 1,  // {lr, momentum}
  Adam = 2,      // {lr, beta1, beta2, epsilon, beta1_power, beta2_power}
  Lars = 3       // {lr, momentum, weight_decay, eta, w_sumsq, g_sumsq}
};
// The fp32 values of update's record for `kind` (0 for a code that is no kind).
constexpr std::uint32_t update_params(UpdateKind kind) {
  switch (kind) {
    case UpdateKind::Sgd: return 1;
    case UpdateKind::Momentum: return 2;
    case UpdateKind::Adam: return 6;
    case UpdateKind::Lars: return 6;
  }
  return 0;
}

struct Nop {};
struct ReadHost {
  HostAddr src;
  UbAddr dst;
  std::uint32_t bytes = 0;
};
struct WriteHost {
  UbAddr src;
  HostAddr dst;
  std::uint32_t bytes = 0;
};
// read_mem and write_mem: `ici` runs the transfer on the core's ICI engine (the second DMA
// engine, in its order with its ici_writes and waits) instead of the DMA: a collective's memory
// traffic then queues apart from the rest of the program's.
struct ReadMem {
  MemAddr src;
  UbAddr dst;
  std::uint32_t bytes = 0;
  bool ici = false;
};
struct WriteMem {
  UbAddr src;
  MemAddr dst;
  std::uint32_t bytes = 0;
  bool ici = false;
};
// A stored matrix S of rows x cols elements of the MXU input type at `addr` (an off-chip MemAddr
// or a UbAddr, by `source`), row i at addr + i*stride (stride 0: dense, cols * element bytes).
// The tile made resident is W = S (K = rows, N = cols) or, with `transpose`, W = S^T (K = cols,
// N = rows): the backward pass reads a forward tile transposed, and a stride picks a sub-block of
// a larger matrix without a copy. K <= mxu.rows, N <= mxu.cols (isa::weight_tile_shape).
struct ReadWeights {
  std::uint8_t mxu = 0;
  WeightSource source = WeightSource::OffChip;
  std::uint64_t addr = 0;
  std::uint16_t rows = 0;
  std::uint16_t cols = 0;
  bool transpose = false;
  std::uint32_t stride = 0;  // bytes between stored rows; 0 = dense
};
// Geometry of an NHWC image in the unified buffer and the window that a windowed MatMul reads:
// row r of the MatMul is output pixel p = first_pixel + r (image p / (out_h*out_w), then oy, ox);
// its element k (k_first <= k < k_first + tile rows) is channel k % in_c of window position
// (ky, kx) = ((k / in_c) / kernel_w, (k / in_c) % kernel_w), read at input pixel
// (oy*stride_h + ky*dilation_h - pad_top, ox*stride_w + kx*dilation_w - pad_left), zero outside
// the image. A dilation of 0 reads as 1: programs written before the dilation fields existed
// encode 0 there and keep their meaning. in_dilation_h/w dilate the image itself (zeros between
// its pixels, what a strided convolution's input gradient reads): the position above is then a
// pixel of the dilated image, zero between stored pixels (isa::window_pixel); 0 reads as 1 too.
struct SetWindow {
  std::uint16_t in_h = 0, in_w = 0, in_c = 0;
  std::uint16_t kernel_h = 0, kernel_w = 0;
  std::uint16_t stride_h = 1, stride_w = 1;
  std::uint16_t pad_top = 0, pad_left = 0;
  std::uint16_t out_h = 0, out_w = 0;
  std::uint16_t dilation_h = 1, dilation_w = 1;
  std::uint8_t in_dilation_h = 1, in_dilation_w = 1;
};
// B = rows input vectors times the resident weight tile (K = tile rows, N = tile cols) into
// accumulator entries dst .. dst+rows-1. Dense: row r starts at src + r*src_stride. Windowed: see
// SetWindow. swap_weights first makes the next shifted-in tile the resident one. transpose reads
// the input transposed (weight gradients): input row r, element j is what the same MatMul without
// transpose would read as row j, element r (dense: at src + j*src_stride + r*e; windowed: pixel
// first_pixel + j, window element k_first + r).
struct MatMul {
  std::uint8_t mxu = 0;
  bool accumulate = false;
  bool swap_weights = false;
  bool window = false;
  UbAddr src;
  AccAddr dst;
  std::uint32_t rows = 0;
  std::uint32_t src_stride = 0;   // dense: bytes between input rows
  std::uint32_t first_pixel = 0;  // windowed: output pixel of row 0
  std::uint16_t k_first = 0;      // windowed: flattened window index of tile row 0
  bool transpose = false;
};
// Reads `rows` accumulator entries, `cols` values each; per column c applies, with the 3-word
// (12-byte) parameter record at params + 12*c = {bias, scale, shift}:
//   integer acc, out int8:   q = requant(acc + bias, multiplier = scale (Q31), shift), then func
//   integer acc, out int32:  acc + bias (saturated), then func
//   integer acc, out fp32/bf16: func(float(acc + bias) * scale_fp32)
//   float acc:               func((acc + bias_fp32) * scale_fp32), rounded to out_type
// and writes row r at dst + r*dst_stride. Softmax works across the `cols` values of a row.
struct Activate {
  AccAddr src;
  UbAddr dst;
  UbAddr params;
  std::uint32_t rows = 0;
  std::uint16_t cols = 0;
  std::uint32_t dst_stride = 0;
  ActFunc func = ActFunc::None;
  DType out_type = DType::Int8;
};
// Pooling over `images` NHWC images of in_h x in_w x channels elements (hw/isa/pooling.h).
// Output pixel (oy, ox) pools input rows oy*stride_h - pad_top + ky, columns ox*stride_w -
// pad_left + kx; window positions outside the image are skipped (TensorFlow's "same" pooling).
// out_h = 0 (out_w = 0) selects valid pooling along that axis: no padding, (in - kernel) / stride
// + 1 outputs, the meaning of every Pool before padding existed.
struct Pool {
  UbAddr src;
  UbAddr dst;
  std::uint16_t in_h = 0, in_w = 0, channels = 0;
  std::uint16_t kernel_h = 0, kernel_w = 0;
  std::uint8_t stride_h = 0, stride_w = 0;
  std::uint16_t images = 0;
  PoolKind kind = PoolKind::Max;
  DType type = DType::Int8;
  std::uint8_t pad_top = 0, pad_left = 0;
  std::uint16_t out_h = 0, out_w = 0;
};
// dst[i] = a[i] op b[j] for i < count, of int8, bf16 or fp32 elements, with j = i when b_period
// is 0 and j = i mod b_period otherwise: b then holds b_period elements, broadcast along a (1: a
// scalar; C: one value per channel of an NHWC tensor). int8 saturates; int8 Mul rounds
// (a*b) >> shift when multiplier is 0, else requantizes a*b by the Q31 multiplier and the signed
// shift as Activate does.
struct Eltwise {
  UbAddr a, b, dst;
  std::uint32_t count = 0;
  std::int8_t shift = 0;
  EltOp op = EltOp::Add;
  DType type = DType::Int8;
  std::int32_t multiplier = 0;  // int8 Mul: Q31 multiplier, or 0 for the plain rounding shift
  std::uint32_t b_period = 0;   // elements of b, 0 = count (no broadcast), else 1..count
};
// For r < rows: the `cols` fp32 values at src + r*src_stride, softmax across them (as Activate's
// softmax), written as fp32 at dst + r*dst_stride. For rows wider than an accumulator entry,
// which Activate's per-entry softmax cannot span: the compiler activates each column tile to
// fp32 logits, then normalizes the whole row.
struct Softmax {
  UbAddr src;
  UbAddr dst;
  std::uint32_t rows = 0;
  std::uint16_t cols = 0;
  std::uint32_t src_stride = 0;
  std::uint32_t dst_stride = 0;
};
// For r < rows: the row_bytes bytes at src + r*src_stride copied to dst + r*dst_stride, inside the
// unified buffer (Concatenate along channels, padding borders). src_stride may be anything (0
// repeats one row, e.g. a zero region into a border); rows do not overlap in dst.
struct Copy {
  UbAddr src;
  UbAddr dst;
  std::uint32_t rows = 0;
  std::uint32_t row_bytes = 0;
  std::uint32_t src_stride = 0;
  std::uint32_t dst_stride = 0;
};
// For i < count, with channel c = i % channels and the fp32 record {a, b, alpha} at params + 12*c:
// x = src[i] as a real number (int8: q * in_scale), y = func(x * a + b; alpha) in fp32, written to
// dst[i] as out_type (int8: clamp(round(y / out_scale), -127, 127)). Standalone
// BatchNormalization, LeakyReLU, ELU, PReLU and activations, and conversions between int8, bf16
// and fp32.
struct Map {
  UbAddr src;
  UbAddr dst;
  UbAddr params;
  std::uint32_t count = 0;
  std::uint16_t channels = 1;
  float in_scale = 0.0f;   // in_type int8 only, else 0
  float out_scale = 0.0f;  // out_type int8 only, else 0
  MapFunc func = MapFunc::Identity;
  DType in_type = DType::Int8;
  DType out_type = DType::Int8;
};
// bytes 0: the sequencer issues nothing after it until every earlier instruction of this core
// (all_cores: of every core of the chip, each at its own sync all_cores) is done.
// bytes > 0, all_cores: a barrier of the chip's cores on a region of off-chip memory, which the
// core's ICI engine takes in its order while the sequencer issues on: it counts as writing
// [dst, dst + bytes), so it starts once this core's earlier instructions that touch the region
// are done, completes when every core's ICI engine has reached its own such sync, and what
// touches the region after it waits for it (docs/isa.md, "sync").
struct Sync {
  bool all_cores = false;
  MemAddr dst{};
  std::uint32_t bytes = 0;
};
struct Tag {
  std::uint32_t id = 0;
};
struct Halt {};
// Keras Embedding's lookup: for r < count, idx = the int32 at indices + 4*r, which must lie in
// [0, rows); the row_bytes bytes at off-chip table + idx*row_bytes go to dst + r*row_bytes.
// Every index is read before any row is written, so dst may overlap indices.
struct Gather {
  MemAddr table;
  UbAddr indices;
  UbAddr dst;
  std::uint32_t count = 0;
  std::uint32_t row_bytes = 0;
  std::uint32_t rows = 0;
};

// The semaphores each chip counts ICI arrivals on (docs/isa.md, "ICI").
inline constexpr std::uint32_t kIciSemaphores = 32;

// Over the inter-chip interconnect (docs/systems.md): the `bytes` bytes at src are written into
// chip `chip`'s off-chip memory at dst, routed over the ICI links (the chip may be this one: a
// copy through no link); when the last byte has arrived, that chip's semaphore `sem` counts one.
// `bytes` 0 sends the count alone, a signal. Run by the DMA, in its order.
struct IciWrite {
  UbAddr src;
  MemAddr dst;
  std::uint32_t bytes = 0;
  std::uint32_t chip = 0;
  std::uint8_t sem = 0;
};
// Waits until this chip's semaphore `sem` has counted `count` arrivals that no earlier ici_wait
// took, and takes them. What arrived is in off-chip memory. bytes 0: the sequencer waits, and
// issues nothing after it until then. bytes > 0: the core's ICI engine waits, in its order, while
// the sequencer issues on; the wait counts as writing [dst, dst + bytes) of off-chip memory (where
// the arrivals land), so what reads that region after it waits for it.
struct IciWait {
  std::uint8_t sem = 0;
  std::uint32_t count = 0;
  MemAddr dst{};
  std::uint32_t bytes = 0;
};

// Sparse softmax cross-entropy with its gradient (TF's SparseSoftmaxCrossEntropyWithLogits), one
// example per row: for r < rows, the cols fp32 logits at src + 4*cols*r and the int32 label at
// labels + 4*r give (numerics::softmax_xent_row) the gradient row at dst + 4*cols*r, scaled by
// `scale` (1 / the global batch), and the record {loss, correct} of two fp32 at out + 8*r, the
// targets smoothed by `smoothing` (Keras's label_smoothing; 0: the one-hot labels). dst may equal
// src.
struct Xent {
  UbAddr src;
  UbAddr labels;
  UbAddr dst;
  UbAddr out;
  std::uint32_t rows = 0;
  std::uint16_t cols = 0;
  float scale = 0.0f;
  float smoothing = 0.0f;
};
// One optimizer step over `count` fp32 elements, in place (numerics/optimizer.h): w from g, and
// the slots m (momentum, adam, lars) and v (adam); the fp32 record at `params` by `kind` (lars's
// w_sumsq and g_sumsq are the whole tensor's, which reduce sum_squares wrote there before). The
// fields a kind does not use must be 0.
struct Update {
  UbAddr w;
  UbAddr g;
  UbAddr m;
  UbAddr v;
  UbAddr params;
  std::uint32_t count = 0;
  UpdateKind kind = UpdateKind::Sgd;
};

// For c < cols: s = acc ? dst[c] : (sum, sum_squares: +0, max: -inf); then for r = 0 .. rows-1
// in order, with x = src[r*stride + 4c]: s = s + x (sum, one fp32 add), s = s + x * x
// (sum_squares: the product rounded, then the add) or max(s, x) (NaN propagates); dst[c] = s.
// fp32 values. Bias gradients, BatchNormalization's batch statistics, a loss's sum, LARS's norms.
struct Reduce {
  UbAddr src;
  UbAddr dst;
  std::uint32_t rows = 0;
  std::uint16_t cols = 0;
  std::uint32_t stride = 0;  // bytes between input rows, >= 4 * cols
  bool accumulate = false;
  ReduceOp op = ReduceOp::Sum;
  DType type = DType::Fp32;  // fp32 only (the vector unit refuses the others)
};
// Pool's backward over `images` NHWC images, the geometry the window registers (set_window)
// held at issue: in_h x in_w x in_c inputs, out_h x out_w outputs, kernel, stride, pad_top and
// pad_left as Pool's (hw/isa/pooling.h). dst (dX, shaped as x) is zeroed; then each output
// element's gradient dy goes, by one fp32 add, to the first maximum of x in its window (max) or,
// divided by the window's size, to every position of its window (avg). avg does not read x.
struct PoolGrad {
  UbAddr x;    // the forward input, images*in_h*in_w*in_c fp32 (max only)
  UbAddr dy;   // the gradient of the forward output, images*out_h*out_w*in_c fp32
  UbAddr dst;  // dX, shaped as x
  std::uint32_t images = 0;
  PoolKind kind = PoolKind::Max;
  DType type = DType::Fp32;  // fp32 only (the vector unit refuses the others)
};

using Instruction =
    std::variant<Nop, ReadHost, WriteHost, ReadMem, WriteMem, ReadWeights, SetWindow, MatMul,
                 Activate, Pool, Eltwise, Softmax, Sync, Tag, Halt, Gather, Copy, Map, Xent, Update,
                 Reduce, PoolGrad, IciWrite, IciWait>;

Opcode opcode_of(const Instruction& inst);
std::string mnemonic(Opcode op);

Word encode(const Instruction& inst);
// Throws ProgramError for an illegal opcode, an unknown enum value or a reserved field that is
// not zero (decode_all adds the instruction's index to the message).
Instruction decode(const Word& word);

std::vector<std::uint8_t> encode_all(const std::vector<Instruction>& program);
std::vector<Instruction> decode_all(const std::uint8_t* data, std::size_t bytes);

// One line of assembly text, e.g. "matmul mxu=0 src=0x100 dst=0 rows=64 stride=256 swap".
std::string to_string(const Instruction& inst);

}  // namespace tpu::isa
