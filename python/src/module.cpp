// _tpusim: the part of the Python package (docs/python.md) that runs in the Python process —
// loading and checking configs and models, the graph after each compiler pass, the compiled
// program. Nothing here elaborates SystemC (the kernel cannot be reset, and a simulation owns its
// process): runs go through the tpusim binary (python/tpusim/__init__.py).
//
// Every function returns the JSON the matching CLI command writes, as text that the package
// parses: one definition of each report, in the C++ that the CLI calls too.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <optional>
#include <string>
#include <systemc>

#include "hw/common/error.h"
#include "hw/common/input_file.h"
#include "hw/config/chip_config.h"
#include "hw/config/system_config.h"
#include "sw/cli/info.h"
#include "sw/sim/graph_report.h"
#include "sw/sim/program_report.h"
#include "sw/sim/session.h"

namespace py = pybind11;

namespace {

// The workload options that do not simulate, as `tpusim run` takes them (sw/cli/run_cmd.h).
tpu::sim::RunOptions workload(const std::string& model, const std::string& topology,
                              const std::optional<std::string>& weights, bool random_weights,
                              std::uint64_t seed, const std::string& data_dir) {
  if (weights && random_weights)
    throw tpu::InputError("weights and random_weights exclude each other");
  tpu::sim::RunOptions o;
  o.model = model;
  o.topology = topology;
  o.weights = weights;
  o.random_weights = random_weights;
  o.seed = seed;
  o.data_dir = data_dir;
  return o;
}

std::string chip_json(const std::string& path) {
  return tpu::to_json(tpu::load_chip_config(path)).dump();
}

std::string system_json(const std::string& path) {
  return tpu::to_json(tpu::load_system_config(path)).dump();
}

std::string describe_chip(const std::string& path) {
  return tpu::cli::describe(tpu::load_chip_config(path));
}

std::string describe_system(const std::string& path) {
  return tpu::cli::describe(tpu::load_system_config(path));
}

std::string graph_json(const std::string& model, const std::string& chip, const std::string& pass,
                       const std::string& topology, const std::optional<std::string>& weights,
                       bool random_weights, std::uint64_t seed, const std::string& data_dir) {
  const auto opt = workload(model, topology, weights, random_weights, seed, data_dir);
  std::optional<tpu::ChipConfig> cfg;
  if (!chip.empty()) cfg = tpu::load_chip_config(chip);
  return tpu::sim::graph_report(opt, cfg ? &*cfg : nullptr, pass).dump();
}

std::string program_json(const std::string& model, const std::string& chip,
                         const std::string& system, std::uint64_t images, std::uint32_t batch,
                         const std::string& topology, const std::optional<std::string>& weights,
                         bool random_weights, std::uint64_t seed, const std::string& data_dir) {
  if (chip.empty() == system.empty())
    throw tpu::InputError("compile needs a chip or a system (one of them)");
  auto opt = workload(model, topology, weights, random_weights, seed, data_dir);
  opt.images = images;
  opt.batch = batch;
  const tpu::SystemConfig sys = system.empty() ? tpu::system_of_chip(tpu::load_chip_config(chip))
                                               : tpu::load_system_config(system);
  return tpu::sim::program_report(sys, opt).dump();
}

}  // namespace

// libsystemc's own main() calls sc_main, so the library refers to it, and python3 loads
// extensions with RTLD_NOW: the reference must resolve (as tb/common/test_main.cpp's). Never
// called: nothing in the Python process elaborates SystemC.
extern "C" __attribute__((visibility("default"))) int sc_main(int, char*[]) { return 1; }

PYBIND11_MODULE(_tpusim, m) {
  m.doc() = "tpusim's in-process functions (docs/python.md); use the tpusim package";
  // tpusim's bad-input errors (InputError, and ConfigError and ProgramError below it) are the
  // CLI's one-line messages, status 2; in Python a ValueError subclass with the same message.
  // Never destroyed: a static Python object would be released after the interpreter is gone.
  static auto* error = new py::exception<tpu::InputError>(m, "Error", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tpu::InputError& e) {
      (*error)(e.what());
    } catch (const sc_core::sc_report& e) {
      (*error)(e.get_msg());
    } catch (const std::filesystem::filesystem_error& e) {
      // As the CLI's net under every path it opens (sw/cli/main.cpp).
      (*error)((e.path1().string() + ": " + tpu::path_error_reason(e.code().value())).c_str());
    }
  });

  m.def("chip_json", &chip_json, py::arg("path"),
        "The resolved chip config as `tpusim info --chip PATH --json` writes it");
  m.def("system_json", &system_json, py::arg("path"),
        "The resolved system config as `tpusim info --system PATH --json` writes it");
  m.def("describe_chip", &describe_chip, py::arg("path"), "`tpusim info --chip PATH`'s text");
  m.def("describe_system", &describe_system, py::arg("path"), "`tpusim info --system PATH`'s text");
  m.def("graph_json", &graph_json, py::arg("model"), py::arg("chip"), py::arg("pass_name"),
        py::arg("topology"), py::arg("weights"), py::arg("random_weights"), py::arg("seed"),
        py::arg("data_dir"), "The tpusim.graph/1 report `tpusim graph --json` writes");
  m.def("program_json", &program_json, py::arg("model"), py::arg("chip"), py::arg("system"),
        py::arg("images"), py::arg("batch"), py::arg("topology"), py::arg("weights"),
        py::arg("random_weights"), py::arg("seed"), py::arg("data_dir"),
        "The tpusim.program/1 report: the compiled program, per core its assembly text");
}
