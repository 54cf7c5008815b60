// A sequential model whose layers report their gradients during backward (a large dense kernel in two parts, every
// layer before its input gradient), trained by fit over 2 replicas with the reduction overlapping backward in small
// buckets: the same bits as one reduction after backward, so reporting early changes when buckets leave, never what
// is summed.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/nn.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/bucketed_reduction.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace early_report_fit_test {

using namespace mwstrat;

// 2 replicas, global batch 32, one epoch of 128 examples (4 steps); rank 0's parameters after it.
std::vector<float> train_two(reduction_overlap overlap) {
  constexpr std::size_t features = 1024, classes = 4;
  std::vector<float> result;
  std::mutex m;
  spawn_ranks(2, [&](local_collective& c) {
    gradient_sync_options sync;
    sync.overlap = overlap;
    sync.update = update_placement::replicated;
    sync.bucket_bytes = std::size_t{256} << 10;  // smaller than the dense kernel's first part: it leaves at once
    mirrored_strategy<local_collective&> strategy(c, sync);
    // 1024 x 1100 = 1.1 M kernel elements: reported as its last 1024 units, then the other 76.
    nn::sequential model({nn::input{{features}}, nn::dense{1100, nn::activation::relu}, nn::dense{classes}});
    nn::sgd sgd(0.05);
    test::blob_batches data(128, features, classes, 32, c.size(), c.rank(), 3);
    fit_options options;
    options.epochs = 1;
    fit(strategy, model, sgd, data, options);
    if (c.rank() == 0) {
      const std::lock_guard lock(m);
      result.assign(model.parameters().begin(), model.parameters().end());
    }
  });
  return result;
}


TEST(fit_early_reports, overlapping_a_chunked_dense_layer_gives_the_bits_of_one_reduction_after_backward) {
  const auto overlapped = train_two(reduction_overlap::always);
  const auto after = train_two(reduction_overlap::never);
  ASSERT_EQ(overlapped.size(), after.size());
  ASSERT_FALSE(overlapped.empty());
  EXPECT_EQ(overlapped, after);
}

// With the strategy's default bucket size, the tutorial CNN's first bucket (Dense(10), Dense(128)'s bias and the
// last units of its kernel) leaves while the rest of that kernel's gradient is still being computed. A first part
// a few units short of a bucket would wait for the whole kernel, and overlapping would gain nothing (it did).
TEST(fit_early_reports, the_tutorial_cnns_first_default_bucket_leaves_before_its_dense_kernel_is_finished) {
  spawn_ranks(1, [](local_collective& c) {
    auto model = nn::reference_cnn();
    bucketed_reduction<local_collective> reduction(c, model.gradients(),
                                                   gradient_sync_options{}.bucket_bytes / sizeof(float));
    constexpr std::size_t batch = 2;
    std::vector<float> images(batch * 784);
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>(i % 251) / 251.0f;
    const std::vector<std::int64_t> labels{3, 8};
    std::vector<std::pair<std::size_t, std::size_t>> reports;  // (offset, buckets in flight after it)
    model.train_batch(images, labels, batch, [&](std::size_t offset, std::size_t count) {
      reduction.on_ready(offset, count);
      reports.emplace_back(offset, reduction.buckets_in_flight());
    });
    reduction.finish();
    // Reports from the end: Dense(10), Dense(128)'s bias, its kernel's last units, its first units (offset 320,
    // after the convolution's 320 parameters), then the convolution.
    std::size_t kernel_rest = reports.size();
    for (std::size_t i = 0; i < reports.size(); ++i)
      if (reports[i].first == 320) kernel_rest = i;
    ASSERT_GE(kernel_rest, 1u) << "Dense(128)'s kernel was not reported in two parts";
    ASSERT_LT(kernel_rest, reports.size());
    EXPECT_GE(reports[kernel_rest - 1].second, 1u)
        << "no bucket had left before the last part of Dense(128)'s kernel was computed";
    EXPECT_GE(reduction.buckets_sent(), 2u);
  });
}

}  // namespace early_report_fit_test
