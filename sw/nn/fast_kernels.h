// The quantized reference's fast kernels (issue 16, docs/performance.md): int8 products through
// oneDNN where its arithmetic is exact, the rest vectorised here. Each computes bit for bit what
// the plain loops of quantized.cpp compute (tb/unit/nn/fast_reference_test.cpp compares them on
// several models); none shares code with the chip model (hw/), so the reference stays
// independent of what it checks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tpu::nn::fast {

// Whether int8 convolutions run through oneDNN's int8 convolution: built with it (Debian's
// libdnnl-dev found at configure time) and on a CPU whose int8 dot products accumulate in int32
// without an int16 intermediate (VNNI or AMX). Without VNNI, oneDNN's u8 x s8 pairs
// (vpmaddubsw) saturate at int16 and the sums are no longer exact: ConvS8 then takes oneDNN's
// fp32 convolution where that is exact.
bool onednn_int8();
// Whether tpusim was built with oneDNN at all.
bool onednn_built();

// A convolution of n NHWC images (ih x iw x ic) with a [kh][kw][ic][oc] kernel (Keras order),
// strides sh, sw, dilations dh, dw, zeros pt rows above and pl columns left of the image and as
// many below and right as the output oh x ow needs.
struct ConvShape {
  std::size_t n = 0;
  std::uint32_t ih = 1, iw = 1, ic = 1, kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  std::uint32_t pt = 0, pl = 0, oh = 1, ow = 1, oc = 1;
};

// The int32 sums acc[((b * oh + y) * ow + x) * oc + c] of the int8 convolution of shape s
// (s.n: the most images a call takes), through oneDNN: the primitive is made and the kernel
// reordered once, then called on as many batches as the caller likes. With VNNI or AMX,
// oneDNN's s8 x s8 -> s32 convolution; elsewhere its fp32 convolution of the same values, where
// the kernel makes every sum exact in fp32 (128 * sum over k of |w[k][c]| < 2^24 for every column
// c, whatever the int8 inputs), and not at all otherwise. `route` picks one for tests.
enum class ConvRoute { Best, S8, F32 };
class ConvS8 {
 public:
  ConvS8(const ConvShape& s, const std::int8_t* kernel, ConvRoute route = ConvRoute::Best);
  ~ConvS8();
  ConvS8(const ConvS8&) = delete;
  ConvS8& operator=(const ConvS8&) = delete;
  // False when oneDNN is not used or cannot take the shape: run must not be called.
  [[nodiscard]] bool ok() const;
  // n <= s.n images at `in` into `acc`.
  void run(const std::int8_t* in, std::size_t n, std::int32_t* acc);

 private:
  struct Impl;
  Impl* impl_ = nullptr;
};

// The vector unit's int8 Activate of `pixels` rows of `oc` accumulators:
// out = numerics::requantize(numerics::add_bias(acc, bias[c]), multiplier[c], shift[c]), then
// numerics::relu when `relu`. Vectorised with the widest instruction set the CPU has (AVX-512,
// else AVX2), the numerics calls elsewhere.
void requantize_rows(const std::int32_t* acc, std::size_t pixels, std::size_t oc,
                     const std::int32_t* bias, const std::int32_t* multiplier,
                     const std::int32_t* shift, bool relu, std::int8_t* out);

// The instruction sets requantize_rows can use, for tests that run each one the CPU has.
enum class Isa { Scalar, Avx2, Avx512 };
bool cpu_has(Isa isa);
// requantize_rows on `isa` (which the CPU must have).
void requantize_rows_on(Isa isa, const std::int32_t* acc, std::size_t pixels, std::size_t oc,
                        const std::int32_t* bias, const std::int32_t* multiplier,
                        const std::int32_t* shift, bool relu, std::int8_t* out);

// Whether requantize_rows and bf16_sums run their AVX-512 loops on this CPU.
bool requantize_vectorised();

// The scalar loop of requantize_rows, the numerics calls as written (the definition the
// vectorised one is tested against).
void requantize_rows_scalar(const std::int32_t* acc, std::size_t pixels, std::size_t oc,
                            const std::int32_t* bias, const std::int32_t* multiplier,
                            const std::int32_t* shift, bool relu, std::int8_t* out);

// The bf16 MXU's sums of `rows` input rows x[r][0..K) (bf16 values widened to fp32) with a
// K x N kernel w (likewise): per column, each tile of `tile` rows of K summed from +0 in row
// order, the tiles added into the accumulator in order — the order the plain loops and the chip
// keep (docs/quantization.md) — into acc[r][0..N). Products of two bf16 values are exact in
// fp32, so only the order of the sums matters, and it is kept per lane. Unlike the plain loops it
// does not skip zero inputs: equal bits only for finite weights (a zero times a finite weight is
// +-0, which leaves a partial sum that is never -0 unchanged); the caller checks. False (acc
// untouched) on CPUs without AVX-512.
bool bf16_sums(const float* x, std::size_t rows, std::size_t K, const float* w, std::size_t N,
               std::size_t tile, float* acc);

// The vector unit's Activate of `rows` rows of N fp32 accumulators into bf16 for a linear or
// ReLU output: to_bf16(numerics::relu?(numerics::scale_float(acc, bias[c], scale[c]))), as
// activate_pixel in quantized.cpp computes it, compiled for AVX-512 where the CPU has it.
void activate_bf16_rows(const float* acc, std::size_t rows, std::size_t N, const float* bias,
                        const float* scale, bool relu, std::uint16_t* out);

// While alive, oneDNN runs on the calling thread alone: the reference runs beside the
// simulation, one core each (sw/sim/session.cpp); more threads would take the simulation's.
class SingleThread {
 public:
  SingleThread();
  ~SingleThread();
  SingleThread(const SingleThread&) = delete;
  SingleThread& operator=(const SingleThread&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace tpu::nn::fast
