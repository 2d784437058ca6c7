// What a simulation computes besides its timing: resolved once (the CLI's --timing-only) and
// handed down through the constructors of System, Chip and TensorCore to every module that
// computes or holds data. No module reads it from anywhere else.
#pragma once

namespace tpu {

struct SimOptions {
  // Timing only (docs/timing-model.md, "Timing-only mode"): every instruction is decoded,
  // checked, ordered, timed and counted as in a full run, so cycles, stall buckets, byte and
  // instruction counts and energy are the same, but no value is computed or stored: the MXU
  // multiplies nothing, the vector unit computes nothing, the memories (unified buffer,
  // accumulators, off-chip memory) keep no bytes (a read leaves the reader's buffer as it was).
  // What depends on values is handled explicitly: a gather reads row 0 of its table for every
  // index, and checks of values (labels, optimizer records, requantization records) are skipped.
  bool timing_only = false;
};

}  // namespace tpu
