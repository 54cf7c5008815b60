#pragma once
/// \file
/// JPEG image features, decoded with libjpeg (libjpeg-turbo on Debian; component `mwstrat::images`, which links
/// it).
///
/// Gives 8-bit grey or RGB (`image_decode_options::channels` 0: as stored, 1 or 3: converted by libjpeg); CMYK
/// and YCCK files are refused. A file libjpeg refuses, and one it would only "recover" (data that ends early, a
/// corrupt entropy-coded segment: libjpeg warns and fills the rest with grey), is a `data_error` (component
/// `image`) naming the file, the record's offset and the feature: half an image is never delivered, as
/// TensorFlow's `decode_jpeg` refuses it unless asked to recover. libjpeg's errors longjmp out of its calls into
/// small C-like steps that hold no C++ object.

#include <mwstrat/data/images/decoded_image.hpp>
#include <mwstrat/data/images/png.hpp>
#include <mwstrat/data/record_location.hpp>
#include <mwstrat/error.hpp>

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include <jpeglib.h>

namespace mwstrat::detail {

struct jpeg_read_context {
  jpeg_error_mgr err{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};
  bool corrupt = false;  // libjpeg warned of corrupt data (and would fill in the rest)
  jpeg_decompress_struct cinfo{};
  bool created = false;

  jpeg_read_context() = default;
  jpeg_read_context(const jpeg_read_context&) = delete;
  jpeg_read_context& operator=(const jpeg_read_context&) = delete;
  ~jpeg_read_context() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

extern "C" inline void mwstrat_jpeg_error_exit(j_common_ptr cinfo) {
  auto* ctx = reinterpret_cast<jpeg_read_context*>(cinfo->err);  // err is the context's first member
  (*cinfo->err->format_message)(cinfo, ctx->message);
  std::longjmp(ctx->jump, 1);
}

extern "C" inline void mwstrat_jpeg_emit_message(j_common_ptr cinfo, int level) {
  auto* ctx = reinterpret_cast<jpeg_read_context*>(cinfo->err);
  if (level < 0 && !ctx->corrupt) {  // a warning: corrupt data that libjpeg would paper over
    ctx->corrupt = true;
    (*cinfo->err->format_message)(cinfo, ctx->message);
  }
}

// Step 1: the header and the start of decompression to `want` channels (0: as stored).
inline bool jpeg_read_header_step(jpeg_read_context& ctx, std::span<const std::byte> bytes, std::size_t want,
                                  bool& unsupported) {
  if (setjmp(ctx.jump)) return false;
  jpeg_create_decompress(&ctx.cinfo);
  ctx.created = true;
  jpeg_mem_src(&ctx.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&ctx.cinfo, TRUE);
  const J_COLOR_SPACE space = ctx.cinfo.jpeg_color_space;
  if (space == JCS_CMYK || space == JCS_YCCK) {
    unsupported = true;
    return false;
  }
  if (want == 1 || (want == 0 && ctx.cinfo.num_components == 1)) ctx.cinfo.out_color_space = JCS_GRAYSCALE;
  else ctx.cinfo.out_color_space = JCS_RGB;
  jpeg_calc_output_dimensions(&ctx.cinfo);
  return true;
}

inline bool jpeg_start_step(jpeg_read_context& ctx) {
  if (setjmp(ctx.jump)) return false;
  jpeg_start_decompress(&ctx.cinfo);
  return true;
}

// Step 2: every scanline into `out` (rows of `stride` bytes), and the end of the file.
inline bool jpeg_read_pixels_step(jpeg_read_context& ctx, std::uint8_t* out, std::size_t stride) {
  if (setjmp(ctx.jump)) return false;
  while (ctx.cinfo.output_scanline < ctx.cinfo.output_height) {
    JSAMPROW row = out + std::size_t{ctx.cinfo.output_scanline} * stride;
    if (jpeg_read_scanlines(&ctx.cinfo, &row, 1) != 1) return false;
  }
  jpeg_finish_decompress(&ctx.cinfo);
  return true;
}

}  // namespace mwstrat::detail

namespace mwstrat::data {

/// Decodes the JPEG `bytes` (feature `feature` of the record at `at`) into `out`; throws data_error when libjpeg
/// refuses it, reports corrupt data, or it does not fit `options` (`out` is then empty).
inline void decode_jpeg(std::span<const std::byte> bytes, decoded_image& out, const record_location& at,
                        std::string_view feature_name, const image_decode_options& options = {}) {
  out.rows = out.cols = out.channels = 0;
  out.pixels.clear();
  if (options.channels != 0 && options.channels != 1 && options.channels != 3) {
    throw config_error({"image"}, "decode_jpeg: channels must be 0, 1 or 3, not " + std::to_string(options.channels));
  }
  if (bytes.size() < 3 || std::to_integer<unsigned>(bytes[0]) != 0xff || std::to_integer<unsigned>(bytes[1]) != 0xd8) {
    throw detail::image_error(at, feature_name, "not a JPEG (no start-of-image marker ff d8)");
  }
  detail::jpeg_read_context ctx;
  ctx.cinfo.err = jpeg_std_error(&ctx.err);
  ctx.err.error_exit = detail::mwstrat_jpeg_error_exit;
  ctx.err.emit_message = detail::mwstrat_jpeg_emit_message;
  bool unsupported = false;
  if (!detail::jpeg_read_header_step(ctx, bytes, options.channels, unsupported)) {
    if (unsupported) throw detail::image_error(at, feature_name, "a CMYK or YCCK JPEG: only grey and RGB are supported");
    throw detail::image_error(at, feature_name, std::string("corrupt JPEG: ") + ctx.message);
  }
  const std::size_t rows = ctx.cinfo.output_height;
  const std::size_t cols = ctx.cinfo.output_width;
  const std::size_t channels = ctx.cinfo.out_color_space == JCS_GRAYSCALE ? 1 : 3;
  detail::check_image_size(rows, cols, channels, options, at, feature_name, "JPEG");
  if (!detail::jpeg_start_step(ctx)) throw detail::image_error(at, feature_name, std::string("corrupt JPEG: ") + ctx.message);
  out.pixels.resize(rows * cols * channels);
  if (!detail::jpeg_read_pixels_step(ctx, out.pixels.data(), cols * channels) || ctx.corrupt) {
    out.pixels.clear();
    throw detail::image_error(at, feature_name, std::string("corrupt JPEG: ") +
                                               (ctx.message[0] != '\0' ? ctx.message : "its data ends early"));
  }
  out.rows = rows;
  out.cols = cols;
  out.channels = channels;
}

}  // namespace mwstrat::data
