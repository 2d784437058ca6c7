// The bad-input table (docs/robustness.md): every entry point of tpusim is fed malformed and
// hostile inputs, and each must end with one clear message and exit status 2 — never a crash, a
// hang, an internal error or an output file left behind as if the run had succeeded.
//
// One row = an entry point, a name, a generator that writes the hostile input into a fresh
// directory, and the fragments the message must contain. Each entry point's rows live in their own
// *_cases_test.cpp, which instantiates the one parameterised test (bad_input_test.cpp) with them;
// a new entry point (sweep specs, Keras JSON, topology CSV, ...) is a new file of the same shape.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tpu::test::bad_input {

namespace fs = std::filesystem;

// How one run ended.
struct Outcome {
  bool exited = false;     // exited on its own (not killed by a signal)
  int status = -1;         // exit status when exited
  int signal = 0;          // the signal that ended it otherwise
  bool timed_out = false;  // killed by the harness after the time limit
  std::string out, err;    // what it wrote to stdout and stderr
};

// What a run of an entry point gets: the hostile input and where an output would go.
struct Paths {
  fs::path dir;    // the case's own directory; after the run it must hold only the inputs
  fs::path input;  // what the generator wrote (a file or a directory)
  fs::path out;    // where the command is asked to write its output
};

struct EntryPoint {
  std::string name;
  std::string out_name;  // file name of the output the command is asked for, inside Paths::dir
  std::function<Outcome(const Paths&)> run;
};

// Writes the hostile input into `dir`; returns the path the message must name.
using Generator = std::function<fs::path(const fs::path& dir)>;

struct Case {
  const EntryPoint* entry = nullptr;
  std::string name;  // [A-Za-z0-9_]: becomes part of the test's name
  Generator make;
  std::vector<std::string> expect;  // fragments of the message (field, instruction, address)
};

// Test parameters print as their entry point and name, not as bytes.
void PrintTo(const Case& c, std::ostream* os);

class BadInput : public ::testing::TestWithParam<Case> {};

std::string case_name(const ::testing::TestParamInfo<Case>& info);

// How a child is started, beyond its arguments.
struct ProcessOptions {
  // Resource limits set in the child before it execs: {RLIMIT_AS, bytes}, {RLIMIT_NPROC, 1}.
  std::vector<std::pair<int, std::uint64_t>> limits;
  // When the tests run as root: the child drops to user and group nobody (65534) before it
  // execs, so that permissions apply to it (root reads a chmod-000 directory). A no-op for
  // other users, to whom they apply already.
  bool unprivileged = false;
};

// Runs `argv` (argv[0] is the program) with stdout and stderr captured, killing it after
// `limit_s` seconds.
Outcome run_process(const std::vector<std::string>& argv, double limit_s,
                    const ProcessOptions& options = {});
// Runs `body` in a forked child (for in-process entry points such as a chip elaboration, which
// cannot be reset inside one process); the child's stdout and stderr are captured, its return
// value is its exit status.
Outcome run_forked(const std::function<int()>& body, double limit_s);
// `tpusim <args>` as a user runs it.
Outcome run_tpusim(const std::vector<std::string>& args, const ProcessOptions& options = {});

// True when the tests run as root (devices, mounts, and dropping to an unprivileged user work).
bool running_as_root();
// Makes `dir` and everything in it accessible to its owner again (a row may chmod 000 a
// directory; a non-root harness could neither list nor remove it otherwise).
void make_accessible(const fs::path& dir);

// Per-run time limit: generous for sanitizer builds, yet a hang fails instead of blocking CI.
inline constexpr double kTimeLimitSeconds = 60;

// Generator helpers.
std::string source_path(const std::string& relative);  // a file of the source tree
std::string read_bytes(const fs::path& path);
fs::path write_bytes(const fs::path& path, const std::string& bytes);
Generator file(const std::string& name, std::string bytes);
// Bytes from a fixed-seed generator: the same garbage on every run.
std::string garbage(std::size_t n, std::uint32_t seed);
// `depth` nested arrays around nothing: "[[[...]]]".
std::string nested_arrays(std::size_t depth);
// `doc` serialised with the value at `pointer` replaced by the literal text `raw` (which need not
// be valid JSON: NaN, Infinity, 1e400, an integer past 64 bits).
std::string with_raw(nlohmann::json doc, const std::string& pointer, const std::string& raw);
// `doc` with `pointer` set to `value`, or removed when `value` is discarded.
std::string with_value(nlohmann::json doc, const std::string& pointer, const nlohmann::json& v);
std::string without(nlohmann::json doc, const std::string& pointer);
// gzip-compressed bytes (RFC 1952), as the Fashion-MNIST files are shipped.
std::string gzip(const std::string& bytes);
// Big-endian 32-bit words, the IDX header layout.
std::string be32(std::initializer_list<std::uint32_t> words);
// Little-endian 32-bit words, the weights-file layout.
std::string le32(std::initializer_list<std::uint32_t> words);

}  // namespace tpu::test::bad_input
