// The JSON and CSV reports: escaping, null for what is unavailable, RFC 4180 quoting, and both
// read back by Python's json and csv modules (the readers a sweep script would use).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "report.hpp"

using namespace augment;

namespace {
std::string report_scratch(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/tai_augment_report." + std::to_string(::getpid()) + "." + name;
}

bool have_python() { return std::system("python3 -c 'import json, csv' >/dev/null 2>&1") == 0; }

// Runs a Python snippet with the file as sys.argv[1]; the snippet's asserts make the exit code.
int python_check(const std::string& code, const std::string& file) {
  const std::string script = report_scratch("check.py");
  std::ofstream(script) << code;
  const int rc = std::system(("python3 " + script + " " + file).c_str());
  std::remove(script.c_str());
  return rc;
}

RunSet sample() {
  RunSet set;
  set.config = {{"threads", 2}, {"method", "posix,tai-def:uring"}, {"overwrite", true},
                {"sizes", Value::json_literal("[[256,256],[640,480]]")}, {"input", nullptr}};
  set.machine = {{"hostname", "box"}, {"memory_total_bytes", std::uint64_t(1) << 40}};
  set.runs.push_back({{"method", "posix"}, {"engine", "posix"}, {"repeat", 1}, {"images_per_s", 123.25},
                      {"write_bytes", std::uint64_t(18446744073709551615ull)}, {"l1_dcm", nullptr},
                      {"note", "say \"hi\",\nthen\ttab \\ and \x01"}});
  set.runs.push_back({{"method", "tai-def:uring"}, {"engine", "tai-def on posix (uring refused: EPERM)"},
                      {"repeat", 1}, {"images_per_s", std::numeric_limits<double>::quiet_NaN()},
                      {"error", "fsync: EIO"}});
  return set;
}
}  // namespace

TEST(AugmentReport, JsonEscapesAndNumbers) {
  EXPECT_EQ(json_quote("a\"b\\c\nd\re\tf\x01g"), "\"a\\\"b\\\\c\\nd\\re\\tf\\u0001g\"");
  EXPECT_EQ(json_quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");  // UTF-8 passes through
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(3), "3");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(Value(std::numeric_limits<double>::quiet_NaN()).to_json(), "null");
  EXPECT_TRUE(Value(std::numeric_limits<double>::infinity()).is_null());
  EXPECT_EQ(Value(-5).to_json(), "-5");
  EXPECT_EQ(Value(std::uint64_t(18446744073709551615ull)).to_json(), "18446744073709551615");
  EXPECT_EQ(Value(true).to_json(), "true");
  EXPECT_EQ(Value("x").to_json(), "\"x\"");  // a const char* is a string, not a bool
  EXPECT_EQ(Value().to_json(), "null");
}

TEST(AugmentReport, CsvQuotesPerRfc4180) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field("cr\r"), "\"cr\r\"");
  const RunSet set = sample();
  const std::string csv = to_csv(set.runs);
  // Header: the union of keys, first-seen order; the second run has no write_bytes, the first no error.
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "method,engine,repeat,images_per_s,write_bytes,l1_dcm,note,error");
  EXPECT_NE(csv.find("tai-def:uring,tai-def on posix (uring refused: EPERM),1,,,,,fsync: EIO\n"), std::string::npos)
      << csv;
}

TEST(AugmentReport, JsonAndCsvReadBackInPython) {
  if (!have_python()) GTEST_SKIP() << "python3 is not installed";
  const RunSet set = sample();
  const std::string json_path = report_scratch("run.json"), csv_path = report_scratch("run.csv");
  std::string err;
  ASSERT_TRUE(write_text_file(json_path, to_json(set), &err)) << err;
  ASSERT_TRUE(write_text_file(csv_path, to_csv(set.runs), &err)) << err;
  EXPECT_EQ(python_check(R"(
import json, sys
d = json.load(open(sys.argv[1]))
assert list(d) == ["schema", "config", "machine", "runs"], list(d)
assert d["schema"] == "tai-augment/1"
assert list(d["config"]) == ["threads", "method", "overwrite", "sizes", "input"]
assert d["config"]["sizes"] == [[256, 256], [640, 480]] and d["config"]["input"] is None
assert d["config"]["overwrite"] is True and d["config"]["threads"] == 2
assert d["machine"]["memory_total_bytes"] == 2 ** 40
r0, r1 = d["runs"]
assert r0["note"] == 'say "hi",\nthen\ttab \\ and \x01', repr(r0["note"])
assert r0["images_per_s"] == 123.25 and r0["l1_dcm"] is None
assert r0["write_bytes"] == 18446744073709551615
assert r1["images_per_s"] is None and r1["error"] == "fsync: EIO"
)",
                         json_path),
            0);
  EXPECT_EQ(python_check(R"(
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
assert len(rows) == 3, rows
assert rows[0][-1] == "error" and len(rows[0]) == 8
assert rows[1][6] == 'say "hi",\nthen\ttab \\ and \x01', repr(rows[1][6])
assert rows[1][5] == "" and rows[2][3] == "" and rows[2][7] == "fsync: EIO"
assert all(len(r) == 8 for r in rows)
)",
                         csv_path),
            0);
  std::remove(json_path.c_str());
  std::remove(csv_path.c_str());
}

TEST(AugmentReport, MachineDescriptionIsValidJson) {
  // The directory this test runs in: wherever the user builds (a /home or /scratch partition, a
  // parallel file system, a tmpfs, a chroot whose root is not a mount point).
  char cwd_buf[4096];
  ASSERT_NE(::getcwd(cwd_buf, sizeof cwd_buf), nullptr);
  const std::string cwd = cwd_buf;
  const Fields m = describe_machine(cwd);
  auto find = [&](const std::string& key) -> const Value* {
    for (const auto& f : m)
      if (f.first == key) return &f.second;
    return nullptr;
  };
  for (const char* key : {"hostname", "kernel", "cpu_model", "hardware_threads", "memory_total_bytes", "output_fs",
                          "output_mount_source", "output_block_device", "output_device_rotational", "compiler"})
    EXPECT_NE(find(key), nullptr) << key;
  ASSERT_NE(find("kernel"), nullptr);
  EXPECT_NE(find("kernel")->to_json().find("Linux"), std::string::npos);
  EXPECT_FALSE(find("output_fs")->is_null());
  EXPECT_FALSE(find("memory_total_bytes")->is_null());
  // Derived, not assumed: null when this process's mountinfo lists no mount holding the
  // directory (a chroot), else a mount point that is the directory or one above it.
  ASSERT_NE(find("output_mount_point"), nullptr);
  const Value* point = find("output_mount_point");
  if (!point->is_null()) {
    const std::string json = point->to_json();
    ASSERT_GE(json.size(), 3u) << json;
    const std::string mount = json.substr(1, json.size() - 2);
    EXPECT_TRUE(mount == "/" || cwd == mount || cwd.compare(0, mount.size() + 1, mount + "/") == 0)
        << "mount point " << json << " does not hold " << cwd;
    EXPECT_FALSE(find("output_mount_type")->is_null());
  } else {
    EXPECT_TRUE(find("output_mount_type")->is_null());
    EXPECT_TRUE(find("output_block_device")->is_null());
  }
  EXPECT_EQ(filesystem_name(0xEF53), "ext2/3/4");
  EXPECT_EQ(filesystem_name(0x1234), "0x1234");
  if (!have_python()) return;
  RunSet set;
  set.machine = m;
  const std::string path = report_scratch("machine.json");
  ASSERT_TRUE(write_text_file(path, to_json(set), nullptr));
  EXPECT_EQ(python_check("import json, sys\nd = json.load(open(sys.argv[1]))\nassert d['runs'] == []\n"
                         "assert d['machine']['hardware_threads'] >= 1\n",
                         path),
            0);
  std::remove(path.c_str());
}

// The mount-point lookup on mountinfo texts of other machines' shapes.
namespace {
std::optional<MountEntry> holding(const std::string& path, const std::string& text) {
  std::istringstream in(text);
  return mount_holding(path, in);
}
}  // namespace

TEST(AugmentReport, MountHoldingAChrootWithoutRoot) {
  // A chroot: only what was mounted inside the new root is listed, relative to it, and "/" is not.
  const std::string chroot =
      "41 30 0:5 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
      "42 30 0:6 / /dev rw,nosuid,relatime - devtmpfs udev rw,size=4096k\n"
      "43 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw\n";
  EXPECT_FALSE(holding("/work/build/release", chroot).has_value());
  EXPECT_FALSE(holding("/", chroot).has_value());
  // "/devices" is not under "/dev".
  EXPECT_FALSE(holding("/devices/x", chroot).has_value());
  const auto dev = holding("/dev/shm", chroot);
  ASSERT_TRUE(dev.has_value());
  EXPECT_EQ(dev->point, "/dev");
  EXPECT_EQ(dev->type, "devtmpfs");
}

TEST(AugmentReport, MountHoldingASeparateHome) {
  const std::string text =
      "22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
      "23 22 254:2 / /home rw,relatime shared:2 - xfs /dev/vda2 rw,attr2\n"
      "24 22 0:31 / /home2 rw - tmpfs tmpfs rw\n";
  const auto home = holding("/home/user/tai/build", text);
  ASSERT_TRUE(home.has_value());
  EXPECT_EQ(home->point, "/home");
  EXPECT_EQ(home->type, "xfs");
  EXPECT_EQ(home->source, "/dev/vda2");
  EXPECT_EQ(home->devno, "254:2");
  EXPECT_EQ(holding("/home", text)->point, "/home");
  EXPECT_EQ(holding("/homework", text)->point, "/");
  EXPECT_EQ(holding("/home2/x", text)->type, "tmpfs");
  EXPECT_EQ(holding("/usr/bin", text)->devno, "254:1");
}

TEST(AugmentReport, MountHoldingAnOverlayRootAndStackedMounts) {
  // A container: an overlay root, a bind mount with a space (escaped \040) in its path, and a
  // second file system mounted over the first at the same point (the later line wins).
  const std::string text =
      "500 450 0:51 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
      "501 500 259:3 /data /scratch\\040space rw - ext4 /dev/nvme0n1p3 rw\n"
      "502 500 0:60 / /mnt rw - tmpfs first rw\n"
      "503 502 0:61 / /mnt rw - tmpfs second rw\n"
      "a line that is not mountinfo\n";
  const auto root = holding("/app/out", text);
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->point, "/");
  EXPECT_EQ(root->type, "overlay");
  const auto spaced = holding("/scratch space/run1", text);
  ASSERT_TRUE(spaced.has_value());
  EXPECT_EQ(spaced->point, "/scratch space");
  EXPECT_EQ(spaced->source, "/dev/nvme0n1p3");
  EXPECT_EQ(holding("/mnt/a", text)->source, "second");
}
