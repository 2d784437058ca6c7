// Outputs as an unlucky user names them (issue 12, rows 1-4, 6, 12, 13, 22, 23): devices, FIFOs,
// descriptors, symlinks, files with their own permissions, outputs that are inputs, impossible
// paths and full disks. sw/io/output.h states the promises.
#include <sys/sysmacros.h>

#include <fstream>
#include <thread>

#include "faults.h"
#include "system/bad_input/bad_input.h"

namespace tpu::test::faults {
namespace {

const std::string kV1 = source("configs/chips/v1.json");
const std::string kCnn = source("configs/models/fashion_mnist_cnn.json");

// A quick run of the tutorial's CNN on v1 with `outputs` added.
std::vector<std::string> small_run(std::vector<std::string> outputs,
                                   const std::string& chip = kV1) {
  std::vector<std::string> a = {"run", "--chip", chip, "--images", "64", "--batch", "32"};
  a.insert(a.end(), outputs.begin(), outputs.end());
  return a;
}

bool is_report(const std::string& text) {
  try {
    return json::parse(text).at("schema") == "tpusim.run/1";
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> n;
  for (const auto& e : fs::directory_iterator(dir)) n.push_back(e.path().filename().string());
  std::sort(n.begin(), n.end());
  return n;
}

// v1 with a 16 KiB unified buffer: the CNN's first activation (43,264 bytes) cannot fit, so a run
// fails in the compiler, after every input has been read and before any simulation.
std::string too_small_chip(const fs::path& dir) {
  json c = json::parse(read_file(kV1));
  c["unified_buffer"]["bytes"] = 16384;
  c["name"] = "tpu-v1-16k";
  const std::string f = (dir / "small-ub.json").string();
  write_file(f, c.dump(2));
  return f;
}

TEST(Outputs, Row01_DevicesAreWrittenNeverReplaced) {
  if (!is_root())
    GTEST_SKIP() << "device nodes are made with mknod, which needs root (CI runs as root)";
  Scratch d("row01");
  ASSERT_EQ(::mknod((d / "null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  ASSERT_EQ(::mknod((d / "full").c_str(), S_IFCHR | 0666, makedev(1, 7)), 0);
  for (const char* n : {"null", "full"}) ASSERT_EQ(::chmod((d / n).c_str(), 0666), 0);  // umask
  auto still_a_device = [&](const std::string& name, unsigned minor) {
    struct stat st {};
    return ::stat((d / name).c_str(), &st) == 0 && S_ISCHR(st.st_mode) &&
           st.st_rdev == makedev(1, minor);
  };

  // Two outputs on one device are allowed: a device is a stream, not a file to replace.
  Ended e = run(small_run({"--json", d / "null", "--markdown", d / "null"}));
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(still_a_device("null", 3)) << "the null device was replaced";

  // /dev/full reports a full disk on every write: an error, with the reason.
  e = run(small_run({"--json", d / "full"}));
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find(d / "full"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("no space left on the device"), std::string::npos) << e.err;
  EXPECT_EQ(e.out, "") << "no summary after a failed write";
  EXPECT_TRUE(still_a_device("full", 7)) << "the full device was replaced";

  // What tpusim prints on standard output must arrive too.
  const int full_fd = ::open((d / "full").c_str(), O_WRONLY);
  ASSERT_GE(full_fd, 0);
  Options to_full;
  to_full.stdout_fd = full_fd;
  e = run({"info", "--chip", kV1}, to_full);
  ::close(full_fd);
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find("standard output: cannot write (no space left on the device)"),
            std::string::npos)
      << e.err;

  // As a user who may write the device but not its directory: written, not refused.
  Options nobody;
  nobody.unprivileged = true;
  e = run(small_run({"--json", d / "null"}), nobody);
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(still_a_device("null", 3));
  EXPECT_EQ(names(d.path), (std::vector<std::string>{"full", "null"}));
}

TEST(Outputs, Row01_StandardOutputIsWrittenWhereTheShellPointedIt) {
  Scratch d("row01-stdout");
  // `tpusim run --json /dev/stdout >> log`: appended to the log, which stays the same file.
  write_file(d / "log", "a line before\n");
  struct stat before {};
  ::stat((d / "log").c_str(), &before);
  for (const char* target : {"/dev/stdout", "-", "/proc/self/fd/1", "/dev/fd/1"}) {
    const int fd = ::open((d / "log").c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    Options o;
    o.stdout_fd = fd;
    const Ended e = run(small_run({"--json", target}), o);
    ::close(fd);
    EXPECT_EQ(e.status, 0) << target << ": " << e.err;
    // The human summary went to stderr, so stdout holds the report alone.
    EXPECT_NE(e.err.find("bit-exact"), std::string::npos) << target;
  }
  struct stat after {};
  ::stat((d / "log").c_str(), &after);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the log was replaced, not appended to";
  const std::string log = read_file(d / "log");
  ASSERT_EQ(log.rfind("a line before\n", 0), 0u) << log.substr(0, 200);
  // Four reports, one after the other.
  std::size_t reports = 0;
  for (std::size_t at = 0; (at = log.find("\"schema\": \"tpusim.run/1\"", at)) != std::string::npos;
       ++at)
    ++reports;
  EXPECT_EQ(reports, 4u);
  EXPECT_EQ(names(d.path), std::vector<std::string>{"log"});
}

TEST(Outputs, Row01_AFifoIsWrittenThroughNotReplaced) {
  Scratch d("row01-fifo");
  ASSERT_EQ(::mkfifo((d / "pipe").c_str(), 0644), 0);
  std::string received;
  std::thread reader([&] {
    std::ifstream in(d / "pipe", std::ios::binary);
    received.assign(std::istreambuf_iterator<char>(in), {});
  });
  const Ended e = run(small_run({"--json", d / "pipe"}));
  reader.join();
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(is_report(received)) << received.substr(0, 200);
  struct stat st {};
  ::lstat((d / "pipe").c_str(), &st);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
}

TEST(Outputs, Row02_ASymlinkIsWrittenThroughAndStays) {
  Scratch d("row02-link");
  fs::create_directories(d.path / "reports");
  write_file(d / "reports/run.json", "old\n");
  fs::create_symlink("reports/run.json", d.path / "latest.json");
  fs::create_symlink("nowhere-yet.json", d.path / "dangling.json");
  const Ended e = run(small_run({"--json", d / "latest.json", "--markdown", d / "dangling.json"}));
  ASSERT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(fs::is_symlink(d.path / "latest.json"));
  EXPECT_EQ(fs::read_symlink(d.path / "latest.json"), "reports/run.json");
  EXPECT_TRUE(is_report(read_file(d / "reports/run.json")));
  // A dangling link is completed, as a shell's `>` would: its target is made.
  EXPECT_TRUE(fs::is_symlink(d.path / "dangling.json"));
  EXPECT_NE(read_file(d / "nowhere-yet.json").find("# "), std::string::npos);
  EXPECT_TRUE(temporaries(d.path).empty());
}

TEST(Outputs, Row02_AnExistingReportKeepsItsPermissionsAndOwner) {
  Scratch d("row02-mode");
  write_file(d / "private.json", "old\n");
  fs::permissions(d.path / "private.json", fs::perms::owner_read | fs::perms::owner_write);
  const uid_t owner = is_root() ? 65534 : ::getuid();
  if (is_root()) {
    ASSERT_EQ(::chown((d / "private.json").c_str(), owner, owner), 0);
  }
  const mode_t old_umask = ::umask(027);
  const Ended e = run(small_run({"--json", d / "private.json", "--markdown", d / "new.md"}));
  ::umask(old_umask);
  ASSERT_EQ(e.status, 0) << e.err;
  struct stat st {};
  ::stat((d / "private.json").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "the report came back with other permissions";
  EXPECT_EQ(st.st_uid, owner);
  EXPECT_TRUE(is_report(read_file(d / "private.json")));
  // A new file gets 0666 less the umask, as any program's would.
  ::stat((d / "new.md").c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
}

TEST(Outputs, Row03_TrainRefusesMetadataThatWouldOverwriteItsModel) {
  Scratch d("row03");
  write_file(d / "tiny.json", read_file(kCnn));
  Ended e = run({"train", "--model", d / "tiny.json", "--save", d / "tiny.bin"});
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find("would overwrite the model"), std::string::npos) << e.err;
  EXPECT_EQ(read_file(d / "tiny.json"), read_file(kCnn)) << "the model was overwritten";
  // Weights named *.json: weights and metadata would be one file.
  e = run({"train", "--model", d / "tiny.json", "--save", d / "w.json"});
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find("give each output its own file"), std::string::npos) << e.err;
  EXPECT_EQ(names(d.path), std::vector<std::string>{"tiny.json"});
}

TEST(Outputs, Row04_AnOutputNamingAnInputIsRefusedAndTheInputKept) {
  Scratch d("row04");
  write_file(d / "base.json", read_file(kV1));
  write_file(d / "chip.json", R"({"include": "base.json"})");
  write_file(d / "model.json", read_file(kCnn));
  write_file(d / "w.bin", read_file(source("configs/weights/fashion_mnist_cnn.bin")));
  write_file(d / "p.s", "halt\n");
  fs::create_symlink("chip.json", d.path / "alias.json");
  fs::create_hard_link(d.path / "model.json", d.path / "hard.json");
  const auto before = files(d.path);
  const std::vector<std::string> workload = {
      "--chip",    d / "chip.json", "--model",  d / "model.json",
      "--weights", d / "w.bin",     "--images", "8"};
  struct Try {
    std::vector<std::string> args;
    std::string input;  // what the message must call the file
  };
  auto with = [&](std::vector<std::string> outputs) {
    std::vector<std::string> a = {"run"};
    a.insert(a.end(), workload.begin(), workload.end());
    a.insert(a.end(), outputs.begin(), outputs.end());
    return a;
  };
  const std::vector<Try> tries = {
      {with({"--json", d / "chip.json"}), "chip config"},
      {with({"--json", d / "base.json"}), "chip config"},  // an include
      {with({"--markdown", d / "model.json"}), "model"},
      {with({"--trace", d / "w.bin"}), "weights file"},
      {with({"--json", d / "alias.json"}), "chip config"},  // through a symlink
      {with({"--json", d / "hard.json"}), "model"},         // another name of the same file
      {{"compare", "--chip", d / "chip.json", "--chip", kV1, "--images", "8", "--csv",
        d / "chip.json"},
       "chip config"},
      {{"asm", d / "p.s", "-o", d / "p.s"}, "assembly text"},
  };
  for (const auto& t : tries) {
    const Ended e = run(t.args);
    EXPECT_EQ(e.status, 2) << t.args.back() << ": " << e.err;
    EXPECT_NE(e.err.find("would overwrite the " + t.input), std::string::npos) << e.err;
  }
  EXPECT_EQ(files(d.path), before) << "an input was changed";
}

TEST(Outputs, Row06_CompareNeedsNoTemporaryDirectoryAndKeepsEveryChipsReason) {
  Scratch d("row06");
  fs::create_directories(d.path / "tmp");
  const std::string small = too_small_chip(d.path);
  for (const std::string& tmpdir : {d / "tmp", std::string("/nonexistent/tmp")}) {
    Options o;
    o.env = {{"TMPDIR", tmpdir}};
    const Ended e = run(
        {"compare", "--chip", kV1, "--chip", small, "--images", "64", "--json", d / "cmp.json"}, o);
    EXPECT_EQ(e.status, 1) << e.err;
    // The failing chip's own one-line reason, not an empty one.
    EXPECT_NE(e.err.find("small-ub.json FAILED (exit status 2: tpusim: "), std::string::npos)
        << e.err;
    EXPECT_NE(e.err.find("16384 bytes"), std::string::npos) << e.err;
    const json cmp = json::parse(read_file(d / "cmp.json"));
    EXPECT_NE(cmp["failed"][0]["error"].get<std::string>().find("16384 bytes"), std::string::npos);
  }
  EXPECT_TRUE(fs::is_empty(d.path / "tmp"));
}

TEST(Outputs, Row12_Row22_AnImpossibleOutputStopsTheRunBeforeItStartsAndLeavesNothing) {
  Scratch d("row12");
  write_file(d / "plain", "a file, not a directory\n");
  // The chip cannot run the model: had the outputs been checked after the compiler (let alone
  // the simulation), that would be the error.
  const std::string small = too_small_chip(d.path);
  const Ended e = run(small_run(
      {"--json", d / "ok.json", "--scalesim-csv", d / "plain/csv", "--trace", d / "run.trace.json"},
      small));
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find(d / "plain/csv"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("not a directory"), std::string::npos) << e.err;
  EXPECT_EQ(e.err.find("16384"), std::string::npos) << "the run started before the outputs "
                                                       "were checked: "
                                                    << e.err;
  EXPECT_EQ(names(d.path), (std::vector<std::string>{"plain", "small-ub.json"}));
}

// The outputs' sizes for the small run, measured on a normal disk.
std::map<std::string, std::uintmax_t> output_sizes(const fs::path& dir,
                                                   const std::vector<std::string>& outputs) {
  const Ended e = run(small_run(outputs));
  EXPECT_EQ(e.status, 0) << e.err;
  std::map<std::string, std::uintmax_t> sizes;
  for (const auto& [f, text] : files(dir)) sizes[f] = text.size();
  return sizes;
}

constexpr std::uint64_t kPage = 4096;
std::uint64_t pages(std::uint64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

TEST(Outputs, Row12_Row23_ASetOfOutputsOnAFullDiskIsAllOrNothing) {
  if (!is_root()) GTEST_SKIP() << "a full disk is a small tmpfs, and mounting one needs root";
  Scratch d("row12-full");
  fs::create_directories(d.path / "measure");
  const auto sizes = output_sizes(
      d.path / "measure", {"--json", d / "measure/r.json", "--scalesim-csv", d / "measure/csv"});
  ASSERT_EQ(sizes.size(), 4u);
  // Room for an old report and the new JSON, not for the CSVs as well.
  const std::string old = "{\"an\": \"old report\"}\n";
  TmpFs disk(d.path / "disk", kPage + pages(sizes.at("r.json")));
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << disk.why();
  write_file(d / "disk/r.json", old);
  const Ended e = run(small_run({"--json", d / "disk/r.json", "--scalesim-csv", d / "disk/csv"}));
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find("no space left on the device"), std::string::npos) << e.err;
  EXPECT_EQ(e.out, "");
  // Nothing of the new set: the old report as it was, no CSV directory, no temporary.
  EXPECT_EQ(names(d.path / "disk"), std::vector<std::string>{"r.json"});
  EXPECT_EQ(read_file(d / "disk/r.json"), old);
  // With room for all of it, the same command writes all of it.
  ASSERT_TRUE(disk.resize(16 * kPage + pages(sizes.at("r.json"))));
  const Ended ok = run(small_run({"--json", d / "disk/r.json", "--scalesim-csv", d / "disk/csv"}));
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(files(d.path / "disk").size(), 4u);
}

// A Fashion-MNIST-shaped data set of `train` and `test` random images, written as the gzip'd IDX
// files `--data-dir` reads.
void tiny_dataset(const fs::path& dir, std::uint32_t train, std::uint32_t test) {
  using bad_input::be32;
  using bad_input::gzip;
  fs::create_directories(dir);
  std::mt19937 g(7);
  for (const auto& [name, n] : {std::pair{"train", train}, std::pair{"t10k", test}}) {
    std::string pixels(std::size_t{n} * 28 * 28, '\0'), labels(n, '\0');
    for (char& c : pixels) c = static_cast<char>(g() & 0xff);
    for (char& c : labels) c = static_cast<char>(g() % 10);
    write_file(dir / (std::string(name) + "-images-idx3-ubyte.gz"),
               gzip(be32({0x803, n, 28, 28}) + pixels));
    write_file(dir / (std::string(name) + "-labels-idx1-ubyte.gz"),
               gzip(be32({0x801, n}) + labels));
  }
}

TEST(Outputs, Row13_TrainOnAFullDiskKeepsTheOldWeightsAndTheirMetadata) {
  if (!is_root()) GTEST_SKIP() << "a full disk is a small tmpfs, and mounting one needs root";
  Scratch d("row13");
  tiny_dataset(d.path / "data", 64, 16);
  const std::vector<std::string> train = {"train", "--data-dir", d / "data", "--epochs",
                                          "1",     "--batch",    "16"};
  auto train_into = [&](const std::string& out) {
    std::vector<std::string> a = train;
    a.insert(a.end(), {"--save", out});
    return run(a);
  };
  fs::create_directories(d.path / "measure");
  ASSERT_EQ(train_into(d / "measure/w.bin").status, 0);
  const std::uintmax_t weights = fs::file_size(d.path / "measure/w.bin");
  // Room for the old pair and the new metadata, not for new weights as well.
  TmpFs disk(d.path / "disk", pages(weights) + 4 * kPage);
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << disk.why();
  write_file(d / "disk/w.bin", read_file(d / "measure/w.bin"));
  write_file(d / "disk/w.json", read_file(d / "measure/w.json"));
  const auto before = files(d.path / "disk");
  const Ended e = train_into(d / "disk/w.bin");
  EXPECT_EQ(e.status, 2) << e.err;
  EXPECT_NE(e.err.find("no space left on the device"), std::string::npos) << e.err;
  EXPECT_EQ(files(d.path / "disk"), before) << "the old weights or their metadata changed";
}

}  // namespace
}  // namespace tpu::test::faults
