#include "image.hpp"

#include <png.h>
// libjpeg-turbo through the libjpeg API, not TurboJPEG: Debian's libjpeg62-turbo-dev (the
// package this project already depends on) ships only jpeglib.h; TurboJPEG needs a second
// package (libturbojpeg0-dev). Both run the same SIMD codec, so nothing is lost.
#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace augment {

std::uint64_t image_seed(std::uint64_t seed, std::uint64_t id, std::uint64_t stream) {
  Rng r(seed ^ (id * 0xd1b54a32d192ed03ull) ^ (stream * 0x8cb92ba72f3d8dd7ull));
  return r.next();
}

// --- PNG ------------------------------------------------------------------------------------

bool decode_png(const Bytes& in, Image& out, std::string* err) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, in.data(), in.size())) {
    if (err) *err = std::string("png: ") + img.message;
    return false;
  }
  img.format = PNG_FORMAT_RGB;
  out.width = int(img.width);
  out.height = int(img.height);
  out.channels = 3;
  out.pixels.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.pixels.data(), 0, nullptr)) {
    if (err) *err = std::string("png: ") + img.message;
    png_image_free(&img);
    return false;
  }
  return true;
}

namespace {
struct PngSink {
  Bytes* out;
};
void png_sink_write(png_structp png, png_bytep data, png_size_t n) {
  auto* sink = static_cast<PngSink*>(png_get_io_ptr(png));
  sink->out->insert(sink->out->end(), data, data + n);
}
void png_sink_flush(png_structp) {}
}  // namespace

// The classic API, because the simplified one cannot set the compression level.
bool encode_png(const Image& in, int level, Bytes& out, std::string* err) {
  out.clear();
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  if (!png) {
    if (err) *err = "png: png_create_write_struct failed";
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    if (err) *err = "png: encoding failed";
    return false;
  }
  PngSink sink{&out};
  png_set_write_fn(png, &sink, png_sink_write, png_sink_flush);
  png_set_compression_level(png, level);
  png_set_IHDR(png, info, png_uint_32(in.width), png_uint_32(in.height), 8,
               in.channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const std::size_t stride = std::size_t(in.width) * std::size_t(in.channels);
  for (int y = 0; y < in.height; ++y)
    png_write_row(png, const_cast<png_bytep>(in.pixels.data() + std::size_t(y) * stride));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

// --- JPEG -----------------------------------------------------------------------------------

namespace {
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};
void jpeg_error_exit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}
void jpeg_quiet(j_common_ptr, int) {}

// The setjmp parts build no C++ object (a longjmp would skip its destructor, and GCC warns that
// such locals may be clobbered): the wrappers below turn the message into a std::string.
bool decode_jpeg_raw(const Bytes& in, Image& out, JpegError& jerr) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&jerr.mgr);
  jerr.mgr.error_exit = jpeg_error_exit;
  jerr.mgr.emit_message = jpeg_quiet;  // warnings (e.g. a truncated file) are not printed
  if (setjmp(jerr.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, in.data(), static_cast<unsigned long>(in.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  out.width = int(cinfo.output_width);
  out.height = int(cinfo.output_height);
  out.channels = 3;
  const std::size_t stride = std::size_t(out.width) * 3;
  out.pixels.resize(stride * std::size_t(out.height));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.pixels.data() + std::size_t(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

bool encode_jpeg_raw(const Image& in, int quality, Bytes& out, JpegError& jerr) {
  jpeg_compress_struct cinfo;
  unsigned char* mem = nullptr;
  unsigned long mem_size = 0;
  cinfo.err = jpeg_std_error(&jerr.mgr);
  jerr.mgr.error_exit = jpeg_error_exit;
  if (setjmp(jerr.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(mem);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &mem, &mem_size);
  cinfo.image_width = JDIMENSION(in.width);
  cinfo.image_height = JDIMENSION(in.height);
  cinfo.input_components = in.channels;
  cinfo.in_color_space = in.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const std::size_t stride = std::size_t(in.width) * std::size_t(in.channels);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(in.pixels.data() + std::size_t(cinfo.next_scanline) * stride);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  out.assign(mem, mem + mem_size);
  std::free(mem);
  return true;
}
}  // namespace

bool decode_jpeg(const Bytes& in, Image& out, std::string* err) {
  JpegError jerr;
  jerr.message[0] = 0;
  if (decode_jpeg_raw(in, out, jerr)) return true;
  if (err) *err = std::string("jpeg: ") + jerr.message;
  return false;
}

bool encode_jpeg(const Image& in, int quality, Bytes& out, std::string* err) {
  JpegError jerr;
  jerr.message[0] = 0;
  if (encode_jpeg_raw(in, quality, out, jerr)) return true;
  if (err) *err = std::string("jpeg: ") + jerr.message;
  return false;
}

bool decode(const EncodedImage& in, Image& out, std::string* err) {
  return in.format == Format::png ? decode_png(in.data, out, err) : decode_jpeg(in.data, out, err);
}

// --- the synthetic input set ----------------------------------------------------------------

bool parse_sizes(const std::string& text, std::vector<Size>& out) {
  out.clear();
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int w = 0, h = 0;
    char x = 0, extra = 0;
    if (std::sscanf(item.c_str(), "%d%c%d%c", &w, &x, &h, &extra) != 3 || (x != 'x' && x != 'X') || w < 4 ||
        h < 4 || w > 16384 || h > 16384)
      return false;
    out.push_back({w, h});
  }
  return !out.empty();
}

Image synthetic_image(std::uint64_t seed, std::uint64_t id, Size size) {
  Rng r(image_seed(seed, id, 1));
  Image img;
  img.width = size.width;
  img.height = size.height;
  img.channels = 3;
  img.pixels.resize(std::size_t(size.width) * std::size_t(size.height) * 3);
  // A sky-to-ground gradient, two waves and a few soft discs, plus a little grain.
  double base[2][3];
  for (auto& c : base)
    for (double& v : c) v = 40 + 180 * r.uniform();
  const double fx = 2 + 10 * r.uniform(), fy = 2 + 10 * r.uniform(), phase = 6.283 * r.uniform();
  struct Disc {
    double x, y, r2, c[3];
  } discs[5];
  for (Disc& d : discs) {
    d.x = r.uniform() * size.width;
    d.y = r.uniform() * size.height;
    const double rad = (0.05 + 0.2 * r.uniform()) * std::min(size.width, size.height);
    d.r2 = rad * rad;
    for (double& v : d.c) v = 255 * r.uniform();
  }
  Rng grain(image_seed(seed, id, 2));
  for (int y = 0; y < size.height; ++y) {
    const double t = double(y) / size.height;
    for (int x = 0; x < size.width; ++x) {
      const double u = double(x) / size.width;
      const double wave = 25 * std::sin(6.283 * fx * u + phase) * std::cos(6.283 * fy * t);
      unsigned char* p = &img.pixels[(std::size_t(y) * size.width + x) * 3];
      double c[3];
      for (int k = 0; k < 3; ++k) c[k] = base[0][k] * (1 - t) + base[1][k] * t + wave;
      for (const Disc& d : discs) {
        const double dx = x - d.x, dy = y - d.y, q = (dx * dx + dy * dy) / d.r2;
        if (q < 1)
          for (int k = 0; k < 3; ++k) c[k] = c[k] * q + d.c[k] * (1 - q);
      }
      const std::uint64_t g = grain.next();
      for (int k = 0; k < 3; ++k) {
        const double v = c[k] + double(int((g >> (8 * k)) & 15) - 8);
        p[k] = static_cast<unsigned char>(std::clamp(v, 0.0, 255.0));
      }
    }
  }
  return img;
}

std::vector<EncodedImage> synthetic_set(std::uint64_t seed, std::size_t count, const std::vector<Size>& sizes) {
  std::vector<std::uint64_t> ids(count);
  for (std::size_t i = 0; i < count; ++i) ids[i] = i;
  return synthetic_images(seed, ids, sizes);
}

std::vector<EncodedImage> synthetic_images(std::uint64_t seed, const std::vector<std::uint64_t>& ids,
                                           const std::vector<Size>& sizes) {
  const std::size_t count = ids.size();
  std::vector<EncodedImage> set(count);
  bool failed = false;
#pragma omp parallel for schedule(dynamic)
  for (std::size_t k = 0; k < count; ++k) {
    EncodedImage& e = set[k];
    const std::uint64_t i = ids[k];
    e.id = i;
    e.format = i % 2 ? Format::jpeg : Format::png;
    const Image img = synthetic_image(seed, i, sizes[i % sizes.size()]);
    const bool ok = e.format == Format::png ? encode_png(img, 6, e.data, nullptr) : encode_jpeg(img, 90, e.data, nullptr);
    if (!ok) {
#pragma omp atomic write
      failed = true;
    }
  }
  if (failed) set.clear();
  return set;
}

// --- transforms -----------------------------------------------------------------------------

Image transform(const Image& in, std::uint64_t seed, std::uint64_t id, const TransformOptions& options) {
  Rng r(image_seed(seed, id, 3));
  const int ch = in.channels;
  // Random crop: 60-100% of each side at a random origin.
  const int cw = std::max(1, int(in.width * (0.6 + 0.4 * r.uniform())));
  const int chh = std::max(1, int(in.height * (0.6 + 0.4 * r.uniform())));
  const int x0 = r.range(0, in.width - cw), y0 = r.range(0, in.height - chh);
  const bool flip = r.next() & 1;
  const double contrast = 0.75 + 0.5 * r.uniform();   // [0.75, 1.25)
  const double brightness = -30 + 60 * r.uniform();   // [-30, 30)
  const int quarter_turns = int(r.next() % 4);
  // A lookup table for brightness/contrast (linear, clamped).
  unsigned char lut[256];
  for (int v = 0; v < 256; ++v)
    lut[v] = static_cast<unsigned char>(std::clamp((v - 128) * contrast + 128 + brightness, 0.0, 255.0));

  const int out_ch = options.grey ? 1 : ch;
  Image out;
  const bool swap = quarter_turns % 2 == 1;
  out.width = swap ? chh : cw;
  out.height = swap ? cw : chh;
  out.channels = out_ch;
  out.pixels.resize(std::size_t(out.width) * std::size_t(out.height) * std::size_t(out_ch));
  for (int y = 0; y < chh; ++y) {
    for (int x = 0; x < cw; ++x) {
      const int sx = x0 + (flip ? cw - 1 - x : x);
      const unsigned char* s = &in.pixels[(std::size_t(y0 + y) * in.width + sx) * ch];
      // Where (x, y) of the cropped, flipped image lands after the rotation (clockwise).
      int ox, oy;
      switch (quarter_turns) {
        case 0: ox = x; oy = y; break;
        case 1: ox = chh - 1 - y; oy = x; break;
        case 2: ox = cw - 1 - x; oy = chh - 1 - y; break;
        default: ox = y; oy = cw - 1 - x; break;
      }
      unsigned char* d = &out.pixels[(std::size_t(oy) * out.width + ox) * out_ch];
      if (out_ch == 1 && ch == 3)
        d[0] = lut[(77 * s[0] + 150 * s[1] + 29 * s[2]) >> 8];
      else
        for (int k = 0; k < out_ch; ++k) d[k] = lut[s[k]];
    }
  }
  return out;
}

}  // namespace augment
