// Host time of the tutorial's fit (docs/training.md, "Host time"): `tpusim fit` on v3 with the
// bit-exact check after every step, run N times, each in a process of its own (SystemC allows
// one simulation per process). Prints each run's host wall time (the report's
// host.wall_seconds), user and system CPU time and peak resident memory (wait4's rusage of the
// child), then the medians and the simulated time per step.
//
//   build/tb/bench/fit_bench                 the full schedule (5 epochs x 60 steps), 3 runs
//   build/tb/bench/fit_bench --quick         1 epoch of 3 steps (and the validation), 3 runs
//   build/tb/bench/fit_bench --runs 5 --epochs 2 --steps-per-epoch 10 --no-check
//   build/tb/bench/fit_bench --quick --tpusim /tmp/tpusim.before     another build
//   build/tb/bench/fit_bench --quick --tpusim /tmp/tpusim.before --tpusim build/tpusim
//
// With several --tpusim the builds take turns (run 1 of each, then run 2 of each, ...), so that
// the load of a shared machine falls on all of them alike; each build's medians are printed, and
// their ratios to the first build's.
//
// The number of runs may also come from TPUSIM_FIT_BENCH_RUNS. Not a test: run it from a Release
// build on a quiet machine (the check's reference runs on a second core).
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct Run {
  double wall = 0, user = 0, sys = 0, max_rss_mb = 0, step_ms = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double seconds(const timeval& t) {
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
}

Run run_once(const std::vector<std::string>& args, const std::string& report) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // The epoch lines go to stderr; keep the bench's own output readable.
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) throw std::runtime_error(fmt::format("cannot start {}: error {}", args[0], err));
  int status = 0;
  rusage ru{};
  if (wait4(pid, &status, 0, &ru) != pid)
    throw std::runtime_error("wait4 on the tpusim fit process failed");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error(fmt::format("tpusim fit failed (status {:#x}): rerun `{}` to see why",
                                         status, fmt::join(args, " ")));
  std::ifstream in(report);
  const nlohmann::json j = nlohmann::json::parse(in);
  Run r;
  r.wall = j.at("host").at("wall_seconds").get<double>();
  r.user = seconds(ru.ru_utime);
  r.sys = seconds(ru.ru_stime);
  r.max_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux: kilobytes
  r.step_ms = j.at("step").at("seconds_median").get<double>() * 1e3;
  return r;
}

int bench(int argc, char** argv) {
  int runs = 3;
  if (const char* e = std::getenv("TPUSIM_FIT_BENCH_RUNS")) runs = std::atoi(e);
  std::string epochs = "5", steps = "60";
  bool check = true;
  std::vector<std::string> builds;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--runs") {
      runs = std::stoi(value());
    } else if (a == "--quick") {
      epochs = "1", steps = "3";
    } else if (a == "--epochs") {
      epochs = value();
    } else if (a == "--steps-per-epoch") {
      steps = value();
    } else if (a == "--tpusim") {
      builds.push_back(value());
    } else if (a == "--no-check") {
      check = false;
    } else {
      throw std::invalid_argument(
          fmt::format("unknown argument {} (--runs N, --quick, --epochs E, --steps-per-epoch S, "
                      "--no-check, --tpusim PATH)",
                      a));
    }
  }
  if (runs < 1) throw std::invalid_argument("--runs must be >= 1");
  if (builds.empty()) builds.emplace_back(TPUSIM_BINARY);
  const std::string report =
      fmt::format("{}/tpusim_fit_bench_{}.json",
                  std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp", getpid());
  std::vector<std::string> args = {
      "",
      "fit",
      "--chip",
      std::string(TPUSIM_SOURCE_DIR) + "/configs/chips/v3.json",
      "--model",
      std::string(TPUSIM_SOURCE_DIR) + "/configs/models/fashion_mnist_cnn.json",
      "--epochs",
      epochs,
      "--steps-per-epoch",
      steps,
      "--batch",
      "1000",
      "--json",
      report};
  if (!check) args.emplace_back("--no-check");
  fmt::print("{}\n", fmt::join(args.begin() + 1, args.end(), " "));
  struct Series {
    std::vector<double> wall, user, rss, step_ms;
  };
  std::vector<Series> series(builds.size());
  for (int k = 0; k < runs; ++k)
    for (std::size_t b = 0; b < builds.size(); ++b) {
      args[0] = builds[b];
      const Run r = run_once(args, report);
      fmt::print("run {}{}: wall {:.2f} s  user {:.2f} s  sys {:.2f} s  peak RSS {:.0f} MB\n",
                 k + 1, builds.size() > 1 ? fmt::format(" of {}", builds[b]) : "", r.wall, r.user,
                 r.sys, r.max_rss_mb);
      std::fflush(stdout);
      Series& s = series[b];
      s.wall.push_back(r.wall), s.user.push_back(r.user), s.rss.push_back(r.max_rss_mb);
      s.step_ms.push_back(r.step_ms);
    }
  std::remove(report.c_str());
  for (std::size_t b = 0; b < builds.size(); ++b) {
    const Series& s = series[b];
    fmt::print(
        "median of {}{}: wall {:.2f} s  user {:.2f} s  peak RSS {:.0f} MB  simulated {:.3f} "
        "ms/step\n",
        runs, builds.size() > 1 ? fmt::format(" of {}", builds[b]) : "", median(s.wall),
        median(s.user), median(s.rss), median(s.step_ms));
    if (b > 0)
      fmt::print("  against {}: wall x{:.2f}  user x{:.2f}  peak RSS x{:.2f}\n", builds[0],
                 median(s.wall) / median(series[0].wall), median(s.user) / median(series[0].user),
                 median(s.rss) / median(series[0].rss));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return bench(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "fit_bench: {}\n", e.what());
    return 1;
  }
}
