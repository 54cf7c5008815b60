#pragma once
/// \file
/// `labeled_images`: an immutable, cheaply copyable set of images with int64 labels, kept in memory.
///
/// An image is `rows × cols × channels` bytes, channels interleaved (HWC, what NHWC layers take): MNIST has one
/// channel, CIFAR-10 three.
///
/// Pixels are stored as the bytes of the file (0..255) and normalised to float in [0, 1] when a batch is filled:
/// MNIST's 60 000 training images take 47 MB as bytes against 188 MB as float, and filling a batch from bytes is
/// as fast as copying floats (see benchmarks/RESULTS.md, "Input pipeline"). Copies share the same storage.
///
/// A set remembers how many of its examples came from each source file (`file_counts()`), which is what file
/// sharding splits across workers (see docs/sharding.md).

#include <mwstrat/error.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// The size of one image: rows × cols pixels of `channels` interleaved bytes each.
struct image_shape {
  std::size_t rows = 0;      ///< height
  std::size_t cols = 0;      ///< width
  std::size_t channels = 1;  ///< bytes per pixel (1: grey, 3: RGB)
};

/// Images (row-major bytes, `rows × cols × channels` each, HWC) with one int64 label per image. Immutable; copies
/// share storage.
class labeled_images {
 public:
  /// An empty set of 0 × 0 images.
  labeled_images() : labeled_images({}, {}, 0, 0) {}

  /// Takes `pixels` (count × rows × cols bytes: one channel) and `labels` (count); `file_counts` says how many
  /// consecutive examples came from each source file (empty: all from one). Throws data_error when the sizes
  /// disagree.
  labeled_images(std::vector<std::uint8_t> pixels, std::vector<std::int64_t> labels, std::size_t rows,
                 std::size_t cols, std::vector<std::size_t> file_counts = {})
      : labeled_images(std::move(pixels), std::move(labels), image_shape{rows, cols, 1}, std::move(file_counts)) {}

  /// Takes `pixels` (count × rows × cols × channels bytes, HWC) and `labels` (count), as above.
  labeled_images(std::vector<std::uint8_t> pixels, std::vector<std::int64_t> labels, image_shape shape,
                 std::vector<std::size_t> file_counts = {}) {
    const std::size_t per = shape.rows * shape.cols * shape.channels;
    if (pixels.size() != labels.size() * per) {
      throw data_error({"data"}, "",
                       "labeled_images: " + std::to_string(pixels.size()) + " pixel bytes do not make " +
                           std::to_string(labels.size()) + " images of " + std::to_string(shape.rows) + "x" +
                           std::to_string(shape.cols) + "x" + std::to_string(shape.channels));
    }
    if (file_counts.empty()) {
      file_counts.push_back(labels.size());
    }
    if (std::accumulate(file_counts.begin(), file_counts.end(), std::size_t{0}) != labels.size()) {
      throw data_error({"data"}, "",
                       "labeled_images: the per-file example counts do not add up to " + std::to_string(labels.size()));
    }
    auto s = std::make_shared<storage>();
    s->pixels = std::move(pixels);
    s->labels = std::move(labels);
    s->file_counts = std::move(file_counts);
    s->rows = shape.rows;
    s->cols = shape.cols;
    s->channels = shape.channels;
    storage_ = std::move(s);
  }

  /// Number of examples.
  [[nodiscard]] std::size_t count() const noexcept { return storage_->labels.size(); }
  /// Bytes per image, rows × cols × channels (784 for MNIST, 3072 for CIFAR-10).
  [[nodiscard]] std::size_t example_size() const noexcept {
    return storage_->rows * storage_->cols * storage_->channels;
  }
  /// Image height.
  [[nodiscard]] std::size_t rows() const noexcept { return storage_->rows; }
  /// Image width.
  [[nodiscard]] std::size_t cols() const noexcept { return storage_->cols; }
  /// Bytes per pixel (1 for MNIST, 3 for CIFAR-10).
  [[nodiscard]] std::size_t channels() const noexcept { return storage_->channels; }
  /// rows, cols and channels together.
  [[nodiscard]] image_shape shape() const noexcept { return {rows(), cols(), channels()}; }
  /// All pixels, example after example, each 0..255.
  [[nodiscard]] std::span<const std::uint8_t> pixels() const noexcept { return storage_->pixels; }
  /// All labels.
  [[nodiscard]] std::span<const std::int64_t> labels() const noexcept { return storage_->labels; }
  /// The pixels of example `i` (unchecked).
  [[nodiscard]] std::span<const std::uint8_t> image(std::size_t i) const noexcept {
    return pixels().subspan(i * example_size(), example_size());
  }
  /// The label of example `i` (unchecked).
  [[nodiscard]] std::int64_t label(std::size_t i) const noexcept { return storage_->labels[i]; }
  /// How many consecutive examples came from each source file; one entry for a set read from one file.
  [[nodiscard]] std::span<const std::size_t> file_counts() const noexcept { return storage_->file_counts; }

  /// Writes example `i` as floats in [0, 1] to `out` (at least example_size() floats; unchecked). Each float is
  /// x · (1/255), which is within an ulp of x / 255 and vectorises better.
  void normalized(std::size_t i, std::span<float> out) const noexcept {
    const std::uint8_t* src = storage_->pixels.data() + i * example_size();
    float* dst = out.data();
    const std::size_t n = example_size();
    for (std::size_t k = 0; k < n; ++k) {
      dst[k] = static_cast<float>(src[k]) * (1.0F / 255.0F);
    }
  }

  /// How many examples carry each label 0 .. num_classes-1 (labels outside are not counted).
  [[nodiscard]] std::vector<std::size_t> class_counts(std::size_t num_classes) const {
    std::vector<std::size_t> counts(num_classes, 0);
    for (const std::int64_t l : labels()) {
      if (l >= 0 && static_cast<std::size_t>(l) < num_classes) {
        ++counts[static_cast<std::size_t>(l)];
      }
    }
    return counts;
  }

 private:
  struct storage {
    std::vector<std::uint8_t> pixels;
    std::vector<std::int64_t> labels;
    std::vector<std::size_t> file_counts;
    std::size_t rows = 0;
    std::size_t cols = 0;
    std::size_t channels = 1;
  };
  std::shared_ptr<const storage> storage_;
};

/// Joins sets of equally sized images into one, in order; each part's files stay separate files (for file
/// sharding). Throws data_error when image sizes differ.
[[nodiscard]] inline labeled_images concatenate(std::span<const labeled_images> parts) {
  if (parts.empty()) {
    return {};
  }
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  std::vector<std::size_t> files;
  std::size_t total = 0;
  for (const auto& p : parts) {
    if (p.rows() != parts[0].rows() || p.cols() != parts[0].cols() || p.channels() != parts[0].channels()) {
      throw data_error({"data"}, "",
                       "concatenate: images of " + std::to_string(p.rows()) + "x" + std::to_string(p.cols()) + "x" +
                           std::to_string(p.channels()) + " cannot join images of " + std::to_string(parts[0].rows()) +
                           "x" + std::to_string(parts[0].cols()) + "x" + std::to_string(parts[0].channels()));
    }
    total += p.count();
  }
  pixels.reserve(total * parts[0].example_size());
  labels.reserve(total);
  for (const auto& p : parts) {
    pixels.insert(pixels.end(), p.pixels().begin(), p.pixels().end());
    labels.insert(labels.end(), p.labels().begin(), p.labels().end());
    files.insert(files.end(), p.file_counts().begin(), p.file_counts().end());
  }
  return {std::move(pixels), std::move(labels), parts[0].shape(), std::move(files)};
}

}  // namespace mwstrat::data
