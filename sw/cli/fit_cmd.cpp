#include "sw/cli/fit_cmd.h"

#include <fmt/format.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cmath>
#include <iostream>
#include <optional>
#include <tuple>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/cli/run_cmd.h"
#include "sw/cli/shipped.h"
#include "sw/io/output.h"
#include "sw/report/formats.h"

namespace tpu::cli {

void add_fit_options(CLI::App* app, FitCommand& cmd) {
  auto& o = cmd.options;
  o.model = shipped_file(o.model);
  CLI::Option* chip = app->add_option("--chip", cmd.chip, "Chip config (JSON)");
  CLI::Option* system =
      app->add_option("--system", cmd.system,
                      "System config (JSON): its chips train as TPUStrategy's replicas, every "
                      "TensorCore one (docs/systems.md)")
          ->excludes(chip);
  app->add_flag("--scale-out", o.scale_out,
                "Simulate chip 0 only, the other chips taken as identical replicas and its ICI "
                "writes mirrored back to it: the step's timing for a pod, no values "
                "(docs/systems.md)")
      ->needs(system);
  app->add_option("--bucket-bytes", o.bucket_bytes,
                  "On several chips: all-reduce the gradient in buckets of at least this many "
                  "bytes while the backward pass goes on; 0: one all-reduce after it "
                  "(docs/systems.md, \"Overlap\")")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 30));
  app->add_option("--model", o.model, "Model (Keras-style JSON) ending in a softmax")
      ->capture_default_str();
  app->add_option("--data-dir", o.data_dir, "Fashion-MNIST directory (default: Debian's)");
  CLI::Option* epochs = app->add_option("--epochs", o.epochs, "Epochs")
                            ->capture_default_str()
                            ->check(CLI::Range(1u, 100000u));
  CLI::Option* per_epoch =
      app->add_option("--steps-per-epoch", o.steps_per_epoch, "Steps per epoch")
          ->capture_default_str()
          ->check(CLI::Range(1u, 1000000u));
  app->add_option("--steps", cmd.steps, "One epoch of this many steps (no validation)")
      ->check(CLI::Range(1u, 1000000u))
      ->excludes(epochs)
      ->excludes(per_epoch);
  app->add_option("--batch", o.batch,
                  "Global batch, split over the TensorCores (default: 60000 // steps per epoch; "
                  "32 for a model on random inputs)")
      ->check(CLI::Range(1u, 1u << 24));
  CLI::Option* weights =
      app->add_option("--weights", o.weights, "Start from this weights file (fine-tuning)");
  app->add_flag("--random-weights", cmd.random_weights,
                "Start from Keras's initialisers with --seed (the default)")
      ->excludes(weights);
  app->add_option("--activations", cmd.activations,
                  "Where a pass's tensors live: auto (the unified buffer when they fit), "
                  "unified-buffer or off-chip")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "unified-buffer", "off-chip"}));
  app->add_option("--learning-rate", o.optimizer.learning_rate, "Learning rate")
      ->capture_default_str();
  app->add_option("--optimizer", cmd.optimizer,
                  "adam, sgd, momentum (SGD with momentum 0.9) or lars (momentum 0.9, the "
                  "layer-wise trust ratio; docs/training.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"adam", "sgd", "momentum", "lars"}));
  app->add_option("--weight-decay", cmd.weight_decay,
                  "LARS's weight decay (default 1e-4, MLPerf ResNet-50's; lars only)");
  app->add_option("--lars-eta", cmd.lars_eta,
                  "LARS's trust coefficient eta (default 0.001, TF's LARSOptimizer's; lars only)");
  app->add_option("--label-smoothing", o.label_smoothing,
                  "Label smoothing E of the cross-entropy loss, in [0, 1): targets (1 - E) x "
                  "onehot + E / classes, as Keras's label_smoothing (0.1 in Google's big-batch "
                  "ResNet-50 runs)")
      ->capture_default_str();
  app->add_option("--bn-group", o.bn_group,
                  "Distributed BatchNormalization: the statistics of every BatchNormalization over "
                  "groups of this many replicas (TensorCores; 8 in Google's v3-2048 ResNet-50 "
                  "run), one pass a step; 1: each replica's own")
      ->capture_default_str()
      ->check(CLI::Range(std::uint32_t{1}, std::uint32_t{1} << 20));
  CLI::Option* warmup_epochs =
      app->add_option("--warmup-epochs", o.warmup_epochs,
                      "Raise the learning rate linearly over this many epochs (floor(epochs x "
                      "steps per epoch) steps; Goyal et al. 5, Google's v3-2048 run 25), then "
                      "the base rate");
  app->add_option("--warmup-steps", o.optimizer.warmup_steps,
                  "The warm-up in steps instead of epochs: step t runs at learning rate x t / "
                  "steps until it reaches the base rate")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1000000000}))
      ->excludes(warmup_epochs);
  app->add_option("--seed", o.seed, "Seed of the initial weights and the shuffle")
      ->capture_default_str();
  app->add_option("--validation-freq", o.validation_freq,
                  "Validate after every this many epochs, as Keras (default: after the last)");
  app->add_option("--epochs-to-train", o.epochs_to_train,
                  "Also report the simulated time to train this many epochs at the median step "
                  "(docs/training.md)")
      ->check(CLI::Range(1u, 100000u));
  app->add_option("--dataset-images", o.dataset_images,
                  "Images of one epoch for --epochs-to-train (default: the training images fit "
                  "reads; needed for random inputs, e.g. 1281167 for ImageNet)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  app->add_flag("--no-check", cmd.no_check,
                "Skip the bit-exact comparison with the training reference after every step");
  app->add_flag("--timing-only", o.timing_only,
                "Cycles, split, bytes and energy only, as a full run's: compute no losses or "
                "weights, store no data (no check)");
  app->add_option("--json", cmd.json, "Write the tpusim.fit/1 report here");
  app->add_option("--markdown", cmd.markdown,
                  "Write the report as Markdown here: the epochs, the last step's split and its "
                  "per-tag table");
  app->add_option("--trace", o.trace,
                  "Write a Chrome trace-event JSON of the first and the last step here (opens in "
                  "ui.perfetto.dev; docs/trace.md)");
}

void run_fit(FitCommand& cmd) {
  auto& o = cmd.options;
  o.check = !cmd.no_check;
  if (cmd.steps) {
    o.epochs = 1;
    o.steps_per_epoch = cmd.steps;
    // Keras's rule: a validation frequency above the epochs validates never.
    if (o.validation_freq == 0) o.validation_freq = 2;
  }
  using A = sim::FitOptions::Activations;
  o.activations = cmd.activations == "unified-buffer" ? A::kUnifiedBuffer
                  : cmd.activations == "off-chip"     ? A::kOffChip
                                                      : A::kAuto;
  o.optimizer.kind = cmd.optimizer == "sgd"        ? nn::OptimizerKind::Sgd
                     : cmd.optimizer == "momentum" ? nn::OptimizerKind::Momentum
                     : cmd.optimizer == "lars"     ? nn::OptimizerKind::Lars
                                                   : nn::OptimizerKind::Adam;
  for (const auto& [flag, value, positive, into] :
       {std::tuple{"--weight-decay", cmd.weight_decay, false, &o.optimizer.weight_decay},
        std::tuple{"--lars-eta", cmd.lars_eta, true, &o.optimizer.lars_eta}}) {
    if (!value) continue;
    if (o.optimizer.kind != nn::OptimizerKind::Lars)
      throw InputError(
          fmt::format("{} is LARS's: it needs --optimizer lars (not {})", flag, cmd.optimizer));
    if (!std::isfinite(*value) || *value < 0.0f || (positive && *value == 0.0f))
      throw InputError(
          fmt::format("{} {} (must be finite and {})", flag, *value, positive ? "> 0" : ">= 0"));
    *into = *value;
  }
  io::OutputSet out;
  std::optional<std::size_t> json, markdown, trace;
  if (!cmd.json.empty()) json = out.add(cmd.json, "--json output");
  if (!cmd.markdown.empty()) markdown = out.add(cmd.markdown, "--markdown output");
  if (!o.trace.empty()) trace = out.add(o.trace, "--trace output");
  const SystemConfig sys = chip_or_system(cmd.chip, cmd.system, "fit");
  if (o.weights.empty())
    out.check({{o.model, "model"}});
  else
    out.check({{o.model, "model"}, {o.weights, "weights"}});
  o.log = [](const std::string& line) { std::cerr << line << "\n"; };
#if defined(__GLIBC__)
  // Every step allocates and frees the same large blocks again (the training reference's
  // tensors, megabytes each). glibc would serve each from fresh mmap()ed pages and give them back
  // on free, so the kernel zeroes and faults them in again every step (36 million page faults
  // over the tutorial's fit): kept in the heap instead, they are reused (docs/training.md, "Host
  // time"). 32 MiB is the largest threshold glibc takes; peak memory is what it was.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  sim::FitResult r = sim::fit_session(sys, o);
  if (r.report.contains("time_to_train")) {
    const auto& t = r.report["time_to_train"];
    std::cerr << fmt::format(
        "Time to train: {} epochs of {} images = {} steps x {:.3f} ms = {:.1f} s (simulated, "
        "{:.0f} images/s)\n",
        t["epochs"].get<std::uint64_t>(), t["dataset_images"].get<std::uint64_t>(),
        t["steps"].get<std::uint64_t>(), 1e3 * r.report["step"]["seconds_median"].get<double>(),
        t["simulated_seconds"].get<double>(), r.report["step"]["images_per_s"].get<double>());
  }
  if (json) out.set(*json, r.report.dump(2) + "\n");
  if (markdown) out.set(*markdown, report::fit_markdown(r.report));
  if (trace) out.set(*trace, std::move(r.trace_json));
  out.commit();
}

}  // namespace tpu::cli
