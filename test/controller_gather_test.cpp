// Gathered write-back through the controller (tai/btree.hpp, "Gathered write-back"): a record
// spanning ten 4 KiB blocks of BTreeDefault reaches the engine as ONE write when fsync writes it
// back, and a failure of that one write (an error, a short transfer) or of the engine sync
// after it is never lost: the fsync fails, every block stays dirty (or is made dirty again), and
// the next fsync writes the whole record again and succeeds. Over the fault engine (wrapping a
// synchronous and the asynchronous engines), whose rules also count the engine writes.
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

#include "engines/fault/fault_engine.hpp"
#include "engines/posix/posix_engine.hpp"
#include "support/controller_support.hpp"
#include "support/test_env.hpp"
#include "tai/tai.hpp"

namespace tai::test {
namespace {

constexpr auto kHang = std::chrono::seconds(60);
constexpr std::uint64_t kRecord = 10 * 4096;
constexpr std::uint64_t kAt = 1 << 20;  // inside one 2 MiB node

bool finished(const Receipt& r) {
  if (r.wait_for(kHang)) return true;
  ADD_FAILURE() << "a receipt did not finish within 60 s (state " << to_string(r.state()) << ")";
  return false;
}

/// A controller (2 workers, no idle flush rounds: write-back happens at fsync) with a fault
/// engine over `inner`, its rules `rules` followed by a rule that never fires and counts the
/// engine writes (its index: write_counter).
struct Faulty {
  Faulty(const std::string& rules, const std::string& inner) : ctl(two_quiet_workers(inner)) {
    auto made = make_engine(inner, ControllerOptions{}.engine_options);
    EXPECT_TRUE(made.ok()) << (made.ok() ? "" : made.error().message);
    auto engine = engines::make_fault(made.ok() ? std::move(made.value()) : engines::make_posix({}));
    fault = engine.get();
    if (!rules.empty()) {
      auto added = fault->add_rules(rules);
      EXPECT_TRUE(added.ok()) << (added.ok() ? "" : added.error().message);
    }
    write_counter = fault->add_rule(engines::FaultRule::parse("write:nth=1000000000:errno=EIO:once").value());
    EXPECT_TRUE(ctl.add_engine("fault", std::move(engine)));
  }
  File open(const std::string& path) {
    auto f = ctl.open<BTreeDefault>(path, Open::read | Open::write | Open::create, "fault");
    EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message);
    return f.ok() ? std::move(f.value()) : File();
  }
  std::uint64_t engine_writes() const { return fault->matches(write_counter); }
  Controller ctl;
  engines::FaultEngine* fault = nullptr;  // owned by ctl
  std::size_t write_counter = 0;
};

bool file_holds(const std::string& path, std::uint64_t offset, const std::vector<unsigned char>& data) {
  const std::vector<unsigned char> disk = read_with_pread(path);
  return disk.size() >= offset + data.size() && std::memcmp(disk.data() + offset, data.data(), data.size()) == 0;
}

class ControllerGather : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { TAI_SKIP_UNLESS_ENGINE_AVAILABLE(GetParam()); }
};

TEST_P(ControllerGather, TenAdjacentBlocksReachTheEngineInOneWrite) {
  ScratchDir dir;
  const std::string path = dir.file("gathered");
  Faulty fc("", GetParam());
  File f = fc.open(path);
  const auto data = pattern(kRecord, 1);
  ASSERT_TRUE(finished(f.write(kAt, data.data(), data.size())));
  EXPECT_EQ(fc.engine_writes(), 0u) << "the record was expected to stay cached until fsync";
  const Receipt synced = f.fsync();
  ASSERT_TRUE(finished(synced));
  EXPECT_TRUE(synced.ok()) << synced.message();
  EXPECT_EQ(fc.engine_writes(), 1u);
  const ControllerStats s = fc.ctl.stats();
  EXPECT_EQ(s.engine_writes, 1u);
  EXPECT_EQ(s.gathered_blocks, 10u);
  EXPECT_EQ(s.bytes_to_engine, kRecord);
  EXPECT_TRUE(file_holds(path, kAt, data));
  EXPECT_TRUE(finished(f.close()));
}

TEST_P(ControllerGather, AFailedGatheredWriteFailsTheFsyncAndTheNextOneWritesTheRecordAgain) {
  ScratchDir dir;
  const std::string path = dir.file("failed");
  Faulty fc("write:nth=1:errno=EIO:once", GetParam());
  File f = fc.open(path);
  const auto data = pattern(kRecord, 2);
  ASSERT_TRUE(finished(f.write(kAt, data.data(), data.size())));
  const Receipt failed = f.fsync();
  ASSERT_TRUE(finished(failed));
  EXPECT_EQ(failed.error(), std::error_code(EIO, std::generic_category())) << failed.message();
  EXPECT_EQ(fc.ctl.stats().write_back_errors, 10u) << "every block the write covered failed";
  EXPECT_EQ(fc.ctl.stats().dirty_bytes, kRecord) << "and stays dirty";
  EXPECT_FALSE(file_holds(path, kAt, data));
  const Receipt again = f.fsync();
  ASSERT_TRUE(finished(again));
  EXPECT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(fc.engine_writes(), 2u) << "written again, in one write";
  EXPECT_TRUE(file_holds(path, kAt, data));
  EXPECT_TRUE(finished(f.close()));
}

TEST_P(ControllerGather, AShortGatheredWriteFailsTheFsyncAndTheNextOneWritesTheRecordAgain) {
  ScratchDir dir;
  const std::string path = dir.file("short");
  Faulty fc("write:nth=1:short=half:once", GetParam());
  File f = fc.open(path);
  const auto data = pattern(kRecord, 3);
  ASSERT_TRUE(finished(f.write(kAt, data.data(), data.size())));
  const Receipt failed = f.fsync();
  ASSERT_TRUE(finished(failed));
  EXPECT_FALSE(failed.ok()) << "a short write-back must fail the fsync";
  EXPECT_EQ(fc.ctl.stats().dirty_bytes, kRecord);
  const Receipt again = f.fsync();
  ASSERT_TRUE(finished(again));
  EXPECT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(fc.engine_writes(), 2u);
  EXPECT_TRUE(file_holds(path, kAt, data));
  EXPECT_TRUE(finished(f.close()));
}

TEST_P(ControllerGather, AFailedEngineSyncAfterAGatheredWriteMakesTheNextFsyncWriteItAgain) {
  ScratchDir dir;
  const std::string path = dir.file("sync");
  Faulty fc("fsync:nth=1:errno=EIO:once", GetParam());
  File f = fc.open(path);
  const auto data = pattern(kRecord, 4);
  ASSERT_TRUE(finished(f.write(kAt, data.data(), data.size())));
  const Receipt failed = f.fsync();
  ASSERT_TRUE(finished(failed));
  EXPECT_EQ(failed.error(), std::error_code(EIO, std::generic_category())) << failed.message();
  EXPECT_EQ(fc.engine_writes(), 1u);
  const Receipt again = f.fsync();
  ASSERT_TRUE(finished(again));
  EXPECT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(fc.engine_writes(), 2u) << "the fsync after the failed one must write the record again";
  EXPECT_TRUE(file_holds(path, kAt, data));
  EXPECT_TRUE(finished(f.close()));
}

INSTANTIATE_TEST_SUITE_P(Controller, ControllerGather, testing::Values("posix", "uring", "libaio"),
                         [](const testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace tai::test
