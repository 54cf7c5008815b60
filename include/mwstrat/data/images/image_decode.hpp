#pragma once
/// \file
/// Image features in either format, told apart by their first bytes (as `tf.io.decode_image` does): PNG
/// (89 50 4e 47 ...) or JPEG (ff d8 ff). Anything else is a `data_error` naming the file, the record's offset and
/// the feature. The images of TFDS and of most Beam pipelines are stored this way, one encoded image per bytes
/// feature. Needs `mwstrat::images` (libpng and libjpeg).

#include <mwstrat/data/images/decoded_image.hpp>
#include <mwstrat/data/images/jpeg.hpp>
#include <mwstrat/data/images/png.hpp>
#include <mwstrat/data/image_record_format.hpp>
#include <mwstrat/data/record_location.hpp>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mwstrat::data {

/// The encodings an image feature may hold.
enum class image_format { png, jpeg };

/// The format `bytes` start like, if either.
[[nodiscard]] inline std::optional<image_format> sniff_image_format(std::span<const std::byte> bytes) noexcept {
  const auto at = [&](std::size_t i) { return i < bytes.size() ? std::to_integer<unsigned>(bytes[i]) : 0x100u; };
  if (at(0) == 0x89 && at(1) == 'P' && at(2) == 'N' && at(3) == 'G') return image_format::png;
  if (at(0) == 0xff && at(1) == 0xd8 && at(2) == 0xff) return image_format::jpeg;
  return std::nullopt;
}

/// Decodes a PNG or JPEG image feature into `out` (see png.hpp, jpeg.hpp); throws data_error otherwise.
inline void decode_image(std::span<const std::byte> bytes, decoded_image& out, const record_location& at,
                         std::string_view feature_name, const image_decode_options& options = {}) {
  const auto format = sniff_image_format(bytes);
  if (!format) {
    out = {};
    std::string head;
    for (std::size_t i = 0; i < 4 && i < bytes.size(); ++i) {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%02x", std::to_integer<unsigned>(bytes[i]));
      if (i != 0) head += ' ';  // appended piecewise: GCC 12 -O3 reports a false -Wrestrict on "lit" + string&&
      head += hex;
    }
    throw detail::image_error(at, feature_name, "neither a PNG nor a JPEG (" + std::to_string(bytes.size()) + " bytes" +
                                               (bytes.empty() ? std::string() : ", starting " + head) + ")");
  }
  if (*format == image_format::png) decode_png(bytes, out, at, feature_name, options);
  else decode_jpeg(bytes, out, at, feature_name, options);
}

/// `decode_image` into a new `decoded_image`.
[[nodiscard]] inline decoded_image decode_image(std::span<const std::byte> bytes, const record_location& at,
                                                std::string_view feature_name, const image_decode_options& options = {}) {
  decoded_image out;
  decode_image(bytes, out, at, feature_name, options);
  return out;
}

/// A `record_image_format::decode` for PNG and JPEG image features: each image decoded to the format's shape
/// (grey, RGB or alpha converted to its channels as `image_decode_options::channels` says; another height or
/// width refused, naming the record). Safe to call from several threads at once.
[[nodiscard]] inline image_decoder png_jpeg_decoder() {
  return [](std::span<const std::byte> encoded, image_shape shape, std::span<std::uint8_t> out,
            const record_location& at, std::string_view feature_name) {
    thread_local decoded_image image;  // its pixel buffer is reused from image to image on each thread
    image_decode_options o;
    o.channels = shape.channels;
    o.rows = shape.rows;
    o.cols = shape.cols;
    decode_image(encoded, image, at, feature_name, o);
    if (image.pixels.size() != out.size()) {
      throw detail::image_error(at, feature_name, "decodes to " + std::to_string(image.pixels.size()) + " bytes, " +
                                                 std::to_string(out.size()) + " expected");
    }
    std::memcpy(out.data(), image.pixels.data(), out.size());
  };
}

}  // namespace mwstrat::data
