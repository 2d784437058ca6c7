// The one rule every row of the bad-input table checks (bad_input.h), and the harness that runs
// an entry point in a child process with a time limit.
#include "bad_input.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace tpu::test::bad_input {

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name; }

void PrintTo(const Case& c, std::ostream* os) { *os << c.entry->name << ": " << c.name; }

std::string source_path(const std::string& relative) {
  return std::string(TPUSIM_SOURCE_DIR) + "/" + relative;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

Generator file(const std::string& name, std::string bytes) {
  return [name, bytes = std::move(bytes)](const fs::path& dir) {
    return write_bytes(dir / name, bytes);
  };
}

std::string garbage(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string nested_arrays(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::string with_raw(nlohmann::json doc, const std::string& pointer, const std::string& raw) {
  // A marker string that cannot occur in a config, replaced after serialisation.
  const std::string marker = "@@raw-value@@";
  doc[nlohmann::json::json_pointer(pointer)] = marker;
  std::string text = doc.dump(2);
  const std::string quoted = "\"" + marker + "\"";
  text.replace(text.find(quoted), quoted.size(), raw);
  return text;
}

std::string with_value(nlohmann::json doc, const std::string& pointer, const nlohmann::json& v) {
  doc[nlohmann::json::json_pointer(pointer)] = v;
  return doc.dump(2);
}

std::string without(nlohmann::json doc, const std::string& pointer) {
  const nlohmann::json::json_pointer p(pointer);
  doc[p.parent_pointer()].erase(p.back());
  return doc.dump(2);
}

std::string gzip(const std::string& bytes) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's (zlib.h, deflateInit2).
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

std::string be32(std::initializer_list<std::uint32_t> words) {
  std::string s;
  for (std::uint32_t w : words)
    for (int i = 3; i >= 0; --i) s += static_cast<char>((w >> (8 * i)) & 0xff);
  return s;
}

std::string le32(std::initializer_list<std::uint32_t> words) {
  std::string s;
  for (std::uint32_t w : words)
    for (int i = 0; i < 4; ++i) s += static_cast<char>((w >> (8 * i)) & 0xff);
  return s;
}

namespace {

// A scratch directory per child for its captured output, outside the case directory whose
// contents are checked.
struct Capture {
  fs::path dir;
  Capture() {
    std::string tmpl = (fs::path(::testing::TempDir()) / "bad_input_capture.XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
  }
  ~Capture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  [[nodiscard]] fs::path out() const { return dir / "stdout"; }
  [[nodiscard]] fs::path err() const { return dir / "stderr"; }
};

// In the child: stdout and stderr into the capture files.
void redirect(const Capture& c) {
  const int out = open(c.out().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err = open(c.err().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out < 0 || err < 0) _exit(125);
  dup2(out, STDOUT_FILENO);
  dup2(err, STDERR_FILENO);
  close(out);
  close(err);
}

Outcome wait_bounded(pid_t pid, const Capture& c, double limit_s) {
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  int st = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      o.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  o.exited = WIFEXITED(st);
  o.status = o.exited ? WEXITSTATUS(st) : -1;
  o.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  o.out = read_bytes(c.out());
  o.err = read_bytes(c.err());
  return o;
}

}  // namespace

bool running_as_root() { return geteuid() == 0; }

void make_accessible(const fs::path& dir) {
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ec);
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    std::error_code ignored;
    if (it->is_directory(ignored) && !it->is_symlink(ignored))
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ignored);
  }
}

Outcome run_process(const std::vector<std::string>& argv, double limit_s,
                    const ProcessOptions& options) {
  Capture c;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    redirect(c);
    for (const auto& [resource, bytes] : options.limits) {
      const rlimit rl{static_cast<rlim_t>(bytes), static_cast<rlim_t>(bytes)};
      if (setrlimit(resource, &rl) != 0) _exit(124);
    }
    if (options.unprivileged && geteuid() == 0) {
      constexpr uid_t kNobody = 65534;
      if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(124);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  return wait_bounded(pid, c, limit_s);
}

Outcome run_forked(const std::function<int()>& body, double limit_s) {
  Capture c;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    redirect(c);
    int status = 126;
    try {
      status = body();
    } catch (...) {
      // An exception the entry point let escape is a failure the parent reports.
      status = 126;
    }
    std::fflush(nullptr);
#if defined(__SANITIZE_ADDRESS__)
    // _exit skips LeakSanitizer's check at exit, so the child runs it here: a leak ends it on
    // SIGABRT (ASAN_OPTIONS=abort_on_error=1 in scripts/test.sh), which the parent reports.
    __lsan_do_leak_check();
#endif
    _exit(status);
  }
  return wait_bounded(pid, c, limit_s);
}

Outcome run_tpusim(const std::vector<std::string>& args, const ProcessOptions& options) {
  std::vector<std::string> argv = {std::string(TPUSIM_BINARY_DIR) + "/tpusim"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, kTimeLimitSeconds, options);
}

namespace {

std::set<fs::path> listing(const fs::path& dir) {
  std::set<fs::path> s;
  for (const auto& e :
       fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied))
    s.insert(e.path());
  return s;
}

// A fresh, empty directory per case (and per process: rows of different entry points share
// names, and ctest runs tests side by side).
fs::path case_dir(const std::string& name) {
  const fs::path d =
      fs::path(::testing::TempDir()) / ("bad_input_" + std::to_string(getpid()) + "_" + name);
  if (fs::exists(d)) make_accessible(d);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// One clear line: long enough for a path, a JSON pointer, the value and the allowed keys.
constexpr std::size_t kMaxMessageBytes = 2048;

std::string shown(const std::string& s) { return s.size() > 2000 ? s.substr(0, 2000) + "..." : s; }

}  // namespace

// The rule: exit status 2 (tpusim's status for a bad input; 3 is an internal error, a signal or
// the time limit a crash or a hang), nothing on stdout, exactly one line on stderr that names the
// input and says what is wrong, and no file left behind beside the inputs.
TEST_P(BadInput, EndsWithOneMessageNamingTheInputAndLeavesNoOutput) {
  const Case& c = GetParam();
  const fs::path dir = case_dir(c.name);
  Paths p;
  p.dir = dir;
  p.input = c.make(dir);
  p.out = dir / c.entry->out_name;
  const std::set<fs::path> before = listing(dir);

  const Outcome o = c.entry->run(p);

  ASSERT_FALSE(o.timed_out) << c.entry->name << ": no answer within " << kTimeLimitSeconds
                            << " s (a hang)\nstderr: " << shown(o.err);
  ASSERT_TRUE(o.exited) << c.entry->name << ": killed by signal " << o.signal
                        << " (a crash)\nstderr: " << shown(o.err);
  EXPECT_EQ(o.status, 2) << "stderr: " << shown(o.err);
  EXPECT_EQ(o.out, "") << "nothing may be printed as if the run had succeeded";
  ASSERT_FALSE(o.err.empty()) << "no message";
  EXPECT_EQ(o.err.back(), '\n') << shown(o.err);
  EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "more than one line:\n" << shown(o.err);
  EXPECT_LE(o.err.size(), kMaxMessageBytes) << "a message must not quote a hostile input whole";
  EXPECT_NE(o.err.find(p.input.string()), std::string::npos)
      << "the message must name " << p.input << ":\n"
      << shown(o.err);
  for (const std::string& e : c.expect)
    EXPECT_NE(o.err.find(e), std::string::npos) << "the message must say \"" << e << "\":\n"
                                                << shown(o.err);
  EXPECT_EQ(listing(dir), before) << "a file was left behind (" << c.entry->out_name << "?)";
  make_accessible(dir);
  fs::remove_all(dir);
}

}  // namespace tpu::test::bad_input
