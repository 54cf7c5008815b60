#pragma once
// An in-memory image set written as TFRecord shards of tf.train.Example (features "image": the raw HWC bytes,
// "label": the class), file f holding the set's f-th run of examples (its file_counts), as tools/tfrecord_convert
// writes them: reading the shards in order gives the set's order.

#include <mwstrat/data/example.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/data/record_batches.hpp>
#include <mwstrat/data/tfrecord_writer.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::test {

/// One example as the shards hold it (and a feature no reader asks for, which must be skipped).
inline std::vector<std::byte> image_example(std::span<const std::uint8_t> image, std::int64_t label) {
  data::example ex;
  ex.features["image"] = data::bytes_list{{std::string(reinterpret_cast<const char*>(image.data()), image.size())}};
  ex.features["label"] = data::int64_list{{label}};
  ex.features["other"] = data::float_list{{1.5f}};
  return data::encode_example(ex);
}

/// `set` as one shard per entry of its file_counts in `dir`; returns their paths in order.
inline std::vector<std::filesystem::path> write_record_shards(
    const data::labeled_images& set, const std::filesystem::path& dir,
    data::tfrecord_compression compression = data::tfrecord_compression::none) {
  std::vector<std::filesystem::path> paths;
  std::size_t next = 0;
  const auto counts = set.file_counts();
  for (std::size_t f = 0; f < counts.size(); ++f) {
    paths.push_back(dir / ("train-" + std::to_string(f) + "-of-" + std::to_string(counts.size())));
    data::tfrecord_writer_options o;
    o.compression = compression;
    data::tfrecord_writer w(paths.back(), o);
    for (std::size_t i = 0; i < counts[f]; ++i, ++next) w.write(image_example(set.image(next), set.label(next)));
    w.close();
  }
  return paths;
}

/// The format of those shards for images of `shape`.
inline data::record_image_format raw_image_format(data::image_shape shape) {
  data::record_image_format f;
  f.shape = shape;
  return f;
}

}  // namespace mwstrat::test
