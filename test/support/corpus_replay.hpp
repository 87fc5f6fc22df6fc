// The replay program of a fuzz target, for any compiler: every input file (or every file of an
// input directory) goes through the same harness function as the libFuzzer target, in name
// order, and each divergence is printed with its file's name. Used by the tree's and the
// controller's replay programs, which ctest runs over their committed corpora.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tai::test {

/// `run_one(data, size)` returns "" or what diverged. Returns the exit status: 0 when every
/// input passed, 1 when one failed, 2 when there was no input.
template <class RunOne>
int replay_corpus(const char* program, int argc, char** argv, RunOne run_one) {
  namespace fs = std::filesystem;
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
    std::fprintf(stderr, "%s: no input files\n", program);
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  const auto start = std::chrono::steady_clock::now();
  int failures = 0;
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string err = run_one(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (!err.empty()) {
      std::fprintf(stderr, "%s: %s\n", p.string().c_str(), err.c_str());
      ++failures;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu inputs, %d failed, %.2f s\n", program, inputs.size(), failures, seconds);
  return failures == 0 ? 0 : 1;
}

}  // namespace tai::test
