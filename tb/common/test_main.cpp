// GoogleTest entry for testbenches that may elaborate SystemC modules. Each test runs in its own
// process (gtest_discover_tests), because the SystemC kernel cannot be reset.
#include <gtest/gtest.h>

#include <cstdlib>
#include <systemc>

// libsystemc's own main() calls sc_main(); ours replaces it, but the library still refers to the
// symbol (extern "C", declared by <systemc>), so it must exist.
int sc_main(int, char*[]) { return 0; }

int main(int argc, char** argv) {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
