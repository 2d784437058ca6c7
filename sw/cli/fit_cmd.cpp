#include "sw/cli/fit_cmd.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <iostream>
#include <optional>

#include "hw/common/error.h"
#include "hw/config/chip_config.h"
#include "sw/io/output.h"
#include "sw/report/formats.h"

namespace tpu::cli {

void add_fit_options(CLI::App* app, FitCommand& cmd) {
  auto& o = cmd.options;
  app->add_option("--chip", cmd.chip, "Chip config (JSON)")->required();
  app->add_option("--model", o.model, "Model (Keras-style JSON) ending in a softmax")
      ->capture_default_str();
  app->add_option("--data-dir", o.data_dir, "Fashion-MNIST directory (default: Debian's)");
  app->add_option("--epochs", o.epochs, "Epochs")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  app->add_option("--steps-per-epoch", o.steps_per_epoch, "Steps per epoch")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000000u));
  app->add_option("--batch", o.batch,
                  "Global batch, split over the TensorCores (default: 60000 // steps per epoch)")
      ->check(CLI::Range(1u, 1u << 24));
  app->add_option("--learning-rate", o.optimizer.learning_rate, "Learning rate")
      ->capture_default_str();
  app->add_option("--optimizer", cmd.optimizer, "adam, sgd or momentum (SGD with momentum 0.9)")
      ->capture_default_str()
      ->check(CLI::IsMember({"adam", "sgd", "momentum"}));
  app->add_option("--seed", o.seed, "Seed of the initial weights and the shuffle")
      ->capture_default_str();
  app->add_option("--validation-freq", o.validation_freq,
                  "Validate after every this many epochs, as Keras (default: after the last)");
  app->add_flag("--no-check", cmd.no_check,
                "Skip the bit-exact comparison with the training reference after every step");
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
  o.optimizer.kind = cmd.optimizer == "sgd"        ? nn::OptimizerKind::Sgd
                     : cmd.optimizer == "momentum" ? nn::OptimizerKind::Momentum
                                                   : nn::OptimizerKind::Adam;
  io::OutputSet out;
  std::optional<std::size_t> json, markdown, trace;
  if (!cmd.json.empty()) json = out.add(cmd.json, "--json output");
  if (!cmd.markdown.empty()) markdown = out.add(cmd.markdown, "--markdown output");
  if (!o.trace.empty()) trace = out.add(o.trace, "--trace output");
  const ChipConfig cfg = load_chip_config(cmd.chip);
  out.check({{o.model, "model"}});
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
  sim::FitResult r = sim::fit_session(cfg, o);
  if (json) out.set(*json, r.report.dump(2) + "\n");
  if (markdown) out.set(*markdown, report::fit_markdown(r.report));
  if (trace) out.set(*trace, std::move(r.trace_json));
  out.commit();
}

}  // namespace tpu::cli
