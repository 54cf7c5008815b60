// record_image_format and its image_decoder hook (image_record_format.hpp), through record_batches, the reader that
// takes them: the defaults name TFDS's features ("image", "label") holding raw HWC pixels and require a shape;
// other feature names are the ones read; a decoder (called from several decode threads) is handed each record's
// encoded bytes, the shape, room for exactly one image, the record's location and the feature's name, and what it
// writes is the batch; its error reaches the caller as it threw it; an encoded image without a decoder is refused
// saying it needs one.
#include <mwstrat/data/example.hpp>
#include <mwstrat/data/image_record_format.hpp>
#include <mwstrat/data/record_batches.hpp>
#include <mwstrat/data/tfrecord_writer.hpp>

#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace image_record_format_test {

using namespace mwstrat;
using namespace mwstrat::data;
namespace fs = std::filesystem;

constexpr image_shape shape{2, 3, 2};
constexpr std::size_t per = 2 * 3 * 2;
constexpr std::size_t count = 6;

// A toy encoding no raw image has: two bytes, a marker and a seed; image i decodes to bytes seed + k.
std::vector<std::uint8_t> encoded(std::size_t i) { return {0xab, static_cast<std::uint8_t>(10 * i)}; }
std::uint8_t decoded_byte(std::size_t i, std::size_t k) { return static_cast<std::uint8_t>(10 * i + k); }

// `count` records whose image (feature `image_name`) is encoded(i) or raw, labelled i; returns their offsets.
std::vector<std::uint64_t> write_records(const fs::path& path, const std::string& image_name,
                                         const std::string& label_name, bool raw) {
  tfrecord_writer w(path);
  std::vector<std::uint64_t> offsets;
  for (std::size_t i = 0; i < count; ++i) {
    std::vector<std::uint8_t> image = encoded(i);
    if (raw) {
      image.resize(per);
      for (std::size_t k = 0; k < per; ++k) image[k] = decoded_byte(i, k);
    }
    example ex;
    ex.features[image_name] = bytes_list{{std::string(image.begin(), image.end())}};
    ex.features[label_name] = int64_list{{static_cast<std::int64_t>(i)}};
    offsets.push_back(w.write(encode_example(ex)));
  }
  w.close();
  return offsets;
}

// Every example in file order, through one batch of all of them on `threads` decode threads.
struct read_back {
  std::vector<float> images = std::vector<float>(count * per);
  std::vector<std::int64_t> labels = std::vector<std::int64_t>(count);
};
read_back read_all(const fs::path& file, record_image_format format, std::size_t threads = 3) {
  distribution_options o;
  o.global_batch = count;
  o.shuffle = false;
  record_batch_options r;
  r.decode_threads = threads;
  record_batches batches(std::vector<fs::path>{file}, std::move(format), o, r);
  read_back out;
  EXPECT_EQ(batches.fill({0, 0, 0}, out.images, out.labels), count);
  return out;
}

void expect_decoded(const read_back& got) {
  for (std::size_t i = 0; i < count; ++i) {
    EXPECT_EQ(got.labels[i], static_cast<std::int64_t>(i));
    for (std::size_t k = 0; k < per; ++k)
      EXPECT_EQ(got.images[i * per + k], static_cast<float>(decoded_byte(i, k)) * (1.0f / 255.0f))  // as in memory
          << i << ", " << k;
  }
}

template <class Error, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(record_image_format, the_defaults_are_tfds_s_features_of_raw_pixels_and_the_shape_is_required) {
  const record_image_format defaults;
  EXPECT_EQ(defaults.image_feature, "image");
  EXPECT_EQ(defaults.label_feature, "label");
  EXPECT_FALSE(defaults.decode);
  mwstrat::test::temp_dir dir("image-record-format");
  write_records(dir / "raw", "image", "label", true);
  const auto no_shape = message_of<config_error>([&] { (void)read_all(dir / "raw", defaults); });
  EXPECT_NE(no_shape.find("record_image_format::shape 0 x 0 x 1 has a zero extent"), std::string::npos) << no_shape;
  record_image_format f;
  f.shape = shape;
  expect_decoded(read_all(dir / "raw", f));
}

TEST(record_image_format, the_features_it_names_are_the_ones_read) {
  mwstrat::test::temp_dir dir("image-record-format");
  write_records(dir / "named", "picture", "class", true);
  record_image_format f;
  f.image_feature = "picture";
  f.label_feature = "class";
  f.shape = shape;
  expect_decoded(read_all(dir / "named", f));
  record_image_format defaults;
  defaults.shape = shape;
  const auto m = message_of<data_error>([&] { (void)read_all(dir / "named", defaults); });
  EXPECT_NE(m.find("record at byte 0: lacks feature 'image'"), std::string::npos) << m;
}

TEST(record_image_format, a_decoder_gets_each_record_s_bytes_with_room_for_one_image_of_the_shape) {
  mwstrat::test::temp_dir dir("image-record-format");
  const auto offsets = write_records(dir / "encoded", "picture", "label", false);
  std::mutex m;
  std::set<std::uint64_t> seen;
  record_image_format f;
  f.image_feature = "picture";
  f.shape = shape;
  f.decode = [&](std::span<const std::byte> bytes, image_shape s, std::span<std::uint8_t> out,
                 const record_location& at, std::string_view feature) {
    const std::lock_guard lock(m);
    EXPECT_EQ(at.file, (dir / "encoded").string());
    const auto i = static_cast<std::size_t>(std::find(offsets.begin(), offsets.end(), at.offset) - offsets.begin());
    ASSERT_LT(i, count) << "no record starts at byte " << at.offset;
    EXPECT_TRUE(seen.insert(at.offset).second) << "record at byte " << at.offset << " decoded twice";
    EXPECT_EQ(feature, "picture");
    EXPECT_EQ(s.rows, shape.rows);
    EXPECT_EQ(s.cols, shape.cols);
    EXPECT_EQ(s.channels, shape.channels);
    ASSERT_EQ(out.size(), per) << "exactly rows x cols x channels bytes of room";
    ASSERT_EQ(bytes.size(), 2u);
    EXPECT_EQ(std::to_integer<std::size_t>(bytes[1]), 10 * i);
    for (std::size_t k = 0; k < per; ++k) out[k] = decoded_byte(i, k);
  };
  expect_decoded(read_all(dir / "encoded", f));
  EXPECT_EQ(seen.size(), count);

  // The same records without a decoder: raw pixels of another size, and the message says what is missing.
  f.decode = nullptr;
  const auto raw = message_of<data_error>([&] { (void)read_all(dir / "encoded", f); });
  EXPECT_NE(raw.find("feature 'picture': holds 2 bytes, raw 2 x 3 x 2 pixels are 12 (an encoded image needs "
                     "record_image_format::decode)"),
            std::string::npos)
      << raw;
}

TEST(record_image_format, a_decoder_s_error_reaches_the_caller_as_thrown) {
  mwstrat::test::temp_dir dir("image-record-format");
  const auto offsets = write_records(dir / "encoded", "image", "label", false);
  record_image_format f;
  f.shape = shape;
  f.decode = [&](std::span<const std::byte>, image_shape, std::span<std::uint8_t> out, const record_location& at,
                 std::string_view feature) {
    if (at.offset == offsets[4]) throw feature_error(at, feature, "not in the toy encoding", "images");
    std::fill(out.begin(), out.end(), std::uint8_t{0});
  };
  std::string path;
  const auto m = message_of<data_error>([&] {
    try {
      (void)read_all(dir / "encoded", f);
    } catch (const data_error& e) {
      path = e.path();
      throw;
    }
  });
  EXPECT_EQ(m, "[mwstrat.images] " + (dir / "encoded").string() + ": record at byte " + std::to_string(offsets[4]) +
                   ": feature 'image': not in the toy encoding");
  EXPECT_EQ(path, (dir / "encoded").string());
}

}  // namespace image_record_format_test
