#pragma once
/// \file
/// `record_image_format`: where an image and its label are in a `tf.train.Example` (the features TFDS and most
/// Beam pipelines write: an encoded or raw image as bytes, an int64 class), and the `image_decoder` hook through
/// which the optional `mwstrat::images` component decodes PNG and JPEG without the data component needing
/// libpng or libjpeg.

#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/record_location.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace mwstrat::data {

/// Decodes an encoded image feature (`encoded`, of the record at `at`, feature `feature_name`) into exactly
/// rows × cols × channels bytes of `shape` in `out`, HWC; throws data_error naming the record when it cannot.
/// Called from several threads at once. `data/images/image_decode.hpp` gives one for PNG and JPEG.
using image_decoder = std::function<void(std::span<const std::byte> encoded, image_shape shape,
                                         std::span<std::uint8_t> out, const record_location& at,
                                         std::string_view feature_name)>;

/// Which features of each `tf.train.Example` hold the image and its label, and how the image is stored.
struct record_image_format {
  std::string image_feature = "image";  ///< a bytes_list of one value
  std::string label_feature = "label";  ///< an int64_list of one value
  image_shape shape;                    ///< every image's shape; required
  /// Empty: the image feature holds the raw rows × cols × channels bytes (HWC). Else the decoder of its encoding
  /// (PNG, JPEG: `png_jpeg_decoder()` of data/images/image_decode.hpp).
  image_decoder decode;
};

}  // namespace mwstrat::data
