// image_augmentation: crop and flip on a hand-made image (each pixel says where it came from), the zero padding,
// per-image standardization and per-channel normalization numbers, draws that are a pure function of
// (seed, epoch, index) and cover every offset, and through distributed_batches: 2 workers × B see the examples
// 1 worker × 2B sees, bit for bit, and a resume to an epoch sees that epoch's images again.

#include <mwstrat/data/distributed.hpp>
#include <mwstrat/data/image_augmentation.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

namespace augmentation_test {

namespace data = mwstrat::data;

// n images of 6 × 5 × 2 whose byte at (y, x, c) is 1 + y·10 + x·2 + c·… (never 0, so padding shows), plus i.
data::labeled_images coded_set(std::size_t n, data::image_shape shape = {6, 5, 2}) {
  std::vector<std::uint8_t> pixels;
  std::vector<std::int64_t> labels;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t y = 0; y < shape.rows; ++y) {
      for (std::size_t x = 0; x < shape.cols; ++x) {
        for (std::size_t c = 0; c < shape.channels; ++c) {
          pixels.push_back(static_cast<std::uint8_t>(1 + y * 20 + x * 3 + c + (i % 7)));
        }
      }
    }
    labels.push_back(static_cast<std::int64_t>(i % 10));
  }
  return {std::move(pixels), std::move(labels), shape};
}

data::augmentation_options geometry_only(std::size_t pad = 2) {
  data::augmentation_options o;
  o.pad = pad;
  o.normalization = data::image_normalization::unit_range;
  return o;
}

TEST(ImageAugmentation, CropAndFlipOnAHandMadeImage) {
  const auto set = coded_set(1);
  const data::image_augmentation aug(geometry_only(2));
  const auto shape = set.shape();
  std::vector<float> out(set.example_size());
  const auto src = [&](std::size_t y, std::size_t x, std::size_t c) {
    return static_cast<float>(set.image(0)[(y * shape.cols + x) * shape.channels + c]) / 255.0F;
  };
  const auto at = [&](std::size_t y, std::size_t x, std::size_t c) { return out[(y * shape.cols + x) * 2 + c]; };

  // No shift (top = left = pad), no flip: the image itself.
  aug.apply(set.image(0), shape, {2, 2, false}, out);
  for (std::size_t y = 0; y < 6; ++y) {
    for (std::size_t x = 0; x < 5; ++x) {
      for (std::size_t c = 0; c < 2; ++c) {
        ASSERT_FLOAT_EQ(at(y, x, c), src(y, x, c));
      }
    }
  }
  // top 0, left 4: shifted down by 2 (two zero rows on top) and left by 2 (two zero columns on the right).
  aug.apply(set.image(0), shape, {0, 4, false}, out);
  for (std::size_t y = 0; y < 6; ++y) {
    for (std::size_t x = 0; x < 5; ++x) {
      for (std::size_t c = 0; c < 2; ++c) {
        const bool inside = y >= 2 && x + 2 < 5;
        ASSERT_FLOAT_EQ(at(y, x, c), inside ? src(y - 2, x + 2, c) : 0.0F) << y << "," << x << "," << c;
      }
    }
  }
  // The same crop flipped: column x of the output is column 4 - x of the crop; channels keep their order.
  aug.apply(set.image(0), shape, {0, 4, true}, out);
  for (std::size_t y = 0; y < 6; ++y) {
    for (std::size_t x = 0; x < 5; ++x) {
      const std::size_t cx = 4 - x;
      for (std::size_t c = 0; c < 2; ++c) {
        const bool inside = y >= 2 && cx + 2 < 5;
        ASSERT_FLOAT_EQ(at(y, x, c), inside ? src(y - 2, cx + 2, c) : 0.0F) << y << "," << x << "," << c;
      }
    }
  }
  // The far corner: top = left = 2·pad shifts up and left.
  aug.apply(set.image(0), shape, {4, 4, false}, out);
  EXPECT_FLOAT_EQ(at(0, 0, 1), src(2, 2, 1));
  EXPECT_FLOAT_EQ(at(3, 2, 0), src(5, 4, 0));
  EXPECT_FLOAT_EQ(at(4, 0, 0), 0.0F);
  EXPECT_FLOAT_EQ(at(0, 3, 0), 0.0F);
}

TEST(ImageAugmentation, DrawsAreAPureFunctionOfSeedEpochIndex) {
  data::augmentation_options o;
  o.seed = 42;
  const data::image_augmentation a(o);
  const data::image_augmentation b(o);
  o.seed = 43;
  const data::image_augmentation other_seed(o);
  std::set<std::pair<std::size_t, std::size_t>> offsets;
  std::size_t flips = 0;
  std::size_t differs_by_epoch = 0;
  std::size_t differs_by_seed = 0;
  const auto same = [](const data::augmentation_draw& x, const data::augmentation_draw& y) {
    return x.top == y.top && x.left == y.left && x.flip == y.flip;
  };
  for (std::size_t i = 0; i < 2000; ++i) {
    const auto d = a.draw(3, i);
    ASSERT_TRUE(same(d, b.draw(3, i)));
    ASSERT_TRUE(same(d, a.draw(3, i)));  // again: no hidden state
    ASSERT_LE(d.top, 8U);
    ASSERT_LE(d.left, 8U);
    offsets.emplace(d.top, d.left);
    flips += d.flip ? 1 : 0;
    differs_by_epoch += same(d, a.draw(4, i)) ? 0 : 1;
    differs_by_seed += same(d, other_seed.draw(3, i)) ? 0 : 1;
  }
  EXPECT_EQ(offsets.size(), 81U);  // every 9 × 9 offset drawn
  EXPECT_GT(flips, 900U);
  EXPECT_LT(flips, 1100U);
  EXPECT_GT(differs_by_epoch, 1900U);  // 1/162 of draws may coincide by chance
  EXPECT_GT(differs_by_seed, 1900U);

  // Evaluation: no crop, no flip.
  const data::image_augmentation eval(o.for_evaluation());
  for (std::size_t i = 0; i < 100; ++i) {
    const auto d = eval.draw(1, i);
    EXPECT_EQ(d.top, 4U);
    EXPECT_EQ(d.left, 4U);
    EXPECT_FALSE(d.flip);
  }
}

TEST(ImageAugmentation, PerImageStandardization) {
  // A 4 × 4 × 1 image of 0, 51, 102, 255 four times (as fractions of 255: 0, 0.2, 0.4, 1): mean 0.4, population
  // std sqrt(0.14), so (x - mean) / std is scale-free; far above the floor 1/sqrt(16) on 0..255 values.
  std::vector<std::uint8_t> pixels;
  for (int k = 0; k < 4; ++k) {
    pixels.insert(pixels.end(), {0, 51, 102, 255});
  }
  const data::labeled_images set(pixels, {0}, data::image_shape{4, 4, 1});
  data::augmentation_options o;
  o.random_crop = false;
  o.random_flip = false;
  const data::image_augmentation aug(o);
  std::vector<float> out(16);
  aug(set, 0, 0, out);
  const double sd = std::sqrt(0.14);
  const double expected[] = {(0.0 - 0.4) / sd, (0.2 - 0.4) / sd, (0.4 - 0.4) / sd, (1.0 - 0.4) / sd};
  for (std::size_t i = 0; i < 16; ++i) {
    EXPECT_NEAR(out[i], expected[i % 4], 1e-6) << i;
  }
  // TensorFlow standardizes the pixel values as they are (0..255), so the floor 1/sqrt(N) only bites on nearly flat
  // images: 0, 0, 0, 1 has std sqrt(3)/4 = 0.433 < 1/sqrt(4), and the floor 0.5 divides (on [0, 1] values the std
  // would be 0.0017 and the floor would divide there too, giving other numbers).
  const data::labeled_images almost({0, 0, 0, 1}, {0}, data::image_shape{2, 2, 1});
  aug(almost, 0, 0, out);
  EXPECT_NEAR(out[0], -0.25 / 0.5, 1e-6);
  EXPECT_NEAR(out[3], 0.75 / 0.5, 1e-6);
  // Above the floor the scale does not matter: 0, 51, 102, 255 in a 2 × 2 image is the 4 × 4 case again.
  const data::labeled_images small({0, 51, 102, 255}, {0}, data::image_shape{2, 2, 1});
  aug(small, 0, 0, out);
  EXPECT_NEAR(out[0], expected[0], 1e-6);
  EXPECT_NEAR(out[3], expected[3], 1e-6);
  // A flat image: stddev 0, so the floor divides (x - mean) = 0: all zeros, no NaN.
  const data::labeled_images flat({7, 7, 7, 7}, {0}, data::image_shape{2, 2, 1});
  aug(flat, 0, 0, out);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out[i], 0.0F);
  }
}

TEST(ImageAugmentation, StandardizationCountsThePaddedZeros) {
  // A 2 × 4 × 1 image of 255s, pad 2, the crop shifted left by two (left = 4): each row 255 255 0 0, so mean 127.5
  // and std 127.5: ±1.
  const data::labeled_images set(std::vector<std::uint8_t>(8, 255), {0}, data::image_shape{2, 4, 1});
  data::augmentation_options o;
  o.pad = 2;
  const data::image_augmentation aug(o);
  std::vector<float> out(8);
  aug.apply(set.image(0), set.shape(), {2, 4, false}, out);
  const std::vector<float> expected{1, 1, -1, -1, 1, 1, -1, -1};
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(out[i], expected[i]) << i;
  }
}

TEST(ImageAugmentation, PerChannelNormalization) {
  // Two 1 × 1 RGB images: (0, 255, 51) and (255, 255, 153): channel means 0.5, 1, 0.4; stds 0.5, 0, 0.2.
  const data::labeled_images set({0, 255, 51, 255, 255, 153}, {0, 1}, data::image_shape{1, 1, 3});
  const auto stats = data::measure_channel_statistics(set);
  ASSERT_EQ(stats.mean.size(), 3U);
  EXPECT_NEAR(stats.mean[0], 0.5, 1e-6);
  EXPECT_NEAR(stats.mean[1], 1.0, 1e-6);
  EXPECT_NEAR(stats.mean[2], 0.4, 1e-6);
  EXPECT_NEAR(stats.stddev[0], 0.5, 1e-6);
  EXPECT_NEAR(stats.stddev[1], 0.0, 1e-6);
  EXPECT_NEAR(stats.stddev[2], 0.2, 1e-6);

  data::augmentation_options o = geometry_only(0).for_evaluation();
  o.normalization = data::image_normalization::per_channel;
  o.statistics = stats;  // channel 1 has std 0: refused
  EXPECT_THROW(data::image_augmentation{o}, mwstrat::config_error);
  o.statistics = {{0.5F, 0.25F, 0.4F}, {0.5F, 0.5F, 0.2F}};
  const data::image_augmentation aug(o);
  std::vector<float> out(3);
  aug(set, 1, 0, out);
  EXPECT_NEAR(out[0], 1.0, 1e-6);
  EXPECT_NEAR(out[1], 1.5, 1e-6);
  EXPECT_NEAR(out[2], 1.0, 1e-6);
  // Statistics for another channel count are refused when an image comes.
  const data::labeled_images grey({1}, {0}, data::image_shape{1, 1, 1});
  std::vector<float> one(1);
  EXPECT_THROW(aug(grey, 0, 0, one), mwstrat::config_error);
}

// The images and labels of every worker's part of global step `step` of `epoch`, concatenated in worker order.
std::pair<std::vector<float>, std::vector<std::int64_t>> global_step(const data::labeled_images& set, int workers,
                                                                     std::size_t global_batch, std::uint64_t epoch,
                                                                     std::uint64_t step,
                                                                     const data::example_transform& transform) {
  std::vector<float> images;
  std::vector<std::int64_t> labels;
  for (int w = 0; w < workers; ++w) {
    data::distribution_options o;
    o.global_batch = global_batch;
    o.num_workers = workers;
    o.worker_index = w;
    o.seed = 9;
    o.policy = data::data_shard{};
    o.transform = transform;
    data::distributed_batches batches(set, o);
    const std::size_t b = batches.per_worker_batch();
    std::vector<float> img(b * set.example_size());
    std::vector<std::int64_t> lab(b);
    const std::size_t n = batches.fill({epoch, step, 9}, img, lab);
    images.insert(images.end(), img.begin(), img.begin() + static_cast<std::ptrdiff_t>(n * set.example_size()));
    labels.insert(labels.end(), lab.begin(), lab.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return {std::move(images), std::move(labels)};
}

TEST(ImageAugmentation, TwoWorkersTimesBSeeWhatOneWorkerTimesTwoBSees) {
  const auto set = coded_set(40, {8, 8, 3});
  data::augmentation_options o;
  o.pad = 2;
  o.seed = 5;
  const auto transform = data::image_augmentation(o).transform();
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    for (std::uint64_t step = 0; step < 5; ++step) {
      const auto one = global_step(set, 1, 8, epoch, step, transform);
      const auto two = global_step(set, 2, 8, epoch, step, transform);
      const auto four = global_step(set, 4, 8, epoch, step, transform);
      ASSERT_EQ(one.second, two.second);
      ASSERT_EQ(one.first, two.first) << "epoch " << epoch << " step " << step;  // bit for bit
      ASSERT_EQ(one.first, four.first);
    }
  }
  // And augmentation really happened: epochs differ for the same example beyond the shuffle.
  data::distribution_options d;
  d.global_batch = 40;
  d.shuffle = false;
  d.transform = transform;
  data::distributed_batches in_order(set, d);
  std::vector<float> e0(40 * set.example_size());
  std::vector<float> e1(e0.size());
  std::vector<std::int64_t> labels(40);
  (void)in_order.fill({0, 0, 0}, e0, labels);
  (void)in_order.fill({1, 0, 0}, e1, labels);
  EXPECT_NE(e0, e1);
  std::vector<float> again(e0.size());
  (void)in_order.fill({0, 0, 0}, again, labels);  // a resume to epoch 0 sees epoch 0's images again
  EXPECT_EQ(e0, again);
}

TEST(ImageAugmentation, EvaluationTransformThroughForEvaluation) {
  const auto set = coded_set(10, {4, 4, 3});
  data::augmentation_options o;
  const auto eval = data::image_augmentation(o.for_evaluation());
  auto batches =
      data::distributed_batches::for_evaluation(set, 10, 1, 0, data::data_shard{}, eval.transform());
  std::vector<float> images(10 * set.example_size());
  std::vector<std::int64_t> labels(10);
  ASSERT_EQ(batches.fill({0, 0, 0}, images, labels), 10U);
  std::vector<float> expected(set.example_size());
  for (std::size_t i = 0; i < 10; ++i) {
    eval(set, i, 7, expected);  // no random part: the epoch does not matter
    ASSERT_TRUE(std::equal(expected.begin(), expected.end(),
                           images.begin() + static_cast<std::ptrdiff_t>(i * set.example_size())));
    double mean = 0;
    for (const float v : expected) {
      mean += v;
    }
    EXPECT_NEAR(mean / static_cast<double>(expected.size()), 0.0, 1e-6);
  }
}

}  // namespace augmentation_test
