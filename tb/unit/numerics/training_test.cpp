// The training definitions (numerics/loss.h, numerics/optimizer.h) against vectors computed
// outside C++ (tb/unit/numerics/data/make_training_vectors.py: numpy float32, one operation at a
// time), against TensorFlow's documented ResourceApplyAdam formula evaluated in float64, and
// against float64 evaluations of the cross-entropy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "numerics/loss.h"
#include "numerics/optimizer.h"
#include "tb/unit/numerics/data/training_vectors.h"
#include "tb/unit/numerics/exact_rules.h"

namespace tpu::numerics {
namespace {

using exact::bits_of;
using exact::float_of;

// +, -, *, / and sqrt are correctly rounded in IEEE 754, so numpy's float32 steps and ours give
// the same bits when the order is the same.
TEST(OptimizerVectors, SgdMomentumAndAdamGiveNumpysFloat32BitsStepForStep) {
  for (const vectors::OptimizerCase& c : vectors::kOptimizerCases) {
    const float w = float_of(c.w), g = float_of(c.g), lr = float_of(c.lr);
    const float beta1 = float_of(c.beta1), beta2 = float_of(c.beta2);
    EXPECT_EQ(bits_of(sgd_step(w, g, lr)), c.sgd_w);
    float mw = w, mm = float_of(c.m);
    momentum_step(mw, mm, g, lr, beta1);
    EXPECT_EQ(bits_of(mw), c.momentum_w);
    EXPECT_EQ(bits_of(mm), c.momentum_m);
    float aw = w, am = float_of(c.m), av = float_of(c.v);
    const float alpha = adam_alpha(lr, float_of(c.beta1_power), float_of(c.beta2_power));
    adam_step(aw, am, av, g, alpha, beta1, beta2, float_of(c.epsilon));
    EXPECT_EQ(bits_of(aw), c.adam_w) << "w " << w << " g " << g;
    EXPECT_EQ(bits_of(am), c.adam_m);
    EXPECT_EQ(bits_of(av), c.adam_v);
  }
}

TEST(AdamPowers, AreTheFloat64PowerRoundedOnceToFp32) {
  for (const vectors::PowerCase& c : vectors::kPowerCases) {
    const AdamPowers p = adam_powers(float_of(c.beta), float_of(c.beta), c.t);
    EXPECT_EQ(bits_of(p.beta1_power), c.power) << float_of(c.beta) << "^" << c.t;
    EXPECT_EQ(bits_of(p.beta2_power), c.power);
  }
  const AdamPowers keras = adam_powers(0.9f, 0.999f, 1);
  EXPECT_EQ(keras.beta1_power, 0.9f);
  EXPECT_EQ(keras.beta2_power, 0.999f);
}

// TensorFlow's documented ResourceApplyAdam (tf.raw_ops.ResourceApplyAdam):
//   lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
//   m_t = beta1 * m + (1 - beta1) * g;  v_t = beta2 * v + (1 - beta2) * g * g
//   var = var - lr_t * m_t / (sqrt(v_t) + epsilon)
// in float64 from the same fp32 inputs. m + (g - m)(1 - beta1) is the same real number as
// beta1·m + (1 - beta1)·g, so the fp32 steps differ from it only by their roundings: a few
// units of 2^-24 relative to the magnitudes involved.
TEST(Adam, AgreesWithTheDocumentedResourceApplyAdamFormulaInFloat64) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  constexpr double kU = 0x1p-24;
  for (const float lr : {1e-3f, 0.1f})
    for (const std::uint64_t t : {1u, 5u, 300u})
      for (int i = 0; i < 2000; ++i) {
        const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-7f;
        const AdamPowers p = adam_powers(beta1, beta2, t);
        const float g = u(rng), m0 = 0.1f * u(rng), v0 = 0.01f * std::fabs(u(rng));
        const float w0 = u(rng);
        float w = w0, m = m0, v = v0;
        adam_step(w, m, v, g, adam_alpha(lr, p.beta1_power, p.beta2_power), beta1, beta2, eps);

        const double b1 = beta1, b2 = beta2, gd = g;
        const double lr_t = lr * std::sqrt(1.0 - double{p.beta2_power}) / (1.0 - p.beta1_power);
        const double m_t = b1 * m0 + (1.0 - b1) * gd;
        const double v_t = b2 * v0 + (1.0 - b2) * gd * gd;
        const double step = lr_t * m_t / (std::sqrt(v_t) + eps);
        EXPECT_NEAR(m, m_t, 4 * kU * (std::fabs(m0) + std::fabs(gd)));
        EXPECT_NEAR(v, v_t, 6 * kU * (v0 + gd * gd));
        // The step's relative error: alpha (4 roundings, one through the cancelling 1 - beta1^t
        // and 1 - beta2^t of fp32 powers), m (relative to |m0| + |g| over |m|), sqrt, the sum,
        // the product and the quotient; then w - step rounds once more.
        const double m_rel = (std::fabs(m0) + std::fabs(gd)) / std::max(std::fabs(m_t), 1e-30);
        const double tol = (16 + 4 * m_rel) * kU * std::fabs(step) + 2 * kU * std::fabs(w0);
        EXPECT_NEAR(w, w0 - step, tol) << "lr " << lr << " t " << t << " g " << g;
      }
}

// Without contraction: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 before the
// subtraction, so m = 2^-11; a fused multiply-subtract would keep 2^-24 more.
TEST(Momentum, RoundsEachProductBeforeTheSubtraction) {
  const float x = 1.0f + std::ldexp(1.0f, -12);
  float w = 0.0f, m = x;
  momentum_step(w, m, 1.0f, 1.0f, x);
  EXPECT_EQ(m, std::ldexp(1.0f, -11));
  EXPECT_EQ(w, m);
  EXPECT_EQ(sgd_step(1.0f, x, x), 1.0f - (1.0f + std::ldexp(1.0f, -11)));
}

// ---- LARS ----

// Each tensor's sums of squares in the documented lane order, the trust-scaled learning rate and
// every element's step give numpy's float32 bits of TF's LARSOptimizer step (its accumulator the
// negation of tpusim's slot), including an all-zero weight tensor and an all-zero gradient,
// whose trust ratio is 1.
TEST(LarsVectors, NormsTrustRatioAndStepGiveTfsLarsOptimizerBitsInNumpyFloat32) {
  for (const vectors::LarsCase& c : vectors::kLarsCases) {
    const auto n = static_cast<std::size_t>(c.n);
    std::vector<float> w(n), g(n), m(n);
    for (std::size_t i = 0; i < n; ++i)
      w[i] = float_of(c.w[i]), g[i] = float_of(c.g[i]), m[i] = float_of(c.m[i]);
    const float w_sumsq = lars_sum_squares(w.data(), n), g_sumsq = lars_sum_squares(g.data(), n);
    EXPECT_EQ(bits_of(w_sumsq), c.w_sumsq) << "n " << n;
    EXPECT_EQ(bits_of(g_sumsq), c.g_sumsq) << "n " << n;
    const float lr = float_of(c.lr), momentum = float_of(c.momentum);
    const float weight_decay = float_of(c.weight_decay), eta = float_of(c.eta);
    const float scaled_lr = lars_scaled_lr(lr, eta, weight_decay, w_sumsq, g_sumsq);
    EXPECT_EQ(bits_of(scaled_lr), c.scaled_lr) << "n " << n;
    for (std::size_t i = 0; i < n; ++i) {
      float wi = w[i], mi = m[i];
      lars_step(wi, mi, g[i], scaled_lr, momentum, weight_decay);
      EXPECT_EQ(bits_of(wi), c.w_after[i]) << "n " << n << " i " << i;
      EXPECT_EQ(bits_of(mi), c.m_after[i]) << "n " << n << " i " << i;
    }
  }
}

// Without an FMA the square rounds before the add: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 becomes
// 1 + 2^-11; and a lane's values add in index order, 128 apart.
TEST(LarsNorm, RoundsEachSquareAndAddsEveryLaneInIndexOrder) {
  const float x = 1.0f + std::ldexp(1.0f, -12);
  EXPECT_EQ(lars_sum_squares(&x, 1), 1.0f + std::ldexp(1.0f, -11));
  // Lane 0 holds 1 then 2^24 (1 + 2^24 ties to 2^24), lane 1 holds 1: 2^24 + 1 ties to 2^24
  // again. In index order, 1 + 1 = 2 would survive: 2^24 + 2.
  std::vector<float> v(kLarsNormLanes + 1, 0.0f);
  v[0] = 1.0f, v[1] = 1.0f, v[kLarsNormLanes] = 4096.0f;
  EXPECT_EQ(lars_sum_squares(v.data(), v.size()), 16777216.0f);
  EXPECT_EQ(lars_sum_squares(v.data(), 0), 0.0f);
}

TEST(LarsTrustRatio, IsOneWhenEitherNormIsZeroOrNotANumber) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(lars_scaled_lr(0.5f, 1e-3f, 1e-4f, 0.0f, 4.0f), 0.5f);
  EXPECT_EQ(lars_scaled_lr(0.5f, 1e-3f, 1e-4f, 4.0f, 0.0f), 0.5f);
  EXPECT_EQ(lars_scaled_lr(0.5f, 1e-3f, 1e-4f, nan, 4.0f), 0.5f);
  // w_norm 2, g_norm 3, no decay: trust = 0.5 * 2 / 3.
  EXPECT_EQ(lars_scaled_lr(1.0f, 0.5f, 0.0f, 4.0f, 9.0f), (0.5f * 2.0f) / 3.0f);
}

// ---- softmax cross-entropy ----

// |got - want| in units of 2^-24 relative to `mag`.
double error_units(float got, double want, double mag) {
  return std::fabs(double{got} - want) / (0x1p-24 * mag);
}

// numpy's float32 exp and log are not the C library's expf and logf: each may differ in its last
// bit. Gradients are within (cols + 8) units of scale (the sum's roundings and exp's), the loss
// within 8 units of |log s| + |z_label - m| + 1, and correct is exact.
TEST(XentVectors, AgreeWithNumpysFloat32WithinTheLastBitsOfExpAndLog) {
  for (const vectors::XentCase& c : vectors::kXentCases) {
    const auto n = static_cast<std::size_t>(c.cols);
    std::vector<float> z(n), grad(n);
    for (std::size_t i = 0; i < n; ++i) z[i] = float_of(c.z[i]);
    const float scale = float_of(c.scale);
    const XentRow r = softmax_xent_row(z.data(), grad.data(), n, c.label, scale);
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_LE(error_units(grad[i], float_of(c.grad[i]), scale), static_cast<double>(n + 8))
          << "cols " << n << " c " << i;
    const float want_loss = float_of(c.loss);
    EXPECT_LE(error_units(r.loss, want_loss, std::fabs(want_loss) + 1.0), 8.0) << n;
    EXPECT_EQ(bits_of(r.correct), c.correct) << "cols " << n << " label " << c.label;
  }
}

// Against float64: loss = log(sum exp(z - m)) - (z_label - m), grad = (softmax - onehot) * scale.
// Logits on a 2^-10 grid in [-20, 20] make every z - m exact, as activation_test's softmax does.
TEST(Xent, IsWithinTheSoftmaxBoundsOfFloat64) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int> grid(-20 * 1024, 20 * 1024);
  for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{10}, std::size_t{1000}})
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> z(n), grad(n);
      for (float& f : z) f = std::ldexp(static_cast<float>(grid(rng)), -10);
      const std::size_t label = std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
      const float scale = 1.0f / 125.0f;
      const XentRow r = softmax_xent_row(z.data(), grad.data(), n, label, scale);
      const double m = *std::max_element(z.begin(), z.end());
      double s = 0;
      for (float f : z) s += std::exp(f - m);
      for (std::size_t i = 0; i < n; ++i) {
        const double want = (std::exp(z[i] - m) / s - (i == label ? 1.0 : 0.0)) * scale;
        ASSERT_LE(error_units(grad[i], want, scale), static_cast<double>(n + 8)) << n << " " << i;
      }
      const double loss = std::log(s) - (z[label] - m);
      EXPECT_LE(error_units(r.loss, loss, std::log(s) + std::fabs(z[label] - m) + 1.0),
                static_cast<double>(n + 8));
      EXPECT_GE(r.loss, 0.0f);
    }
}

TEST(Xent, CorrectIsOneOnlyWhenTheLabelIsTheFirstIndexOfTheMaximum) {
  const std::vector<float> z = {1.0f, 3.0f, 3.0f, -2.0f};
  std::vector<float> grad(z.size());
  EXPECT_EQ(softmax_xent_row(z.data(), grad.data(), z.size(), 1, 1.0f).correct, 1.0f);
  EXPECT_EQ(softmax_xent_row(z.data(), grad.data(), z.size(), 2, 1.0f).correct, 0.0f);
  EXPECT_EQ(softmax_xent_row(z.data(), grad.data(), z.size(), 0, 1.0f).correct, 0.0f);
  // -0 and +0 are equal: the first stays the maximum.
  const std::vector<float> zeros = {-0.0f, 0.0f};
  EXPECT_EQ(softmax_xent_row(zeros.data(), grad.data(), 2, 0, 1.0f).correct, 1.0f);
  EXPECT_EQ(softmax_xent_row(zeros.data(), grad.data(), 2, 1, 1.0f).correct, 0.0f);
}

// One class: p = 1, so the loss is log(1) - 0 = 0 and the gradient (1 - 1) * scale = 0.
TEST(Xent, OneClassHasZeroLossAndGradientAndIsAlwaysCorrect) {
  const float z = 42.0f;
  float grad = 5.0f;
  const XentRow r = softmax_xent_row(&z, &grad, 1, 0, 0.5f);
  EXPECT_EQ(bits_of(r.loss), 0u);
  EXPECT_EQ(bits_of(grad), 0u);
  EXPECT_EQ(r.correct, 1.0f);
}

TEST(Xent, WorksInPlace) {
  std::vector<float> z = {3.0f, -1.0f, 0.5f, 7.25f, 7.25f};
  std::vector<float> apart(z.size());
  const XentRow a = softmax_xent_row(z.data(), apart.data(), z.size(), 3, 0.25f);
  const XentRow b = softmax_xent_row(z.data(), z.data(), z.size(), 3, 0.25f);
  for (std::size_t i = 0; i < z.size(); ++i) EXPECT_EQ(bits_of(z[i]), bits_of(apart[i])) << i;
  EXPECT_EQ(bits_of(a.loss), bits_of(b.loss));
  EXPECT_EQ(a.correct, b.correct);
}

// ---- label smoothing ----

// Against float64 with the smoothed targets t_c = (1 - E)·onehot + E / n:
// loss = sum_c t_c·(log s - (z_c - m)), grad = (softmax - t)·scale. The sum of t_c·(z_c - m)
// adds n roundings to the loss's error.
TEST(XentLabelSmoothing, IsWithinTheBoundsOfFloat64WithSmoothedTargets) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> grid(-20 * 1024, 20 * 1024);
  for (const float e : {0.1f, 0.25f, 0.9f})
    for (const std::size_t n : {std::size_t{2}, std::size_t{10}, std::size_t{1000}})
      for (int trial = 0; trial < 10; ++trial) {
        std::vector<float> z(n), grad(n);
        for (float& f : z) f = std::ldexp(static_cast<float>(grid(rng)), -10);
        const std::size_t label = std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
        const float scale = 1.0f / 125.0f;
        const XentRow r = softmax_xent_row(z.data(), grad.data(), n, label, scale, e);
        const double m = *std::max_element(z.begin(), z.end());
        double s = 0;
        for (float f : z) s += std::exp(f - m);
        double loss = 0, spread = 0;
        for (std::size_t i = 0; i < n; ++i) {
          const double t = (i == label ? 1.0 - e : 0.0) + double{e} / static_cast<double>(n);
          const double want = (std::exp(z[i] - m) / s - t) * scale;
          ASSERT_LE(error_units(grad[i], want, scale), static_cast<double>(n + 8)) << n << " " << i;
          loss += t * (std::log(s) - (z[i] - m));
          spread += t * std::fabs(z[i] - m);
        }
        EXPECT_LE(error_units(r.loss, loss, std::log(s) + spread + 1.0),
                  static_cast<double>(2 * n + 8))
            << "E " << e << " n " << n;
      }
}

// Smoothing raises the loss of a confident correct prediction (the other classes' targets are
// no longer 0) and keeps the correct flag: the prediction is the logits', not the targets'.
TEST(XentLabelSmoothing, RaisesAConfidentPredictionsLossAndKeepsTheCorrectFlag) {
  const std::vector<float> z = {8.0f, -1.0f, 0.5f, -3.0f};
  std::vector<float> grad(z.size());
  const XentRow hard = softmax_xent_row(z.data(), grad.data(), z.size(), 0, 1.0f);
  const XentRow soft = softmax_xent_row(z.data(), grad.data(), z.size(), 0, 1.0f, 0.1f);
  EXPECT_GT(soft.loss, hard.loss);
  EXPECT_EQ(soft.correct, 1.0f);
  // The label's target is 0.9 + 0.025: its gradient is p_0 - 0.925, no longer p_0 - 1.
  const double s = std::exp(0.0) + std::exp(-9.0) + std::exp(-7.5) + std::exp(-11.0);
  EXPECT_NEAR(grad[0], 1.0 / s - 0.925, 1e-6);
  EXPECT_NEAR(grad[3], std::exp(-11.0) / s - 0.025, 1e-6);
}

// E = 0 is the one-hot definition bit for bit, written out here as it stood before smoothing,
// with logits of -inf (whose terms the one-hot loss never forms) and an in-place gradient.
TEST(XentLabelSmoothing, ZeroIsTheOneHotDefinitionBitForBit) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {3.0f, -1.0f, 0.5f, 7.25f, 7.25f}, {-inf, 2.0f, -inf, 0.0f}, {-0.0f, 0.0f}, {1e-30f}};
  for (const auto& z : rows)
    for (std::size_t label = 0; label < z.size(); ++label) {
      if (std::isinf(z[label])) continue;
      const std::size_t n = z.size();
      float m = z[0];
      std::size_t k = 0;
      for (std::size_t c = 1; c < n; ++c)
        if (m < z[c]) m = z[c], k = c;
      std::vector<float> want(n);
      float s = 0.0f;
      for (std::size_t c = 0; c < n; ++c) s += want[c] = std::exp(z[c] - m);
      for (std::size_t c = 0; c < n; ++c)
        want[c] = (want[c] / s - (c == label ? 1.0f : 0.0f)) * 0.125f;
      const float want_loss = std::log(s) - (z[label] - m);
      std::vector<float> got = z;
      const XentRow r = softmax_xent_row(got.data(), got.data(), n, label, 0.125f, 0.0f);
      for (std::size_t c = 0; c < n; ++c) EXPECT_EQ(bits_of(got[c]), bits_of(want[c])) << c;
      EXPECT_EQ(bits_of(r.loss), bits_of(want_loss));
      EXPECT_EQ(r.correct, label == k ? 1.0f : 0.0f);
    }
}

// ---- learning-rate warm-up ----

TEST(Warmup, RisesLinearlyToTheBaseRateAtTheLastWarmupStepThenStays) {
  EXPECT_EQ(warmup_learning_rate(0.5f, 1, 4), 0.125f);
  EXPECT_EQ(warmup_learning_rate(0.5f, 2, 4), 0.25f);
  EXPECT_EQ(warmup_learning_rate(0.5f, 3, 4), 0.375f);
  EXPECT_EQ(warmup_learning_rate(0.5f, 4, 4), 0.5f);
  EXPECT_EQ(warmup_learning_rate(0.5f, 1000, 4), 0.5f);
  // No warm-up: the base rate from the first step.
  EXPECT_EQ(warmup_learning_rate(0.5f, 1, 0), 0.5f);
  // In float64, rounded once: 0.1f·1/3 is not (0.1f/3) in fp32 nor 0.1f·(1/3.0f).
  for (std::uint64_t t = 1; t < 3; ++t)
    EXPECT_EQ(bits_of(warmup_learning_rate(0.1f, t, 3)),
              bits_of(static_cast<float>(double{0.1f} * static_cast<double>(t) / 3.0)))
        << t;
}

}  // namespace
}  // namespace tpu::numerics
