#include "hw/isa/semantics.h"

#include <type_traits>
#include <variant>

#include "hw/isa/pooling.h"
#include "hw/isa/window.h"

namespace tpu::isa {

namespace {

template <class T, class... U>
constexpr bool is_one_of = (std::is_same_v<T, U> || ...);

// The bytes of one row of the instructions that move strided rows.
std::uint64_t row_bytes(const Softmax& s) { return std::uint64_t{s.cols} * 4; }
std::uint64_t row_bytes(const Copy& c) { return c.row_bytes; }

}  // namespace

TileShape weight_tile_shape(const ReadWeights& rw) {
  return rw.transpose ? TileShape{rw.cols, rw.rows} : TileShape{rw.rows, rw.cols};
}

std::uint64_t weight_row_pitch(const ReadWeights& rw, std::uint32_t elem_bytes) {
  return rw.stride != 0 ? rw.stride : std::uint64_t{rw.cols} * elem_bytes;
}

std::uint64_t weight_extent(const ReadWeights& rw, std::uint32_t elem_bytes) {
  if (rw.rows == 0 || rw.cols == 0) return 0;
  return std::uint64_t{rw.rows - 1u} * weight_row_pitch(rw, elem_bytes) +
         std::uint64_t{rw.cols} * elem_bytes;
}

Unit unit_of(const Instruction& inst) {
  return std::visit(
      [](const auto& i) -> Unit {
        using T = std::decay_t<decltype(i)>;
        if constexpr (is_one_of<T, ReadHost, WriteHost>)
          return Unit{UnitKind::Dma, 0, true};
        else if constexpr (is_one_of<T, ReadMem, WriteMem>)
          return Unit{i.ici ? UnitKind::Ici : UnitKind::Dma, 0, false};
        else if constexpr (std::is_same_v<T, Gather>)
          return Unit{UnitKind::Dma, 0, false};
        else if constexpr (std::is_same_v<T, IciWrite>)
          return Unit{UnitKind::Ici, 0, false};
        else if constexpr (is_one_of<T, IciWait, Sync>)  // the region forms: the ICI engine
          return i.bytes > 0 ? Unit{UnitKind::Ici, 0, false} : Unit{};
        else if constexpr (std::is_same_v<T, ReadWeights>)
          return Unit{UnitKind::MxuWeights, i.mxu, false};
        else if constexpr (std::is_same_v<T, MatMul>)
          return Unit{UnitKind::MxuArray, i.mxu, false};
        else if constexpr (is_one_of<T, Activate, Pool, Eltwise, Softmax, Copy, Map, Xent, Update,
                                     Reduce, PoolGrad>)
          return Unit{UnitKind::Vector, 0, false};
        else
          return Unit{};
      },
      inst);
}

std::vector<Access> footprint(const Instruction& inst, const FootprintContext& ctx) {
  std::vector<Access> a;
  auto read = [&](Space s, const char* field, std::uint64_t lo, std::uint64_t bytes) {
    a.push_back(Access{s, lo, sat_add(lo, bytes), false, field});
  };
  auto write = [&](Space s, const char* field, std::uint64_t lo, std::uint64_t bytes) {
    a.push_back(Access{s, lo, sat_add(lo, bytes), true, field});
  };
  const std::uint64_t entry = ctx.acc_entry_bytes;
  std::visit(
      [&](const auto& i) {
        using T = std::decay_t<decltype(i)>;
        if constexpr (std::is_same_v<T, ReadHost>) {
          write(Space::UnifiedBuffer, "dst", i.dst.value(), i.bytes);
          read(Space::Host, "src", i.src.value(), i.bytes);
        } else if constexpr (std::is_same_v<T, WriteHost>) {
          read(Space::UnifiedBuffer, "src", i.src.value(), i.bytes);
          write(Space::Host, "dst", i.dst.value(), i.bytes);
        } else if constexpr (std::is_same_v<T, ReadMem>) {
          write(Space::UnifiedBuffer, "dst", i.dst.value(), i.bytes);
          read(Space::OffChip, "src", i.src.value(), i.bytes);
        } else if constexpr (std::is_same_v<T, WriteMem>) {
          read(Space::UnifiedBuffer, "src", i.src.value(), i.bytes);
          write(Space::OffChip, "dst", i.dst.value(), i.bytes);
        } else if constexpr (std::is_same_v<T, ReadWeights>) {
          read(i.source == WeightSource::UnifiedBuffer ? Space::UnifiedBuffer : Space::OffChip,
               "addr", i.addr, weight_extent(i, size_of(ctx.mxu_input_type)));
        } else if constexpr (std::is_same_v<T, MatMul>) {
          MatMulInput in;
          in.window = i.window, in.src = i.src.value(), in.rows = i.rows;
          in.src_stride = i.src_stride, in.first_pixel = i.first_pixel, in.k_first = i.k_first;
          in.geom = ctx.window;
          in.transpose = i.transpose;
          const auto [lo, hi] = matmul_input_extent(in, ctx.tile_rows, size_of(ctx.mxu_input_type));
          if (i.rows > 0) read(Space::UnifiedBuffer, i.window ? "window" : "src", lo, hi - lo);
          const std::uint64_t first = sat_mul(i.dst.value(), entry);
          const std::uint64_t bytes = sat_mul(i.rows, entry);
          write(Space::Accumulators, "dst", first, bytes);
          if (i.accumulate) read(Space::Accumulators, "dst", first, bytes);
        } else if constexpr (std::is_same_v<T, Activate>) {
          read(Space::Accumulators, "src", sat_mul(i.src.value(), entry), sat_mul(i.rows, entry));
          read(Space::UnifiedBuffer, "params", i.params.value(), 12ull * i.cols);
          if (i.rows > 0)
            write(Space::UnifiedBuffer, "dst", i.dst.value(),
                  std::uint64_t{i.rows - 1} * i.dst_stride +
                      std::uint64_t{i.cols} * size_of(i.out_type));
        } else if constexpr (std::is_same_v<T, Pool>) {
          const std::uint64_t e = size_of(i.type);
          read(Space::UnifiedBuffer, "src", i.src.value(),
               std::uint64_t{i.images} * i.in_h * i.in_w * i.channels * e);
          const std::uint64_t oh = pool_rows(i).outputs(), ow = pool_cols(i).outputs();
          if (oh > 0 && ow > 0)
            write(Space::UnifiedBuffer, "dst", i.dst.value(),
                  std::uint64_t{i.images} * oh * ow * i.channels * e);
        } else if constexpr (std::is_same_v<T, Eltwise>) {
          // A broadcast b (b_period > 0) is b_period elements, whatever count is.
          const std::uint64_t n = std::uint64_t{i.count} * size_of(i.type);
          const std::uint64_t b_elems = i.b_period != 0 ? i.b_period : i.count;
          read(Space::UnifiedBuffer, "a", i.a.value(), n);
          read(Space::UnifiedBuffer, "b", i.b.value(), b_elems * size_of(i.type));
          write(Space::UnifiedBuffer, "dst", i.dst.value(), n);
        } else if constexpr (std::is_same_v<T, Map>) {
          read(Space::UnifiedBuffer, "src", i.src.value(),
               std::uint64_t{i.count} * size_of(i.in_type));
          write(Space::UnifiedBuffer, "dst", i.dst.value(),
                std::uint64_t{i.count} * size_of(i.out_type));
          read(Space::UnifiedBuffer, "params", i.params.value(), 12ull * i.channels);
        } else if constexpr (is_one_of<T, Softmax, Copy>) {
          if (i.rows > 0) {
            const std::uint64_t row = row_bytes(i);
            read(Space::UnifiedBuffer, "src", i.src.value(),
                 std::uint64_t{i.rows - 1} * i.src_stride + row);
            write(Space::UnifiedBuffer, "dst", i.dst.value(),
                  std::uint64_t{i.rows - 1} * i.dst_stride + row);
          }
        } else if constexpr (std::is_same_v<T, Gather>) {
          // Which rows a gather reads depends on the indices, known only when it runs; the
          // scoreboard orders it against the whole table, every row it may read.
          read(Space::OffChip, "table", i.table.value(), std::uint64_t{i.rows} * i.row_bytes);
          read(Space::UnifiedBuffer, "indices", i.indices.value(), 4ull * i.count);
          write(Space::UnifiedBuffer, "dst", i.dst.value(), std::uint64_t{i.count} * i.row_bytes);
        } else if constexpr (std::is_same_v<T, Xent>) {
          const std::uint64_t logits = std::uint64_t{i.rows} * i.cols * 4;
          read(Space::UnifiedBuffer, "src", i.src.value(), logits);
          read(Space::UnifiedBuffer, "labels", i.labels.value(), 4ull * i.rows);
          write(Space::UnifiedBuffer, "dst", i.dst.value(), logits);
          write(Space::UnifiedBuffer, "out", i.out.value(), 8ull * i.rows);
        } else if constexpr (std::is_same_v<T, Update>) {
          // Only the arrays the kind uses: sgd's m and v, momentum's and lars's v are 0 and name
          // nothing.
          const std::uint64_t n = 4ull * i.count;
          const bool slot_m = i.kind != UpdateKind::Sgd, slot_v = i.kind == UpdateKind::Adam;
          read(Space::UnifiedBuffer, "w", i.w.value(), n);
          write(Space::UnifiedBuffer, "w", i.w.value(), n);
          read(Space::UnifiedBuffer, "g", i.g.value(), n);
          if (slot_m) read(Space::UnifiedBuffer, "m", i.m.value(), n);
          if (slot_m) write(Space::UnifiedBuffer, "m", i.m.value(), n);
          if (slot_v) read(Space::UnifiedBuffer, "v", i.v.value(), n);
          if (slot_v) write(Space::UnifiedBuffer, "v", i.v.value(), n);
          read(Space::UnifiedBuffer, "params", i.params.value(), 4ull * update_params(i.kind));
        } else if constexpr (std::is_same_v<T, Reduce>) {
          if (i.rows > 0)
            read(Space::UnifiedBuffer, "src", i.src.value(),
                 std::uint64_t{i.rows - 1} * i.stride + 4ull * i.cols);
          write(Space::UnifiedBuffer, "dst", i.dst.value(), 4ull * i.cols);
          if (i.accumulate) read(Space::UnifiedBuffer, "dst", i.dst.value(), 4ull * i.cols);
        } else if constexpr (std::is_same_v<T, IciWrite>) {
          // The far side is another chip's memory (or this one's, through the fabric): ordered
          // by the semaphores, not by this core's scoreboard.
          read(Space::UnifiedBuffer, "src", i.src.value(), i.bytes);
        } else if constexpr (is_one_of<T, IciWait, Sync>) {
          // The region forms: what touches the region after them waits for them.
          if (i.bytes > 0) write(Space::OffChip, "dst", i.dst.value(), i.bytes);
        } else if constexpr (std::is_same_v<T, PoolGrad>) {
          // The geometry is the window registers' at issue; avg does not read x.
          const SetWindow& g = ctx.window;
          const std::uint64_t pixels_c = std::uint64_t{i.images} * g.in_c * size_of(i.type);
          const std::uint64_t in_bytes = sat_mul(sat_mul(pixels_c, g.in_h), g.in_w);
          const std::uint64_t out_bytes = sat_mul(sat_mul(pixels_c, g.out_h), g.out_w);
          if (i.kind == PoolKind::Max) read(Space::UnifiedBuffer, "x", i.x.value(), in_bytes);
          read(Space::UnifiedBuffer, "dy", i.dy.value(), out_bytes);
          write(Space::UnifiedBuffer, "dst", i.dst.value(), in_bytes);
        }
      },
      inst);
  return a;
}

}  // namespace tpu::isa
