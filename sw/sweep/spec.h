// A sweep spec (docs/sweeps.md): a base chip or system config, axes that each set one or more JSON
// pointers of it, combined as a product or a zip, and the workloads to run on every design point.
// Loading it expands and validates every design point, so a bad spec stops before anything runs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tpu::sweep {

struct Axis {
  std::string name;
  std::vector<std::string> pointers;  // the first is the axis; the others are tied to it
  std::vector<nlohmann::json> values;
};

struct Workload {
  std::string name;
  // "run" (inference, on a chip sweep's chips or a system sweep's systems) or "fit" (a system
  // sweep's training steps).
  std::string command = "run";
  // Arguments of the command that select the workload, paths absolute. For run on a chip:
  // --model or --topology, --weights or --random-weights, --seed, --images, --batch,
  // --data-dir, --no-check. On a system (and for fit), all but --images and --batch, which are
  // images_per_chip and batch_per_chip x the point's chips.
  std::vector<std::string> run_args;
  std::uint64_t batch_per_chip = 0;   // system sweeps only
  std::uint64_t images_per_chip = 0;  // run on a system sweep only
};

struct Point {
  std::string id;                      // zero-padded index in expansion order: its directory
  std::vector<nlohmann::json> values;  // one per axis
  // The resolved config of this point: a chip config, or for a system sweep a system config
  // whose /chip is an absolute path.
  nlohmann::json chip;
  std::uint32_t chips = 1;  // the system's chips (1 for a chip sweep)
};

struct Spec {
  std::string file;  // where it was loaded from
  std::string name;
  std::string description;
  std::string base;     // the base chip or system config, absolute
  bool system = false;  // the base is a system config (it names a "chip"): fit workloads
  bool zip = false;     // axes combined element by element instead of as a product
  bool check = false;
  std::vector<Axis> axes;
  std::vector<Workload> workloads;
  std::vector<Point> points;
};

// Throws InputError naming the spec file and the offending key; ConfigError (an InputError) for
// a design point the chip or system config validation rejects, naming the axis, the value and
// the validation's message.
Spec load_spec(const std::string& path);

// The point's config file name in its directory: "chip.json" or "system.json".
std::string config_file(const Spec& spec);

// "rows=64, clock_mhz=700": a point's axis values, for names and messages.
std::string describe_point(const Spec& spec, const Point& point);

// The expanded sweep as written to its output directory (sweep.json): everything a task needs,
// so Slurm tasks and resumed runs do not depend on the spec file still being the same.
nlohmann::ordered_json to_json(const Spec& spec);
// A workload as sweep.json and results.json record it.
nlohmann::ordered_json workload_json(const Workload& w);
Spec from_json(const nlohmann::json& doc, const std::string& origin);

}  // namespace tpu::sweep
