#pragma once
/// \file
/// `image_augmentation`: the CIFAR-10 tutorial's input preprocessing as an `example_transform` for
/// `distributed_batches` (and so for `distributed_input`):
///
///   1. training only: zero-pad by `pad` pixels on every side, take a random `rows × cols` crop of the padded
///      image and flip it left-right with probability 1/2 (tf.image.resize_with_crop_or_pad + random_crop +
///      random_flip_left_right);
///   2. normalise, one of
///        - `per_image_standardization`: (x − mean) / max(stddev, 1/√N) over the image's N = rows·cols·channels
///          values (tf.image.per_image_standardization; like it, on the pixel values 0..255 as they are, which only
///          matters for the floor 1/√N; the padded zeros of a crop count, as in TensorFlow's order),
///        - `per_channel`: (x/255 − mean[c]) / std[c], mean and std given or measured on the training set
///          (`channel_statistics`),
///        - `unit_range`: x / 255 (what the pipeline does without a transform).
///
/// The random choices of an example are a pure function of (seed, epoch, the example's index in the set): the
/// same on every worker, with any number of workers, and after a resume from a data cursor, so with data sharding
/// 2 workers × B see exactly the augmented examples 1 worker × 2B sees. Nothing allocates per example.
///
///     data::augmentation_options aug;                       // pad 4, crop + flip, per-image standardization
///     aug.seed = seed;
///     data::distribution_options o;                         // global batch, workers, shuffle seed, ...
///     o.transform = data::image_augmentation(aug).transform();
///     o.policy = data::data_shard{};  // one shared order (auto would shard CIFAR-10's five files by file)
///     mwstrat::distributed_input train(data::distributed_batches(train_set, o));
///     const auto eval = data::image_augmentation(aug.for_evaluation());   // standardization only
///     mwstrat::distributed_input test(
///         data::distributed_batches::for_evaluation(test_set, g, n, w, data::data_shard{}, eval.transform()));

#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/detail/splitmix64.hpp>
#include <mwstrat/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::data {

/// How pixels become floats after the geometric augmentation.
enum class image_normalization {
  per_image_standardization,  ///< (x − mean) / max(stddev, 1/√N) per image, x in 0..255 (TensorFlow's)
  per_channel,                ///< (x/255 − mean[c]) / std[c] with fixed per-channel statistics
  unit_range,                 ///< x / 255
};

/// Per-channel mean and standard deviation of pixels scaled to [0, 1].
struct channel_statistics {
  std::vector<float> mean;  ///< one per channel
  std::vector<float> stddev;  ///< one per channel, > 0
};

/// The per-channel mean and (population) standard deviation of `set`'s pixels, scaled to [0, 1] (for CIFAR-10's
/// training set about mean 0.491 0.482 0.447, std 0.247 0.243 0.262). Accumulated in double, in a fixed order.
[[nodiscard]] inline channel_statistics measure_channel_statistics(const labeled_images& set) {
  const std::size_t channels = set.channels();
  std::vector<double> sum(channels, 0.0);
  std::vector<double> sum_sq(channels, 0.0);
  const auto pixels = set.pixels();
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    const double x = static_cast<double>(pixels[i]) / 255.0;
    sum[i % channels] += x;
    sum_sq[i % channels] += x * x;
  }
  const double n = static_cast<double>(pixels.size() / std::max<std::size_t>(channels, 1));
  channel_statistics out;
  for (std::size_t c = 0; c < channels; ++c) {
    const double mean = n > 0 ? sum[c] / n : 0.0;
    const double var = n > 0 ? std::max(0.0, sum_sq[c] / n - mean * mean) : 0.0;
    out.mean.push_back(static_cast<float>(mean));
    out.stddev.push_back(static_cast<float>(std::sqrt(var)));
  }
  return out;
}

/// Options of `image_augmentation` (the defaults are the tutorial's training preprocessing).
struct augmentation_options {
  bool random_crop = true;   ///< zero-pad by `pad` and take a random crop of the original size
  std::size_t pad = 4;       ///< pixels of zeros on every side before the crop
  bool random_flip = true;   ///< flip left-right with probability 1/2
  image_normalization normalization = image_normalization::per_image_standardization;
  channel_statistics statistics = {};  ///< per_channel only: one mean and std per channel
  std::uint64_t seed = 0;    ///< with (epoch, example index), decides every crop and flip

  /// The same normalisation without the random parts: what validation and test data get.
  [[nodiscard]] augmentation_options for_evaluation() const {
    augmentation_options o = *this;
    o.random_crop = false;
    o.random_flip = false;
    return o;
  }
};

/// The random choices for one example: the crop's top-left corner in the padded image and the flip.
struct augmentation_draw {
  std::size_t top = 0;   ///< in [0, 2·pad]; pad means no shift
  std::size_t left = 0;  ///< in [0, 2·pad]
  bool flip = false;
};

/// The tutorial's augmentation and normalisation (see the file comment). Stateless after construction: one object
/// may serve every thread.
class image_augmentation {
 public:
  /// Checks the options (per_channel needs positive stds); the channel count is checked on each image.
  explicit image_augmentation(augmentation_options options) : options_(std::move(options)) {
    if (options_.normalization == image_normalization::per_channel) {
      if (options_.statistics.mean.empty() || options_.statistics.mean.size() != options_.statistics.stddev.size()) {
        throw config_error({"data"}, "image_augmentation: per_channel normalization needs one mean and one std per "
                                     "channel (got " + std::to_string(options_.statistics.mean.size()) + " and " +
                                         std::to_string(options_.statistics.stddev.size()) + ")");
      }
      for (std::size_t c = 0; c < options_.statistics.stddev.size(); ++c) {
        if (!(options_.statistics.stddev[c] > 0.0F)) {
          throw config_error({"data"}, "image_augmentation: the std of channel " + std::to_string(c) +
                                           " is not positive");
        }
      }
    }
  }

  /// The options.
  [[nodiscard]] const augmentation_options& options() const noexcept { return options_; }

  /// The crop and flip of example `index` in `epoch`: a pure function of (seed, epoch, index).
  [[nodiscard]] augmentation_draw draw(std::uint64_t epoch, std::size_t index) const noexcept {
    // Its own stream, apart from the shuffle's stream_seed(seed, epoch) even when the seeds are equal.
    const std::uint64_t key = mwstrat::detail::mix64(mwstrat::detail::mix64(options_.seed ^ 0xa5a5c1fa210au) ^
                                                     mwstrat::detail::mix64(epoch)) ^
                              mwstrat::detail::mix64(static_cast<std::uint64_t>(index) + 0x9e3779b9u);
    mwstrat::detail::splitmix64 gen(key);
    augmentation_draw d;
    const std::uint64_t span = 2 * static_cast<std::uint64_t>(options_.pad) + 1;
    const std::uint64_t a = gen();
    const std::uint64_t b = gen();
    const std::uint64_t c = gen();
    if (options_.random_crop) {
      d.top = static_cast<std::size_t>(a % span);   // bias ≤ 9/2^64: immaterial
      d.left = static_cast<std::size_t>(b % span);
    } else {
      d.top = d.left = options_.pad;
    }
    d.flip = options_.random_flip && (c >> 63U) != 0;
    return d;
  }

  /// Writes example `index` of `set` as seen in `epoch` into `out` (set.example_size() floats, HWC).
  void operator()(const labeled_images& set, std::size_t index, std::uint64_t epoch, std::span<float> out) const {
    apply(set.image(index), set.shape(), draw(epoch, index), out);
  }

  /// Crops, flips and normalises one image `pixels` of `shape` with the given choices into `out`.
  void apply(std::span<const std::uint8_t> pixels, image_shape shape, const augmentation_draw& d,
             std::span<float> out) const {
    const std::size_t rows = shape.rows;
    const std::size_t cols = shape.cols;
    const std::size_t ch = shape.channels;
    const std::size_t n = rows * cols * ch;
    if (out.size() < n || pixels.size() < n) {
      throw config_error({"data"}, "image_augmentation: an image of " + std::to_string(n) + " values does not fit " +
                                       std::to_string(out.size()) + " floats");
    }
    if (options_.normalization == image_normalization::per_channel && options_.statistics.mean.size() != ch) {
      throw config_error({"data"}, "image_augmentation: " + std::to_string(options_.statistics.mean.size()) +
                                       " channel statistics for images of " + std::to_string(ch) + " channels");
    }
    const std::size_t pad = options_.pad;
    // TensorFlow standardizes the uint8 values cast to float (0..255); the other modes start from x / 255.
    const float scale =
        options_.normalization == image_normalization::per_image_standardization ? 1.0F : 1.0F / 255.0F;
    for (std::size_t y = 0; y < rows; ++y) {
      // Row y of the crop is row (top + y − pad) of the image; outside it, zeros.
      const std::size_t py = d.top + y;
      const bool row_inside = py >= pad && py - pad < rows;
      for (std::size_t x = 0; x < cols; ++x) {
        const std::size_t cx = d.flip ? cols - 1 - x : x;  // flip the crop, not the source
        const std::size_t px = d.left + cx;
        const bool inside = row_inside && px >= pad && px - pad < cols;
        float* o = out.data() + (y * cols + x) * ch;
        if (inside) {
          const std::uint8_t* p = pixels.data() + ((py - pad) * cols + (px - pad)) * ch;
          for (std::size_t c = 0; c < ch; ++c) {
            o[c] = static_cast<float>(p[c]) * scale;
          }
        } else {
          std::fill_n(o, ch, 0.0F);
        }
      }
    }
    normalise(out.first(n), ch);
  }

  /// This object as the hook `distribution_options::transform` takes (a copy of it inside).
  [[nodiscard]] example_transform transform() const {
    return [self = *this](std::span<const std::uint8_t> image, image_shape shape, std::size_t index,
                          std::uint64_t epoch, std::span<float> out) {
      self.apply(image, shape, self.draw(epoch, index), out);
    };
  }

 private:
  void normalise(std::span<float> v, std::size_t ch) const {
    switch (options_.normalization) {
      case image_normalization::unit_range: return;
      case image_normalization::per_channel:
        for (std::size_t i = 0; i < v.size(); ++i) {
          const std::size_t c = i % ch;
          v[i] = (v[i] - options_.statistics.mean[c]) / options_.statistics.stddev[c];
        }
        return;
      case image_normalization::per_image_standardization: {
        // Double sums in a fixed order: the same bits on every machine and thread.
        double sum = 0.0;
        for (const float x : v) {
          sum += x;
        }
        const double count = static_cast<double>(v.size());
        const double mean = sum / count;
        double sq = 0.0;
        for (const float x : v) {
          sq += (x - mean) * (x - mean);
        }
        const double stddev = std::max(std::sqrt(sq / count), 1.0 / std::sqrt(count));
        for (float& x : v) {
          x = static_cast<float>((x - mean) / stddev);
        }
        return;
      }
    }
  }

  augmentation_options options_;
};

}  // namespace mwstrat::data
