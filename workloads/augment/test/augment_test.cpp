// The workload's tests: deterministic transforms and records, the codecs, and a small run of every
// built method whose output must verify and match the others record for record.
#include <gtest/gtest.h>
#include <omp.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <string>

#include "image.hpp"
#include "method.hpp"
#include "record.hpp"
#include "run.hpp"

using namespace augment;

namespace {
// Every OpenMP region of these tests (synthetic_set's too) runs AUGMENT_TEST_THREADS threads: 1
// under ThreadSanitizer, which cannot see libgomp's synchronisation (see CMakeLists.txt).
const int kOmpThreads = (omp_set_num_threads(AUGMENT_TEST_THREADS), AUGMENT_TEST_THREADS);
const std::vector<Size> kTiny = {{40, 32}, {56, 48}, {33, 65}};

std::string scratch(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/tai_augment_test." + std::to_string(::getpid()) + "." + name;
}

// Why the scratch directory refuses O_DIRECT ("" when it takes it): ramfs, tmpfs before Linux 6.6
// and some FUSE and network file systems do. The direct runs skip there with the reason.
std::string direct_io_refused() {
  const std::string probe = scratch("direct-probe");
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
    return "";
  }
  const int err = errno;
  ::unlink(probe.c_str());
  return "O_DIRECT is refused in the scratch directory (" + probe + ": " + std::strerror(err) +
         "); set TMPDIR to a directory on a disk file system";
}
}  // namespace

TEST(AugmentImage, SyntheticSetIsDeterministicAndMixed) {
  const auto a = synthetic_set(7, 6, kTiny);
  const auto b = synthetic_set(7, 6, kTiny);
  ASSERT_EQ(a.size(), 6u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].data, b[i].data) << i;
    EXPECT_EQ(a[i].format, i % 2 ? Format::jpeg : Format::png);
  }
  EXPECT_NE(synthetic_set(8, 1, kTiny)[0].data, a[0].data);
}

TEST(AugmentImage, PngRoundTripIsExactJpegDecodes) {
  const Image img = synthetic_image(3, 5, {37, 29});
  Bytes png;
  ASSERT_TRUE(encode_png(img, 6, png, nullptr));
  Image back;
  std::string err;
  ASSERT_TRUE(decode_png(png, back, &err)) << err;
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.height, 29);
  EXPECT_EQ(back.pixels, img.pixels);
  Bytes jpg;
  ASSERT_TRUE(encode_jpeg(img, 90, jpg, nullptr));
  ASSERT_TRUE(decode_jpeg(jpg, back, &err)) << err;
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.height, 29);
}

TEST(AugmentImage, CorruptInputsFailWithAReason) {
  Bytes junk(100, 0x5a);
  Image out;
  std::string err;
  EXPECT_FALSE(decode_png(junk, out, &err));
  EXPECT_FALSE(err.empty());
  err.clear();
  EXPECT_FALSE(decode_jpeg(junk, out, &err));
  EXPECT_FALSE(err.empty());
  // A truncated PNG.
  const auto set = synthetic_set(1, 1, kTiny);
  Bytes cut(set[0].data.begin(), set[0].data.begin() + set[0].data.size() / 2);
  EXPECT_FALSE(decode_png(cut, out, &err));
}

TEST(AugmentTransform, DeterministicPerImageId) {
  const Image img = synthetic_image(1, 0, {64, 48});
  for (std::uint64_t id = 0; id < 20; ++id) {
    const Image a = transform(img, 9, id, {});
    const Image b = transform(img, 9, id, {});
    EXPECT_EQ(a.width, b.width);
    EXPECT_EQ(a.height, b.height);
    EXPECT_EQ(a.pixels, b.pixels) << id;
    EXPECT_GE(std::min(a.width, a.height), 28);  // at least 60% of a side
  }
  // Different ids draw different transforms (some of 20 must differ from id 0).
  const Image ref = transform(img, 9, 0, {});
  int differ = 0;
  for (std::uint64_t id = 1; id < 20; ++id) differ += transform(img, 9, id, {}).pixels != ref.pixels;
  EXPECT_GT(differ, 15);
  const Image g = transform(img, 9, 3, TransformOptions{true});
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels.size(), std::size_t(g.width) * g.height);
}

TEST(AugmentTransform, RecordsAreDeterministicAcrossThreads) {
  const auto set = synthetic_set(4, 8, kTiny);
  RunConfig config;
  config.seed = 4;
  std::vector<Bytes> first(set.size()), second(set.size());
  for (std::size_t i = 0; i < set.size(); ++i) ASSERT_TRUE(make_output_record(set[i], config, first[i], nullptr));
#pragma omp parallel for num_threads(AUGMENT_TEST_THREADS)
  for (std::size_t i = 0; i < set.size(); ++i) make_output_record(set[i], config, second[i], nullptr);
  EXPECT_EQ(first, second);
}

TEST(AugmentRecord, ScanCatchesCorruptionAndTruncation) {
  const std::string path = scratch("verify");
  Bytes rec, all;
  for (std::uint64_t id : {1, 0, 2}) {
    make_record(id, Bytes(50 + id, static_cast<unsigned char>(id)), rec);
    all.insert(all.end(), rec.begin(), rec.end());
  }
  auto write_file = [&](const Bytes& b) { std::ofstream(path, std::ios::binary).write((const char*)b.data(), b.size()); };
  write_file(all);
  FileScan ok = scan_file(path, false);
  ASSERT_TRUE(ok.ok) << ok.error;
  ASSERT_EQ(ok.records.size(), 3u);
  EXPECT_EQ(ok.records[1].id, 0u);
  EXPECT_EQ(ok.records[1].offset, 24u + 51);
  EXPECT_EQ(ok.records[1].crc32c, crc32c_of(all.data() + 75, 74));
  Bytes bad = all;
  bad[30] ^= 1;  // a payload byte of the first record
  write_file(bad);
  const FileScan v = scan_file(path, false);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.error.find("CRC"), std::string::npos) << v.error;
  bad = all;
  bad.resize(bad.size() - 1);
  write_file(bad);
  EXPECT_FALSE(scan_file(path, false).ok);
  std::remove(path.c_str());
}

TEST(AugmentRecord, Crc32cIsCastagnoli) {
  // The check value of CRC-32C (RFC 3720 B.4 and every CRC catalogue): "123456789" -> e3069283.
  EXPECT_EQ(crc32c_of("123456789", 9), 0xe3069283u);
  EXPECT_EQ(crc32_of("123456789", 9), 0xcbf43926u);  // zlib's CRC-32 check value
}

TEST(AugmentRecord, PaddedRecordsScanAndPaddingMustBeZero) {
  const std::string path = scratch("padded");
  Bytes rec, all;
  for (std::uint64_t id : {0, 1}) {
    make_record(id, Bytes(5000 + id, 7), rec, 4096);
    EXPECT_EQ(rec.size(), 8192u);
    all.insert(all.end(), rec.begin(), rec.end());
  }
  auto write_file = [&](const Bytes& b) { std::ofstream(path, std::ios::binary).write((const char*)b.data(), b.size()); };
  write_file(all);
  const FileScan v = scan_file(path, false);
  EXPECT_TRUE(v.ok) << v.error;
  EXPECT_EQ(v.bytes, 16384u);
  all[8000] = 1;  // in the first record's padding
  write_file(all);
  EXPECT_FALSE(scan_file(path, false).ok);
  std::remove(path.c_str());
}

// A shared file as the MPI mode leaves it: two writers' records in chunks with zero tails, zeros
// after the last record (direct-I/O padding kept), one index per writer, one manifest with
// "shared-writers 2". verify_run must accept it, and catch a changed byte (in a record or in a
// gap), a missing index entry and a wrong image count.
TEST(AugmentRecord, SharedFileManifestVerifies) {
  const std::string base = scratch("shared");
  const std::string file = base + ".taia";
  const std::uint64_t chunk = 400;
  Bytes bytes;
  std::vector<IndexEntry> rank_entries[2];
  for (std::uint64_t id = 0; id < 6; ++id) {
    Bytes rec;
    make_record(id, Bytes(60 + 10 * id, static_cast<unsigned char>(id + 1)), rec);
    const unsigned rank = unsigned(id % 2);
    const std::uint64_t k = id / 2;  // each record in its own chunk: chunk (k*2 + rank)
    const std::uint64_t at = (k * 2 + rank) * chunk + (k == 1 ? 13 : 0);
    if (bytes.size() < at + rec.size()) bytes.resize(at + rec.size(), 0);
    std::copy(rec.begin(), rec.end(), bytes.begin() + std::ptrdiff_t(at));
    rank_entries[rank].push_back({id, 0, at, rec.size(), crc32c_of(rec.data(), rec.size())});
  }
  bytes.resize((bytes.size() + 4095) / 4096 * 4096, 0);  // the padding a shared direct file keeps
  auto write_bytes = [&](const Bytes& b) { std::ofstream(file, std::ios::binary).write((const char*)b.data(), b.size()); };
  write_bytes(bytes);
  std::string err;
  for (unsigned p = 0; p < 2; ++p) ASSERT_TRUE(write_index(file + ".rank" + std::to_string(p), rank_entries[p], &err)) << err;
  RunManifest m;
  m.method = "tai-def";
  m.content = "test shared";
  m.inputs = 6;
  m.images = 6;
  m.shared_writers = 2;
  m.files = {file.substr(file.rfind('/') + 1)};
  const std::string manifest = base + ".run";
  ASSERT_TRUE(write_manifest(manifest, m, &err)) << err;
  RunManifest back;
  ASSERT_TRUE(read_manifest(manifest, back, &err)) << err;
  EXPECT_EQ(back.shared_writers, 2u);

  RunCheck c = verify_run(manifest, false);
  EXPECT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.records_read, 6u);
  EXPECT_FALSE(scan_file(file, false).ok) << "without zero gaps the holes are bad headers";

  Bytes bad = bytes;
  bad[chunk + 30] ^= 0x40;  // a payload byte of rank 1's first record
  write_bytes(bad);
  c = verify_run(manifest, false);
  EXPECT_FALSE(c.ok);
  bad = bytes;
  bad[3 * chunk - 5] = 1;  // a byte in the zero tail of rank 0's second chunk
  write_bytes(bad);
  c = verify_run(manifest, false);
  EXPECT_FALSE(c.ok);
  bad = bytes;
  bad.back() = 1;  // in the kept padding after the last record
  write_bytes(bad);
  c = verify_run(manifest, false);
  EXPECT_FALSE(c.ok);
  write_bytes(bytes);
  std::vector<IndexEntry> fewer(rank_entries[1].begin(), rank_entries[1].end() - 1);
  ASSERT_TRUE(write_index(file + ".rank1", fewer, &err)) << err;
  c = verify_run(manifest, false);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.error.find("index lists"), std::string::npos) << c.error;
  ASSERT_TRUE(write_index(file + ".rank1", rank_entries[1], &err)) << err;
  m.images = 7;
  ASSERT_TRUE(write_manifest(manifest, m, &err)) << err;
  c = verify_run(manifest, false);
  EXPECT_FALSE(c.ok);
  for (const std::string& f : {file, file + ".rank0.idx", file + ".rank1.idx", manifest}) std::remove(f.c_str());
}

TEST(AugmentMethods, UnknownNamesAreRejected) {
  EXPECT_EQ(find_method("nosuch", nullptr), nullptr);
  EXPECT_EQ(find_method("posix:uring", nullptr), nullptr);  // only TAI takes an engine suffix
  std::string suffix;
  ASSERT_NE(find_method("tai-def:posix", &suffix), nullptr);
  EXPECT_EQ(suffix, "posix");
}

TEST(AugmentRun, SyncDrawIsSeededAndNearOneInF) {
  int hits = 0;
  for (std::uint64_t id = 0; id < 30000; ++id) {
    EXPECT_EQ(sync_after(5, id, 0, 30), sync_after(5, id, 0, 30));
    hits += sync_after(5, id, 0, 30);
    EXPECT_FALSE(sync_after(5, id, 0, 0));
    EXPECT_TRUE(sync_after(5, id, 0, 1));
  }
  EXPECT_NEAR(hits, 1000, 150);  // 30000 / 30, within ~5 standard deviations
}

namespace {
// Every built method (and TAI on the posix engine) runs `config` over a tiny synthetic set; each
// run must succeed or be refused with a reason, and every run must verify against the others.
void run_every_method(const std::string& name, RunConfig config, std::size_t images = 40) {
  const auto set = synthetic_set(11, images, kTiny);
  config.threads = kOmpThreads;
  config.seed = 11;
  config.content = "test seed=11";
  std::vector<std::string> specs;
  for (const MethodInfo& m : methods())
    if (m.unavailable.empty()) specs.push_back(m.name);
  specs.push_back("tai-def:posix");
  std::vector<std::string> manifests;
  std::vector<std::string> cleanup;
  for (const std::string& spec : specs) {
    std::string stem = scratch(name + "." + spec);
    std::replace(stem.begin(), stem.end(), ':', '_');
    const RunResult r = run_method(set, spec, stem, config);
    for (const std::string& f : r.files) cleanup.insert(cleanup.end(), {f, index_path(f)});
    cleanup.push_back(r.manifest);
    if (!r.refused.empty()) {  // e.g. libaio where the filesystem refuses O_DIRECT, cstdio with --direct
      std::printf("%s: skipped here: %s\n", spec.c_str(), r.refused.c_str());
      continue;
    }
    ASSERT_TRUE(r.ok()) << spec << ": " << r.error;
    EXPECT_EQ(r.images, images) << spec;
    EXPECT_EQ(r.writes, images * config.amplify * (config.overwrite ? 2 : 1)) << spec;
    const RunCheck c = verify_run(r.manifest, true);
    EXPECT_TRUE(c.ok) << spec << ": " << c.error;
    EXPECT_EQ(c.bytes, r.bytes) << spec;
    EXPECT_EQ(c.records_read, images * config.amplify) << spec;
    manifests.push_back(r.manifest);
  }
  EXPECT_GE(manifests.size(), 4u);
  EXPECT_TRUE(verify_runs(manifests, false));
  for (const std::string& f : cleanup) std::remove(f.c_str());
}
}  // namespace

TEST(AugmentMethods, EveryMethodWritesRecordsThatVerify) {
  RunConfig config;
  config.batch = 9;
  run_every_method("plain", config);
}

TEST(AugmentMethods, OverwriteAmplifyFsyncEveryAndSeveralFiles) {
  RunConfig config;
  config.batch = 7;
  config.overwrite = true;
  config.amplify = 3;
  config.fsync_every = 4;
  config.files = 3;
  run_every_method("knobs", config, 30);
}

TEST(AugmentMethods, DirectPaddedAndFdatasync) {
  if (const std::string why = direct_io_refused(); !why.empty()) GTEST_SKIP() << why;
  RunConfig config;
  config.batch = 8;
  config.method.direct = true;
  config.method.fdatasync = true;
  config.fsync_every = 5;
  config.overwrite = true;
  run_every_method("direct", config, 24);
}

TEST(AugmentMethods, DirectUnpaddedGoesThroughTheCache) {
  if (const std::string why = direct_io_refused(); !why.empty()) GTEST_SKIP() << why;
  RunConfig config;
  config.batch = 8;
  config.method.direct = true;
  config.method.direct_unpadded = true;
  config.fsync_every = 3;
  run_every_method("unpadded", config, 24);
}

TEST(AugmentRun, SyncsFollowTheSeededDraw) {
  const auto set = synthetic_set(3, 50, kTiny);
  RunConfig config;
  config.threads = kOmpThreads;
  config.seed = 3;
  config.fsync_every = 3;
  config.amplify = 2;
  std::uint64_t expected = 0;
  for (const auto& e : set)
    for (unsigned c = 0; c < 2; ++c) expected += sync_after(3, e.id, c, 3);
  const std::string stem = scratch("draw");
  const RunResult r = run_method(set, "posix", stem, config);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.syncs, expected);
  EXPECT_GT(expected, 10u);
  for (const std::string& f : {r.files[0], index_path(r.files[0]), r.manifest}) std::remove(f.c_str());
}

TEST(AugmentVerify, CatchesABadIndexAMissingCopyAndADifferentRun) {
  const auto set = synthetic_set(2, 12, kTiny);
  RunConfig config;
  config.threads = kOmpThreads;
  config.seed = 2;
  config.amplify = 2;
  config.content = "seed=2";
  const std::string a = scratch("va"), b = scratch("vb");
  const RunResult ra = run_method(set, "posix", a, config);
  const RunResult rb = run_method(set, "posix", b, config);
  ASSERT_TRUE(ra.ok() && rb.ok());
  ASSERT_TRUE(verify_runs({ra.manifest, rb.manifest}, true));

  // A wrong CRC32C in the index.
  std::vector<IndexEntry> index;
  std::string err;
  ASSERT_TRUE(read_index(ra.files[0], index, &err)) << err;
  std::vector<IndexEntry> broken = index;
  broken[3].crc32c ^= 1;
  ASSERT_TRUE(write_index(ra.files[0], broken, &err));
  EXPECT_FALSE(verify_run(ra.manifest, false).ok);
  ASSERT_TRUE(write_index(ra.files[0], index, &err));
  EXPECT_TRUE(verify_run(ra.manifest, false).ok);

  // A run that claims amplify 3 is missing copies.
  RunManifest m;
  ASSERT_TRUE(read_manifest(ra.manifest, m, &err));
  m.amplify = 3;
  ASSERT_TRUE(write_manifest(ra.manifest, m, &err));
  EXPECT_FALSE(verify_run(ra.manifest, false).ok);
  m.amplify = 2;
  ASSERT_TRUE(write_manifest(ra.manifest, m, &err));

  // A run of another seed under the same content label differs image by image.
  config.seed = 99;
  const auto other = synthetic_set(2, 12, kTiny);
  const std::string c = scratch("vc");
  const RunResult rc = run_method(other, "posix", c, config);
  ASSERT_TRUE(rc.ok());
  EXPECT_TRUE(verify_run(rc.manifest, false).ok);
  EXPECT_FALSE(verify_runs({ra.manifest, rc.manifest}, false));
  for (const RunResult* r : {&ra, &rb, &rc})
    for (const std::string& f : {r->files[0], index_path(r->files[0]), r->manifest}) std::remove(f.c_str());
}
