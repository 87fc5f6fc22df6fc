// Replays controller fuzz inputs through the same harness as the libFuzzer target, with any
// compiler:
//   controller_fuzz_replay <file or directory>...
// Exit status 1 (and the failing file's name with the divergence) if any input diverges.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "controller_fuzz/controller_harness.hpp"

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
    std::fprintf(stderr, "controller_fuzz_replay: no input files\n");
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  const auto start = std::chrono::steady_clock::now();
  int failures = 0;
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string err = tai::test::controller_fuzz::run_fuzz_input(
        reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (!err.empty()) {
      std::fprintf(stderr, "%s: %s\n", p.string().c_str(), err.c_str());
      ++failures;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("controller_fuzz_replay: %zu inputs, %d failed, %.2f s\n", inputs.size(), failures, seconds);
  return failures == 0 ? 0 : 1;
}
