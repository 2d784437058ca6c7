// tpu::hw links libsystemc, whose main() refers to sc_main (extern "C", declared by <systemc>).
// A benchmark brings its own main (BENCHMARK_MAIN) and never elaborates a module, so sc_main is
// never called, but it must exist: a linker that keeps libsystemc as a needed library (GCC's
// -fsanitize=address link line turns --as-needed off, docs/robustness.md) refuses the
// executable otherwise. tb/common/test_main.cpp does the same for the testbenches.
#include <systemc>

int sc_main(int, char*[]) { return 0; }
