#pragma once
/// \file
/// The CIFAR-10 loader: the official binary batches (`cifar-10-batches-bin/`, what every CIFAR user has on disk
/// and what scripts/fetch-cifar10 writes) as a `labeled_images` of 32 × 32 × 3 bytes in HWC order.
///
/// A batch file is records of `[label][1024 R][1024 G][1024 B]` (each plane row-major), 10 000 of them. The
/// training split is data_batch_1..5 (50 000 images, one file count per batch, so file sharding splits them), the
/// test split test_batch (10 000). Every file is read and checked before the set exists: a missing file, a short
/// (truncated) or otherwise wrong-sized one, a label ≥ 10 are errors naming the file and the record, and nothing
/// is half-loaded.

#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// Which half of CIFAR-10.
enum class cifar10_split { train, test };

/// Where scripts/fetch-cifar10 puts CIFAR-10 (relative to the repository root).
inline constexpr const char* default_cifar10_dir = ".cache/cifar10";

/// CIFAR-10's class names, by label.
inline constexpr std::array<std::string_view, 10> cifar10_class_names = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};

/// The image shape of CIFAR-10: 32 × 32 RGB.
inline constexpr image_shape cifar10_shape{32, 32, 3};

/// Options of `load_cifar10`.
struct cifar10_options {
  std::size_t records_per_file = 10000;  ///< the official files hold 10 000; a test may write fewer
};

/// Reads one batch file in the official layout (exactly `records` records), appending its images (converted to
/// HWC) and labels. Throws io_error when it cannot be opened, data_error naming the file and record otherwise; a
/// refused file leaves both vectors as they were.
inline void read_cifar10_batch(const std::filesystem::path& file, std::size_t records,
                               std::vector<std::uint8_t>& pixels, std::vector<std::int64_t>& labels) {
  constexpr std::size_t plane = 32 * 32;
  constexpr std::size_t record_size = 1 + 3 * plane;
  const std::string name = file.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw io_error({"cifar10"}, "cannot find the CIFAR-10 batch file " + name);
  }
  const std::uintmax_t size = std::filesystem::file_size(file, ec);
  if (ec) {
    throw io_error({"cifar10"}, "cannot read the size of " + name + ": " + ec.message());
  }
  const std::uintmax_t expected = static_cast<std::uintmax_t>(records) * record_size;
  if (size < expected) {
    const std::uintmax_t whole = size / record_size;
    throw data_error({"cifar10"}, name,
                     name + ": truncated: " + std::to_string(size) + " bytes end in record " + std::to_string(whole) +
                         " (" + std::to_string(whole) + " whole records of 3073 bytes; expected " +
                         std::to_string(records) + " records, " + std::to_string(expected) + " bytes)");
  }
  if (size != expected) {
    throw data_error({"cifar10"}, name,
                     name + ": wrong size: " + std::to_string(size) + " bytes, expected " + std::to_string(records) +
                         " records of 3073 bytes (" + std::to_string(expected) +
                         " bytes); record " + std::to_string(records) + " onwards is extra");
  }
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(size));
  std::ifstream in(file, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size()))) {
    throw io_error({"cifar10"}, "cannot read " + name + " (" + std::to_string(in.gcount()) + " of " +
                                 std::to_string(raw.size()) + " bytes read)");
  }
  // Every label is checked before the caller's vectors grow, so a refused file leaves them as they were.
  for (std::size_t r = 0; r < records; ++r) {
    const std::uint8_t label = raw[r * record_size];
    if (label >= 10) {
      throw data_error({"cifar10"}, name,
                       name + ": corrupt: record " + std::to_string(r) + " (byte offset " +
                           std::to_string(r * record_size) + ") has label " + std::to_string(label) +
                           ", not in [0, 10)");
    }
  }
  const std::size_t first_pixel = pixels.size();
  pixels.resize(first_pixel + records * 3 * plane);
  labels.reserve(labels.size() + records);
  for (std::size_t r = 0; r < records; ++r) {
    const std::uint8_t* record = raw.data() + r * record_size;
    labels.push_back(record[0]);
    std::uint8_t* image = pixels.data() + first_pixel + r * 3 * plane;
    for (std::size_t p = 0; p < plane; ++p) {  // planar CHW -> interleaved HWC
      image[3 * p + 0] = record[1 + p];
      image[3 * p + 1] = record[1 + plane + p];
      image[3 * p + 2] = record[1 + 2 * plane + p];
    }
  }
}

/// The batch files of a split, in order: data_batch_1..5.bin or test_batch.bin under `dir`, or under
/// `dir/cifar-10-batches-bin` when `dir` holds that folder (as .cache/cifar10 and the official tarball do).
[[nodiscard]] inline std::vector<std::filesystem::path> cifar10_files(const std::filesystem::path& dir,
                                                                     cifar10_split split) {
  std::error_code ec;
  const std::filesystem::path nested = dir / "cifar-10-batches-bin";
  const std::filesystem::path base = std::filesystem::is_directory(nested, ec) ? nested : dir;
  std::vector<std::filesystem::path> files;
  if (split == cifar10_split::train) {
    for (int b = 1; b <= 5; ++b) {
      files.push_back(base / ("data_batch_" + std::to_string(b) + ".bin"));
    }
  } else {
    files.push_back(base / "test_batch.bin");
  }
  return files;
}

/// Loads CIFAR-10's training (50 000 images, 5 files) or test (10 000) split from `dir` (see cifar10_files).
[[nodiscard]] inline labeled_images load_cifar10(const std::filesystem::path& dir, cifar10_split split,
                                                 const cifar10_options& options = {}) {
  if (options.records_per_file == 0) {
    throw config_error({"cifar10"}, "load_cifar10: records_per_file must be positive");
  }
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  std::vector<std::size_t> file_counts;
  const auto files = cifar10_files(dir, split);
  pixels.reserve(files.size() * options.records_per_file * 3072);
  for (const auto& file : files) {
    read_cifar10_batch(file, options.records_per_file, pixels, labels);
    file_counts.push_back(options.records_per_file);
  }
  // Only now, with every file read and checked, does the set exist.
  return {std::move(pixels), std::move(labels), cifar10_shape, std::move(file_counts)};
}

}  // namespace mwstrat::data
