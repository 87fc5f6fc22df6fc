// GoogleTest entry point for tai_tests. Prints the seed that randomized tests use so that a
// failure can be replayed with TAI_TEST_SEED=<seed>.
#include <gtest/gtest.h>

#include "support/test_env.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
