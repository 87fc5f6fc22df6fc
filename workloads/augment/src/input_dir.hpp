// `--input DIR`: a directory tree of PNG and JPEG files as the workload's input set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "image.hpp"

namespace augment {

// A memory budget that holds every input.
constexpr std::uint64_t kHoldEveryInput = std::numeric_limits<std::uint64_t>::max();

struct InputSet {
  // The usable images, sorted by path (byte-wise, so the ids are the same on every run and host):
  // images[i].id == i and images[i].path is its file. An image beyond the memory budget has an
  // empty images[i].data (the loop reads its path itself, as --read-input does) but its format set.
  std::vector<EncodedImage> images;
  std::uint64_t bytes = 0;  // the usable files' total size
  std::size_t held = 0;            // images whose encoded bytes are in memory
  std::uint64_t held_bytes = 0;    // their total, at most the budget
  // One line per skipped candidate (a .png/.jpg/.jpeg that is corrupt, truncated, unreadable or
  // neither a PNG nor a JPEG), naming the file and the reason, in path order. The caller prints them.
  std::vector<std::string> skipped;
  std::size_t ignored = 0;  // regular files without an image extension (not counted as skipped)
};

// Walks `dir` recursively (symlinks to files followed, symlinks to directories not, which cannot
// loop), takes the files named *.png, *.jpg or *.jpeg (any case), reads each and keeps the ones
// that decode: the format comes from the magic bytes, not the name, and every kept file has been
// decoded once, so the measured loop cannot meet an undecodable input. Returns false with a message
// in *err when `dir` is missing or not a directory, cannot be walked, or holds no usable image.
// The check decodes on the OpenMP threads (omp_get_max_threads()); the result does not depend on
// their number.
// memory_budget bounds the encoded bytes kept in memory: the images are held in path order while
// their total fits, the rest are streamed (data left empty). 0 holds none (--read-input). Which
// images are held depends only on the files and the budget, so every run of a set is the same.
// The check itself holds no more than the budget plus the files being checked on each thread.
bool load_input_dir(const std::string& dir, InputSet& out, std::string* err,
                    std::uint64_t memory_budget = kHoldEveryInput);

// The images in `images` that the loop reads from their path (no bytes in memory, a path set).
std::size_t streamed_count(const std::vector<EncodedImage>& images);

// Reads a whole file (the loop's read for --read-input); false and *err (naming the file) on error.
bool read_encoded(const std::string& path, Bytes& out, std::string* err);

// Writes the images that have no path yet (the synthetic set) as files in `dir` (created if
// missing), named by zero-padded id ("000042.png", ".jpg"), and sets their path: --read-input then
// works without --input, and load_input_dir(dir) gives back the same ids in the same order.
bool write_input_files(std::vector<EncodedImage>& images, const std::string& dir, std::string* err);

// Drops the images' files from the page cache (dirty pages written back first with
// sync_file_range, no device flush; then posix_fadvise DONTNEED),
// so that a measured --read-input loop reads from the device rather than from the memory the
// checking pass (or the spill) filled. Images without a path are left alone. False (and *err) on
// the first file it cannot open or advise. Not on tmpfs, whose pages are the files' only copy.
bool evict_from_page_cache(const std::vector<EncodedImage>& images, std::string* err);

// The number of the file's pages in the page cache (mincore on a mapping) and its page count;
// false on error or an empty file. For tests and for reporting whether an eviction took.
bool cached_pages(const std::string& path, std::size_t& resident, std::size_t& total, std::string* err);

// PNG or JPEG from the first bytes; nullopt for anything else.
std::optional<Format> sniff_format(const Bytes& data);

// True when a JPEG's marker segments run from the start-of-image to an end-of-image marker;
// false for a file cut short (which libjpeg would decode with a grey tail and only a warning).
bool jpeg_is_complete(const Bytes& data);

// True for names ending in .png, .jpg or .jpeg, any case.
bool has_image_extension(const std::string& path);

}  // namespace augment
