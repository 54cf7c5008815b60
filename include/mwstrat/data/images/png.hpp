#pragma once
/// \file
/// PNG image features, decoded and encoded with libpng (component `mwstrat::images`, which links it).
///
/// Decoding gives 8-bit pixels: palette images are expanded to RGB, grey below 8 bits to 8 bits, a transparency
/// chunk to an alpha channel (kept only where the output has one), 16-bit samples keep their high byte;
/// interlaced files are de-interlaced. `image_decode_options::channels` converts between grey and RGB as libpng
/// does (its default luminance weights). A file libpng refuses (a bad signature or chunk CRC, data that ends
/// early) is a `data_error` (component `image`) naming the file, the record's offset and the feature: libpng's
/// longjmp-based errors are caught in small C-like steps that hold no C++ object, and never cross C++ frames.
/// `encode_png` (libpng's simplified writer) stores 8-bit grey, grey + alpha, RGB or RGBA losslessly.

#include <mwstrat/data/images/decoded_image.hpp>
#include <mwstrat/data/record_location.hpp>
#include <mwstrat/error.hpp>

#include <png.h>

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwstrat::detail {

struct png_read_context {
  std::span<const std::byte> in;
  std::size_t pos = 0;
  char message[256] = {};
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::vector<png_bytep> rows;

  png_read_context() = default;
  png_read_context(const png_read_context&) = delete;
  png_read_context& operator=(const png_read_context&) = delete;
  ~png_read_context() {
    if (png != nullptr) png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr);
  }
};

extern "C" inline void mwstrat_png_error(png_structp png, png_const_charp message) {
  auto* ctx = static_cast<png_read_context*>(png_get_error_ptr(png));
  std::strncpy(ctx->message, message != nullptr ? message : "unknown libpng error", sizeof ctx->message - 1);
  png_longjmp(png, 1);
}

extern "C" inline void mwstrat_png_warning(png_structp, png_const_charp) {}  // warnings change no pixel

extern "C" inline void mwstrat_png_read(png_structp png, png_bytep out, size_t n) {
  auto* ctx = static_cast<png_read_context*>(png_get_io_ptr(png));
  if (n > ctx->in.size() - ctx->pos) png_error(png, "the data ends inside the PNG (truncated)");
  std::memcpy(out, ctx->in.data() + ctx->pos, n);
  ctx->pos += n;
}

// Step 1: the header, the transformations to 8-bit `want` channels (0: as stored), the output's size.
inline bool png_read_header(png_read_context& ctx, std::size_t want, std::uint32_t& width, std::uint32_t& height,
                            std::size_t& channels, std::size_t& rowbytes) {
  png_structp png = ctx.png;
  png_infop info = ctx.info;
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, &ctx, mwstrat_png_read);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  const bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  const bool colour = (color & PNG_COLOR_MASK_COLOR) != 0 || color == PNG_COLOR_TYPE_PALETTE;
  const bool alpha = (color & PNG_COLOR_MASK_ALPHA) != 0 || trns;
  const bool want_alpha = want == 0 ? alpha : want == 2 || want == 4;
  const bool want_colour = want == 0 ? colour : want >= 3;
  if (trns && want_alpha) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_strip_16(png);
  if (colour && !want_colour) png_set_rgb_to_gray_fixed(png, 1, -1, -1);
  if (!colour && want_colour) png_set_gray_to_rgb(png);
  if ((color & PNG_COLOR_MASK_ALPHA) != 0 && !want_alpha) png_set_strip_alpha(png);  // (tRNS: not expanded)
  if (!alpha && want_alpha) png_set_add_alpha(png, 0xff, PNG_FILLER_AFTER);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  width = png_get_image_width(png, info);
  height = png_get_image_height(png, info);
  channels = png_get_channels(png, info);
  rowbytes = png_get_rowbytes(png, info);
  return true;
}

// Step 2: every row, into the rows set up by the caller, and the end of the file.
inline bool png_read_pixels(png_read_context& ctx) {
  png_structp png = ctx.png;
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, ctx.rows.data());
  png_read_end(png, nullptr);
  return true;
}

[[nodiscard]] inline data_error image_error(const data::record_location& at, std::string_view feature_name,
                                            const std::string& what) {
  return data::feature_error(at, feature_name, what, "image");
}

// The size checks every decoder makes once it knows the output's size, before allocating it.
inline void check_image_size(std::size_t rows, std::size_t cols, std::size_t channels,
                             const data::image_decode_options& options, const data::record_location& at,
                             std::string_view feature_name, const char* format) {
  const std::string size = std::to_string(cols) + "x" + std::to_string(rows);
  if (rows == 0 || cols == 0) throw image_error(at, feature_name, std::string(format) + " of size " + size);
  if (rows > options.max_pixels / cols) {
    throw image_error(at, feature_name, std::string(format) + " of " + size + " exceeds the limit of " +
                                       std::to_string(options.max_pixels) + " pixels (image_decode_options::max_pixels)");
  }
  if ((options.rows != 0 && rows != options.rows) || (options.cols != 0 && cols != options.cols)) {
    throw image_error(at, feature_name, std::string(format) + " is " + size + ", expected " +
                                       std::to_string(options.cols != 0 ? options.cols : cols) + "x" +
                                       std::to_string(options.rows != 0 ? options.rows : rows));
  }
  (void)channels;
}

}  // namespace mwstrat::detail

namespace mwstrat::data {

/// Decodes the PNG `bytes` (feature `feature` of the record at `at`) into `out`; throws data_error when libpng
/// refuses it or it does not fit `options` (`out` is then empty).
inline void decode_png(std::span<const std::byte> bytes, decoded_image& out, const record_location& at,
                       std::string_view feature_name, const image_decode_options& options = {}) {
  out.rows = out.cols = out.channels = 0;
  out.pixels.clear();
  if (options.channels > 4) {
    throw config_error({"image"}, "decode_png: channels must be 0, 1, 2, 3 or 4, not " +
                                      std::to_string(options.channels));
  }
  if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) != 0) {
    throw detail::image_error(at, feature_name, "not a PNG (no PNG signature)");
  }
  detail::png_read_context ctx;
  ctx.in = bytes;
  ctx.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, detail::mwstrat_png_error, detail::mwstrat_png_warning);
  if (ctx.png != nullptr) ctx.info = png_create_info_struct(ctx.png);
  if (ctx.png == nullptr || ctx.info == nullptr) throw io_error({"image"}, "libpng could not start (out of memory)");
  std::uint32_t width = 0, height = 0;
  std::size_t channels = 0, rowbytes = 0;
  if (!detail::png_read_header(ctx, options.channels, width, height, channels, rowbytes)) {
    throw detail::image_error(at, feature_name, std::string("corrupt PNG: ") + ctx.message);
  }
  detail::check_image_size(height, width, channels, options, at, feature_name, "PNG");
  if (rowbytes != std::size_t{width} * channels) {
    throw detail::image_error(at, feature_name, "PNG rows of " + std::to_string(rowbytes) + " bytes, expected " +
                                               std::to_string(std::size_t{width} * channels));
  }
  out.pixels.resize(std::size_t{height} * rowbytes);
  ctx.rows.resize(height);
  for (std::size_t r = 0; r < height; ++r) ctx.rows[r] = out.pixels.data() + r * rowbytes;
  if (!detail::png_read_pixels(ctx)) {
    out.pixels.clear();
    throw detail::image_error(at, feature_name, std::string("corrupt PNG: ") + ctx.message);
  }
  out.rows = height;
  out.cols = width;
  out.channels = channels;
}

/// Encodes 8-bit `pixels` (rows × cols × channels, HWC; channels 1 to 4) as a PNG, losslessly.
[[nodiscard]] inline std::vector<std::byte> encode_png(std::span<const std::uint8_t> pixels, std::size_t rows,
                                                       std::size_t cols, std::size_t channels) {
  static constexpr png_uint_32 formats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
  if (channels < 1 || channels > 4 || rows == 0 || cols == 0 || pixels.size() != rows * cols * channels) {
    throw config_error({"image"}, "encode_png: " + std::to_string(pixels.size()) + " bytes are not a " +
                                      std::to_string(cols) + "x" + std::to_string(rows) + " image of " +
                                      std::to_string(channels) + " channels (1 to 4)");
  }
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(cols);
  image.height = static_cast<png_uint_32>(rows);
  image.format = formats[channels - 1];
  png_alloc_size_t size = 0;
  const auto stride = static_cast<png_int_32>(cols * channels);
  if (png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), stride, nullptr) == 0) {
    throw io_error({"image"}, std::string("encode_png: libpng refused: ") + image.message);
  }
  std::vector<std::byte> out(size);
  if (png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), stride, nullptr) == 0) {
    throw io_error({"image"}, std::string("encode_png: libpng refused: ") + image.message);
  }
  out.resize(size);
  return out;
}

}  // namespace mwstrat::data
