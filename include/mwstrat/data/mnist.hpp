#pragma once
/// \file
/// Loaders for MNIST and Fashion-MNIST (and any pair of IDX image/label files shaped like them).
///
/// Both data sets use the same four file names; each may be raw or gzip-compressed (`name` or `name.gz`).
/// Images must be u8 with three dimensions; labels integer with one dimension, as many as the images, each in
/// [0, num_classes). Anything else is a `data_error` naming the file(s) and the defect.

#include <mwstrat/data/idx.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// Which half of an MNIST-style data set.
enum class mnist_split { train, test };

/// Where Debian's `dataset-fashion-mnist` package installs Fashion-MNIST.
inline constexpr const char* default_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

/// Options of `load_labeled_images`.
struct load_options {
  std::int64_t num_classes = 10;  ///< labels must lie in [0, num_classes)
  idx_read_options idx = {};      ///< limits for the IDX reader
};

/// Reads an image file and a label file and checks that they belong together.
[[nodiscard]] inline labeled_images load_labeled_images(const std::filesystem::path& images_path,
                                                        const std::filesystem::path& labels_path,
                                                        const load_options& options = {}) {
  idx_array images = read_idx(images_path, options.idx);
  if (images.type != idx_type::u8) {
    throw detail::idx_defect(images.source, "images must be u8, the file holds " +
                                                std::string(to_string(images.type)));
  }
  if (images.dims.size() != 3) {
    throw detail::idx_defect(images.source, "images must have 3 dimensions (count, rows, cols), the file has " +
                                                std::to_string(images.dims.size()));
  }
  idx_array labels_file = read_idx(labels_path, options.idx);
  if (labels_file.dims.size() != 1) {
    throw detail::idx_defect(labels_file.source, "labels must have 1 dimension, the file has " +
                                                     std::to_string(labels_file.dims.size()));
  }
  if (labels_file.type == idx_type::f32 || labels_file.type == idx_type::f64) {
    throw detail::idx_defect(labels_file.source, "labels must be integers, the file holds " +
                                                     std::string(to_string(labels_file.type)));
  }
  if (labels_file.dims[0] != images.dims[0]) {
    throw data_error({"idx"}, images.source,
                     "mismatched files: " + images.source + " holds " + std::to_string(images.dims[0]) +
                         " images but " + labels_file.source + " holds " + std::to_string(labels_file.dims[0]) +
                         " labels");
  }
  std::vector<std::int64_t> labels = labels_file.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= options.num_classes) {
      throw detail::idx_defect(labels_file.source, "corrupt: label " + std::to_string(labels[i]) + " of example " +
                                                       std::to_string(i) + " is outside [0, " +
                                                       std::to_string(options.num_classes) + ")");
    }
  }
  return {std::move(images.data), std::move(labels), images.dims[1], images.dims[2]};
}

}  // namespace mwstrat::data

namespace mwstrat::detail {

[[nodiscard]] inline std::filesystem::path find_idx(const std::filesystem::path& dir, const std::string& stem) {
  const auto raw = dir / stem;
  if (std::filesystem::exists(raw)) {
    return raw;
  }
  auto gz = dir / (stem + ".gz");
  if (std::filesystem::exists(gz)) {
    return gz;
  }
  throw io_error({"data"}, "cannot find " + raw.string() + " nor " + gz.string());
}

[[nodiscard]] inline data::labeled_images load_mnist_layout(const std::filesystem::path& dir, data::mnist_split split,
                                                           const char* what) {
  const std::string prefix = split == data::mnist_split::train ? "train" : "t10k";
  auto images = find_idx(dir, prefix + "-images-idx3-ubyte");
  data::labeled_images set = data::load_labeled_images(images, find_idx(dir, prefix + "-labels-idx1-ubyte"));
  if (set.rows() != 28 || set.cols() != 28) {
    throw data_error({"idx"}, images.string(),
                     images.string() + ": " + what + " images are 28x28, the file holds " + std::to_string(set.rows()) +
                         "x" + std::to_string(set.cols()));
  }
  return set;
}

}  // namespace mwstrat::detail

namespace mwstrat::data {

/// Loads MNIST's training (60 000) or test (10 000) split from `dir` (raw or .gz IDX files).
[[nodiscard]] inline labeled_images load_mnist(const std::filesystem::path& dir, mnist_split split) {
  return detail::load_mnist_layout(dir, split, "MNIST");
}

/// Loads Fashion-MNIST's training (60 000) or test (10 000) split from `dir` (raw or .gz IDX files).
[[nodiscard]] inline labeled_images load_fashion_mnist(mnist_split split,
                                                       const std::filesystem::path& dir = default_fashion_mnist_dir) {
  return detail::load_mnist_layout(dir, split, "Fashion-MNIST");
}

}  // namespace mwstrat::data
