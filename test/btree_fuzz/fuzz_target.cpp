// libFuzzer entry: the fuzzer's bytes choose a tree and a quota and drive the model harness.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "btree_fuzz/btree_harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string err = tai::test::btree::run_fuzz_input(data, size);
  if (!err.empty()) {
    std::fprintf(stderr, "btree fuzz: %s\n", err.c_str());
    std::abort();
  }
  return 0;
}
