// Images of the augmentation workload: 8-bit RGB bitmaps, the PNG/JPEG codecs, the deterministic
// synthetic input set and the per-image transforms.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace augment {

using Bytes = std::vector<unsigned char>;

struct Image {
  int width = 0;
  int height = 0;
  int channels = 3;  // 3 (RGB) or 1 (grey)
  Bytes pixels;      // row-major, channels bytes per pixel, no padding
};

enum class Format { png, jpeg };

struct EncodedImage {
  std::uint64_t id = 0;
  Format format = Format::png;
  Bytes data;         // the encoded file (empty when it is read inside the loop, --read-input)
  std::string path;   // where it lives on disk; empty for an in-memory synthetic image
};

// Decoders return false and say why in *err on a corrupt or unsupported input (never abort).
bool decode_png(const Bytes& in, Image& out, std::string* err);
bool decode_jpeg(const Bytes& in, Image& out, std::string* err);
bool decode(const EncodedImage& in, Image& out, std::string* err);
// level: zlib level 0..9 (libpng's default is 6).
bool encode_png(const Image& in, int level, Bytes& out, std::string* err);
bool encode_jpeg(const Image& in, int quality, Bytes& out, std::string* err);

struct Size {
  int width;
  int height;
};
// Parses "256x256,640x480"; false on a malformed list.
bool parse_sizes(const std::string& text, std::vector<Size>& out);

// The built-in input set: image i has the size sizes[i % sizes.size()], is a JPEG when i is odd
// and a PNG otherwise, and its content (gradients, waves, discs, a little noise: photo-like, so
// that compression does real work) depends only on (seed, i).
Image synthetic_image(std::uint64_t seed, std::uint64_t id, Size size);
std::vector<EncodedImage> synthetic_set(std::uint64_t seed, std::size_t count, const std::vector<Size>& sizes);
// The images of the set with these ids only (an MPI rank's shard), in the order given.
std::vector<EncodedImage> synthetic_images(std::uint64_t seed, const std::vector<std::uint64_t>& ids,
                                           const std::vector<Size>& sizes);

struct TransformOptions {
  bool grey = false;  // convert every output to grey-scale
};
// Random crop (60-100% of each side), horizontal flip, brightness/contrast, a rotation by a
// multiple of 90 degrees: every draw comes from (seed, id), so the result depends only on those.
Image transform(const Image& in, std::uint64_t seed, std::uint64_t id, const TransformOptions& options);

// A small deterministic generator (splitmix64) for the per-image draws.
struct Rng {
  std::uint64_t state;
  explicit Rng(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  int range(int lo, int hi) { return lo + int(next() % std::uint64_t(hi - lo + 1)); }  // [lo, hi]
};
std::uint64_t image_seed(std::uint64_t seed, std::uint64_t id, std::uint64_t stream);

}  // namespace augment
