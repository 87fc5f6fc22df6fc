// Behaviour of the null engine: no file system access, zero-filled reads, discarded writes.
#include "engines/null/null_engine.hpp"

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/engine_test_support.hpp"
#include "support/test_env.hpp"

namespace {

using tai::Completion;
using tai::Engine;
using tai::EngineFile;
using tai::Open;
using tai::Op;
using tai::Request;
using tai::test::run_request;

TEST(NullEngine, Capabilities) {
  auto engine = tai::engines::make_null({});
  EXPECT_EQ(engine->name(), "null");
  const auto& caps = engine->capabilities();
  EXPECT_FALSE(caps.stores_data);
  EXPECT_TRUE(caps.direct_io);
  EXPECT_FALSE(caps.durable_sync);
  EXPECT_FALSE(caps.asynchronous);
}

TEST(NullEngine, OpenNeverTouchesTheFileSystem) {
  tai::test::ScratchDir dir;
  auto engine = tai::engines::make_null({});
  const std::string nowhere = dir.file("no/such/dir/file");
  auto f = engine->open(nowhere, {Open::read | Open::write | Open::create | Open::truncate});
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f.value()->path(), nowhere);
  EXPECT_EQ(f.value()->fd(), -1);
  EXPECT_FALSE(std::filesystem::exists(dir.file("no")));
  std::vector<char> data(1000, 'x');
  EXPECT_EQ(run_request(*engine, Op::write, f->get(), data.data(), 0, data.size()).result, 1000);
  EXPECT_EQ(run_request(*engine, Op::fsync, f->get(), nullptr, 0, 0).result, 0);
  EXPECT_FALSE(std::filesystem::exists(dir.file("no")));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  EXPECT_FALSE(engine->close(**f));
}

TEST(NullEngine, ReadsAreZeroFilledAndWritesAreDiscarded) {
  auto engine = tai::engines::make_null({});
  auto f = engine->open("/null/file", {Open::read | Open::write});
  ASSERT_TRUE(f);
  std::vector<unsigned char> data(1 << 20, 0xAB);
  EXPECT_EQ(run_request(*engine, Op::write, f->get(), data.data(), 4096, data.size()).result, 1 << 20);
  EXPECT_EQ(data[0], 0xAB) << "a write's buffer is not modified";
  // Reads return the whole length, wherever they are (no end of file), filled with zeros.
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), data.data(), 4096, data.size()).result, 1 << 20);
  for (std::size_t i = 0; i < data.size(); i += 511) ASSERT_EQ(data[i], 0) << i;
  EXPECT_EQ(data.back(), 0);
  std::vector<unsigned char> tail(100, 0xCD);
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), tail.data(), 1ull << 50, tail.size()).result, 100);
  EXPECT_EQ(tail, std::vector<unsigned char>(100, 0));
  EXPECT_EQ(run_request(*engine, Op::fdatasync, f->get(), nullptr, 0, 0).result, 0);
}

TEST(NullEngine, DirectHasNoAlignmentConstraint) {
  auto engine = tai::engines::make_null({});
  auto f = engine->open("/null/direct", {Open::read | Open::write | Open::direct});
  ASSERT_TRUE(f) << f.error().message;
  const auto& caps = f.value()->capabilities();
  EXPECT_TRUE(caps.direct);
  EXPECT_EQ(caps.alignment.memory, 1u);
  EXPECT_EQ(caps.alignment.offset, 1u);
  EXPECT_EQ(caps.alignment.length, 1u);
  EXPECT_STREQ(caps.alignment.source, "none");
  // Odd address, offset and length: no bouncing needed, the request goes straight through.
  std::vector<char> buf(1001, 'q');
  EXPECT_EQ(run_request(*engine, Op::read, f->get(), buf.data() + 1, 3, 999).result, 999);
  EXPECT_EQ(buf[0], 'q');
  EXPECT_EQ(buf[1], 0);
  EXPECT_EQ(buf[999], 0);
  EXPECT_EQ(buf[1000], 'q');
}

}  // namespace
