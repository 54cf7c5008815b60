// A sequential model whose layers report their gradients during backward (a large dense kernel in two parts, every
// layer before its input gradient), trained by fit over 2 replicas with the reduction overlapping backward in small
// buckets: the same bits as one reduction after backward, so reporting early changes when buckets leave, never what
// is summed.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/nn.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

namespace {

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

}  // namespace

TEST(fit_early_reports, overlapping_a_chunked_dense_layer_gives_the_bits_of_one_reduction_after_backward) {
  const auto overlapped = train_two(reduction_overlap::always);
  const auto after = train_two(reduction_overlap::never);
  ASSERT_EQ(overlapped.size(), after.size());
  ASSERT_FALSE(overlapped.empty());
  EXPECT_EQ(overlapped, after);
}
