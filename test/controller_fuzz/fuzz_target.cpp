// libFuzzer entry: the fuzzer's bytes choose an engine, a tree, a quota and options, and the
// operation sequence that controller_harness.hpp runs through a controller and checks.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "controller_fuzz/controller_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string err = tai::test::controller_fuzz::run_fuzz_input(data, size);
  if (!err.empty()) {
    std::fprintf(stderr, "controller fuzz: %s\n", err.c_str());
    std::abort();
  }
  return 0;
}
