#include "sw/sim/graph_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "hw/common/error.h"
#include "sw/compiler/compiler.h"
#include "sw/compiler/lifetimes.h"
#include "sw/compiler/rewrite.h"
#include "sw/compiler/tiling.h"
#include "sw/import/import.h"
#include "sw/ir/ops.h"
#include "sw/nn/quantized.h"
#include "sw/sim/workload.h"

namespace tpu::sim {
namespace {

using nlohmann::ordered_json;

std::string tensor_name(const ir::Graph& g, std::size_t t) {
  return t == ir::kGraphInput ? "input" : g.ops[t].name;
}

// An operation's arguments that differ from an operation's defaults, so every kind shows what it
// has without a case per kind.
ordered_json arguments(const ir::Op& op) {
  static const ir::Op defaults;
  ordered_json a = ordered_json::object();
  if (op.filters) a["filters"] = op.filters;
  if (op.kernel_h != defaults.kernel_h || op.kernel_w != defaults.kernel_w)
    a["kernel"] = {op.kernel_h, op.kernel_w};
  if (op.stride_h != defaults.stride_h || op.stride_w != defaults.stride_w)
    a["strides"] = {op.stride_h, op.stride_w};
  if (op.dilation_h != 1 || op.dilation_w != 1) a["dilation"] = {op.dilation_h, op.dilation_w};
  if (op.depth_multiplier != 1) a["depth_multiplier"] = op.depth_multiplier;
  if (op.padding == ir::Padding::Same) a["padding"] = "same";
  const bool pads = op.pad_top || op.pad_bottom || op.pad_left || op.pad_right;
  if (op.padding == ir::Padding::Explicit || (pads && op.kind == ir::OpKind::ZeroPadding2D))
    a["pads"] = {op.pad_top, op.pad_bottom, op.pad_left, op.pad_right};
  if (op.activation != ir::Act::Linear) a["activation"] = ir::name_of(op.activation);
  if (op.activation == ir::Act::LeakyRelu || op.activation == ir::Act::Elu) a["alpha"] = op.alpha;
  if (op.input_dim) a["input_dim"] = op.input_dim;
  if (op.return_sequences) a["return_sequences"] = true;
  if (!op.target_shape.empty()) a["target_shape"] = op.target_shape;
  return a;
}

ordered_json operations(const ir::Graph& g) {
  ordered_json ops = ordered_json::array();
  for (const ir::Op& op : g.ops) {
    ordered_json o;
    o["name"] = op.name;
    o["kind"] = ir::name_of(op.kind);
    o["inputs"] = ordered_json::array();
    for (std::size_t p : op.inputs) o["inputs"].push_back(tensor_name(g, p));
    o["shape"] = {op.out.h, op.out.w, op.out.c};
    o.update(arguments(op));
    ops.push_back(std::move(o));
  }
  return ops;
}

}  // namespace

ordered_json graph_report(const RunOptions& opt, const ChipConfig* cfg,
                          const std::string& only_pass) {
  ordered_json passes = ordered_json::array();
  auto record = [&](std::string_view name, ordered_json ops) {
    passes.push_back({{"pass", name}, {"operations", std::move(ops)}});
  };
  const std::string& file = opt.topology.empty() ? opt.model : opt.topology;
  importers::Imported imported =
      opt.topology.empty() ? importers::import_model(opt.model)
                           : importers::Imported{importers::load_topology(opt.topology), {}};
  record("import", operations(imported.graph));
  const ir::Graph model = compiler::remove_identities(std::move(imported.graph));
  record("remove-identities", operations(model));
  std::string weights_source;
  const nn::Weights weights = load_weights(model, opt, weights_source, imported.parameters);
  // A rewritten graph's operations, each with the operation of `model` it reports as and the one
  // whose value it stands for, where those are not itself.
  auto rewritten = [&](const ir::Graph& g) {
    ordered_json ops = operations(g);
    for (std::size_t i = 0; i < g.ops.size(); ++i) {
      const ir::Op& op = g.ops[i];
      if (model.ops[op.origin].name != op.name) ops[i]["origin"] = model.ops[op.origin].name;
      if (op.value_of != op.origin)
        ops[i]["value_of"] =
            op.value_of < model.ops.size() ? model.ops[op.value_of].name : "(its own)";
    }
    return ops;
  };
  const DType mxu_type = cfg ? cfg->mxu.input_type : DType::Bf16;
  compiler::rewrite(
      model, weights, mxu_type,
      [&](std::string_view pass, const compiler::Module& m) { record(pass, rewritten(m.graph)); });
  ordered_json report;
  report["schema"] = "tpusim.graph/1";
  report["model"] = {{"name", model.name},
                     {"file", file},
                     {"weights", weights_source},
                     {"macs_per_image", model.macs_per_image()}};
  if (cfg) {
    report["chip"] = {{"name", cfg->name}, {"file", cfg->file}};
    // Only the calibration images matter here: one image to run, not a whole test set.
    RunOptions one = opt;
    one.images = 1;
    const Inputs in = load_inputs(model, one);
    const nn::QuantizedModel q =
        compiler::prepare(model, weights, cfg->mxu.input_type, cfg->mxu.rows, in.calibration.data(),
                          in.calibration.size() / model.input.size());
    ordered_json ops = rewritten(q.graph);
    for (std::size_t i = 0; i < q.graph.ops.size(); ++i) {
      const nn::QuantizedLayer& ql = q.layers[i];
      ops[i]["type"] = name_of(ql.out_type);
      if (ql.out_type == DType::Int8) ops[i]["scale"] = ql.out_scale;
      if (!q.computes(i)) ops[i]["view_of"] = tensor_name(q.graph, q.tensor[i]);
    }
    record("quantize", ops);
    const compiler::Partition part =
        compiler::partition(*cfg, compiler::Options{opt.batch, opt.batch});
    report["partition"] = {{"cores", cfg->tensor_cores},
                           {"images_per_core_per_batch", part.per_core},
                           {"accumulator_entries_per_slot", part.acc_slot}};
    const compiler::Tiling tiling = compiler::tile(q, *cfg);
    for (std::size_t i = 0; i < q.graph.ops.size(); ++i) {
      const compiler::WeightedPlan& p = tiling.plans[i];
      if (p.tile_off.empty()) continue;
      ops[i]["tiles"] = {p.k_tiles, p.n_tiles};
      ops[i]["tiles_stored"] = std::count_if(p.tile_off.begin(), p.tile_off.end(),
                                             [](auto off) { return off != compiler::kNoTile; });
    }
    record("tiling", ops);
    const compiler::Lifetimes life = compiler::lifetimes(q);
    for (std::size_t i = 0; i < q.graph.ops.size(); ++i)
      if (q.computes(i))
        ops[i]["last_reader"] = life.last_read[i] == ir::kNoOp
                                    ? std::string("(the output)")
                                    : q.graph.ops[life.last_read[i]].name;
    record("lifetimes", ops);
  }
  if (!only_pass.empty()) {
    std::string names;
    for (const auto& p : passes)
      names += (names.empty() ? "" : ", ") + p["pass"].get<std::string>();
    const auto it = std::find_if(passes.begin(), passes.end(),
                                 [&](const ordered_json& p) { return p["pass"] == only_pass; });
    if (it == passes.end())
      throw InputError(fmt::format("--pass {}: no such pass{} (passes: {})", only_pass,
                                   cfg ? "" : " without --chip", names));
    passes = ordered_json::array({*it});
  }
  report["passes"] = std::move(passes);
  return report;
}

std::string graph_text(const ordered_json& report) {
  std::string s = fmt::format("model {} ({}), {} MACs per image; weights: {}\n",
                              report["model"]["name"].get<std::string>(),
                              report["model"]["file"].get<std::string>(),
                              report["model"]["macs_per_image"].get<std::uint64_t>(),
                              report["model"]["weights"].get<std::string>());
  if (report.contains("chip"))
    s += fmt::format("chip {} ({}); {} images per core per batch\n",
                     report["chip"]["name"].get<std::string>(),
                     report["chip"]["file"].get<std::string>(),
                     report["partition"]["images_per_core_per_batch"].get<std::uint64_t>());
  for (const auto& pass : report["passes"]) {
    const auto& ops = pass["operations"];
    s += fmt::format("\n== after {}: {} operations\n", pass["pass"].get<std::string>(), ops.size());
    std::size_t width = 4;
    for (const auto& o : ops) width = std::max(width, o["name"].get<std::string>().size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const auto& o = ops[i];
      std::string inputs, rest;
      for (const auto& in : o["inputs"])
        inputs += (inputs.empty() ? "" : ",") + in.get<std::string>();
      for (auto it = o.begin(); it != o.end(); ++it) {
        if (it.key() == "name" || it.key() == "kind" || it.key() == "inputs" || it.key() == "shape")
          continue;
        rest +=
            fmt::format(" {}={}", it.key(), it->is_string() ? it->get<std::string>() : it->dump());
      }
      const auto& sh = o["shape"];
      s += fmt::format("{:>4}  {:<{}}  {:<22} {:>14}  <- {}{}\n", i, o["name"].get<std::string>(),
                       width, o["kind"].get<std::string>(),
                       fmt::format("{}x{}x{}", sh[0].get<std::uint32_t>(),
                                   sh[1].get<std::uint32_t>(), sh[2].get<std::uint32_t>()),
                       inputs, rest);
    }
  }
  return s;
}

}  // namespace tpu::sim
