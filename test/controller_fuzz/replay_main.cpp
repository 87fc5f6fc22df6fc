// Replays controller fuzz inputs through the same harness as the libFuzzer target, with any
// compiler:
//   controller_fuzz_replay <file or directory>...
// Exit status 1 (and the failing file's name with the divergence) if any input diverges.
#include "controller_fuzz/controller_harness.hpp"
#include "support/corpus_replay.hpp"

int main(int argc, char** argv) {
  return tai::test::replay_corpus("controller_fuzz_replay", argc, argv, tai::test::controller_fuzz::run_fuzz_input);
}
