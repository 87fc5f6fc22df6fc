// Replays fuzz inputs through the same harness as the libFuzzer target, with any compiler:
//   btree_fuzz_replay <file or directory>...
// Exit status 1 (and the failing file's name) if any input makes the harness report a mismatch.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "btree_fuzz/btree_harness.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else {
      inputs.push_back(p);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "btree_fuzz_replay: no input files\n");
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  int failures = 0;
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string err =
        tai::test::btree::run_fuzz_input(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (!err.empty()) {
      std::fprintf(stderr, "%s: %s\n", p.string().c_str(), err.c_str());
      ++failures;
    }
  }
  std::printf("btree_fuzz_replay: %zu inputs, %d failed\n", inputs.size(), failures);
  return failures == 0 ? 0 : 1;
}
