#include "sw/sim/fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <future>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <system_error>

#include "hw/chip/chip.h"
#include "hw/chip/energy.h"
#include "hw/common/error.h"
#include "hw/system/system.h"
#include "numerics/bf16.h"
#include "numerics/loss.h"
#include "numerics/optimizer.h"
#include "sw/compiler/training.h"
#include "sw/data/idx.h"
#include "sw/data/shuffle.h"
#include "sw/driver/fit_driver.h"
#include "sw/import/import.h"
#include "sw/io/signals.h"
#include "sw/ir/autodiff.h"
#include "sw/report/trace_writer.h"
#include "sw/sim/activity.h"
#include "sw/sim/progress.h"

namespace tpu::sim {
namespace {

using nlohmann::ordered_json;
using Next = driver::FitDriver::Next;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The shuffle's stream is its own, so the initial weights do not move the order.

void put_f32(std::uint8_t* p, float v) { std::memcpy(p, &v, 4); }
float get_f32(const std::uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// The report's step split (docs/training.md): every cycle of a step lands in the part of the
// tag its sequencer retired it under (the Counters' retirement cycles, as `run` splits layers).
enum class Part { Infeed, Forward, Loss, Backward, Communication, Update };
constexpr std::size_t kParts = 6;
constexpr std::array<const char*, kParts> kPartNames = {"infeed",   "forward",       "loss",
                                                        "backward", "communication", "update"};

struct EpochLog {
  double loss = 0, correct = 0, images = 0;
  std::optional<double> val_loss, val_accuracy;
  std::uint64_t val_images = 0;
  Cycle cycles = 0, val_cycles = 0;
  std::array<double, kParts> parts{};
  double energy_j = 0;
};

// What a fit trains and validates on: Fashion-MNIST, or, for a model whose input is not its
// 28x28x1 images, seeded random images (every pixel uniform over 0..255, as raw pixels) with
// seeded random labels, which nothing validates on.
class Images {
 public:
  static Images fashion_mnist(data::Dataset d) {
    Images s;
    s.count_ = d.images.count;
    s.pixels_ = std::uint64_t{d.images.rows} * d.images.cols;
    s.set_ = std::move(d);
    return s;
  }
  static Images random(std::uint64_t count, std::uint64_t pixels, std::uint32_t classes,
                       std::uint64_t seed) {
    Images s;
    s.count_ = count, s.pixels_ = pixels, s.classes_ = classes, s.seed_ = seed;
    return s;
  }
  [[nodiscard]] std::uint64_t count() const { return count_; }
  [[nodiscard]] std::uint64_t pixels() const { return pixels_; }
  [[nodiscard]] bool random() const { return !set_; }
  // Image i's pixels into out[0 .. pixels), and its label. A random image is drawn from its own
  // stream (our own mapping of mt19937_64: the standard distributions are
  // implementation-defined), so it is the same whichever images come before it.
  std::int32_t image(std::uint64_t i, std::uint8_t* out) const {
    if (set_) {
      std::memcpy(out, &set_->images.pixels[i * pixels_], pixels_);
      return set_->labels[i];
    }
    std::mt19937_64 rng(seed_ ^ ((i + 1) * 0x9e3779b97f4a7c15ULL));
    const auto label = static_cast<std::int32_t>(rng() % classes_);
    for (std::uint64_t p = 0; p < pixels_; ++p) out[p] = static_cast<std::uint8_t>(rng() >> 56);
    return label;
  }

 private:
  std::optional<data::Dataset> set_;
  std::uint64_t count_ = 0, pixels_ = 0, seed_ = 0;
  std::uint32_t classes_ = 0;
};

struct StepLog {
  Cycle cycles = 0;
  std::array<double, kParts> parts{};  // cycles, averaged over the cores: they add up to `cycles`
  double energy_j = 0;
  std::uint64_t ici_bytes = 0;  // carried by the ICI links, each link's bytes counted
  // Over every chip: bytes over the host links (the instruction stream's among them) and to or
  // from off-chip memory, and the instructions the sequencers issued.
  std::uint64_t host_link_bytes = 0, off_chip_bytes = 0, instructions = 0;
  // The gradient exchange's work (the communication part's tags), averaged over the cores:
  // cycles it kept a unit busy or its sequencer waiting, and of those the cycles nothing else
  // ran (Counters::busy_cycles, exposed_cycles; docs/systems.md, "Overlap").
  double all_reduce = 0, exposed = 0;
};

class Fit {
 public:
  Fit(const SystemConfig& sys, const FitOptions& opt)
      : sys_(sys),
        cfg_(sys.chip),
        opt_(resolved(opt)),
        scale_out_(opt.scale_out && sys.chips() > 1),
        // Scale-out's values are not the model's anyway: it computes none.
        timing_only_(opt.timing_only || scale_out_),
        check_(opt.check && !timing_only_) {
    all_ = system_as_one_chip(sys_);
  }

  FitResult run() {
    const double t0 = now_s();
    g_ = importers::load_model(opt_.model);
    t_ = ir::differentiate(g_);
    if (opt_.steps_per_epoch == 0 || opt_.epochs == 0)
      throw InputError("--epochs and --steps-per-epoch must be >= 1");
    if (g_.input == ir::Shape{28, 28, 1}) {
      const std::string dir = opt_.data_dir.empty() ? data::kDefaultFashionMnistDir : opt_.data_dir;
      train_ = Images::fashion_mnist(data::load_fashion_mnist(dir, "train"));
      test_ = Images::fashion_mnist(data::load_fashion_mnist(dir, "t10k"));
      batch_ = opt_.batch ? opt_.batch
                          : static_cast<std::uint32_t>(train_.count() / opt_.steps_per_epoch);
    } else {
      // Keras's batch_size defaults to 32; every epoch goes over the same images (scale-out: the
      // representative chip's share of them, all that is ever read).
      batch_ = opt_.batch ? opt_.batch : 32;
      const std::uint64_t per_step = scale_out_ ? batch_ / sys_.chips() : batch_;
      train_ = Images::random(per_step * opt_.steps_per_epoch, g_.input.size(),
                              static_cast<std::uint32_t>(g_.output().size()),
                              opt_.seed ^ data::kShuffleStream ^ 0x5eedULL);
    }
    stride_ = train_.random() && scale_out_ ? batch_ / sys_.chips() : batch_;
    if (opt_.epochs_to_train > 0 && opt_.dataset_images == 0 && train_.random())
      throw InputError(
          "--epochs-to-train on a model with random inputs needs --dataset-images (the images "
          "of one epoch of the real dataset, e.g. 1281167 for ImageNet)");
    if (batch_ == 0 || std::uint64_t{stride_} * opt_.steps_per_epoch > train_.count())
      throw InputError(
          fmt::format("--batch {} x --steps-per-epoch {} needs more than the {} "
                      "training images",
                      batch_, opt_.steps_per_epoch, train_.count()));
    const nn::Weights w0 = opt_.weights.empty() ? nn::random_weights(g_, opt_.seed)
                                                : nn::load_weights(opt_.weights, g_);
    const auto home = opt_.activations == FitOptions::Activations::kUnifiedBuffer
                          ? compiler::ActivationHome::kUnifiedBuffer
                      : opt_.activations == FitOptions::Activations::kOffChip
                          ? compiler::ActivationHome::kOffChip
                          : compiler::ActivationHome::kAuto;
    prog_ = compiler::compile_training(
        g_, t_, w0, opt_.optimizer, cfg_, batch_, home,
        sys_.chips() > 1 ? sys_.ici.dims : std::vector<std::uint32_t>{}, scale_out_ ? 1 : 0,
        opt_.bucket_bytes, opt_.label_smoothing, opt_.bn_group);
    // The images the host feeds each step: the batch, or the representative chip's share of it.
    fed_ = prog_.layout.programmed * prog_.layout.share;
    if (check_) ref_ = nn::initial_state(g_, t_, w0, opt_.optimizer);
    order_.resize(train_.count());
    shuffle_rng_.seed(opt_.seed ^ data::kShuffleStream);

    // Scale-out: distributed BatchNormalization's all-reduces run rings of one message a step
    // over each group's box of chips (hw/system/ici_router.h).
    std::vector<MirroredRing> rings;
    if (prog_.layout.bn_semaphores > 0)
      rings.push_back(
          {prog_.layout.bn_first_semaphore, prog_.layout.bn_semaphores, prog_.layout.bn_dims});
    System system("system", sys_,
                  scale_out_ ? System::Scale::kRepresentative : System::Scale::kEveryChip,
                  SimOptions{timing_only_}, std::move(rings));
    system_ = &system;
    // An error in the host loop (a mismatch with the reference is a bug in tpusim) stops the
    // run and leaves the simulation as itself: thrown inside the kernel it would come out as an
    // sc_report, which main() takes for bad input.
    std::exception_ptr failure;
    const auto guarded = [&failure](auto&& f) {
      if (failure) return false;
      try {
        f();
        return true;
      } catch (...) {
        failure = std::current_exception();
        return false;
      }
    };
    driver::FitDriver drv(
        "driver", static_cast<std::uint32_t>(system.size()), prog_,
        std::move(prog_.setup.memory_image), system.chip(0).clock(), timing_only_,
        [this, &guarded](std::uint64_t, std::vector<std::uint8_t>& m) {
          Next next = Next::Stop;
          guarded([&] { next = before(m); });
          return next;
        },
        [this, &drv, &guarded](std::uint64_t, const std::vector<std::uint8_t>& m, Cycle b,
                               Cycle e) { guarded([&] { after(drv, m, b, e); }); });
    for (std::size_t c = 0; c < system.size(); ++c) driver::attach(drv, system.chip(c));
    // On a terminal, a progress line between the Keras log's lines (docs/cli.md, "Progress").
    run_simulation("fit", cfg_.clock_hz(), [this] {
      Progress p;
      p.at = validating_ ? fmt::format("epoch {}/{}, validating", epoch_, opt_.epochs)
             : epoch_ < opt_.epochs
                 ? fmt::format("epoch {}/{}, step {}/{}", epoch_ + 1, opt_.epochs,
                               step_in_epoch_ + 1, opt_.steps_per_epoch)
                 : std::string("finishing");
      return p;
    });
    if (failure) std::rethrow_exception(failure);
    if (!drv.done())
      throw ProgramError(sys_.chips() > 1 ? "the system deadlocked during fit"
                                          : "the chip deadlocked during fit");
    FitResult r;
    if (!timing_only_) r.weights = chip_weights(drv_weights_);
    r.report = report(now_s() - t0);
    if (!opt_.trace.empty()) {
      // The model load, and counters over the traced steps (docs/trace.md).
      report::LoadAndCounters load = report::load_and_counters(prog_.step.cores, all_.tensor_cores,
                                                               size_of(cfg_.mxu.input_type),
                                                               drv.loaded_at(), drv.image_bytes());
      load.spans = counter_spans_;
      r.trace_json = report::chrome_trace_json(trace_, all_, tag_names(), fit_tracks(), load);
    }
    system_ = nullptr;
    return r;
  }

 private:
  // ---- the host loop (Keras's fit) ---------------------------------------------------------

  // The simulated instant (every chip runs on the same clock) and the activity of every chip
  // since the last call, its per-core layers side by side.
  Cycle now() const { return system_->chip(0).clock().now(); }
  LayerCounters take_counters(Cycle end) {
    LayerCounters all;
    for (std::size_t c = 0; c < system_->size(); ++c) all += system_->chip(c).take_counters(end);
    // Scale-out: every chip did what the representative did.
    if (scale_out_) {
      const LayerCounters one = all;
      for (std::uint32_t c = 1; c < sys_.chips(); ++c) all += one;
    }
    // What each ICI link carried and was busy since the last call.
    const IciFabric& f = system_->fabric();
    links_.resize(f.link_count());
    for (std::size_t l = 0; l < f.link_count(); ++l) {
      const std::uint64_t bytes = f.bytes_carried(l), busy = f.busy_cycles(l).value();
      links_[l] = {bytes - taken_links_[l].first, busy - taken_links_[l].second};
      taken_links_[l] = {bytes, busy};
    }
    return all;
  }

  Next before(std::vector<std::uint8_t>& m) {
    // What ran since the last program (setup, the host's reads of the check) is no step's.
    take_counters(now());
    for (std::size_t c = 0; c < system_->size(); ++c) system_->chip(c).disable_trace();
    if (!opt_.trace.empty()) system_->fabric().record_busy(false);
    if (validating_) return next_validation(m);
    if (step_in_epoch_ == 0) {
      if (epoch_ == opt_.epochs) return Next::Stop;
      std::iota(order_.begin(), order_.end(), 0);
      data::shuffle(order_, shuffle_rng_);
      epochs_.emplace_back();
      log(fmt::format("Epoch {}/{}", epoch_ + 1, opt_.epochs));
    }
    const auto first = order_.begin() + std::ptrdiff_t{step_in_epoch_} * stride_;
    batch_index_.assign(first, first + std::ptrdiff_t{fed_});
    if (!timing_only_) fill(m, train_, batch_index_);  // timing only: nothing reads them
    // The optimizer's record for t = iterations + 1 (docs/isa.md, update); LARS's sums of
    // squares are the chip's to write, per tensor.
    const nn::Optimizer& o = opt_.optimizer;
    const auto t = static_cast<double>(iterations_ + 1);
    const bool lars = o.kind == nn::OptimizerKind::Lars;
    const float rec[6] = {
        numerics::warmup_learning_rate(o.learning_rate, iterations_ + 1, o.warmup_steps),
        o.kind == nn::OptimizerKind::Momentum || lars ? o.momentum : o.beta1,
        lars ? o.weight_decay : o.beta2,
        lars ? o.lars_eta : o.epsilon,
        lars ? 0.0f : static_cast<float>(std::pow(static_cast<double>(o.beta1), t)),
        lars ? 0.0f : static_cast<float>(std::pow(static_cast<double>(o.beta2), t))};
    for (int k = 0; k < 6; ++k) put_f32(&m[prog_.layout.optimizer_addr + 4 * k], rec[k]);
    if (!opt_.trace.empty() && traced_step(iterations_ + 1)) {
      // The step's instructions continue each core's stream (the setup's, earlier steps' and
      // validations'): the trace's counters find them by their index from here on.
      traced_first_index_.assign(all_.tensor_cores, 0);
      for (std::size_t c = 0; c < system_->size(); ++c) {
        system_->chip(c).enable_trace(trace_, static_cast<std::uint32_t>(c) * cfg_.tensor_cores);
        for (std::uint32_t k = 0; k < cfg_.tensor_cores; ++k)
          traced_first_index_[c * cfg_.tensor_cores + k] =
              system_->chip(c).cores[k]->sequencer->issued();
      }
      system_->fabric().record_busy(true);
    }
    if (check_) start_reference();
    return Next::Step;
  }

  void fill(std::vector<std::uint8_t>& m, const Images& d,
            const std::vector<std::uint64_t>& index) const {
    const compiler::TrainingLayout& L = prog_.layout;
    const std::uint64_t px = g_.input.size();
    std::vector<std::uint8_t> pixels(px);
    for (std::size_t i = 0; i < index.size(); ++i) {
      const std::int32_t label = d.image(index[i], pixels.data());
      for (std::uint64_t p = 0; p < px; ++p) {
        const Bf16 b = to_bf16(static_cast<float>(pixels[p]));
        std::memcpy(&m[L.images_addr + i * L.image_bytes + 2 * p], &b.bits, 2);
      }
      std::memcpy(&m[L.labels_addr + 4 * i], &label, 4);
    }
  }

  Next next_validation(std::vector<std::uint8_t>& m) {
    if (val_first_ >= test_.count()) {
      validating_ = false;
      finish_epoch();
      return before(m);
    }
    // The evaluation program takes whole global batches: a last, partial one is padded with
    // copies of its last image, whose records are not counted (as TPUStrategy pads a partial
    // batch to the compiled shape and masks the padding).
    val_real_ = std::min<std::uint64_t>(batch_, test_.count() - val_first_);
    batch_index_.resize(batch_);
    std::iota(batch_index_.begin(), batch_index_.begin() + std::ptrdiff_t(val_real_), val_first_);
    std::fill(batch_index_.begin() + std::ptrdiff_t(val_real_), batch_index_.end(),
              val_first_ + val_real_ - 1);
    if (!timing_only_) fill(m, test_, batch_index_);
    if (check_) start_validation_reference();
    return Next::Evaluate;
  }

  void after(driver::FitDriver& drv, const std::vector<std::uint8_t>& m, Cycle begin, Cycle end) {
    const LayerCounters counters = take_counters(end);
    const compiler::TrainingLayout& L = prog_.layout;
    double loss = 0, correct = 0;
    // Timing only: the chip wrote no records.
    const std::size_t counted = timing_only_ ? 0 : validating_ ? val_real_ : batch_index_.size();
    for (std::size_t i = 0; i < counted; ++i) {
      loss += get_f32(&m[L.records_addr + 8 * i]);
      correct += get_f32(&m[L.records_addr + 8 * i + 4]);
    }
    EpochLog& e = epochs_.back();
    if (validating_) {
      if (check_) check_validation(m);
      val_loss_ += loss, val_correct_ += correct;
      val_first_ += val_real_;
      val_cycles_ += end - begin;
      return;
    }
    e.loss += loss, e.correct += correct, e.images += static_cast<double>(batch_index_.size());
    e.cycles += end - begin;
    log_step(counters, end - begin);
    if (!opt_.trace.empty() && traced_step(iterations_ + 1)) {
      traced_steps_.push_back({iterations_ + 1, begin, end});
      counter_spans_.push_back({begin, end, traced_first_index_});
    }
    ++iterations_;
    if (check_) check_step(drv, m);
    if (++step_in_epoch_ == opt_.steps_per_epoch) {
      step_in_epoch_ = 0;
      ++epoch_;
      const std::uint32_t freq = opt_.validation_freq ? opt_.validation_freq : opt_.epochs;
      if (epoch_ % freq == 0 &&
          !scale_out_) {  // scale-out: the values are not the model's  // Keras's validation_freq:
                          // after epochs freq, 2 freq, ...
        validating_ = true;
        val_first_ = 0, val_loss_ = 0, val_correct_ = 0, val_cycles_ = 0;
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
      e.val_images = val_first_;
      e.val_cycles = val_cycles_;
      val_first_ = 0;
    }
    const double ms = static_cast<double>(e.cycles) / cfg_.clock_hz() * 1e3 / opt_.steps_per_epoch;
    // On a system, the step's split too: where the chips' time went, the all-reduce apart.
    // Timing only, always, in place of the losses that were not computed.
    std::string split;
    if ((sys_.chips() > 1 || timing_only_) && e.cycles > 0) {
      const auto share = [&](std::initializer_list<Part> parts) {
        double c = 0;
        for (Part p : parts) c += e.parts[static_cast<std::size_t>(p)];
        return 100.0 * c / static_cast<double>(e.cycles);
      };
      split =
          fmt::format(": compute {:.1f}%, all-reduce {:.1f}%, infeed {:.1f}%, update {:.1f}%",
                      share({Part::Forward, Part::Loss, Part::Backward}),
                      share({Part::Communication}), share({Part::Infeed}), share({Part::Update}));
    }
    // Buckets: how much of the all-reduce the backward pass hid, in the epoch's last step.
    if (!prog_.layout.buckets.empty() && !steps_.empty() && steps_.back().all_reduce > 0)
      split += fmt::format(", {:.1f}% of it hidden",
                           100.0 * (1.0 - steps_.back().exposed / steps_.back().all_reduce));
    std::string line = fmt::format("{}/{} - {:.3f} ms/step (simulated{})", opt_.steps_per_epoch,
                                   opt_.steps_per_epoch, ms, split);
    if (scale_out_) {
      line += " - scale-out: timing only";
    } else if (timing_only_) {
      // No losses were computed: what the validation's runs took instead of their figures.
      line += " - timing only, no losses";
      if (e.val_loss)
        line += fmt::format(" - validation: {:.3f} ms simulated",
                            static_cast<double>(e.val_cycles) / cfg_.clock_hz() * 1e3);
    } else {
      line += fmt::format(" - loss: {:.4f} - accuracy: {:.4f}", e.loss / e.images,
                          e.correct / e.images);
      if (e.val_loss)
        line +=
            fmt::format(" - val_loss: {:.4f} - val_accuracy: {:.4f}", *e.val_loss, *e.val_accuracy);
    }
    log(line);
  }

  void log(const std::string& s) const {
    if (!opt_.log) return;
    clear_progress_line();
    opt_.log(s);
  }

  // ---- the step's accounting (docs/training.md, "The report's step split") ------------------

  // Tag ids (compiler::compile_training): 0 the host I/O, 1 + i the forward of operation i,
  // 1 + n + i its backward, then the loss, the gradient exchange, the update and distributed
  // BatchNormalization's all-reduces (communication too).
  Part part_of(std::uint32_t tag) const {
    const std::size_t n = g_.ops.size();
    if (tag == 0) return Part::Infeed;
    if (tag <= n) return Part::Forward;
    if (tag <= 2 * n) return Part::Backward;
    if (tag == 2 * n + 1) return Part::Loss;
    if (tag == 2 * n + 3) return Part::Update;
    return Part::Communication;
  }
  bool gradient_exchange(std::uint32_t tag) const { return tag == 2 * g_.ops.size() + 2; }

  // The operation a forward or backward tag belongs to.
  std::optional<std::size_t> op_of(std::uint32_t tag) const {
    const std::size_t n = g_.ops.size();
    if (tag == 0 || tag > 2 * n) return std::nullopt;
    return tag <= n ? tag - 1 : tag - 1 - n;
  }

  // The network's multiply-accumulates under a tag in one step: the compiler's per-image MACs of
  // the row (a forward pass; per backward product, as many again) times the global batch.
  std::uint64_t network_macs(std::uint32_t tag) const {
    return prog_.step.layers.at(tag).macs_per_image * batch_;
  }

  std::uint64_t step_macs() const {
    std::uint64_t macs = 0;
    for (std::size_t tag = 0; tag < prog_.step.layers.size(); ++tag)
      macs += network_macs(static_cast<std::uint32_t>(tag));
    return macs;
  }

  // The trace's and the layer rows' names: the compiler's, tag 0 being the step's host I/O.
  std::vector<std::string> tag_names() const {
    std::vector<std::string> names;
    for (const compiler::LayerInfo& l : prog_.step.layers) names.push_back(l.name);
    names[0] = "infeed";
    return names;
  }

  // The first and the last training step (1-based) are traced: a full fit's trace would hold
  // every instruction of hundreds of steps.
  bool traced_step(std::uint64_t step) const {
    return step == 1 || step == std::uint64_t{opt_.epochs} * opt_.steps_per_epoch;
  }

  // The trace's tracks beyond the chips': the traced steps' spans, and on a system of more than
  // one chip each directed link's streaming intervals within them.
  report::FitTracks fit_tracks() const {
    report::FitTracks t;
    t.steps = traced_steps_;
    if (sys_.chips() < 2) return t;
    const IciFabric& f = system_->fabric();
    for (std::size_t l = 0; l < f.link_count(); ++l) {
      report::LinkTrack& track = t.links.emplace_back();
      track.name = f.link_name(l);
      for (const IciFabric::BusyInterval& b : f.busy_intervals(l)) {
        report::LinkBusy& busy =
            track.busy.emplace_back(report::LinkBusy{b.begin, b.end, b.bytes, {}});
        for (const IciFabric::TransferBytes& x : b.transfers)
          busy.transfers.push_back({x.from, x.to, x.bytes});
      }
    }
    return t;
  }

  double seconds(double cycles) const { return cycles / cfg_.clock_hz(); }

  void log_step(const LayerCounters& counters, Cycle cycles) {
    StepLog st;
    st.cycles = cycles;
    for (const auto& [tag, c] : counters.by_layer()) {
      st.parts[static_cast<std::size_t>(part_of(tag))] +=
          static_cast<double>(c.cycles) / all_.tensor_cores;
      if (!gradient_exchange(tag)) continue;
      // The gradient's all-reduce (what overlap hides). Per core (scale-out's counters count the
      // representative once per chip).
      st.all_reduce += static_cast<double>(c.busy_cycles) / all_.tensor_cores;
      st.exposed += static_cast<double>(c.exposed_cycles) / all_.tensor_cores;
    }
    const Counters total = counters.total();
    st.energy_j = energy_of(all_.energy, total, seconds(static_cast<double>(cycles))).total_j();
    st.host_link_bytes = total.host_bytes_in + total.host_bytes_out;
    st.off_chip_bytes = total.off_chip_bytes_read + total.off_chip_bytes_written;
    st.instructions = total.instructions;
    EpochLog& e = epochs_.back();
    for (std::size_t k = 0; k < kParts; ++k) e.parts[k] += st.parts[k];
    e.energy_j += st.energy_j;
    for (const auto& [bytes, busy] : links_) st.ici_bytes += bytes;
    if (scale_out_) st.ici_bytes *= sys_.chips();  // every chip's writes as the representative's
    steps_.push_back(st);
    last_counters_ = counters;
    last_links_ = links_;
  }

  // ---- the check ---------------------------------------------------------------------------

  // The first `n` images of the batch (float pixels) and their labels.
  void gather(const Images& d, std::size_t n, std::vector<float>& images,
              std::vector<std::int32_t>& labels) const {
    const std::uint64_t px = g_.input.size();
    std::vector<std::uint8_t> pixels(px);
    images.resize(n * px);
    labels.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      labels[i] = d.image(batch_index_[i], pixels.data());
      std::copy(pixels.begin(), pixels.end(), images.begin() + std::ptrdiff_t(i * px));
    }
  }

  // The chip's loss records of the first n images against the reference's, bit for bit.
  void check_records(const std::vector<std::uint8_t>& m, const nn::StepRecords& rec, std::size_t n,
                     const std::string& what) const {
    const compiler::TrainingLayout& L = prog_.layout;
    for (std::size_t i = 0; i < n; ++i)
      for (int k = 0; k < 2; ++k) {
        const float chip = get_f32(&m[L.records_addr + 8 * i + 4 * k]);
        const float want = k == 0 ? rec.loss[i] : rec.correct[i];
        if (std::memcmp(&chip, &want, 4) != 0)
          throw std::logic_error(
              fmt::format("fit: {}: image {}'s {} is {} on the chip and {} in "
                          "the reference",
                          what, i, k == 0 ? "loss" : "correct flag", chip, want));
      }
  }

  void check_validation(const std::vector<std::uint8_t>& m) {
    const nn::StepRecords rec = reference_.get();
    check_records(
        m, rec, val_real_,
        fmt::format("validation after step {}, test images from {}", iterations_, val_first_));
  }

  // The reference's step on the batch before() chose, or its evaluation of the validation batch,
  // runs on another core while the (single-threaded) kernel simulates the chip's: it shares
  // nothing with the simulation but read-only inputs and its own state (ref_, which nothing else
  // touches until check_step or check_validation joins it). Its results do not depend on the
  // thread it runs on.
  void start_reference() {
    gather(train_, batch_index_.size(), ref_images_, ref_labels_);
    launch_reference([this, plan = prog_.layout.plan()] {
      return nn::reference_step(g_, t_, plan, opt_.optimizer, *ref_, ref_images_.data(),
                                ref_labels_.data(), batch_);
    });
  }
  void start_validation_reference() {
    gather(test_, val_real_, ref_images_, ref_labels_);
    launch_reference([this, plan = prog_.layout.plan(), n = val_real_] {
      return nn::reference_evaluate(g_, t_, plan, *ref_, ref_images_.data(), ref_labels_.data(), n,
                                    batch_);
    });
  }
  template <class F>
  void launch_reference(F f) {
    // The thread blocks the termination signals, so they reach the main thread only
    // (sw/io/signals.h); a process that may not start a thread runs the work at the join.
    io::SignalBlock block;
    try {
      reference_ = std::async(std::launch::async, f);
    } catch (const std::system_error&) {
      reference_ = std::async(std::launch::deferred, f);
    }
  }

  void check_step(driver::FitDriver& drv, const std::vector<std::uint8_t>& m) {
    const compiler::TrainingLayout& L = prog_.layout;
    const nn::StepRecords rec = reference_.get();
    if (opt_.reference_fault) opt_.reference_fault(iterations_, *ref_);
    check_records(m, rec, ref_labels_.size(), fmt::format("step {}", iterations_));
    drv_weights_.assign(L.replicas, {});
    for (std::uint32_t r = 0; r < L.replicas; ++r)
      for (std::size_t k = 0; k < t_.parameters.size(); ++k) {
        // Replica r: core r % cores of chip r / cores, at that core's addresses.
        const compiler::TrainingLayout::Home& h = L.params[r % L.cores][k];
        const std::vector<std::uint8_t> bytes = drv.read_memory(r / L.cores, h.w, h.elements * 4);
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
    nn::Weights w = ref_                   ? nn::weights_with_moving(*ref_)
                    : opt_.weights.empty() ? nn::random_weights(g_, opt_.seed)
                                           : nn::load_weights(opt_.weights, g_);
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
    if (timing_only_) j["outputs_computed"] = false;
    j["chip"] = cfg_.name;
    if (sys_.chips() > 1) j["system"] = system_summary_json(sys_);
    j["model"] = g_.name;
    j["replicas"] = prog_.layout.replicas;
    j["global_batch"] = batch_;
    j["micro_batch"] = prog_.layout.micro_batch;
    j["activations"] = prog_.layout.off_chip ? "off_chip" : "unified_buffer";
    if (prog_.layout.off_chip) j["activation_bytes"] = prog_.layout.activation_bytes;
    j["inputs"] = train_.random() ? fmt::format("random (seed {})", opt_.seed) : "Fashion-MNIST";
    j["initial_weights"] =
        opt_.weights.empty() ? fmt::format("random (seed {})", opt_.seed) : opt_.weights;
    j["optimizer"] = prog_.step.layers.back().type;
    j["learning_rate"] = opt_.optimizer.learning_rate;
    if (opt_.optimizer.warmup_steps > 0) {
      // Step t's rate is base * t / warmup_steps until the base (numerics::warmup_learning_rate);
      // per_step[].learning_rate gives each step's.
      j["warmup"] = {{"steps", opt_.optimizer.warmup_steps}, {"epochs", opt_.warmup_epochs}};
      if (opt_.warmup_epochs == 0) j["warmup"].erase("epochs");
    }
    if (opt_.label_smoothing > 0) j["label_smoothing"] = opt_.label_smoothing;
    if (opt_.bn_group > 1) j["bn_group"] = opt_.bn_group;
    if (opt_.optimizer.kind == nn::OptimizerKind::Lars) {
      j["weight_decay"] = opt_.optimizer.weight_decay;
      j["lars_eta"] = opt_.optimizer.lars_eta;
      j["momentum"] = opt_.optimizer.momentum;
    }
    j["epochs_run"] = epochs_.size();
    j["steps"] = iterations_;
    j["checked"] = check_;
    // Scale-out: one chip simulated, its ICI writes mirrored (docs/systems.md, "Scale-out").
    j["mode"] = scale_out_ ? "scale_out" : "every_chip";
    ordered_json ep = ordered_json::array();
    for (std::size_t i = 0; i < epochs_.size(); ++i) {
      const EpochLog& e = epochs_[i];
      ordered_json x;
      x["epoch"] = i + 1;
      if (!scale_out_ && !timing_only_) {  // neither computes meaningful values
        x["loss"] = e.loss / e.images;
        x["accuracy"] = e.correct / e.images;
      }
      if (e.val_loss) {
        if (!timing_only_) {
          x["val_loss"] = *e.val_loss;
          x["val_accuracy"] = *e.val_accuracy;
        }
        x["val_images"] = e.val_images;
      }
      x["simulated_seconds"] = seconds(static_cast<double>(e.cycles));
      x["split_cycles"] = parts_json(e.parts);
      x["energy_j"] = e.energy_j;
      if (e.val_loss) x["val_simulated_seconds"] = seconds(static_cast<double>(e.val_cycles));
      ep.push_back(x);
    }
    j["epochs"] = ep;
    if (!steps_.empty()) {
      std::vector<Cycle> s;
      for (const StepLog& st : steps_) s.push_back(st.cycles);
      std::sort(s.begin(), s.end());
      const double median_s = seconds(static_cast<double>(s[s.size() / 2]));
      j["step"] = {{"cycles_median", s[s.size() / 2]},
                   {"seconds_median", median_s},
                   {"images_per_s", batch_ / median_s},
                   {"last", last_step_json()}};
      if (opt_.epochs_to_train > 0) j["time_to_train"] = time_to_train(median_s);
      const double flops = 2.0 * static_cast<double>(step_macs());
      const double peak_macs = static_cast<double>(all_.peak_macs_per_cycle());
      ordered_json per = ordered_json::array();
      for (std::size_t i = 0; i < steps_.size(); ++i) {
        const auto cycles = static_cast<double>(steps_[i].cycles);
        per.push_back({{"step", i + 1},
                       {"cycles", steps_[i].cycles},
                       {"split_cycles", parts_json(steps_[i].parts)},
                       {"tflops", flops / seconds(cycles) / 1e12},
                       {"utilization", flops / 2 / (peak_macs * cycles)},
                       {"energy_j", steps_[i].energy_j},
                       {"bytes_host_link", steps_[i].host_link_bytes},
                       {"bytes_off_chip", steps_[i].off_chip_bytes},
                       {"instructions", steps_[i].instructions},
                       {"ici_bytes", steps_[i].ici_bytes}});
        if (opt_.optimizer.warmup_steps > 0)
          per.back()["learning_rate"] = numerics::warmup_learning_rate(
              opt_.optimizer.learning_rate, i + 1, opt_.optimizer.warmup_steps);
        if (sys_.chips() > 1) {
          per.back()["all_reduce_cycles"] = steps_[i].all_reduce;
          per.back()["exposed_all_reduce_cycles"] = steps_[i].exposed;
        }
      }
      j["per_step"] = per;
      if (steps_.size() > 1) j["steady_state"] = steady_state_json(flops);
    }
    j["host"] = {{"wall_seconds", wall}};
    if (!opt_.trace.empty()) j["host"]["trace_file"] = opt_.trace;
    return j;
  }

  // Steps 2..N, after the first (docs/report.md, "Training"): their mean cycles, seconds and
  // energy per step, and the rates of their sums.
  ordered_json steady_state_json(double flops) const {
    const auto n = static_cast<double>(steps_.size() - 1);
    double cycles = 0, energy = 0;
    for (std::size_t i = 1; i < steps_.size(); ++i) {
      cycles += static_cast<double>(steps_[i].cycles);
      energy += steps_[i].energy_j;
    }
    const double step_s = seconds(cycles / n);
    const auto images = static_cast<double>(batch_);
    return {
        {"steps", steps_.size() - 1},
        {"first_step", 2},
        {"cycles_per_step", cycles / n},
        {"seconds_per_step", step_s},
        {"images_per_s", images / step_s},
        {"tflops", flops / step_s / 1e12},
        {"utilization", flops / 2 / (static_cast<double>(all_.peak_macs_per_cycle()) * cycles / n)},
        {"energy_per_step_j", energy / n},
        {"energy_per_image_j", energy / n / images}};
  }

  // Epochs of the dataset at the median step: Keras's steps per epoch, ⌈images / batch⌉.
  ordered_json time_to_train(double step_s) const {
    const std::uint64_t images = opt_.dataset_images ? opt_.dataset_images : train_.count();
    const std::uint64_t per_epoch = (images + batch_ - 1) / batch_;
    const std::uint64_t steps = per_epoch * opt_.epochs_to_train;
    return {{"epochs", opt_.epochs_to_train},
            {"dataset_images", images},
            {"steps_per_epoch", per_epoch},
            {"steps", steps},
            {"simulated_seconds", static_cast<double>(steps) * step_s}};
  }

  // How the gradient's all-reduce went (docs/systems.md, "Overlap"): its buckets, the cycles
  // its work took and the part of them the backward pass hid.
  ordered_json all_reduce_json(const StepLog& st) const {
    const std::vector<std::uint64_t>& b = prog_.layout.buckets;
    return {{"bucket_bytes", opt_.bucket_bytes},
            {"buckets", b.empty() ? 1 : b.size()},
            {"overlap", !b.empty()},
            {"cycles", st.all_reduce},
            {"exposed_cycles", st.exposed},
            {"hidden_cycles", st.all_reduce - st.exposed},
            {"hidden_share", st.all_reduce > 0 ? 1.0 - st.exposed / st.all_reduce : 0.0}};
  }

  static ordered_json parts_json(const std::array<double, kParts>& parts) {
    ordered_json j;
    for (std::size_t k = 0; k < kParts; ++k) j[kPartNames[k]] = parts[k];
    return j;
  }

  // The last training step in full: its split, rates and energy as `run` reports its totals, and
  // one row per tag — the forward and the backward of each Keras layer among them.
  ordered_json last_step_json() const {
    const StepLog& st = steps_.back();
    const auto cycles = static_cast<double>(st.cycles);
    const std::uint64_t macs = step_macs();
    ordered_json j;
    j["step"] = steps_.size();
    j["cycles"] = st.cycles;
    j["split_cycles"] = parts_json(st.parts);
    if (sys_.chips() > 1) j["all_reduce"] = all_reduce_json(st);
    j["flops"] = 2.0 * static_cast<double>(macs);
    j["tflops"] = 2.0 * static_cast<double>(macs) / seconds(cycles) / 1e12;
    j.update(activity_json(all_, last_counters_.total(), cycles, cycles, batch_, macs));
    const std::vector<std::string> names = tag_names();
    ordered_json rows = ordered_json::array();
    for (const auto& [tag, c] : last_counters_.by_layer()) {
      const double cyc = static_cast<double>(c.cycles) / all_.tensor_cores;
      ordered_json row;
      row["tag"] = tag;
      row["name"] = tag < names.size() ? names[tag] : fmt::format("tag {}", tag);
      if (const std::optional<std::size_t> op = op_of(tag)) row["layer"] = g_.ops[*op].name;
      row["phase"] = kPartNames[static_cast<std::size_t>(part_of(tag))];
      if (tag < prog_.step.layers.size()) row["type"] = prog_.step.layers[tag].type;
      row["cycles"] = cyc;
      row.update(
          activity_json(all_, c, cyc, static_cast<double>(c.span()), batch_, network_macs(tag)));
      rows.push_back(row);
    }
    j["layers"] = rows;
    // Per ICI link that carried anything: its bytes and busy cycles in the step.
    ordered_json links = ordered_json::array();
    for (std::size_t l = 0; l < last_links_.size(); ++l)
      if (last_links_[l].first > 0)
        links.push_back({{"link", system_->fabric().link_name(l)},
                         {"bytes", last_links_[l].first},
                         {"busy_cycles", last_links_[l].second}});
    j["ici_links"] = links;
    return j;
  }

  const SystemConfig& sys_;
  const ChipConfig& cfg_;
  ChipConfig all_;  // the whole system as one chip, for rates and energy
  // The options with the warm-up's epochs turned into steps.
  static FitOptions resolved(FitOptions o) {
    if (!numerics::valid_label_smoothing(o.label_smoothing))
      throw InputError(fmt::format("--label-smoothing {} (must be in [0, 1))", o.label_smoothing));
    if (!(o.warmup_epochs >= 0.0) || !std::isfinite(o.warmup_epochs))
      throw InputError(
          fmt::format("--warmup-epochs {} (must be a finite number >= 0)", o.warmup_epochs));
    if (o.warmup_epochs > 0)
      o.optimizer.warmup_steps = static_cast<std::uint64_t>(
          std::floor(o.warmup_epochs * static_cast<double>(o.steps_per_epoch)));
    return o;
  }

  const FitOptions opt_;
  const bool scale_out_, timing_only_, check_;
  ir::Graph g_;
  ir::TrainingGraph t_;
  Images train_, test_;  // test_: none (count 0) with random inputs
  compiler::TrainingProgram prog_;
  std::optional<nn::TrainState> ref_;
  // The step's or the validation batch's images and labels, for the reference's thread.
  std::vector<float> ref_images_;
  std::vector<std::int32_t> ref_labels_;
  std::future<nn::StepRecords> reference_;
  std::uint32_t batch_ = 0;
  // Per step: images the shuffled order advances by, and images the host feeds (the batch, or
  // in scale-out the representative chip's share).
  std::uint32_t stride_ = 0, fed_ = 0;

  std::vector<std::uint64_t> order_, batch_index_;
  std::mt19937_64 shuffle_rng_;
  std::uint32_t epoch_ = 0, step_in_epoch_ = 0;
  std::uint64_t iterations_ = 0;
  std::vector<EpochLog> epochs_;
  std::vector<StepLog> steps_;
  LayerCounters last_counters_;  // the last training step's
  // Per ICI link: (bytes, busy cycles) since the last take_counters, the last step's, and the
  // totals taken so far.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> links_, last_links_;
  std::map<std::size_t, std::pair<std::uint64_t, std::uint64_t>> taken_links_;
  System* system_ = nullptr;  // while run() simulates
  Trace trace_;
  std::vector<report::StepSpan> traced_steps_;
  std::vector<std::uint64_t> traced_first_index_;  // per core: the traced step's first instruction
  std::vector<report::CounterSpan> counter_spans_;
  bool validating_ = false;
  std::uint64_t val_first_ = 0, val_real_ = 0;  // first test image of the batch, images counted
  double val_loss_ = 0, val_correct_ = 0;
  Cycle val_cycles_ = 0;
  std::vector<std::vector<std::vector<std::uint8_t>>> drv_weights_;
};

}  // namespace

FitResult fit_session(const SystemConfig& sys, const FitOptions& opt) {
  return Fit(sys, opt).run();
}

}  // namespace tpu::sim
