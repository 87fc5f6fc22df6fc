// A BTreeDefault over a posix O_DIRECT file whose requests are recorded: for the tests of what a
// direct file's tree sends to the engine (the aligned superset of a block, write-around only of
// aligned pieces).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "btree_fuzz/btree_harness.hpp"
#include "support/test_env.hpp"
#include "tai/btree.hpp"
#include "tai/btree_driver.hpp"

namespace tai::test::btree {

/// Not thread-safe (one test's rig). Made by make(): null when the test must stop, with `why`
/// set to the reason to skip (the file system refuses O_DIRECT, or its alignment passes a 4 KiB
/// block), or empty after a failure it reported.
struct DirectTreeRig {
  static std::unique_ptr<DirectTreeRig> make(const ScratchDir& dir, const BTreeOptions& options, std::string& why) {
    why = direct_io_unsupported_reason(dir.path());
    if (!why.empty()) return nullptr;
    auto rig = std::unique_ptr<DirectTreeRig>(new DirectTreeRig);
    rig->engine = engines::make_posix({});
    auto opened = rig->engine->open(dir.file("direct.bin"), OpenMode(Open::read | Open::write | Open::create | Open::direct));
    if (!opened) {
      ADD_FAILURE() << opened.error().message;
      return nullptr;
    }
    rig->file = std::move(opened.value());
    rig->align = std::max<std::uint64_t>(rig->file->capabilities().alignment.offset, 1u);
    if (rig->align > 4096) {
      why = "direct-I/O alignment " + std::to_string(rig->align) + " above a 4 KiB block";
      return nullptr;
    }
    rig->tree = std::make_unique<BTreeDefault>(rig->file.get(), rig->quota, options);
    return rig;
  }

  std::unique_ptr<Engine> engine;
  std::unique_ptr<EngineFile> file;
  std::uint64_t align = 1;  // the file's direct-I/O offset alignment
  EngineExecutor inner;
  RecordingExecutor rec{inner};  // every request the tree sent, in order
  Quota quota;
  std::unique_ptr<BTreeDefault> tree;
  SequentialDriver driver{driver_options(rec)};

 private:
  DirectTreeRig() = default;
  static SequentialDriver::Options driver_options(IoExecutor& executor) {
    SequentialDriver::Options d;
    d.executor = &executor;
    return d;
  }
};

}  // namespace tai::test::btree
