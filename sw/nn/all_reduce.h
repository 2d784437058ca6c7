// The sum of the replicas' gradients as a TPU system takes it (docs/systems.md, "All-reduce"),
// written from that section, not from the compiler's lowering, so that the chips' sums can be
// checked against it bit for bit. Every addition is one fp32 addition.
//
// Replicas are numbered chip-major: replica r is core r % cores of chip r / cores; chips are
// numbered row-major over the torus dimensions, the first the slowest.
//
//  1. Each chip sums its cores' gradients in core order: h = ((g0 + g1) + g2) + ...
//  2. The chips' sums are all-reduced over the torus, part by part: the gradient (all parameters'
//     elements, one after the other) is cut into ceil(cores / 2) contiguous parts (a pair of
//     cores per part, one for each ring direction), each reduced on its own. Over a part, a
//     reduce-scatter along each dimension of more than one chip in order, then an all-gather along
//     them in reverse order (which moves sums and adds nothing). A reduce-scatter along a dimension
//     of n chips (a ring, in coordinate order, whether or not the axis wraps) cuts the region it
//     reduces into n chunks; chunk j ends at member j. Each chunk's first half travels in the +
//     direction from member j + 1, each member adding its own value to what it received: ((h[j+1] +
//     h[j+2]) + ...) + h[j] (a received partial plus the member's value); its second half in the -
//     direction from member j - 1:
//     ((h[j-1] + h[j-2]) + ...) + h[j]. Indices are mod n. After it, member m holds chunk m summed
//     along the dimension, and the next dimension reduces that chunk.
//
// Cuts: a region [a, b) of L elements into n chunks, chunk j = [a + floor(j L / n), a +
// floor((j + 1) L / n)); a chunk [c, d) into halves [c, c + floor((d - c) / 2)) and the rest.
//
// Buckets (fit's overlap of the all-reduce with the backward pass): the gradient is cut into
// contiguous buckets, and each bucket is all-reduced on its own as the whole vector above: its
// parts, chunks and halves are cut from the bucket. On rings of two chips an element's sum does
// not depend on the cuts (a + b = b + a); on longer rings the member that starts it does, so
// bucketed sums may differ from unbucketed ones in the last bits.
#pragma once

#include <cstdint>
#include <vector>

namespace tpu::nn {

// The sum every replica receives of `grads` (one vector per replica, all the same length): the
// replicas of `dims` chips (its product; an empty `dims` is one chip) of `cores` cores each.
std::vector<float> all_reduce(const std::vector<std::vector<float>>& grads, std::uint32_t cores,
                              const std::vector<std::uint32_t>& dims);
// The same in buckets: `ends` holds the element where each bucket ends, ascending, the last the
// vectors' length; empty: one bucket.
std::vector<float> all_reduce(const std::vector<std::vector<float>>& grads, std::uint32_t cores,
                              const std::vector<std::uint32_t>& dims,
                              const std::vector<std::uint64_t>& ends);

}  // namespace tpu::nn
