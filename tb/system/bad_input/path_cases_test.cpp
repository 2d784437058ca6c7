// Bad-input rows for paths (hw/common/input_file.h): every entry point that reads a file is
// given one that cannot be read as a file — a character device (/dev/zero, /dev/urandom, reached
// through a symlink in the case's directory), a FIFO, a directory, a symlink loop, a name too
// long, a path through a regular file, a directory it may not read — and must refuse it at once
// with the reason, before reading anything unbounded or waiting for a writer.
#include <sys/stat.h>
#include <unistd.h>

#include "bad_input.h"

namespace tpu::test::bad_input {
namespace {

const std::string kV1 = source_path("configs/chips/v1.json");
const std::string kCnn = source_path("configs/models/fashion_mnist_cnn.json");

// One command line per entry point; `path` is the file under test.
using Command = std::function<std::vector<std::string>(const Paths&)>;

struct Entry {
  EntryPoint plain, unprivileged;
  std::string file_name;  // what the file is called when it is made readable (a valid copy)
  std::string valid;      // a valid file of the kind, for the unreadable-directory row
};

Entry entry(const std::string& name, const std::string& out, const std::string& file_name,
            const std::string& valid, Command command) {
  Entry e;
  e.plain = EntryPoint{name, out, [command](const Paths& p) { return run_tpusim(command(p)); }};
  e.unprivileged = EntryPoint{name + " (unprivileged)", out, [command](const Paths& p) {
                                ProcessOptions o;
                                o.unprivileged = true;
                                return run_tpusim(command(p), o);
                              }};
  e.file_name = file_name;
  e.valid = valid;
  return e;
}

const Entry kChip =
    entry("chip config", "report.json", "chip.json", read_bytes(kV1),
          [](const Paths& p) -> std::vector<std::string> {
            return {"run", "--chip",     p.input.string(), "--random-weights", "--images",
                    "1",   "--no-check", "--json",         p.out.string()};
          });
// v3-2048 with its chip named by an absolute path, so the copy works from any directory.
std::string system_text() {
  nlohmann::json doc =
      nlohmann::json::parse(read_bytes(source_path("configs/systems/v3-2048.json")));
  doc["chip"] = source_path("configs/chips/v3.json");
  return doc.dump(2);
}
const Entry kSystem = entry("system config", "info.json", "system.json", system_text(),
                            [](const Paths& p) -> std::vector<std::string> {
                              return {"info", "--system", p.input.string(), "--json"};
                            });
const Entry kModel = entry(
    "model", "report.json", "model.json", read_bytes(kCnn),
    [](const Paths& p) -> std::vector<std::string> {
      return {"run",      "--chip", kV1,          "--model", p.input.string(), "--random-weights",
              "--images", "1",      "--no-check", "--json",  p.out.string()};
    });
const Entry kGraph =
    entry("model for tpusim graph", "graph.json", "model.json", read_bytes(kCnn),
          [](const Paths& p) -> std::vector<std::string> {
            return {"graph",          "--chip",           kV1,      "--model",
                    p.input.string(), "--random-weights", "--json", p.out.string()};
          });
const Entry kTopology = entry(
    "topology", "report.json", "topology.csv",
    "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
    "Strides,\nConv1, 8, 8, 3, 3, 1, 4, 1,\n",
    [](const Paths& p) -> std::vector<std::string> {
      return {"run",      "--chip", kV1,          "--topology", p.input.string(),
              "--images", "1",      "--no-check", "--json",     p.out.string()};
    });
const Entry kWeights =
    entry("weights", "report.json", "w.bin",
          read_bytes(source_path("configs/weights/fashion_mnist_cnn.bin")),
          [](const Paths& p) -> std::vector<std::string> {
            return {"run",       "--chip",         kV1,        "--model", kCnn,
                    "--weights", p.input.string(), "--images", "1",       "--no-check",
                    "--json",    p.out.string()};
          });
const Entry kSpec =
    entry("sweep spec", "results", "spec.json", "", [](const Paths& p) -> std::vector<std::string> {
      return {"sweep", p.input.string(), "--out", p.out.string(), "-j", "1"};
    });
const Entry kAsm = entry("assembly text", "program.bin", "p.s", "halt\n",
                         [](const Paths& p) -> std::vector<std::string> {
                           return {"asm", p.input.string(), "-o", p.out.string()};
                         });
const Entry kDisasm = entry("binary program", "listing.s", "p.bin", std::string(32, '\0'),
                            [](const Paths& p) -> std::vector<std::string> {
                              return {"disasm", p.input.string()};
                            });

// The Fashion-MNIST images file of `--data-dir` is the path under test.
const char* const kImages = "t10k-images-idx3-ubyte.gz";
const Entry kData =
    entry("IDX data", "report.json", kImages, "", [](const Paths& p) -> std::vector<std::string> {
      return {"run",      "--chip", kV1,          "--data-dir", p.input.parent_path().string(),
              "--images", "1",      "--no-check", "--json",     p.out.string()};
    });

// The generators, each making `name` (under `sub`, a directory it creates) into the hostile
// path and returning it.
Generator symlink_to(const std::string& name, const std::string& target) {
  return [name, target](const fs::path& d) {
    fs::create_symlink(target, d / name);
    return d / name;
  };
}
Generator fifo(const std::string& name) {
  return [name](const fs::path& d) {
    if (::mkfifo((d / name).c_str(), 0644) != 0) throw std::runtime_error("mkfifo failed");
    return d / name;
  };
}
Generator directory(const std::string& name) {
  return [name](const fs::path& d) {
    fs::create_directory(d / name);
    return d / name;
  };
}
Generator too_long() {
  return [](const fs::path& d) { return d / std::string(300, 'a'); };
}
Generator through_a_file(const std::string& name) {
  return [name](const fs::path& d) {
    write_bytes(d / "plain", "a regular file\n");
    return d / "plain" / name;
  };
}
// A valid file in a directory nobody may enter. The case's directory is left writable to all,
// so that the unprivileged run's output could be made (and must not be).
Generator unreadable(const std::string& name, const std::string& bytes) {
  return [name, bytes](const fs::path& d) {
    fs::permissions(d, fs::perms::all | fs::perms::sticky_bit);
    fs::create_directory(d / "locked");
    write_bytes(d / "locked" / name, bytes);
    fs::permissions(d / "locked", fs::perms::none);
    return d / "locked" / name;
  };
}
// For --data-dir: the images file inside a directory "data".
Generator in_data(const Generator& g) {
  return [g](const fs::path& d) {
    fs::create_directory(d / "data");
    return g(d / "data");
  };
}

std::vector<Case> cases() {
  std::vector<Case> rows;
  auto add = [&](const Entry& e, const std::string& prefix, bool data_dir) {
    auto wrap = [&](Generator g) { return data_dir ? in_data(g) : g; };
    const std::string& f = e.file_name;
    rows.push_back(Case{&e.plain,
                        prefix + "_dev_zero",
                        wrap(symlink_to(f, "/dev/zero")),
                        {"is a character device"}});
    rows.push_back(Case{&e.plain,
                        prefix + "_dev_urandom",
                        wrap(symlink_to(f, "/dev/urandom")),
                        {"is a character device"}});
    rows.push_back(Case{&e.plain, prefix + "_fifo", wrap(fifo(f)), {"FIFO"}});
    rows.push_back(Case{&e.plain, prefix + "_directory", wrap(directory(f)), {"is a directory"}});
    rows.push_back(
        Case{&e.plain, prefix + "_symlink_loop", wrap(symlink_to(f, f)), {"symlink loop"}});
    if (!data_dir)  // --data-dir names a directory; the names of its files are fixed
      rows.push_back(
          Case{&e.plain, prefix + "_name_of_300_bytes", too_long(), {"file name too long"}});
    rows.push_back(Case{
        &e.plain, prefix + "_path_through_a_file", wrap(through_a_file(f)), {"not a directory"}});
    if (!e.valid.empty())
      rows.push_back(Case{&e.unprivileged,
                          prefix + "_in_an_unreadable_directory",
                          wrap(unreadable(f, e.valid)),
                          {"permission denied"}});
  };
  add(kChip, "chip", false);
  add(kSystem, "system", false);
  add(kModel, "model", false);
  add(kGraph, "graph_model", false);
  add(kTopology, "topology", false);
  add(kWeights, "weights", false);
  add(kSpec, "spec", false);
  add(kAsm, "asm", false);
  add(kDisasm, "disasm", false);
  add(kData, "data", true);

  // Includes: the message names the including file, the pointer and the reason.
  auto including = [](const std::string& target, Generator make_target) -> Generator {
    return [target, make_target](const fs::path& d) {
      make_target(d);
      write_bytes(d / "chip.json", nlohmann::json{{"include", target}}.dump());
      return d / "chip.json";
    };
  };
  rows.push_back(Case{&kChip.plain,
                      "chip_include_naming_a_fifo",
                      including("base.json", fifo("base.json")),
                      {"/include", "FIFO"}});
  rows.push_back(Case{&kChip.plain,
                      "chip_include_naming_a_directory",
                      including("base.json", directory("base.json")),
                      {"/include", "a directory"}});
  rows.push_back(Case{&kChip.plain,
                      "chip_include_naming_dev_zero",
                      including("base.json", symlink_to("base.json", "/dev/zero")),
                      {"/include", "character device"}});
  rows.push_back(Case{&kChip.plain,
                      "chip_include_in_a_symlink_loop",
                      including("base.json", symlink_to("base.json", "base.json")),
                      {"/include", "symlink loop"}});
  // The chip a system config names: the message names the system file, /chip and the reason.
  auto naming_chip = [](Generator make_chip) -> Generator {
    return [make_chip](const fs::path& d) {
      make_chip(d);
      nlohmann::json doc = nlohmann::json::parse(system_text());
      doc["chip"] = "chip.json";
      return write_bytes(d / "system.json", doc.dump(2));
    };
  };
  rows.push_back(Case{&kSystem.plain,
                      "system_chip_naming_a_fifo",
                      naming_chip(fifo("chip.json")),
                      {"/chip", "FIFO"}});
  rows.push_back(Case{&kSystem.plain,
                      "system_chip_naming_dev_zero",
                      naming_chip(symlink_to("chip.json", "/dev/zero")),
                      {"/chip", "character device"}});
  rows.push_back(Case{&kSystem.plain,
                      "system_chip_in_a_symlink_loop",
                      naming_chip(symlink_to("chip.json", "chip.json")),
                      {"/chip", "symlink loop"}});
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Paths, BadInput, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tpu::test::bad_input
