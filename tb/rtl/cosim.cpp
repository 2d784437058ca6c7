#include "tb/rtl/cosim.h"

#include <fmt/format.h>
#include <tlm_utils/simple_target_socket.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <systemc>

#include "hw/common/clock.h"
#include "hw/common/error.h"
#include "hw/mxu/mxu_factory.h"
#include "hw/mxu/rtl_mxu.h"
#include "sw/compiler/compiler.h"
#include "sw/data/idx.h"
#include "sw/import/import.h"
#include "sw/ir/graph.h"
#include "sw/nn/quantized.h"
#include "sw/nn/weights.h"

namespace tpu::cosim {

namespace {

// One MXU with its own storage, fed the stimulus by a thread standing in for the sequencer.
// Tiles come from the unified buffer; the off-chip weight path is bound but never used.
class Bench : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<Bench> memory{"memory"};
  std::unique_ptr<Mxu> mxu;
  std::vector<std::shared_ptr<InFlight>> matmuls;

  Bench(sc_core::sc_module_name name, const ChipConfig& cfg, const Clock& clock, const Stimulus& s)
      : sc_core::sc_module(name),
        cfg_(cfg),
        clock_(clock),
        stimulus_(s),
        ub_(cfg.unified_buffer.bytes, 0),
        acc_(std::uint64_t{cfg.accumulators.entries} * cfg.mxu.cols, 0) {
    std::copy(s.ub.begin(), s.ub.end(), ub_.begin());
    CoreStorage storage;
    storage.ub = ub_.data();
    storage.ub_bytes = ub_.size();
    storage.acc = acc_.data();
    storage.acc_entries = cfg.accumulators.entries;
    storage.acc_words_per_entry = cfg.mxu.cols;
    mxu = make_mxu("mxu", cfg, clock, storage, counters_, std::string(basename()));
    mxu->mxu2mem_weights.bind(memory);
    memory.register_b_transport(this, &Bench::b_transport);
    SC_HAS_PROCESS(Bench);
    SC_THREAD(drive);
  }

  Outcome outcome(Cycle end) {
    mxu->finish(end);
    Outcome o;
    for (const auto& f : matmuls) o.matmuls.push_back({f->started_at, f->busy_until, f->done_at});
    o.acc = acc_;
    o.buckets = mxu->buckets();
    o.counters = counters_.total();
    return o;
  }

 private:
  void drive() {
    std::uint64_t index = 0;
    for (const Step& st : stimulus_.steps) {
      clock_.wait_until(st.at);
      auto f = std::make_shared<InFlight>();
      f->index = index++;
      f->inst = st.inst;
      f->window = st.window;
      f->issued_at = clock_.now();
      if (std::holds_alternative<isa::MatMul>(st.inst)) {
        matmuls.push_back(f);
        mxu->matmul_queue.write(f);
      } else {
        mxu->weight_queue.write(f);
      }
    }
  }

  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time&) {
    gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
  }

  const ChipConfig& cfg_;
  const Clock& clock_;
  const Stimulus& stimulus_;
  std::vector<std::uint8_t> ub_;
  std::vector<std::uint32_t> acc_;
  LayerCounters counters_;
};

ChipConfig with_impl(ChipConfig cfg, MxuImpl impl) {
  cfg.mxu.impl = impl;
  return cfg;
}

// Stimulus builders share these: a tile stored in the unified buffer and loaded from there.
struct Builder {
  const ChipConfig& cfg;
  Stimulus s;
  Cycle at = 0;
  std::uint32_t next_free = 0;  // first unused unified-buffer byte

  std::uint32_t put(const std::vector<std::uint8_t>& bytes) {
    if (bytes.size() > cfg.unified_buffer.bytes - next_free)
      throw InputError(fmt::format("{}: stimulus {} needs more than the {}-byte unified buffer",
                                   cfg.file, s.name, cfg.unified_buffer.bytes));
    const std::uint32_t addr = next_free;
    if (s.ub.size() < addr + bytes.size()) s.ub.resize(addr + bytes.size());
    std::copy(bytes.begin(), bytes.end(), s.ub.begin() + static_cast<std::ptrdiff_t>(addr));
    next_free = addr + static_cast<std::uint32_t>(bytes.size());
    return addr;
  }
  void read_weights(std::uint32_t addr, std::uint32_t rows, std::uint32_t cols) {
    s.steps.push_back(
        {isa::ReadWeights{0, isa::WeightSource::UnifiedBuffer, addr,
                          static_cast<std::uint16_t>(rows), static_cast<std::uint16_t>(cols)},
         at,
         {}});
  }
  void matmul(const isa::MatMul& m, const isa::SetWindow& window = {}) {
    s.steps.push_back({m, at, window});
  }
};

std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// The trained, int8-quantized CNN for an array of cfg.mxu.rows rows (as `tpusim run` quantizes
// it), calibrated on the first test images, and those images encoded for the chip.
struct FashionMnist {
  ir::Graph model;
  nn::QuantizedModel q;
  std::vector<std::uint8_t> images;  // encoded, NHWC int8
  std::size_t layer(ir::OpKind kind) const {
    for (std::size_t i = 0; i < q.graph.ops.size(); ++i)
      if (q.graph.ops[i].kind == kind) return i;
    throw InputError("fashion_mnist_cnn has no such layer");
  }
};

FashionMnist load_fashion_mnist(const ChipConfig& cfg, std::uint32_t images) {
  const std::string root = TPUSIM_SOURCE_DIR;
  FashionMnist fm;
  fm.model = importers::load_model(root + "/configs/models/fashion_mnist_cnn.json");
  const nn::Weights w = nn::load_weights(root + "/configs/weights/fashion_mnist_cnn.bin", fm.model);
  const data::Dataset ds = data::load_fashion_mnist(data::kDefaultFashionMnistDir, "t10k");
  const std::size_t per = fm.model.input.size();
  std::vector<float> pixels(std::max<std::size_t>(images, nn::kCalibrationImages) * per);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = ds.images.pixels[i];
  fm.q = compiler::prepare(fm.model, w, cfg.mxu.input_type, cfg.mxu.rows, pixels.data(),
                           nn::kCalibrationImages);
  fm.images = nn::encode_input(fm.q, pixels.data(), images);
  return fm;
}

// The K x N block [k0, k0 + k) x [n0, n0 + n) of a row-major K x N int8 matrix, row-major.
std::vector<std::uint8_t> block(const std::vector<std::int8_t>& m, std::uint32_t cols_total,
                                std::uint32_t k0, std::uint32_t k, std::uint32_t n0,
                                std::uint32_t n) {
  std::vector<std::uint8_t> b(std::size_t{k} * n);
  for (std::uint32_t r = 0; r < k; ++r)
    for (std::uint32_t c = 0; c < n; ++c)
      b[std::size_t{r} * n + c] =
          static_cast<std::uint8_t>(m[std::size_t{k0 + r} * cols_total + n0 + c]);
  return b;
}

}  // namespace

Result run(const ChipConfig& cfg, const Stimulus& s, const std::string& vcd) {
  const ChipConfig tlm_cfg = with_impl(cfg, MxuImpl::Tlm);
  const ChipConfig rtl_cfg = with_impl(cfg, MxuImpl::Rtl);
  const Clock clock(cfg.clock_hz());
  Bench tlm("tlm", tlm_cfg, clock, s);
  Bench rtl("rtl", rtl_cfg, clock, s);
  if (!vcd.empty()) dynamic_cast<RtlMxu&>(*rtl.mxu).array().trace_vcd(vcd);
  sc_core::sc_start();
  Result r;
  for (const Bench* b : {&tlm, &rtl})
    for (const auto& f : b->matmuls) r.end = std::max(r.end, f->done_at);
  r.tlm = tlm.outcome(r.end);
  r.rtl = rtl.outcome(r.end);
  return r;
}

std::string first_difference(const ChipConfig& cfg, const Stimulus& s, const Result& r) {
  const Outcome& a = r.tlm;
  const Outcome& b = r.rtl;
  // 1. Timing, MatMul by MatMul in issue order: the first one that differs is the one to read.
  if (a.matmuls.size() != b.matmuls.size())
    return fmt::format("{} MatMuls completed in the TLM, {} in the RTL", a.matmuls.size(),
                       b.matmuls.size());
  std::size_t m = 0;
  for (std::size_t i = 0; i < s.steps.size(); ++i) {
    const auto* mm = std::get_if<isa::MatMul>(&s.steps[i].inst);
    if (!mm) continue;
    const Outcome::MatMulTiming& x = a.matmuls[m];
    const Outcome::MatMulTiming& y = b.matmuls[m];
    const std::string what =
        fmt::format("MatMul #{} (step {}, B = {}{}{})", m, i, mm->rows,
                    mm->swap_weights ? ", swap" : "", mm->window ? ", windowed" : "");
    const std::pair<const char*, std::pair<Cycle, Cycle>> checks[] = {
        {"feed starts", {x.feed_start, y.feed_start}},
        {"feed ends", {x.feed_end, y.feed_end}},
        {"results are in the accumulators", {x.done, y.done}}};
    for (const auto& [name, c] : checks)
      if (c.first != c.second)
        return fmt::format("{}: {} at cycle {} in the TLM, {} in the RTL", what, name, c.first,
                           c.second);
    ++m;
  }
  // 2. Results, element by element.
  for (std::size_t i = 0; i < a.acc.size(); ++i)
    if (a.acc[i] != b.acc[i])
      return fmt::format(
          "accumulator entry {} column {}: {} in the TLM, {} in the RTL (all MatMuls done by "
          "cycle {})",
          i / cfg.mxu.cols, i % cfg.mxu.cols, static_cast<std::int32_t>(a.acc[i]),
          static_cast<std::int32_t>(b.acc[i]), r.end);
  // 3. The cycle buckets and the counters the MXU keeps.
  const std::pair<const char*, std::pair<std::uint64_t, std::uint64_t>> totals[] = {
      {"mxu cycles active", {a.buckets.active, b.buckets.active}},
      {"mxu cycles weight_stall", {a.buckets.weight_stall, b.buckets.weight_stall}},
      {"mxu cycles weight_shift", {a.buckets.weight_shift, b.buckets.weight_shift}},
      {"mxu cycles data_hazard", {a.buckets.data_hazard, b.buckets.data_hazard}},
      {"mxu cycles input_stall", {a.buckets.input_stall, b.buckets.input_stall}},
      {"mxu cycles idle", {a.buckets.idle, b.buckets.idle}},
      {"macs", {a.counters.macs, b.counters.macs}},
      {"weight_tiles", {a.counters.weight_tiles, b.counters.weight_tiles}},
      {"weight_bytes", {a.counters.weight_bytes, b.counters.weight_bytes}},
      {"mxu_input_bytes", {a.counters.mxu_input_bytes, b.counters.mxu_input_bytes}},
      {"ub_bytes_read", {a.counters.ub_bytes_read, b.counters.ub_bytes_read}},
      {"acc_bytes_read", {a.counters.acc_bytes_read, b.counters.acc_bytes_read}},
      {"acc_bytes_written", {a.counters.acc_bytes_written, b.counters.acc_bytes_written}}};
  for (const auto& [name, v] : totals)
    if (v.first != v.second)
      return fmt::format("{}: {} in the TLM, {} in the RTL (run ends at cycle {})", name, v.first,
                         v.second, r.end);
  return "";
}

Stimulus random_mix(const ChipConfig& cfg, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::uint32_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  auto pick = [&](std::uint32_t lo, std::uint32_t hi) {
    return static_cast<std::uint32_t>(lo + rng() % (hi - lo + 1));
  };
  Builder bld{cfg, {}, 0, 0};
  bld.s.name = fmt::format("random mix (seed {})", seed);
  // B around every size that matters to the array: one row, the array's dimensions, its fill
  // and drain, and several times it.
  const std::vector<std::uint32_t> batches = {
      1, 2, R - 1 + (R == 1), R, R + 1, C, R + C - 1, R + C, 2 * R + 3, 3 * (R + C)};
  const std::uint32_t acc_rows = std::min<std::uint32_t>(cfg.accumulators.entries, 4 * (R + C));
  for (std::uint32_t t = 0; t < 12; ++t) {
    const bool full = rng() % 3 == 0;
    const std::uint32_t k = full ? R : pick(1, R);
    const std::uint32_t n = full ? C : pick(1, C);
    bld.read_weights(bld.put(random_bytes(rng, std::size_t{k} * n)), k, n);
    const std::uint32_t uses = pick(1, 3);
    for (std::uint32_t u = 0; u < uses; ++u) {
      // Issued about as fast as the array consumes them, now and then late enough for the array
      // to drain and idle.
      const std::uint32_t b = std::min(batches[rng() % batches.size()], acc_rows);
      bld.at += b / 2 + (rng() % 4 == 0 ? pick(1, 3 * (R + C)) : 0);
      const std::uint32_t stride = k + pick(0, 3);
      isa::MatMul m;
      m.swap_weights = u == 0;
      m.accumulate = rng() % 2 == 0;
      m.rows = b;
      m.src_stride = stride;
      m.src = UbAddr(bld.put(random_bytes(rng, std::size_t{b} * stride)));
      m.dst = AccAddr(pick(0, acc_rows - b));
      bld.matmul(m);
    }
  }
  return bld.s;
}

Stimulus back_to_back(const ChipConfig& cfg, std::uint32_t b, std::uint32_t tiles) {
  std::mt19937_64 rng(b * 7919u + tiles);
  const std::uint32_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  Builder bld{cfg, {}, 0, 0};
  bld.s.name = fmt::format("{} full tiles back to back, B = {}", tiles, b);
  std::vector<std::uint32_t> tile_addr;
  for (std::uint32_t t = 0; t < tiles; ++t)
    tile_addr.push_back(bld.put(random_bytes(rng, std::size_t{R} * C)));
  const std::uint32_t x = bld.put(random_bytes(rng, std::size_t{b} * R));
  for (std::uint32_t t = 0; t < tiles; ++t) bld.read_weights(tile_addr[t], R, C);
  for (std::uint32_t t = 0; t < tiles; ++t) {
    isa::MatMul m;
    m.swap_weights = true;
    m.rows = b;
    m.src = UbAddr(x);
    m.src_stride = R;
    m.dst = AccAddr(t * b % (cfg.accumulators.entries - b + 1));
    bld.matmul(m);
  }
  return bld.s;
}

Stimulus fashion_mnist_conv(const ChipConfig& cfg, std::uint32_t images) {
  const FashionMnist fm = load_fashion_mnist(cfg, images);
  const ir::Op& conv = fm.q.graph.ops[fm.layer(ir::OpKind::Conv2D)];
  const nn::QuantizedLayer& ql = fm.q.layers[fm.layer(ir::OpKind::Conv2D)];
  const std::uint32_t K = conv.kernel_h * conv.kernel_w * conv.in.c, N = conv.filters;
  Builder bld{cfg, {}, 0, 0};
  bld.s.name = fmt::format("Fashion-MNIST {} ({}x{}x{} kernels) on {} test images", conv.name,
                           conv.kernel_h, conv.kernel_w, conv.in.c, images);
  const std::uint32_t image_addr = bld.put(fm.images);
  isa::SetWindow g;
  g.in_h = static_cast<std::uint16_t>(conv.in.h);
  g.in_w = static_cast<std::uint16_t>(conv.in.w);
  g.in_c = static_cast<std::uint16_t>(conv.in.c);
  g.kernel_h = static_cast<std::uint16_t>(conv.kernel_h);
  g.kernel_w = static_cast<std::uint16_t>(conv.kernel_w);
  g.stride_h = static_cast<std::uint16_t>(conv.stride_h);
  g.stride_w = static_cast<std::uint16_t>(conv.stride_w);
  g.out_h = static_cast<std::uint16_t>(conv.out.h);
  g.out_w = static_cast<std::uint16_t>(conv.out.w);
  g.dilation_h = static_cast<std::uint16_t>(conv.dilation_h);
  g.dilation_w = static_cast<std::uint16_t>(conv.dilation_w);
  const std::uint32_t pixels = images * conv.out.h * conv.out.w;
  // Output pixels in runs that fit the accumulators; per run, every N chunk, its K chunks summed.
  const std::uint32_t run = std::min(pixels, cfg.accumulators.entries);
  for (std::uint32_t p0 = 0; p0 < pixels; p0 += run)
    for (std::uint32_t n0 = 0; n0 < N; n0 += cfg.mxu.cols)
      for (std::uint32_t k0 = 0; k0 < K; k0 += cfg.mxu.rows) {
        const std::uint32_t k = std::min(cfg.mxu.rows, K - k0);
        const std::uint32_t n = std::min(cfg.mxu.cols, N - n0);
        bld.read_weights(bld.put(block(ql.kernel_i8, N, k0, k, n0, n)), k, n);
        isa::MatMul m;
        m.swap_weights = true;
        m.window = true;
        m.accumulate = k0 > 0;
        m.src = UbAddr(image_addr);
        m.rows = std::min(run, pixels - p0);
        m.first_pixel = p0;
        m.k_first = static_cast<std::uint16_t>(k0);
        m.dst = AccAddr(0);
        bld.matmul(m, g);
      }
  return bld.s;
}

Stimulus fashion_mnist_dense(const ChipConfig& cfg, std::uint32_t b, std::uint32_t tiles) {
  const FashionMnist fm = load_fashion_mnist(cfg, 1);
  const ir::Op& dense = fm.q.graph.ops[fm.layer(ir::OpKind::Dense)];
  const nn::QuantizedLayer& ql = fm.q.layers[fm.layer(ir::OpKind::Dense)];
  const auto K = static_cast<std::uint32_t>(dense.in.size());
  const std::uint32_t N = dense.filters;
  std::mt19937_64 rng(b);
  Builder bld{cfg, {}, 0, 0};
  bld.s.name = fmt::format("Fashion-MNIST {} ({} x {} weights): {} tiles, B = {}", dense.name, K, N,
                           tiles, b);
  const std::uint32_t x = bld.put(random_bytes(rng, std::size_t{b} * K));
  std::uint32_t t = 0;
  for (std::uint32_t k0 = 0; k0 < K && t < tiles; k0 += cfg.mxu.rows)
    for (std::uint32_t n0 = 0; n0 < N && t < tiles; n0 += cfg.mxu.cols, ++t) {
      const std::uint32_t k = std::min(cfg.mxu.rows, K - k0);
      const std::uint32_t n = std::min(cfg.mxu.cols, N - n0);
      bld.read_weights(bld.put(block(ql.kernel_i8, N, k0, k, n0, n)), k, n);
      isa::MatMul m;
      m.swap_weights = true;
      m.accumulate = k0 > 0;
      m.src = UbAddr(x + k0);
      m.src_stride = K;
      m.rows = b;
      m.dst = AccAddr(n0 / cfg.mxu.cols * b);
      bld.matmul(m);
    }
  return bld.s;
}

std::vector<std::string> config_files() {
  const std::string root = TPUSIM_SOURCE_DIR;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(root + "/tb/rtl/configs"))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  files.push_back(root + "/configs/chips/tiny-rtl.json");
  return files;
}

}  // namespace tpu::cosim
