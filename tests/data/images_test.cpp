// PNG and JPEG image features (data/images/, component mwstrat::images): our PNG round trip and channel
// conversions, images encoded by another library (Pillow, in the Python venv of scripts/test) decoded to its
// pixels, and the refusals (not an image, truncated or corrupt data, an unexpected size), each naming the file,
// the record's offset and the feature.
#include <mwstrat/data/images/image_decode.hpp>

#include <support/process.hpp>
#include <support/temp_dir.hpp>

#include "byte_files.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <algorithm>
#include <utility>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace images_test {

using namespace mwstrat;
using namespace mwstrat::data;
namespace fs = std::filesystem;
using byte_files::read_bytes;

const record_location here{"/data/images-00000-of-00001", 77};
const std::string python = std::string(MWSTRAT_TEST_SOURCE_DIR) + "/.cache/py-venv/bin/python";

// The pixel formula both sides use.
std::uint8_t pixel(std::size_t r, std::size_t c, std::size_t ch) {
  return static_cast<std::uint8_t>((r * 7 + c * 13 + ch * 50) % 256);
}

std::vector<std::uint8_t> pattern(std::size_t rows, std::size_t cols, std::size_t channels) {
  std::vector<std::uint8_t> v(rows * cols * channels);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      for (std::size_t ch = 0; ch < channels; ++ch) v[(r * cols + c) * channels + ch] = pixel(r, c, ch);
  return v;
}

std::string refusal(const std::vector<std::byte>& bytes, const image_decode_options& o = {}) {
  decoded_image out;
  try {
    decode_image(bytes, out, here, "image/encoded", o);
  } catch (const data_error& e) {
    EXPECT_EQ(e.path(), here.file);
    EXPECT_TRUE(out.pixels.empty());
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("[mwstrat.image] /data/images-00000-of-00001: record at byte 77: feature 'image/encoded': ", 0), 0u)
        << m;
    return m;
  }
  return "accepted";
}

TEST(images, png_round_trips_and_converts_channels) {
  for (const std::size_t channels : {1u, 2u, 3u, 4u}) {
    const auto pixels = pattern(5, 9, channels);
    const auto png = encode_png(pixels, 5, 9, channels);
    EXPECT_EQ(sniff_image_format(png), image_format::png);
    const decoded_image img = decode_image(png, here, "image");
    EXPECT_EQ(img.rows, 5u);
    EXPECT_EQ(img.cols, 9u);
    EXPECT_EQ(img.channels, channels);
    EXPECT_EQ(img.pixels, pixels);
  }
  const auto grey = pattern(4, 3, 1);
  const decoded_image rgb = decode_image(encode_png(grey, 4, 3, 1), here, "image", {.channels = 3});
  ASSERT_EQ(rgb.pixels.size(), 36u);
  for (std::size_t i = 0; i < 12; ++i)
    for (std::size_t ch = 0; ch < 3; ++ch) EXPECT_EQ(rgb.pixels[3 * i + ch], grey[i]);
  const auto rgba = pattern(4, 3, 4);
  const decoded_image stripped = decode_image(encode_png(rgba, 4, 3, 4), here, "image", {.channels = 3});
  for (std::size_t i = 0; i < 12; ++i)
    for (std::size_t ch = 0; ch < 3; ++ch) EXPECT_EQ(stripped.pixels[3 * i + ch], rgba[4 * i + ch]);
  const decoded_image opaque = decode_image(encode_png(pattern(2, 2, 3), 2, 2, 3), here, "image", {.channels = 4});
  EXPECT_EQ(opaque.pixels[3], 0xff);
  const decoded_image grey_again = decode_image(encode_png(rgb.pixels, 4, 3, 3), here, "image", {.channels = 1});
  EXPECT_EQ(grey_again.pixels, grey) << "grey replicated to RGB comes back as the same grey";
}

TEST(images, bytes_that_are_no_image_are_refused) {
  EXPECT_NE(refusal({}).find("neither a PNG nor a JPEG (0 bytes)"), std::string::npos);
  const std::string gif = "GIF89a....";
  EXPECT_NE(refusal(std::vector<std::byte>(reinterpret_cast<const std::byte*>(gif.data()),
                                           reinterpret_cast<const std::byte*>(gif.data()) + gif.size()))
                .find("neither a PNG nor a JPEG (10 bytes, starting 47 49 46 38)"),
            std::string::npos);
}

TEST(images, a_truncated_or_corrupt_png_is_refused) {
  const auto png = encode_png(pattern(16, 16, 3), 16, 16, 3);
  EXPECT_NE(refusal({png.begin(), png.end() - 20}).find("corrupt PNG: "), std::string::npos);
  EXPECT_NE(refusal({png.begin(), png.begin() + 30}).find("corrupt PNG: "), std::string::npos);
  auto bad = png;
  bad[png.size() - 20] ^= std::byte{0x10};  // inside the IDAT chunk (IDAT's CRC and IEND are the last 16 bytes)
  const std::string m = refusal(bad);
  EXPECT_NE(m.find("corrupt PNG: "), std::string::npos) << m;
}

TEST(images, an_image_of_another_size_is_refused) {
  const auto png = encode_png(pattern(28, 27, 1), 28, 27, 1);
  EXPECT_NE(refusal(png, {.rows = 28, .cols = 28}).find("PNG is 27x28, expected 28x28"), std::string::npos);
  EXPECT_NE(refusal(png, {.max_pixels = 100}).find("exceeds the limit of 100 pixels"), std::string::npos);
}

// Pillow writes a PNG (RGB, palette, 16-bit grey) and JPEGs (grey, RGB) of pattern(), and each JPEG's own decoding.
constexpr const char* pillow_script = R"PY(
import sys
from PIL import Image
rows, cols, out = 12, 20, sys.argv[1]
def img(mode, channels):
    data = bytes((r * 7 + c * 13 + ch * 50) % 256 for r in range(rows) for c in range(cols) for ch in range(channels))
    return Image.frombytes(mode, (cols, rows), data)
img("RGB", 3).save(out + "/rgb.png")
img("RGB", 3).quantize(colors=256).save(out + "/palette.png")
img("L", 1).convert("I").point(lambda v: v * 257).convert("I;16").save(out + "/grey16.png")
for mode, channels in (("L", 1), ("RGB", 3)):
    img(mode, channels).save(out + "/%s.jpg" % mode, quality=90)
    open(out + "/%s.jpg.pixels" % mode, "wb").write(Image.open(out + "/%s.jpg" % mode).tobytes())
open(out + "/palette.png.pixels", "wb").write(Image.open(out + "/palette.png").convert("RGB").tobytes())
)PY";


std::vector<std::uint8_t> as_u8(const std::vector<std::byte>& b) {
  std::vector<std::uint8_t> out(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) out[i] = std::to_integer<std::uint8_t>(b[i]);
  return out;
}

TEST(images, pngs_and_jpegs_written_by_pillow_decode_to_their_pixels) {
  if (test::run(python + " -c 'import PIL'", 60).exit_code != 0) {
    GTEST_SKIP() << "SKIPPED: no Pillow in " << python << " (scripts/test makes the venv)";
  }
  test::temp_dir dir("images");
  std::ofstream(dir / "write.py") << pillow_script;
  const auto r = test::run(python + " " + (dir / "write.py").string() + " " + dir.path().string(), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const decoded_image rgb = decode_image(read_bytes(dir / "rgb.png"), here, "image");
  EXPECT_EQ(rgb.channels, 3u);
  EXPECT_EQ(rgb.pixels, pattern(12, 20, 3));
  const decoded_image palette = decode_image(read_bytes(dir / "palette.png"), here, "image");
  EXPECT_EQ(palette.channels, 3u) << "a palette is expanded to RGB";
  EXPECT_EQ(palette.pixels, as_u8(read_bytes(dir / "palette.png.pixels")));
  const decoded_image grey16 = decode_image(read_bytes(dir / "grey16.png"), here, "image");
  EXPECT_EQ(grey16.channels, 1u);
  EXPECT_EQ(grey16.pixels, pattern(12, 20, 1)) << "16-bit samples v * 257 keep their high byte v";

  for (const auto& [mode, channels] : {std::pair<std::string, std::size_t>{"L", 1}, {"RGB", 3}}) {
    const auto jpg = read_bytes(dir / (mode + ".jpg"));
    EXPECT_EQ(sniff_image_format(jpg), image_format::jpeg);
    const decoded_image img = decode_image(jpg, here, "image");
    EXPECT_EQ(img.rows, 12u);
    EXPECT_EQ(img.cols, 20u);
    ASSERT_EQ(img.channels, channels);
    const auto theirs = as_u8(read_bytes(dir / (mode + ".jpg.pixels")));
    ASSERT_EQ(img.pixels.size(), theirs.size());
    int worst = 0;
    for (std::size_t i = 0; i < theirs.size(); ++i) worst = std::max(worst, std::abs(int(img.pixels[i]) - int(theirs[i])));
    EXPECT_LE(worst, 1) << mode << ": libjpeg-turbo here and Pillow's libjpeg differ by at most their rounding";
    const decoded_image three = decode_image(jpg, here, "image", {.channels = 3});
    EXPECT_EQ(three.channels, 3u);
    // Truncated: libjpeg would warn and fill the rest in grey; we refuse.
    EXPECT_NE(refusal({jpg.begin(), jpg.begin() + static_cast<std::ptrdiff_t>(jpg.size() / 2)}).find("corrupt JPEG: "),
              std::string::npos);
    EXPECT_NE(refusal({jpg.begin(), jpg.begin() + 40}).find("corrupt JPEG: "), std::string::npos);
  }
  EXPECT_THROW((void)decode_image(read_bytes(dir / "L.jpg"), here, "image", {.channels = 4}), config_error);
}

}  // namespace images_test
