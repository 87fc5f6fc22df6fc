// --input DIR: a tree of good, corrupt, truncated, misnamed and nested files gives the right
// images in a deterministic order and one skip line per bad file; unusable directories are errors.
#include <gtest/gtest.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <string>

#include "image.hpp"
#include "input_dir.hpp"
#include "record.hpp"
#include "run.hpp"

using namespace augment;
namespace fs = std::filesystem;

namespace {
class InputDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    root_ = fs::path(tmp ? tmp : "/tmp") /
            ("tai_augment_input." + std::to_string(::getpid()) + "." +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void put(const std::string& rel, const Bytes& data) {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  }
  Bytes png() const {
    Bytes out;
    EXPECT_TRUE(encode_png(synthetic_image(1, 0, {40, 30}), 6, out, nullptr));
    return out;
  }
  Bytes jpeg() const {
    Bytes out;
    EXPECT_TRUE(encode_jpeg(synthetic_image(1, 1, {48, 32}), 90, out, nullptr));
    return out;
  }
  std::string path(const std::string& rel) const { return (root_ / rel).string(); }

  fs::path root_;
};

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
}
}  // namespace

TEST_F(InputDirTest, TakesGoodImagesSkipsBadOnesInPathOrder) {
  const Bytes good_png = png(), good_jpeg = jpeg();
  put("b/good.png", good_png);
  put("a/deep/er/photo.JPG", good_jpeg);  // nested, upper-case extension
  put("c/really_png.jpeg", good_png);     // misnamed: the magic bytes decide
  put("c/corrupt.png", Bytes(good_png.begin(), good_png.begin() + 40));  // signature, then cut
  put("c/truncated.jpg", Bytes(good_jpeg.begin(), good_jpeg.begin() + long(good_jpeg.size() * 2 / 3)));
  Bytes gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0};
  put("d/animation.png", gif);  // unsupported content behind an image name
  put("d/empty.jpg", {});
  put("notes.txt", {'h', 'i'});
  put("e/image.gif", gif);  // not an image extension: ignored, not skipped

  InputSet set;
  std::string err;
  ASSERT_TRUE(load_input_dir(root_.string(), set, &err)) << err;
  ASSERT_EQ(set.images.size(), 3u);
  EXPECT_EQ(set.images[0].path, path("a/deep/er/photo.JPG"));
  EXPECT_EQ(set.images[1].path, path("b/good.png"));
  EXPECT_EQ(set.images[2].path, path("c/really_png.jpeg"));
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(set.images[i].id, i);
  EXPECT_EQ(set.images[0].format, Format::jpeg);
  EXPECT_EQ(set.images[1].format, Format::png);
  EXPECT_EQ(set.images[2].format, Format::png);
  EXPECT_EQ(set.images[0].data, good_jpeg);
  EXPECT_EQ(set.images[2].data, good_png);
  EXPECT_EQ(set.bytes, good_jpeg.size() + 2 * good_png.size());
  EXPECT_EQ(set.ignored, 2u);
  ASSERT_EQ(set.skipped.size(), 4u);
  EXPECT_TRUE(mentions(set.skipped, path("c/corrupt.png") + ": PNG does not decode"));
  EXPECT_TRUE(mentions(set.skipped, path("c/truncated.jpg") + ": JPEG is truncated"));
  EXPECT_TRUE(mentions(set.skipped, path("d/animation.png") + ": neither a PNG nor a JPEG"));
  EXPECT_TRUE(mentions(set.skipped, path("d/empty.jpg") + ": empty file"));
  for (const std::string& line : set.skipped) EXPECT_EQ(line.find('\n'), std::string::npos);
  // Every kept image decodes: the loop cannot meet a bad one.
  for (const EncodedImage& img : set.images) {
    Image out;
    EXPECT_TRUE(decode(img, out, &err)) << err;
  }

  // Without the data: same list, same formats, empty buffers; read_encoded brings them back.
  InputSet lean;
  ASSERT_TRUE(load_input_dir(root_.string(), lean, &err, 0)) << err;
  ASSERT_EQ(lean.images.size(), set.images.size());
  for (std::size_t i = 0; i < lean.images.size(); ++i) {
    EXPECT_TRUE(lean.images[i].data.empty());
    EXPECT_EQ(lean.images[i].format, set.images[i].format);
    EXPECT_EQ(lean.images[i].path, set.images[i].path);
    Bytes bytes;
    ASSERT_TRUE(read_encoded(lean.images[i].path, bytes, &err)) << err;
    EXPECT_EQ(bytes, set.images[i].data);
  }
}

TEST_F(InputDirTest, UnusableDirectoriesAreClearErrors) {
  InputSet set;
  std::string err;
  EXPECT_FALSE(load_input_dir(path("missing"), set, &err));
  EXPECT_NE(err.find("no such directory"), std::string::npos) << err;

  put("file.png", png());
  err.clear();
  EXPECT_FALSE(load_input_dir(path("file.png"), set, &err));
  EXPECT_NE(err.find("not a directory"), std::string::npos) << err;

  fs::create_directories(root_ / "empty");
  err.clear();
  EXPECT_FALSE(load_input_dir(path("empty"), set, &err));
  EXPECT_NE(err.find("no usable image"), std::string::npos) << err;

  put("bad/only.png", {'n', 'o', 'p', 'e'});
  err.clear();
  EXPECT_FALSE(load_input_dir(path("bad"), set, &err));
  EXPECT_NE(err.find("no usable image (1 .png/.jpg/.jpeg file(s), 1 skipped"), std::string::npos) << err;
  EXPECT_EQ(set.skipped.size(), 1u);
}

TEST_F(InputDirTest, ReadEncodedNamesTheFileOnError) {
  Bytes out;
  std::string err;
  EXPECT_FALSE(read_encoded(path("nope.png"), out, &err));
  EXPECT_NE(err.find(path("nope.png")), std::string::npos) << err;
}

TEST(AugmentInputFormat, MagicBytesAndCompleteness) {
  Bytes p, j;
  ASSERT_TRUE(encode_png(synthetic_image(2, 0, {16, 16}), 6, p, nullptr));
  ASSERT_TRUE(encode_jpeg(synthetic_image(2, 1, {64, 64}), 80, j, nullptr));
  EXPECT_EQ(sniff_format(p), Format::png);
  EXPECT_EQ(sniff_format(j), Format::jpeg);
  EXPECT_FALSE(sniff_format(Bytes{0xff, 0xd8}).has_value());
  EXPECT_TRUE(jpeg_is_complete(j));
  for (std::size_t keep : {j.size() - 2, j.size() / 2, std::size_t(20), std::size_t(3)})
    EXPECT_FALSE(jpeg_is_complete(Bytes(j.begin(), j.begin() + long(keep)))) << keep;
  Bytes padded = j;
  padded.insert(padded.end(), {0, 0, 0});  // bytes after the end marker do not make it incomplete
  EXPECT_TRUE(jpeg_is_complete(padded));
  EXPECT_TRUE(has_image_extension("x/y/Z.JpEg"));
  EXPECT_TRUE(has_image_extension("a.png"));
  EXPECT_FALSE(has_image_extension("a.png.txt"));
  EXPECT_FALSE(has_image_extension("png"));
}

TEST_F(InputDirTest, ALoadedTreeRunsThroughAMethodAndVerifies) {
  // The synthetic set written out as files (ids 0..5 sort as 0.png < 1.jpg < ... in one directory).
  const auto set = synthetic_set(5, 6, {{40, 32}, {56, 48}});
  for (const EncodedImage& img : set)
    put("in/" + std::to_string(img.id) + (img.format == Format::png ? ".png" : ".jpg"), img.data);
  InputSet input;
  std::string err;
  ASSERT_TRUE(load_input_dir(path("in"), input, &err)) << err;
  ASSERT_EQ(input.images.size(), set.size());
  for (std::size_t i = 0; i < set.size(); ++i) EXPECT_EQ(input.images[i].data, set[i].data) << i;
  RunConfig config;
  config.threads = 1;
  config.content = "input_dir test";
  for (const bool read_input : {false, true}) {
    config.read_input = read_input;
    InputSet from;
    ASSERT_TRUE(load_input_dir(path("in"), from, &err, read_input ? 0 : kHoldEveryInput)) << err;
    const std::string stem = path(read_input ? "out-read" : "out-memory");
    const RunResult r = run_method(from.images, "posix", stem, config);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.images, set.size());
    const RunCheck check = verify_run(stem + ".run", true);
    EXPECT_TRUE(check.ok) << check.error;
    EXPECT_EQ(check.records.size(), set.size());
  }
}

TEST_F(InputDirTest, SyntheticSetAsFilesLoadsBackWithTheSameIds) {
  auto set = synthetic_set(3, 12, {{40, 32}, {24, 24}});
  std::string err;
  ASSERT_TRUE(write_input_files(set, path("synthetic"), &err)) << err;
  InputSet back;
  ASSERT_TRUE(load_input_dir(path("synthetic"), back, &err, 0)) << err;
  ASSERT_EQ(back.images.size(), set.size());
  EXPECT_TRUE(back.skipped.empty());
  for (std::size_t i = 0; i < set.size(); ++i) {
    EXPECT_EQ(back.images[i].id, set[i].id);
    EXPECT_EQ(back.images[i].path, set[i].path);  // zero-padded names: path order is id order
    EXPECT_EQ(back.images[i].format, set[i].format);
    Bytes bytes;
    ASSERT_TRUE(read_encoded(back.images[i].path, bytes, &err)) << err;
    EXPECT_EQ(bytes, set[i].data) << i;
  }
}

TEST_F(InputDirTest, EvictionEmptiesThePageCacheOfTheInputs) {
  EncodedImage big;
  big.data.resize(256 * 1024);
  for (std::size_t i = 0; i < big.data.size(); ++i) big.data[i] = static_cast<unsigned char>(i * 7);
  std::vector<EncodedImage> images = {big};
  std::string err;
  ASSERT_TRUE(write_input_files(images, path("evict"), &err)) << err;
  struct statfs sf {};
  ASSERT_EQ(::statfs(images[0].path.c_str(), &sf), 0);
  // tmpfs and ramfs pages are the file's only copy: the kernel cannot drop them.
  if (sf.f_type == 0x01021994 || sf.f_type == 0x858458f6)
    GTEST_SKIP() << "the scratch directory is on tmpfs or ramfs: its page cache cannot be dropped";
  std::size_t resident = 0, total = 0;
  ASSERT_TRUE(cached_pages(images[0].path, resident, total, &err)) << err;
  EXPECT_EQ(total, big.data.size() / std::size_t(::sysconf(_SC_PAGESIZE)));
  EXPECT_GT(resident, 0u);  // just written: in the cache
  ASSERT_TRUE(evict_from_page_cache(images, &err)) << err;
  ASSERT_TRUE(cached_pages(images[0].path, resident, total, &err)) << err;
  EXPECT_EQ(resident, 0u);
  Bytes back;
  ASSERT_TRUE(read_encoded(images[0].path, back, &err)) << err;
  EXPECT_EQ(back, big.data);
  images[0].path = path("gone.png");
  EXPECT_FALSE(evict_from_page_cache(images, &err));
  EXPECT_NE(err.find("gone.png"), std::string::npos);
}

TEST(AugmentInputFormat, EveryPrefixOfAJpegIsIncompleteAndJunkNeverOverreads) {
  Bytes j;
  ASSERT_TRUE(encode_jpeg(synthetic_image(4, 1, {48, 40}), 85, j, nullptr));
  for (std::size_t keep = 0; keep < j.size(); ++keep)
    ASSERT_FALSE(jpeg_is_complete(Bytes(j.begin(), j.begin() + long(keep)))) << keep;
  // Random damage after the SOI: any answer is fine, reading past the end is not (the sanitizer
  // presets check that).
  Rng rng(11);
  for (int round = 0; round < 300; ++round) {
    Bytes damaged = j;
    for (int k = 0; k < 4; ++k) damaged[2 + rng.next() % (damaged.size() - 2)] = static_cast<unsigned char>(rng.next());
    damaged.resize(2 + rng.next() % (damaged.size() - 1));
    (void)jpeg_is_complete(damaged);
  }
}

namespace {
// Every record of a finished one-file run, by (image id, copy), read back from where the index
// says: the comparison is byte for byte and does not depend on the order the threads wrote in.
std::map<std::pair<std::uint64_t, std::uint32_t>, Bytes> budget_test_records(const RunResult& r) {
  std::map<std::pair<std::uint64_t, std::uint32_t>, Bytes> out;
  Bytes file;
  std::string err;
  EXPECT_TRUE(read_encoded(r.files.at(0), file, &err)) << err;
  for (const IndexEntry& e : r.index.at(0)) {
    EXPECT_LE(e.offset + e.size, file.size());
    if (e.offset + e.size > file.size()) break;
    out[{e.id, e.copy}] = Bytes(file.begin() + long(e.offset), file.begin() + long(e.offset + e.size));
  }
  return out;
}
}  // namespace
TEST_F(InputDirTest, ABudgetHoldsAPathOrderPrefixAndStreamsTheRest) {
  const auto set = synthetic_set(9, 8, {{40, 32}, {56, 48}, {24, 24}});
  for (const EncodedImage& img : set)
    put("in/" + std::to_string(img.id) + (img.format == Format::png ? ".png" : ".jpg"), img.data);
  put("in/broken.png", {'n', 'o'});  // skipped: must not be counted as held
  std::uint64_t total = 0;
  for (const EncodedImage& img : set) total += img.data.size();
  // Room for the first three in path order and most of the fourth (names 0..7 sort as ids).
  const std::uint64_t budget = set[0].data.size() + set[1].data.size() + set[2].data.size() + set[3].data.size() - 1;
  std::string err;
  InputSet part;
  ASSERT_TRUE(load_input_dir(path("in"), part, &err, budget)) << err;
  ASSERT_EQ(part.images.size(), set.size());
  EXPECT_EQ(part.skipped.size(), 1u);
  EXPECT_EQ(part.held, 3u);
  EXPECT_EQ(part.held_bytes, budget + 1 - set[3].data.size());
  EXPECT_LE(part.held_bytes, budget);
  EXPECT_EQ(part.bytes, total);
  EXPECT_EQ(streamed_count(part.images), set.size() - 3);
  for (std::size_t i = 0; i < set.size(); ++i) {
    EXPECT_EQ(part.images[i].format, set[i].format) << i;
    if (i < 3)
      EXPECT_EQ(part.images[i].data, set[i].data) << i;
    else
      EXPECT_TRUE(part.images[i].data.empty()) << i;
  }
  InputSet none, all;
  ASSERT_TRUE(load_input_dir(path("in"), none, &err, 0)) << err;
  EXPECT_EQ(none.held, 0u);
  EXPECT_EQ(none.held_bytes, 0u);
  EXPECT_EQ(streamed_count(none.images), set.size());
  ASSERT_TRUE(load_input_dir(path("in"), all, &err, total)) << err;  // exactly enough
  EXPECT_EQ(all.held, set.size());
  EXPECT_EQ(all.held_bytes, total);
  EXPECT_EQ(streamed_count(all.images), 0u);
}

TEST_F(InputDirTest, StreamedInputsWriteTheSameRecordsAsHeldOnes) {
  const auto set = synthetic_set(13, 10, {{40, 32}, {56, 48}});
  for (const EncodedImage& img : set)
    put("in/" + std::to_string(img.id) + (img.format == Format::png ? ".png" : ".jpg"), img.data);
  RunConfig config;
  config.threads = AUGMENT_TEST_THREADS;
  config.batch = 4;
  config.amplify = 2;
  config.content = "input budget test";
  std::string err;
  // The whole set in memory, then a budget of about half of it, then none.
  const std::uint64_t half = std::accumulate(set.begin(), set.begin() + 5, std::uint64_t(0),
                                             [](std::uint64_t a, const EncodedImage& e) { return a + e.data.size(); });
  std::vector<std::map<std::pair<std::uint64_t, std::uint32_t>, Bytes>> records;
  std::vector<std::pair<std::size_t, std::size_t>> counts;
  for (const std::uint64_t budget : {kHoldEveryInput, half, std::uint64_t(0)}) {
    InputSet in;
    ASSERT_TRUE(load_input_dir(path("in"), in, &err, budget)) << err;
    const std::string stem = path("out-" + std::to_string(records.size()));
    const RunResult r = run_method(in.images, "posix", stem, config);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.images, set.size());
    EXPECT_EQ(r.skipped, 0u);
    counts.emplace_back(r.input_held, r.input_streamed);
    if (r.input_streamed) {
      EXPECT_GT(r.input_s, 0.0);
    }
    const RunCheck check = verify_run(stem + ".run", true);
    EXPECT_TRUE(check.ok) << check.error;
    records.push_back(budget_test_records(r));
    EXPECT_EQ(records.back().size(), set.size() * 2);
  }
  EXPECT_EQ(counts[0], std::make_pair(std::size_t(10), std::size_t(0)));
  EXPECT_EQ(counts[1], std::make_pair(std::size_t(5), std::size_t(5)));
  EXPECT_EQ(counts[2], std::make_pair(std::size_t(0), std::size_t(10)));
  EXPECT_TRUE(records[1] == records[0]);
  EXPECT_TRUE(records[2] == records[0]);
}
