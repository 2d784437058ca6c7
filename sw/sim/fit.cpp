#include "sw/sim/fit.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <system_error>

#include "hw/chip/chip.h"
#include "hw/common/error.h"
#include "numerics/bf16.h"
#include "sw/compiler/training.h"
#include "sw/data/idx.h"
#include "sw/data/shuffle.h"
#include "sw/driver/fit_driver.h"
#include "sw/import/import.h"
#include "sw/io/signals.h"
#include "sw/ir/autodiff.h"

namespace tpu::sim {
namespace {

using nlohmann::ordered_json;
using Next = driver::FitDriver::Next;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The shuffle's stream is its own, so the initial weights do not move the order.
constexpr std::uint64_t kShuffleStream = 0x53485546464c45ull;  // "SHUFFLE"

void put_f32(std::uint8_t* p, float v) { std::memcpy(p, &v, 4); }
float get_f32(const std::uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

struct EpochLog {
  double loss = 0, correct = 0, images = 0;
  std::optional<double> val_loss, val_accuracy;
  Cycle cycles = 0;
};

class Fit {
 public:
  Fit(const ChipConfig& cfg, const FitOptions& opt) : cfg_(cfg), opt_(opt) {}

  FitResult run() {
    const double t0 = now_s();
    g_ = importers::load_model(opt_.model);
    t_ = ir::differentiate(g_);
    const std::string dir = opt_.data_dir.empty() ? data::kDefaultFashionMnistDir : opt_.data_dir;
    train_ = data::load_fashion_mnist(dir, "train");
    test_ = data::load_fashion_mnist(dir, "t10k");
    if (g_.input.size() != std::uint64_t{train_.images.rows} * train_.images.cols)
      throw InputError(
          fmt::format("{}: fit trains on Fashion-MNIST's {}x{} images; the model's "
                      "input is {}",
                      g_.file, train_.images.rows, train_.images.cols, ir::show_shape(g_.input)));
    if (opt_.steps_per_epoch == 0 || opt_.epochs == 0)
      throw InputError("--epochs and --steps-per-epoch must be >= 1");
    batch_ = opt_.batch ? opt_.batch : train_.images.count / opt_.steps_per_epoch;
    if (batch_ == 0 || std::uint64_t{batch_} * opt_.steps_per_epoch > train_.images.count)
      throw InputError(
          fmt::format("--batch {} x --steps-per-epoch {} needs more than the {} "
                      "training images",
                      batch_, opt_.steps_per_epoch, train_.images.count));
    const nn::Weights w0 = nn::random_weights(g_, opt_.seed);
    prog_ = compiler::compile_training(g_, t_, w0, opt_.optimizer, cfg_, batch_);
    if (opt_.check) ref_ = nn::initial_state(g_, t_, w0, opt_.optimizer);
    order_.resize(train_.images.count);
    shuffle_rng_.seed(opt_.seed ^ kShuffleStream);

    Chip chip("chip", cfg_);
    driver::FitDriver drv(
        "driver", chip, prog_,
        [this](std::uint64_t, std::vector<std::uint8_t>& m) { return before(m); },
        [this, &drv](std::uint64_t, const std::vector<std::uint8_t>& m, Cycle b, Cycle e) {
          after(drv, m, b, e);
        });
    sc_core::sc_start();
    if (!drv.done()) throw ProgramError("the chip deadlocked during fit");
    FitResult r;
    r.weights = chip_weights(drv_weights_);
    r.report = report(now_s() - t0);
    return r;
  }

 private:
  // ---- the host loop (Keras's fit) ---------------------------------------------------------

  Next before(std::vector<std::uint8_t>& m) {
    if (validating_) return next_validation(m);
    if (step_in_epoch_ == 0) {
      if (epoch_ == opt_.epochs) return Next::Stop;
      std::iota(order_.begin(), order_.end(), 0);
      data::shuffle(order_, shuffle_rng_);
      epochs_.emplace_back();
      log(fmt::format("Epoch {}/{}", epoch_ + 1, opt_.epochs));
    }
    batch_index_.assign(order_.begin() + std::ptrdiff_t{step_in_epoch_} * batch_,
                        order_.begin() + std::ptrdiff_t{step_in_epoch_ + 1} * batch_);
    fill(m, train_, batch_index_);
    // The optimizer's record for t = iterations + 1.
    const nn::Optimizer& o = opt_.optimizer;
    const auto t = static_cast<double>(iterations_ + 1);
    const float rec[6] = {o.learning_rate,
                          o.kind == nn::OptimizerKind::Momentum ? o.momentum : o.beta1,
                          o.beta2,
                          o.epsilon,
                          static_cast<float>(std::pow(static_cast<double>(o.beta1), t)),
                          static_cast<float>(std::pow(static_cast<double>(o.beta2), t))};
    for (int k = 0; k < 6; ++k) put_f32(&m[prog_.layout.optimizer_addr + 4 * k], rec[k]);
    if (opt_.check) start_reference();
    return Next::Step;
  }

  void fill(std::vector<std::uint8_t>& m, const data::Dataset& d,
            const std::vector<std::uint64_t>& index) const {
    const compiler::TrainingLayout& L = prog_.layout;
    const std::uint64_t px = g_.input.size();
    for (std::size_t i = 0; i < index.size(); ++i) {
      const std::uint8_t* src = &d.images.pixels[index[i] * px];
      for (std::uint64_t p = 0; p < px; ++p) {
        const Bf16 b = to_bf16(static_cast<float>(src[p]));
        std::memcpy(&m[L.images_addr + i * L.image_bytes + 2 * p], &b.bits, 2);
      }
      const auto label = static_cast<std::int32_t>(d.labels[index[i]]);
      std::memcpy(&m[L.labels_addr + 4 * i], &label, 4);
    }
  }

  Next next_validation(std::vector<std::uint8_t>& m) {
    if (val_first_ >= test_.images.count) {
      validating_ = false;
      finish_epoch();
      return before(m);
    }
    const std::uint64_t n = std::min<std::uint64_t>(batch_, test_.images.count - val_first_);
    if (n < batch_) {  // the evaluation program takes whole global batches
      validating_ = false;
      finish_epoch();
      return before(m);
    }
    batch_index_.resize(n);
    std::iota(batch_index_.begin(), batch_index_.end(), val_first_);
    fill(m, test_, batch_index_);
    return Next::Evaluate;
  }

  void after(driver::FitDriver& drv, const std::vector<std::uint8_t>& m, Cycle begin, Cycle end) {
    const compiler::TrainingLayout& L = prog_.layout;
    double loss = 0, correct = 0;
    for (std::size_t i = 0; i < batch_index_.size(); ++i) {
      loss += get_f32(&m[L.records_addr + 8 * i]);
      correct += get_f32(&m[L.records_addr + 8 * i + 4]);
    }
    EpochLog& e = epochs_.back();
    if (validating_) {
      val_loss_ += loss, val_correct_ += correct;
      val_first_ += batch_index_.size();
      val_cycles_ += end - begin;
      return;
    }
    e.loss += loss, e.correct += correct, e.images += static_cast<double>(batch_index_.size());
    e.cycles += end - begin;
    step_cycles_.push_back(end - begin);
    ++iterations_;
    if (opt_.check) check_step(drv, m);
    if (++step_in_epoch_ == opt_.steps_per_epoch) {
      step_in_epoch_ = 0;
      ++epoch_;
      const std::uint32_t freq = opt_.validation_freq ? opt_.validation_freq : opt_.epochs;
      if (epoch_ % freq == 0 || epoch_ == opt_.epochs) {
        validating_ = true;
        val_first_ = 0, val_loss_ = 0, val_correct_ = 0;
      } else {
        finish_epoch();
      }
    }
  }

  void finish_epoch() {
    EpochLog& e = epochs_.back();
    if (val_first_ > 0) {
      e.val_loss = val_loss_ / static_cast<double>(val_first_);
      e.val_accuracy = val_correct_ / static_cast<double>(val_first_);
      val_first_ = 0;
    }
    const double ms = static_cast<double>(e.cycles) / cfg_.clock_hz() * 1e3 / opt_.steps_per_epoch;
    std::string line = fmt::format(
        "{}/{} - {:.3f} ms/step (simulated) - loss: {:.4f} - accuracy: {:.4f}",
        opt_.steps_per_epoch, opt_.steps_per_epoch, ms, e.loss / e.images, e.correct / e.images);
    if (e.val_loss)
      line +=
          fmt::format(" - val_loss: {:.4f} - val_accuracy: {:.4f}", *e.val_loss, *e.val_accuracy);
    log(line);
  }

  void log(const std::string& s) const {
    if (opt_.log) opt_.log(s);
  }

  // ---- the check ---------------------------------------------------------------------------

  // The reference's step on the batch before() chose runs on another core while the
  // (single-threaded) kernel simulates the chip's: it shares nothing with the simulation but
  // read-only inputs and its own state (ref_, which nothing else touches until check_step joins
  // it). Its results do not depend on the thread it runs on.
  void start_reference() {
    const std::uint64_t px = g_.input.size();
    ref_images_.resize(batch_index_.size() * px);
    ref_labels_.resize(batch_index_.size());
    for (std::size_t i = 0; i < batch_index_.size(); ++i) {
      const std::uint8_t* src = &train_.images.pixels[batch_index_[i] * px];
      std::copy(src, src + px, &ref_images_[i * px]);
      ref_labels_[i] = train_.labels[batch_index_[i]];
    }
    auto step = [this, plan = prog_.layout.plan()] {
      return nn::reference_step(g_, t_, plan, opt_.optimizer, *ref_, ref_images_.data(),
                                ref_labels_.data(), batch_);
    };
    // The thread blocks the termination signals, so they reach the main thread only
    // (sw/io/signals.h); a process that may not start a thread runs the step at the join.
    io::SignalBlock block;
    try {
      reference_ = std::async(std::launch::async, step);
    } catch (const std::system_error&) {
      reference_ = std::async(std::launch::deferred, step);
    }
  }

  void check_step(driver::FitDriver& drv, const std::vector<std::uint8_t>& m) {
    const compiler::TrainingLayout& L = prog_.layout;
    const nn::StepRecords rec = reference_.get();
    const std::vector<std::int32_t>& labels = ref_labels_;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const float chip_loss = get_f32(&m[L.records_addr + 8 * i]);
      if (std::memcmp(&chip_loss, &rec.loss[i], 4) != 0)
        throw std::logic_error(
            fmt::format("fit: step {}: image {}'s loss is {} on the chip and {} "
                        "in the reference",
                        iterations_, i, chip_loss, rec.loss[i]));
    }
    drv_weights_.assign(L.replicas, {});
    for (std::uint32_t r = 0; r < L.replicas; ++r)
      for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
        const compiler::TrainingLayout::Home& h = L.params[r][k];
        const std::vector<std::uint8_t> bytes = drv.read_memory(h.w, h.elements * 4);
        const ir::TensorId& p = t_.parameters[k];
        const std::vector<float>& want = nn::tensor_of(ref_->weights.layers[p.op], p.param);
        for (std::uint64_t e = 0; e < h.elements; ++e)
          if (std::memcmp(&bytes[4 * e], &want[e], 4) != 0)
            throw std::logic_error(fmt::format(
                "fit: after step {}, replica {}'s {}[{}] is {} on the chip and {} in the "
                "reference",
                iterations_, r, ir::describe(g_, p), e, get_f32(&bytes[4 * e]), want[e]));
        drv_weights_[r].push_back(bytes);
      }
  }

  nn::Weights chip_weights(const std::vector<std::vector<std::vector<std::uint8_t>>>& got) const {
    nn::Weights w = ref_ ? ref_->weights : nn::random_weights(g_, opt_.seed);
    if (got.empty()) return w;
    for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
      const ir::TensorId& p = t_.parameters[k];
      std::vector<float>& dst = nn::tensor_of(w.layers[p.op], p.param);
      std::memcpy(dst.data(), got[0][k].data(), dst.size() * 4);
    }
    return w;
  }

  // ---- the report --------------------------------------------------------------------------

  ordered_json report(double wall) const {
    ordered_json j;
    j["schema"] = "tpusim.fit/1";
    j["chip"] = cfg_.name;
    j["model"] = g_.name;
    j["replicas"] = prog_.layout.replicas;
    j["global_batch"] = batch_;
    j["micro_batch"] = prog_.layout.micro_batch;
    j["optimizer"] = prog_.step.layers.back().type;
    j["learning_rate"] = opt_.optimizer.learning_rate;
    j["epochs_run"] = epochs_.size();
    j["steps"] = iterations_;
    j["checked"] = opt_.check;
    ordered_json ep = ordered_json::array();
    for (std::size_t i = 0; i < epochs_.size(); ++i) {
      const EpochLog& e = epochs_[i];
      ordered_json x;
      x["epoch"] = i + 1;
      x["loss"] = e.loss / e.images;
      x["accuracy"] = e.correct / e.images;
      if (e.val_loss) {
        x["val_loss"] = *e.val_loss;
        x["val_accuracy"] = *e.val_accuracy;
      }
      x["simulated_seconds"] = static_cast<double>(e.cycles) / cfg_.clock_hz();
      ep.push_back(x);
    }
    j["epochs"] = ep;
    if (!step_cycles_.empty()) {
      std::vector<Cycle> s = step_cycles_;
      std::sort(s.begin(), s.end());
      j["step"] = {{"cycles_median", s[s.size() / 2]},
                   {"seconds_median", static_cast<double>(s[s.size() / 2]) / cfg_.clock_hz()}};
    }
    j["host"] = {{"wall_seconds", wall}};
    return j;
  }

  const ChipConfig& cfg_;
  const FitOptions& opt_;
  ir::Graph g_;
  ir::TrainingGraph t_;
  data::Dataset train_, test_;
  compiler::TrainingProgram prog_;
  std::optional<nn::TrainState> ref_;
  std::vector<float> ref_images_;  // the step's images and labels, for the reference's thread
  std::vector<std::int32_t> ref_labels_;
  std::future<nn::StepRecords> reference_;
  std::uint32_t batch_ = 0;

  std::vector<std::uint64_t> order_, batch_index_;
  std::mt19937_64 shuffle_rng_;
  std::uint32_t epoch_ = 0, step_in_epoch_ = 0;
  std::uint64_t iterations_ = 0;
  std::vector<EpochLog> epochs_;
  std::vector<Cycle> step_cycles_;
  bool validating_ = false;
  std::uint64_t val_first_ = 0;
  double val_loss_ = 0, val_correct_ = 0;
  Cycle val_cycles_ = 0;
  std::vector<std::vector<std::vector<std::uint8_t>>> drv_weights_;
};

}  // namespace

FitResult fit_session(const ChipConfig& cfg, const FitOptions& opt) { return Fit(cfg, opt).run(); }

}  // namespace tpu::sim
