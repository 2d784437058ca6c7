// A sweep spec (docs/sweeps.md): a base chip config, axes that each set one or more JSON pointers
// of it, combined as a product or a zip, and the workloads to run on every design point.
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
  // Arguments of `tpusim run` that select the workload (--model/--topology, --weights or
  // --random-weights, --seed, --images, --batch, --data-dir, --no-check), paths absolute.
  std::vector<std::string> run_args;
};

struct Point {
  std::string id;                      // zero-padded index in expansion order: its directory
  std::vector<nlohmann::json> values;  // one per axis
  nlohmann::json chip;                 // the resolved chip config of this point
};

struct Spec {
  std::string file;  // where it was loaded from
  std::string name;
  std::string description;
  std::string base;  // the base chip config, absolute
  bool zip = false;  // axes combined element by element instead of as a product
  bool check = false;
  std::vector<Axis> axes;
  std::vector<Workload> workloads;
  std::vector<Point> points;
};

// Throws InputError naming the spec file and the offending key; ConfigError (an InputError) for
// a design point the chip config validation rejects, naming the axis, the value and the
// validation's message.
Spec load_spec(const std::string& path);

// "rows=64, clock_mhz=700": a point's axis values, for names and messages.
std::string describe_point(const Spec& spec, const Point& point);

// The expanded sweep as written to its output directory (sweep.json): everything a task needs,
// so Slurm tasks and resumed runs do not depend on the spec file still being the same.
nlohmann::ordered_json to_json(const Spec& spec);
Spec from_json(const nlohmann::json& doc, const std::string& origin);

}  // namespace tpu::sweep
