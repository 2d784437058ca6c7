// Bad-input rows for the command line itself (sw/cli/main.cpp, docs/cli.md, "Usage errors"):
// an unknown option or command, a missing or bad value, options that exclude each other, an
// argument too many, and `-` where it cannot mean standard output. Each is one `tpusim:` line
// naming the argument and what is allowed, status 2, nothing written — never CLI11's own exit
// codes (105, 106, 109) or its two-line message.
#include <deque>

#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

const std::string kV1 = source_path("configs/chips/v1.json");

// `args` with "@out" standing for the case's output path; `named` is what the message must name
// (the table's rule calls it the input).
struct Row {
  std::string name;
  std::vector<std::string> args;
  std::string named;
  std::vector<std::string> expect;
};

// One entry point per row (its arguments are the row), kept where Case's pointer stays valid.
std::deque<EntryPoint>& entries() {
  static std::deque<EntryPoint> e;
  return e;
}

Case row(Row r) {
  const std::vector<std::string> args = r.args;
  entries().push_back(EntryPoint{"command line", "out", [args](const Paths& p) {
                                   std::vector<std::string> a = args;
                                   for (std::string& s : a)
                                     if (s == "@out") s = p.out.string();
                                   return run_tpusim(a);
                                 }});
  const std::string named = r.named;
  return Case{&entries().back(), std::move(r.name),
              [named](const fs::path&) { return fs::path(named); }, std::move(r.expect)};
}

std::vector<Case> cases() {
  const std::vector<Row> rows = {
      {"usage_unknown_option",
       {"run", "--chip", kV1, "--bogus"},
       "--bogus",
       {"not an option of run", "tpusim run --help"}},
      // CLI11 checks --chip first; the unknown option is what the user got wrong.
      {"usage_unknown_option_before_a_missing_one",
       {"run", "--bogus"},
       "--bogus",
       {"not an option of run"}},
      {"usage_unknown_top_level_option", {"--bogus"}, "--bogus", {"tpusim --help"}},
      {"usage_unknown_command",
       {"frobnicate"},
       "frobnicate",
       {"no such command", "info, run, compare, sweep"}},
      {"usage_no_command", {}, "a command is required", {"info, run, compare, sweep"}},
      // run's --chip or --system: one of the two is required.
      {"usage_missing_required_option",
       {"run", "--json", "@out"},
       "--chip",
       {"needs a chip config", "--system"}},
      {"usage_option_without_its_value", {"run", "--chip"}, "--chip", {}},
      {"usage_option_given_twice", {"run", "--chip", kV1, "--chip", kV1}, "--chip", {}},
      {"usage_value_out_of_range", {"run", "--chip", kV1, "--images", "0"}, "--images", {"1 to"}},
      {"usage_value_not_a_number",
       {"run", "--chip", kV1, "--images", "many"},
       "many",
       {"--images"}},
      {"usage_value_not_a_choice",
       {"fit", "--chip", kV1, "--optimizer", "adamw"},
       "--optimizer",
       {"adamw", "adam"}},
      {"usage_options_that_exclude_each_other",
       {"fit", "--chip", kV1, "--steps", "1", "--epochs", "2"},
       "--steps",
       {"--epochs"}},
      {"usage_weights_and_random_weights",
       {"run", "--chip", kV1, "--weights", kV1, "--random-weights"},
       "--random-weights",
       {"--weights"}},
      {"usage_chip_and_system_in_info",
       {"info", "--chip", kV1, "--system", source_path("configs/systems/v3-8.json")},
       "--chip",
       {"--system"}},
      {"usage_extra_positional_argument",
       {"run", "--chip", kV1, "extra"},
       "extra",
       {"run takes no positional argument"}},
      {"usage_second_sweep_spec", {"sweep", kV1, kV1, "--out", "@out"}, kV1, {"one spec"}},
      // `-` is standard output for a file, never for a directory, and for one output only.
      {"usage_dash_for_run_scalesim_csv_directory",
       {"run", "--chip", kV1, "--scalesim-csv", "-"},
       "--scalesim-csv",
       {"directory"}},
      // --csv is one file in every command: run's old directory form is refused with the way on.
      {"usage_run_csv_names_a_directory",
       {"run", "--chip", kV1, "--csv", source_path("configs")},
       "--csv",
       {"a directory", "--scalesim-csv DIR"}},
      {"usage_max_array_size_without_slurm",
       {"sweep", source_path("configs/sweeps/mxu_size.json"), "--max-array-size", "3", "--out",
        "@out"},
       "--max-array-size",
       {"--executor slurm"}},
      {"usage_dash_for_sweep_out_directory",
       {"sweep", source_path("configs/sweeps/mxu_size.json"), "--out", "-"},
       "--out",
       {"directory"}},
      {"usage_dash_for_train_save", {"train", "--save", "-"}, "--save", {"beside the weights"}},
      // A flag means one thing in every command: --out is sweep's directory, so train's and
      // asm's files have other names, and the old ones say which.
      {"usage_train_out_renamed", {"train", "--out", "@out"}, "--out", {"renamed", "--save FILE"}},
      {"usage_asm_out_renamed",
       {"asm", kV1, "--out", "@out"},
       "--out",
       {"renamed", "-o, --output FILE"}},
      {"usage_two_outputs_on_standard_output",
       {"run", "--chip", kV1, "--json", "-", "--markdown", "-"},
       "--markdown",
       {"--json"}},
  };
  std::vector<Case> c;
  for (const Row& r : rows) c.push_back(row(r));
  return c;
}

INSTANTIATE_TEST_SUITE_P(Usage, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
