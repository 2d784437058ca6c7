#include "hw/system/fluid_network.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace tpu {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A flow that would move its last bytes within this many of them is done: float round-off
// must not leave a crumb that completes a cycle late. Relative to the flow's size, with a floor
// for small flows (bandwidth.cpp's kEpsilonBytes).
double done_tolerance(double bytes) { return std::max(1e-6, 1e-12 * bytes); }

}  // namespace

FluidNetwork::FluidNetwork(std::vector<double> link_bytes_per_cycle) {
  links_.reserve(link_bytes_per_cycle.size());
  for (std::size_t l = 0; l < link_bytes_per_cycle.size(); ++l) {
    const double c = link_bytes_per_cycle[l];
    if (!(c > 0) || !std::isfinite(c))
      throw std::invalid_argument("fluid network: link " + std::to_string(l) + " has capacity " +
                                  std::to_string(c) + " bytes per cycle (must be finite and > 0)");
    links_.push_back(LinkState{c, 0, 0, {}});
  }
}

void FluidNetwork::advance(double now) {
  if (!(now > last_)) return;
  allocate();
  const double dt = now - last_;
  // Per link, how long within [last_, now] some flow still had bytes to move over it, and, while
  // recording intervals, what each flow moved over it.
  std::vector<double> busy(links_.size(), 0.0);
  std::vector<std::vector<FlowBytes>> moved_on(recording_ ? links_.size() : 0);
  for (auto& [id, f] : flows_) {
    if (f.remaining <= 0 || f.path.empty()) continue;
    double moved = f.rate * dt;
    double moving_for = dt;
    if (moved >= f.remaining - done_tolerance(f.bytes)) {
      moved = f.remaining;
      moving_for = std::min(dt, f.remaining / f.rate);
    }
    f.remaining -= moved;
    for (const Link l : f.path) {
      links_[l].bytes_carried += moved;
      busy[l] = std::max(busy[l], moving_for);
      if (recording_) moved_on[l].push_back(FlowBytes{id, f.label, moved});
    }
  }
  for (std::size_t l = 0; l < links_.size(); ++l) {
    links_[l].busy_time += busy[l];
    // Every flow moving bytes was moving from the start of the window (flows start and retire
    // only at advances), and the link is busy until the last of them stops.
    if (recording_ && busy[l] > 0)
      record(links_[l], last_, busy[l] >= dt ? now : last_ + busy[l], std::move(moved_on[l]));
  }
  last_ = now;
}

void FluidNetwork::record(LinkState& link, double from, double to, std::vector<FlowBytes> moved) {
  if (link.intervals.empty() || link.intervals.back().end != from)
    link.intervals.push_back(BusyInterval{from, from, 0, {}});
  BusyInterval& b = link.intervals.back();
  b.end = to;
  for (const FlowBytes& m : moved) {
    b.bytes += m.bytes;
    const auto same = std::find_if(b.flows.begin(), b.flows.end(),
                                   [&](const FlowBytes& f) { return f.flow == m.flow; });
    if (same == b.flows.end())
      b.flows.push_back(m);
    else
      same->bytes += m.bytes;
  }
}

FluidNetwork::FlowId FluidNetwork::start(double now, double bytes, std::vector<Link> path,
                                         std::uint64_t label) {
  if (!(bytes >= 0) || !std::isfinite(bytes))
    throw std::invalid_argument("fluid network: a flow of " + std::to_string(bytes) +
                                " bytes (must be finite and >= 0)");
  std::vector<bool> crossed(links_.size(), false);
  for (const Link l : path) {
    if (l >= links_.size())
      throw std::invalid_argument("fluid network: a path crosses link " + std::to_string(l) +
                                  ", but there are " + std::to_string(links_.size()) + " links");
    if (crossed[l])
      throw std::invalid_argument("fluid network: a path crosses link " + std::to_string(l) +
                                  " twice");
    crossed[l] = true;
  }
  advance(now);
  Flow f;
  f.path = std::move(path);
  f.bytes = bytes;
  f.label = label;
  f.remaining = f.path.empty() ? 0 : bytes;  // same source and destination: nothing to move
  flows_.emplace(next_id_, std::move(f));
  stale_ = true;
  return next_id_++;
}

double FluidNetwork::next_completion() const {
  allocate();
  double next = kInf;
  for (const auto& [id, f] : flows_)
    next = std::min(next, f.remaining <= 0 ? last_ : last_ + f.remaining / f.rate);
  return next;
}

std::vector<FluidNetwork::FlowId> FluidNetwork::retire_finished() {
  std::vector<FlowId> finished;
  for (auto it = flows_.begin(); it != flows_.end();) {
    if (it->second.remaining <= 0) {
      finished.push_back(it->first);
      it = flows_.erase(it);
    } else {
      ++it;
    }
  }
  if (!finished.empty()) stale_ = true;
  return finished;
}

double FluidNetwork::rate(FlowId id) const {
  const auto it = flows_.find(id);
  if (it == flows_.end())
    throw std::out_of_range("fluid network: flow " + std::to_string(id) + " is not active");
  allocate();
  return it->second.rate;
}

double FluidNetwork::bytes_left(FlowId id) const {
  const auto it = flows_.find(id);
  if (it == flows_.end())
    throw std::out_of_range("fluid network: flow " + std::to_string(id) + " is not active");
  return it->second.remaining;
}

void FluidNetwork::allocate() const {
  if (!stale_) return;
  stale_ = false;
  // 1. Flows with bytes left are unfrozen at rate 0; every link they cross offers its whole
  //    capacity. Only those links are scanned below (a pod has tens of thousands of links).
  std::vector<double> left(links_.size(), 0.0);
  std::vector<std::size_t> unfrozen_on(links_.size(), 0);
  std::vector<const Flow*> unfrozen;
  std::vector<Link> used;
  for (const auto& [id, f] : flows_) {
    if (f.path.empty()) {
      f.rate = kInf;  // crosses no link: nothing limits it
    } else if (f.remaining <= 0) {
      f.rate = 0;  // done, awaiting retirement: needs no share
    } else {
      f.rate = 0;
      unfrozen.push_back(&f);
      for (const Link l : f.path) {
        if (unfrozen_on[l]++ == 0) {
          used.push_back(l);
          left[l] = links_[l].capacity;
        }
      }
    }
  }
  std::sort(used.begin(), used.end());  // ascending: ties below go to the lowest link
  double level = 0;
  std::vector<bool> saturated(links_.size(), false);
  while (!unfrozen.empty()) {
    // 2. The step to the next bottleneck (ties: the lowest link index, for determinism).
    double step = kInf;
    Link bottleneck = 0;
    for (const Link l : used) {
      if (unfrozen_on[l] == 0) continue;
      const double share = left[l] / static_cast<double>(unfrozen_on[l]);
      if (share < step) {
        step = share;
        bottleneck = l;
      }
    }
    level += step;
    // 3. Every link gives its unfrozen flows the step; those with nothing left saturate. The
    //    bottleneck saturates by construction, whatever the round-off says.
    for (const Link l : used) {
      if (unfrozen_on[l] == 0) continue;
      left[l] -= step * static_cast<double>(unfrozen_on[l]);
      saturated[l] = l == bottleneck || left[l] <= 1e-12 * links_[l].capacity;
    }
    // 4. Flows crossing a saturated link freeze at the level.
    std::vector<const Flow*> still;
    for (const Flow* f : unfrozen) {
      const bool blocked =
          std::any_of(f->path.begin(), f->path.end(), [&](Link l) { return saturated[l]; });
      if (blocked) {
        f->rate = level;
        for (const Link l : f->path) --unfrozen_on[l];
      } else {
        still.push_back(f);
      }
    }
    unfrozen = std::move(still);
  }
}

}  // namespace tpu
