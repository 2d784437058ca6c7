// The one way tpusim writes a file (reports, CSVs, traces, Markdown, sweep files, weights and
// their metadata, assembled programs). The promises, each kept by a test (docs/robustness.md,
// "Outputs"):
//
// - `-` is standard output. A target that is not a regular file — a device such as /dev/null or
//   /dev/full, a FIFO, one of this process's descriptors (/dev/stdout, /dev/fd/N) — is written
//   directly, never replaced; a write error (a full device, a closed pipe) is an error.
// - A regular file is written to a temporary file beside it and renamed over it, so a reader
//   never sees it half written. A symlink is followed: its target is replaced and the link
//   stays. An existing file keeps its permission bits (and, for root, its owner); a new one gets
//   0666 less the umask, as any program's.
// - A set of outputs (`run --json --csv --markdown --trace`) is all or nothing: every content is
//   written to its temporary before any target is touched, and the renames happen with the
//   termination signals held back.
// - check() runs before the work that produces the contents (a simulation, training): it
//   resolves every target, creates the temporaries (so a directory that cannot take a new file
//   is found now, not after an hour), and refuses a target that is a directory, a read-only
//   file, an input of the run (any file opened through open_input, or named in `inputs`) or
//   another output of the set.
// - Temporaries are registered with sw/io/signals.h: SIGINT, SIGTERM, SIGHUP and SIGPIPE remove
//   them; a set destroyed without commit() removes them too.
// - Every error names the file, the option that asked for it and the reason (errno's).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hw/common/input_file.h"

namespace tpu::io {

// The suffix of tpusim's temporary files (".<name>.<pid>-<n>.tpusim-tmp" beside the target):
// a sweep removes stale ones from its directory when it resumes.
inline constexpr const char* kTempSuffix = ".tpusim-tmp";

// A file a command will read but has not opened yet, for check(): {path, "model"}.
struct NamedInput {
  std::string path;
  std::string what;
};

class OutputSet {
 public:
  OutputSet();
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  // Registers an output and returns its index; `option` says what it is in messages
  // ("--json output", "metadata beside --out").
  std::size_t add(const std::string& path, const std::string& option);
  // A directory that holds outputs (`--csv DIR`): made by check() with its missing parents and
  // removed again (when still empty) if the set is not committed.
  void add_directory(const std::string& dir, const std::string& option);

  // See above. `inputs` are files the run will read that it has not opened yet (files opened
  // through open_input count without being named; commit() checks those again).
  void check(const std::vector<NamedInput>& inputs = {});
  // The content of output `i` (after check()).
  void set(std::size_t i, std::string content);
  // Writes every output or none. Throws InputError naming the file and the reason.
  void commit();

  // True when one of the outputs is standard output (the caller then prints its human summary
  // on stderr, so standard output carries the document alone).
  [[nodiscard]] bool uses_stdout() const;
  [[nodiscard]] std::size_t size() const;

 private:
  struct Target;
  struct Dir;
  std::vector<std::unique_ptr<Target>> targets_;
  std::vector<std::unique_ptr<Dir>> dirs_;
  std::vector<InputIdentity> named_inputs_;
  bool checked_ = false, committed_ = false;
  void check_inputs() const;
  void discard() noexcept;
};

// One output written with the same promises: a set of one.
void write_file(const std::string& path, const std::string& content,
                const std::string& option = "");

// `-` is standard output for a file, never for a directory: throws InputError for `-` naming
// `option` ("--csv output"), before anything is made. add_directory's check() calls it; so does
// a command whose directory is its own (sweep --out).
void refuse_stdout_for_directory(const std::string& dir, const std::string& option);

// Creates `dir` and its parents if needed; throws InputError naming it otherwise. (Directories a
// command keeps, such as a sweep's; an OutputSet's own directories go through add_directory.)
void make_directory(const std::string& dir);

}  // namespace tpu::io
