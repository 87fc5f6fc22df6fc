// Controller::open's forms (include/tai/controller.hpp): the short forms, and OpenOptions naming
// the engine and this file's tree options, which win over the controller's.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr auto kHang = std::chrono::seconds(60);

ControllerOptions options() { return two_quiet_workers("posix"); }

// Writes and reads back 16 small blocks; returns the controller's inline operations since start.
std::uint64_t inline_ops_of(Controller& ctl, File& f) {
  std::vector<char> block(4096, 'x');
  for (int i = 0; i < 16; ++i) {
    Receipt w = f.write(static_cast<std::uint64_t>(i) * block.size(), block.data(), block.size());
    EXPECT_TRUE(w.wait_for(kHang));
    EXPECT_TRUE(w.ok()) << w.message();
  }
  std::vector<char> back(block.size());
  for (int i = 0; i < 16; ++i) {
    Receipt r = f.read(static_cast<std::uint64_t>(i) * back.size(), back.data(), back.size());
    EXPECT_TRUE(r.wait_for(kHang));
    EXPECT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(back, block);
  }
  return ctl.stats().inline_ops;
}

TEST(ControllerOpenOptions, TheShortFormsUseTheDefaultOrTheNamedEngine) {
  ScratchDir dir;
  Controller ctl(options());
  auto a = ctl.open(dir.file("a"), Open::read | Open::write | Open::create);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->status().engine, "posix");
  auto b = ctl.open<BTreeTrivial>(dir.file("b"), Open::read | Open::write | Open::create, "null");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(b->status().engine, "null");
  EXPECT_EQ(b->status().tree, "BTree<64>");
}

// "auto" picks by the open's mode: posix for a buffered file (a page-cache copy gains nothing
// from an asynchronous engine), the selector's best engine for an O_DIRECT one; a named engine
// serves both.
TEST(ControllerOpenOptions, AutoPicksPosixForBufferedFilesAndTheBestEngineForDirectOnes) {
  ScratchDir dir;
  std::string note;
  auto best = make_engine("auto", {}, &note);
  ASSERT_TRUE(best) << best.error().message;
  const std::string best_name(best.value()->name());
  ControllerOptions o = two_quiet_workers();  // engine "auto"
  Controller ctl(o);
  EXPECT_EQ(ctl.engine_note(), "auto: posix for buffered files, for O_DIRECT files " + note);
  auto buffered = ctl.open(dir.file("buffered"), Open::read | Open::write | Open::create);
  ASSERT_TRUE(buffered) << buffered.error().message;
  EXPECT_EQ(buffered->status().engine, "posix");
  auto named = ctl.open(dir.file("named"), Open::read | Open::write | Open::create, best_name);
  ASSERT_TRUE(named) << named.error().message;
  EXPECT_EQ(named->status().engine, best_name);
  if (const std::string why = direct_io_unsupported_reason(dir.path()); !why.empty()) GTEST_SKIP() << why;
  auto direct = ctl.open(dir.file("direct"), Open::read | Open::write | Open::create | Open::direct);
  ASSERT_TRUE(direct) << direct.error().message;
  EXPECT_EQ(direct->status().engine, best_name);
  std::vector<char> block(4096, 'd');
  EXPECT_TRUE(wait_ok(direct->write(0, Buffer::copy_of(block.data(), block.size()))));
  EXPECT_TRUE(wait_ok(direct->fsync()));
}

TEST(ControllerOpenOptions, OpenOptionsNameTheEngine) {
  ScratchDir dir;
  Controller ctl(options());
  OpenOptions how;
  how.engine = "null";
  auto f = ctl.open(dir.file("f"), Open::read | Open::write | Open::create, how);
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->status().engine, "null");

  how.engine = "no-such-engine";
  auto bad = ctl.open(dir.file("g"), Open::read | Open::write | Open::create, how);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("no-such-engine"), std::string::npos) << bad.error().message;
}

TEST(ControllerOpenOptions, TreeOptionsApplyToThatFileOnly) {
  ScratchDir dir;
  // The controller's tree options allow the inline path (the default); one file turns it off.
  Controller ctl(options());
  auto with_inline = ctl.open(dir.file("inline"), Open::read | Open::write | Open::create);
  ASSERT_TRUE(with_inline) << with_inline.error().message;
  const std::uint64_t after_first = inline_ops_of(ctl, *with_inline);
  EXPECT_GT(after_first, 0u) << "the posix engine is synchronous: reads and writes go inline by default";

  OpenOptions how;
  how.tree_options = BTreeOptions{};
  how.tree_options->inline_path = false;
  auto without = ctl.open(dir.file("stepped"), Open::read | Open::write | Open::create, how);
  ASSERT_TRUE(without) << without.error().message;
  EXPECT_EQ(inline_ops_of(ctl, *without), after_first) << "the file's own tree options were ignored";
}

}  // namespace
}  // namespace tai::test
