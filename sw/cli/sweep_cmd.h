// `tpusim sweep SPEC`: every design point of a sweep spec (docs/sweeps.md) times every workload,
// each a `tpusim run` in its own process (the SystemC kernel cannot be reset), locally up to -j
// at a time or as a Slurm job array; one table (results.csv, results.json) rebuilt from the
// finished points. Points are written atomically, so a killed sweep resumes where it stopped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpu::cli {

struct SweepCommand {
  std::string spec;
  std::string out;                 // default: results/<sweep name>
  unsigned jobs = 0;               // 0: one per core
  std::string executor = "local";  // or "slurm"
  bool emit_only = false;          // slurm: write the batch script, do not submit it
  std::vector<std::string> sbatch_args;
  std::optional<std::size_t> max_array_size;  // slurm: default from `scontrol show config`
  bool retry_failed = false;
  std::optional<std::uint64_t> shuffle_seed;  // run the points in a seeded random order
  std::optional<std::size_t> task;            // run one task of `out`'s plan (a Slurm array task)
  bool timing_only = false;                   // every run with --timing-only (in the plan)
};

// The command line's words (without the program name) with each `--sbatch-arg OPTION VALUE`
// written as two --sbatch-arg words, so that `--sbatch-arg --partition big` passes both words to
// sbatch as written: the word after `--sbatch-arg` is an sbatch argument whatever it starts with,
// and when it is an option without `=` (`--partition`, `-p`) and the next word is not an option,
// that word is its value. A flag that takes no value (`--exclusive`) goes before another option.
std::vector<std::string> pair_sbatch_values(std::vector<std::string> words);

// Returns the exit status: 0 when every run finished and none failed, 1 when some failed (they
// are in the table with their errors), 130 when interrupted (SIGINT/SIGTERM).
int run_sweep(SweepCommand& cmd);

}  // namespace tpu::cli
