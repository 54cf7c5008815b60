#pragma once
/// \file
/// A decoded image feature (rows × cols × channels bytes, HWC, what `labeled_images` and the NHWC layers take)
/// and the options every decoder takes. Decoders write into a `decoded_image` the caller keeps, so decoding a
/// stream of equally sized images allocates nothing after the first.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mwstrat::data {

/// An 8-bit image, channels interleaved.
struct decoded_image {
  std::size_t rows = 0;               ///< height
  std::size_t cols = 0;               ///< width
  std::size_t channels = 0;           ///< 1 grey, 2 grey + alpha, 3 RGB, 4 RGBA
  std::vector<std::uint8_t> pixels;   ///< rows × cols × channels bytes, row-major
};

/// What the decoders produce and accept.
struct image_decode_options {
  /// 0: the channels the file stores (alpha, or a PNG's transparency chunk, as a channel); 1: grey (colour
  /// converted); 3: RGB (grey replicated, alpha dropped); 4 (PNG only): RGBA (opaque alpha added where none).
  std::size_t channels = 0;
  std::size_t rows = 0;  ///< refuse another height (0: any)
  std::size_t cols = 0;  ///< refuse another width (0: any)
  std::size_t max_pixels = std::size_t{1} << 28;  ///< refuse larger images before allocating (a hostile header)
};

}  // namespace mwstrat::data
