// The workload's tests: deterministic transforms and records, the codecs, and a small run of every
// built method whose output must verify and match the others record for record.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

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

TEST(AugmentRecord, VerifyCatchesCorruptionAndMissingIds) {
  const std::string path = scratch("verify");
  Bytes rec, all;
  for (std::uint64_t id : {1, 0, 2}) {
    make_record(id, Bytes(50 + id, static_cast<unsigned char>(id)), rec);
    all.insert(all.end(), rec.begin(), rec.end());
  }
  auto write_file = [&](const Bytes& b) { std::ofstream(path, std::ios::binary).write((const char*)b.data(), b.size()); };
  write_file(all);
  EXPECT_TRUE(verify_file(path, 3).ok);
  EXPECT_FALSE(verify_file(path, 4).ok);
  Bytes bad = all;
  bad[30] ^= 1;  // a payload byte of the first record
  write_file(bad);
  const VerifyResult v = verify_file(path, 3);
  EXPECT_FALSE(v.ok);
  EXPECT_NE(v.error.find("CRC"), std::string::npos) << v.error;
  bad = all;
  bad.resize(bad.size() - 1);
  write_file(bad);
  EXPECT_FALSE(verify_file(path, 3).ok);
  std::remove(path.c_str());
}

TEST(AugmentRecord, PaddedRecordsVerifyAndPaddingMustBeZero) {
  const std::string path = scratch("padded");
  Bytes rec, all;
  for (std::uint64_t id : {0, 1}) {
    make_record(id, Bytes(5000 + id, 7), rec, 4096);
    EXPECT_EQ(rec.size(), 8192u);
    all.insert(all.end(), rec.begin(), rec.end());
  }
  auto write_file = [&](const Bytes& b) { std::ofstream(path, std::ios::binary).write((const char*)b.data(), b.size()); };
  write_file(all);
  const VerifyResult v = verify_file(path, 2);
  EXPECT_TRUE(v.ok) << v.error;
  EXPECT_EQ(v.bytes, 16384u);
  all[8000] = 1;  // in the first record's padding
  write_file(all);
  EXPECT_FALSE(verify_file(path, 2).ok);
  std::remove(path.c_str());
}

TEST(AugmentMethods, UnknownNamesAreRejected) {
  EXPECT_EQ(find_method("nosuch", nullptr), nullptr);
  EXPECT_EQ(find_method("posix:uring", nullptr), nullptr);  // only TAI takes an engine suffix
  std::string suffix;
  ASSERT_NE(find_method("tai-def:posix", &suffix), nullptr);
  EXPECT_EQ(suffix, "posix");
}

// Every built method writes 40 tiny images (2 threads, batches of 9) and its file verifies; all
// methods' files hold the same records.
TEST(AugmentMethods, EveryMethodWritesRecordsThatVerify) {
  const auto set = synthetic_set(11, 40, kTiny);
  RunConfig config;
  config.threads = kOmpThreads;
  config.batch = 9;
  config.seed = 11;
  std::vector<std::string> specs;
  for (const MethodInfo& m : methods())
    if (m.unavailable.empty()) specs.push_back(m.name);
  specs.push_back("tai-def:posix");
  std::map<std::uint64_t, RecordInfo> reference;
  for (const std::string& spec : specs) {
    const std::string path = scratch(spec);
    const RunResult r = run_method(set, spec, path, config);
    if (!r.refused.empty()) {  // e.g. libaio where the filesystem refuses O_DIRECT
      std::printf("%s: skipped here: %s\n", spec.c_str(), r.refused.c_str());
      std::remove(path.c_str());
      continue;
    }
    ASSERT_TRUE(r.ok()) << spec << ": " << r.error;
    EXPECT_EQ(r.images, 40u) << spec;
    const VerifyResult v = verify_file(path, 40, true);
    EXPECT_TRUE(v.ok) << spec << ": " << v.error;
    EXPECT_EQ(v.bytes, r.bytes) << spec;
    if (reference.empty())
      reference = v.records;
    else
      for (const auto& [id, info] : v.records) {
        EXPECT_EQ(info.crc32, reference[id].crc32) << spec << " image " << id;
        EXPECT_EQ(info.length, reference[id].length) << spec << " image " << id;
      }
    std::remove(path.c_str());
  }
}
