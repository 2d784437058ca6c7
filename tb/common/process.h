// A thread that runs a test's function once, from the start of the simulation: the test's own
// initiator when it calls a module directly (BandwidthResource::transfer, IciFabric::transfer).
#pragma once

#include <functional>
#include <systemc>
#include <utility>

namespace tpu::test {

class Process : public sc_core::sc_module {
 public:
  Process(sc_core::sc_module_name name, std::function<void()> body)
      : sc_core::sc_module(name), body_(std::move(body)) {
    SC_HAS_PROCESS(Process);
    SC_THREAD(run);
  }

 private:
  void run() { body_(); }
  std::function<void()> body_;
};

}  // namespace tpu::test
