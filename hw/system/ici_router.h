// IciRouter: where the chips' ICI ends meet the fabric. An ici_write's transaction leaves its
// chip through chip2ici into `in`. The router refuses a destination outside the system, or a
// range outside the destination's off-chip memory, naming it in the transaction's refusal; else
// the write is posted: the bytes stream over the route (IciFabric::stream, the links shared with
// every other transfer) and the transaction returns to the sender's ICI engine when the last
// byte has left, so that its next write streams right behind; the bytes, copied then, arrive the
// route's latency later (hops × hop latency), when the router hands them to the destination
// chip's ici2chip through `out` (bound in chip order), which stores them and counts the arrival
// on the semaphore the write names (docs/systems.md, "The system model").
//
// Mirrored (fit's scale-out mode, docs/systems.md, "Scale-out"): only chip 0 exists, and the
// system's other chips are taken to do what it does at the same time, as data-parallel replicas
// on a ring do. Its writes still stream over the fabric's links at their fair share; each lands
// back in chip 0, at the address and semaphore it named, as the write its ring predecessor makes
// to it at that moment, the ring's mean edge latency after the last byte has left. On a torus
// every edge is one hop; on a mesh axis the ring's closing edge runs back over the line (n - 1
// hops), and the members, alike but for which edge feeds them, see the mean edge on average.
// That holds for a ring whose steps pipeline many pieces (the gradient's all-reduce). A
// MirroredRing is one of a box of chips whose every step is one message (distributed
// BatchNormalization's sums, docs/training.md): a chain, which ends with its slowest member, so
// its writes take the longest chain of n - 1 consecutive edges of the box's ring through chip 0,
// spread over its edges (a sub-ring of an axis closes over the links between its ends).
#pragma once

#include <tlm_utils/multi_passthrough_initiator_socket.h>
#include <tlm_utils/multi_passthrough_target_socket.h>

#include <cstdint>
#include <memory>
#include <queue>
#include <systemc>
#include <tlm>
#include <vector>

#include "hw/system/ici_fabric.h"

namespace tpu {

// Writes on semaphores [first_semaphore, first_semaphore + semaphores) run rings over the box
// of chips with these extents (one per torus dimension) that holds chip 0, one message a step.
struct MirroredRing {
  std::uint32_t first_semaphore = 0, semaphores = 0;
  std::vector<std::uint32_t> box;
};

class IciRouter : public sc_core::sc_module {
 public:
  tlm_utils::multi_passthrough_target_socket<IciRouter> in;
  tlm_utils::multi_passthrough_initiator_socket<IciRouter> out;

  // `memory_bytes`: every chip's off-chip memory.
  IciRouter(sc_core::sc_module_name name, IciFabric& fabric, std::uint64_t memory_bytes,
            bool mirrored = false, std::vector<MirroredRing> rings = {});

 private:
  struct Arrival {
    Cycle at = 0;
    std::uint64_t order = 0;  // posting order: arrivals of one cycle in it
    std::uint32_t from = 0, to = 0, sem = 0;
    std::uint64_t addr = 0;
    std::vector<std::uint8_t> bytes;
  };
  struct Later {
    bool operator()(const std::unique_ptr<Arrival>& a, const std::unique_ptr<Arrival>& b) const {
      return a->at != b->at ? a->at > b->at : a->order > b->order;
    }
  };

  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void deliver();  // SC_THREAD: hands each arrival to its chip at its cycle
  // Mirrored: a ring edge's latency on the axis from chip 0 to `to` (see above).
  [[nodiscard]] Cycles ring_edge_latency(std::uint32_t to, std::uint32_t sem) const;
  // The latency of a ring edge along axis d of n chips: the mean edge, or a chain's (above).
  [[nodiscard]] Cycles ring_latency(std::size_t d, std::uint32_t n, bool chain) const;

  IciFabric& fabric_;
  std::uint64_t memory_bytes_;
  bool mirrored_;
  std::vector<MirroredRing> rings_;
  std::vector<Cycles> ring_edge_;                // mirrored: per axis, its ring's mean edge
  std::vector<std::vector<Cycles>> chain_edge_;  // per ring of rings_, per axis
  std::priority_queue<std::unique_ptr<Arrival>, std::vector<std::unique_ptr<Arrival>>, Later>
      pending_;
  std::uint64_t posted_ = 0;
  sc_core::sc_event posted_event_;
};

}  // namespace tpu
