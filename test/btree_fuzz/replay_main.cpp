// Replays fuzz inputs through the same harness as the libFuzzer target, with any compiler:
//   btree_fuzz_replay <file or directory>...
// Exit status 1 (and the failing file's name) if any input makes the harness report a mismatch.
#include "btree_fuzz/btree_harness.hpp"
#include "support/corpus_replay.hpp"

int main(int argc, char** argv) {
  return tai::test::replay_corpus("btree_fuzz_replay", argc, argv, tai::test::btree::run_fuzz_input);
}
