// The sequential model: summary, arena layout, readiness during backward, overwritten gradients, thread-count
// invariance, steady-state allocation, and argument errors.
#include <mwstrat/error.hpp>
#include <mwstrat/nn.hpp>

#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace nn = mwstrat::nn;

// Counts operator new calls so a test can assert that a warm training step allocates nothing. (GCC takes the
// replaced new/delete pair built on malloc/free for a mismatch once it inlines them.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace model_test {
std::atomic<std::size_t> allocations{0};
}
void* operator new(std::size_t n) {
  model_test::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc{};
}
// The nothrow form too (std::stable_sort's temporary buffer uses it): every new of this program is malloc's, so
// the replaced deletes' free() always matches.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  model_test::allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace model_test {

template <class T = float>
struct batch {
  std::vector<T> x;
  std::vector<std::int64_t> y;
  std::size_t n;
};

template <class T>
batch<T> make_batch(std::size_t input_size, std::size_t classes, std::size_t n, std::uint64_t seed) {
  batch<T> b{std::vector<T>(n * input_size), std::vector<std::int64_t>(n), n};
  for (std::size_t i = 0; i < b.x.size(); ++i) b.x[i] = static_cast<T>(mwstrat::detail::random_unit(seed, 1, i));
  for (std::size_t i = 0; i < n; ++i) b.y[i] = static_cast<std::int64_t>(mwstrat::detail::random_bits(seed, 2, i) % classes);
  return b;
}

nn::sequential small_model(int threads) {
  return nn::sequential({nn::input{{9, 11}}, nn::reshape{{9, 11, 1}},
                         nn::conv2d{5, {3, 3}, nn::activation::relu, {1, 1}, nn::padding::same}, nn::max_pool2d{{2, 2}},
                         nn::conv2d{7, {2, 3}, nn::activation::relu}, nn::flatten{}, nn::dropout{0.2},
                         nn::dense{19, nn::activation::relu}, nn::dense{10}},
                        {.threads = threads, .seed = 5});
}


TEST(NnModel, ReferenceCnnSummaryAndParameterCount) {
  auto model = nn::reference_cnn();
  EXPECT_EQ(model.parameter_count(), 2770634u);
  EXPECT_EQ(model.parameters().size(), 2770634u);
  EXPECT_EQ(model.gradients().size(), 2770634u);
  std::ostringstream out;
  model.summary(out);
  const std::string s = out.str();
  for (const char* piece : {"conv2d (Conv2D)", "(None, 26, 26, 32)", "320", "flatten (Flatten)", "(None, 21632)",
                            "dense (Dense)", "(None, 128)", "2769024", "dense_1 (Dense)", "(None, 10)", "1290",
                            "Total params: 2770634"})
    EXPECT_NE(s.find(piece), std::string::npos) << piece << " missing from\n" << s;
}

TEST(NnModel, ArenaLayoutAndInitialisation) {
  auto model = nn::reference_cnn({.seed = 42});
  std::size_t expected_offset = 0;
  for (const auto& l : model.layers()) {
    EXPECT_EQ(l.offset, expected_offset) << l.name;
    expected_offset += l.count;
  }
  EXPECT_EQ(expected_offset, model.parameter_count());
  const auto& dense = model.layers()[3];
  ASSERT_EQ(dense.name, "dense");
  auto p = model.parameters();
  const double limit = std::sqrt(6.0 / (21632 + 128));
  double sum = 0, max_abs = 0;
  for (std::size_t i = dense.offset; i < dense.offset + 21632 * 128; ++i) {
    sum += p[i];
    max_abs = std::max(max_abs, static_cast<double>(std::abs(p[i])));
  }
  EXPECT_LE(max_abs, limit);
  EXPECT_GT(max_abs, 0.99 * limit);
  EXPECT_NEAR(sum / (21632.0 * 128), 0.0, 1e-4);
  for (std::size_t i = dense.offset + 21632 * 128; i < dense.offset + dense.count; ++i) EXPECT_EQ(p[i], 0.0f);
  auto again = nn::reference_cnn({.seed = 42});
  EXPECT_TRUE(std::equal(p.begin(), p.end(), again.parameters().begin()));
  auto other = nn::reference_cnn({.seed = 43});
  EXPECT_FALSE(std::equal(p.begin(), p.end(), other.parameters().begin()));
  other.initialize(42);
  EXPECT_TRUE(std::equal(p.begin(), p.end(), other.parameters().begin()));
}

TEST(NnModel, FingerprintNamesArchitecture) {
  EXPECT_EQ(nn::reference_cnn({.seed = 1}).fingerprint(), nn::reference_cnn({.threads = 2, .seed = 9}).fingerprint());
  EXPECT_NE(nn::reference_cnn().fingerprint(), nn::reference_cnn<double>().fingerprint());
  nn::sequential a{nn::input{{4}}, nn::dense{3}};
  nn::sequential b{nn::input{{4}}, nn::dense{3, nn::activation::relu}};
  nn::sequential c{nn::input{{5}}, nn::dense{3}};
  EXPECT_NE(a.fingerprint(), b.fingerprint());
  EXPECT_NE(a.fingerprint(), c.fingerprint());
  EXPECT_NE(nn::reference_cnn().fingerprint().find("conv2d(32,3x3"), std::string::npos);
}

TEST(NnModel, GradientsAreOverwrittenAndReportedLastLayerFirst) {
  auto model = small_model(2);
  auto b = make_batch<float>(model.input_size(), 10, 6, 3);
  std::vector<std::pair<std::size_t, std::size_t>> ready;
  std::vector<std::vector<float>> seen;
  model.set_step(0);
  const auto stats = model.train_batch(b.x, b.y, b.n, [&](std::size_t offset, std::size_t count) {
    ready.emplace_back(offset, count);
    auto g = model.gradients().subspan(offset, count);
    seen.emplace_back(g.begin(), g.end());
  });
  EXPECT_EQ(stats.count, 6u);
  EXPECT_GT(stats.loss_sum, 0.0);
  const std::vector<float> first(model.gradients().begin(), model.gradients().end());
  // Every parameter layer, last first, slices tiling the arena; each slice already final when reported.
  ASSERT_EQ(ready.size(), 4u);
  std::size_t end = model.parameter_count();
  for (std::size_t i = 0; i < ready.size(); ++i) {
    EXPECT_EQ(ready[i].first + ready[i].second, end);
    end = ready[i].first;
    EXPECT_TRUE(std::equal(seen[i].begin(), seen[i].end(), first.begin() + static_cast<std::ptrdiff_t>(ready[i].first)));
  }
  EXPECT_EQ(end, 0u);
  // The same batch at the same step gives the same gradients: they are overwritten, not accumulated.
  model.set_step(0);
  model.train_batch(b.x, b.y, b.n);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), model.gradients().begin()));
  EXPECT_EQ(model.step(), 1u);
}

// Parameters and gradients in the caller's storage (what fit does with memory the replicas of one host share): the
// same results as in the model's own arena, and the values come back with use_own_storage.
TEST(NnModel, AdoptedStorageTrainsLikeTheModelsOwnAndCopiesBack) {
  auto own = small_model(1);
  auto adopted = small_model(1);
  const std::size_t n = adopted.parameter_count();
  mwstrat::detail::aligned_vector<float> params(adopted.parameters().begin(), adopted.parameters().end());
  mwstrat::detail::aligned_vector<float> grads(n, 0.0f);
  adopted.adopt_storage(params, grads);
  EXPECT_FALSE(adopted.uses_own_storage());
  EXPECT_EQ(adopted.parameters().data(), params.data());
  EXPECT_EQ(adopted.gradients().data(), grads.data());
  auto b = make_batch<float>(own.input_size(), 10, 6, 3);
  own.set_step(0);
  adopted.set_step(0);
  own.train_batch(b.x, b.y, b.n);
  adopted.train_batch(b.x, b.y, b.n);
  EXPECT_TRUE(std::equal(grads.begin(), grads.end(), own.gradients().begin()));
  for (auto& p : params) p += 1.0f;  // an update made by someone else, in the shared copy
  adopted.use_own_storage();
  EXPECT_TRUE(adopted.uses_own_storage());
  EXPECT_NE(adopted.parameters().data(), params.data());
  EXPECT_TRUE(std::equal(params.begin(), params.end(), adopted.parameters().begin()));
  EXPECT_TRUE(std::equal(grads.begin(), grads.end(), adopted.gradients().begin()));

  std::vector<float> short_of_one(n - 1);
  EXPECT_THROW(adopted.adopt_storage(short_of_one, grads), mwstrat::config_error);
  EXPECT_THROW(adopted.adopt_storage(std::span<float>(params).subspan(1), std::span<float>(grads).subspan(1)),
               mwstrat::config_error);
  mwstrat::detail::aligned_vector<float> one_more(n + 1);
  EXPECT_THROW(adopted.adopt_storage(std::span<float>(one_more).subspan(1), grads), mwstrat::config_error)
      << "not 64-byte aligned";
  EXPECT_TRUE(adopted.uses_own_storage());
}

TEST(NnModel, SameBitsForOneTwoAndFourThreads) {
  std::vector<std::vector<float>> params, grads;
  std::vector<double> losses;
  tbb::global_control allow_four(tbb::global_control::max_allowed_parallelism, 4);
  for (int threads : {1, 2, 4}) {
    auto model = small_model(threads);
    nn::adam opt;
    double loss = 0;
    for (std::uint64_t s = 0; s < 3; ++s) {
      auto b = make_batch<float>(model.input_size(), 10, 13, 20 + s);
      loss += model.train_batch(b.x, b.y, b.n).loss_sum;
      model.execute([&] { opt.apply(model.parameters(), model.gradients()); });
    }
    params.emplace_back(model.parameters().begin(), model.parameters().end());
    grads.emplace_back(model.gradients().begin(), model.gradients().end());
    losses.push_back(loss);
  }
  for (std::size_t r = 1; r < params.size(); ++r) {
    EXPECT_EQ(std::memcmp(params[0].data(), params[r].data(), params[0].size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(grads[0].data(), grads[r].data(), grads[0].size() * sizeof(float)), 0);
    EXPECT_EQ(losses[0], losses[r]);
  }
}

TEST(NnModel, ReferenceCnnSameBitsForOneTwoAndFourThreads) {
  std::vector<std::vector<float>> grads;
  auto b = make_batch<float>(784, 10, 3, 77);
  tbb::global_control allow_four(tbb::global_control::max_allowed_parallelism, 4);
  for (int threads : {1, 2, 4}) {
    auto model = nn::reference_cnn({.threads = threads, .seed = 3});
    model.train_batch(b.x, b.y, b.n);
    grads.emplace_back(model.gradients().begin(), model.gradients().end());
  }
  for (std::size_t r = 1; r < grads.size(); ++r)
    EXPECT_EQ(std::memcmp(grads[0].data(), grads[r].data(), grads[0].size() * sizeof(float)), 0);
}

TEST(NnModel, WarmStepAllocatesNothing) {
  auto model = small_model(2);
  nn::sgd opt(0.01, 0.9, true);
  auto b = make_batch<float>(model.input_size(), 10, 8, 4);
  auto step = [&] {
    model.train_batch(b.x, b.y, b.n, [](std::size_t, std::size_t) {});
    model.execute([&] { opt.apply(model.parameters(), model.gradients()); });
  };
  auto smaller = make_batch<float>(model.input_size(), 10, 5, 4);
  step();
  step();
  const std::size_t before = allocations.load();
  step();
  (void)model.evaluate_batch(b.x, b.y, b.n);
  model.train_batch(smaller.x, smaller.y, smaller.n);
  EXPECT_EQ(allocations.load() - before, 0u);
}

TEST(NnModel, EvaluateCountsAndLeavesGradients) {
  nn::sequential model{nn::input{{2}}, nn::dense{2}};
  auto p = model.parameters();
  std::copy_n(std::vector<float>{1, 0, 0, 1, 0, 0}.begin(), 6, p.begin());  // identity
  std::vector<float> x{3, 1, 0, 2, 5, 5};
  std::vector<std::int64_t> y{0, 0, 1};
  const auto st = model.evaluate_batch(x, y, 3);
  EXPECT_EQ(st.count, 3u);
  EXPECT_EQ(st.correct, 1u);  // sample 0 right, sample 1 wrong, sample 2 a tie (first index wins: 0)
  const double expected = std::log(1 + std::exp(-2.0)) + std::log(1 + std::exp(2.0)) + std::log(2.0);
  EXPECT_NEAR(st.loss_sum, expected, 1e-5);
  for (float g : model.gradients()) EXPECT_EQ(g, 0.0f);
}

// A Conv2D without a bias has no bias weight in Keras's layout: listing one named the next layer's values (and read
// past the arena when the convolution was last).
TEST(NnModel, ABiaslessConvolutionListsNoBiasWeight) {
  for (const bool last : {false, true}) {
    nn::sequential m = last ? nn::sequential({nn::input{{4, 4, 2}}, nn::conv2d{.filters = 3, .kernel_size = {2, 2},
                                                                               .use_bias = false}})
                            : nn::sequential({nn::input{{4, 4, 2}},
                                              nn::conv2d{.filters = 3, .kernel_size = {2, 2}, .use_bias = false},
                                              nn::flatten{}, nn::dense{2}});
    std::vector<std::string> names;
    std::size_t values = 0;
    for (const auto& w : m.keras_weights()) {
      names.push_back(w.name);
      values += w.values.size();
    }
    EXPECT_EQ(values, m.parameters().size()) << "last " << last;
    EXPECT_EQ(names.front(), "conv2d/kernel");
    EXPECT_TRUE(std::ranges::find(names, std::string("conv2d/bias")) == names.end()) << "last " << last;
    EXPECT_NE(m.architecture().find("\"use_bias\":false"), std::string::npos) << m.architecture();
  }
}

// predict of no samples on a graph model that has never run a batch: nothing to compute, and no buffers (batch norm's
// among them) to compute it in.
TEST(NnModel, AGraphModelPredictsNothingForNoSamples) {
  const auto x = nn::input_tensor({4, 4, 2});
  const auto y = nn::batch_normalization{}(nn::conv2d{.filters = 3}(x));
  nn::graph_model m(x, nn::dense{2}(nn::global_average_pooling2d{}(y)));
  EXPECT_TRUE(m.predict(std::span<const float>(), 0).empty());
  const std::vector<float> one(32, 0.5f);
  EXPECT_EQ(m.predict(one, 1).size(), 2u);
}

TEST(NnModel, BadArgumentsAreReported) {
  EXPECT_THROW((nn::sequential{nn::dense{3}}), mwstrat::config_error);
  EXPECT_THROW((nn::sequential{nn::input{{4}}, nn::conv2d{2, {3, 3}}}), mwstrat::config_error);
  EXPECT_THROW((nn::sequential{nn::input{{2, 2, 1}}, nn::conv2d{2, {3, 3}}}), mwstrat::config_error);
  EXPECT_THROW((nn::sequential{nn::input{{4}}, nn::input{{4}}}), mwstrat::config_error);
  EXPECT_THROW((nn::sequential({nn::input{{4}}, nn::dense{3}}, {.threads = 0})), mwstrat::config_error);
  nn::sequential model{nn::input{{4}}, nn::dense{3}};
  std::vector<float> x(8);
  std::vector<std::int64_t> y{0, 3};
  try {
    model.train_batch(x, y, 2);
    FAIL() << "expected data_error";
  } catch (const mwstrat::data_error& e) {
    EXPECT_NE(std::string(e.what()).find("[mwstrat.nn] train_batch: label 3 of sample 1"), std::string::npos) << e.what();
  }
  y = {0, 1};
  EXPECT_THROW(model.train_batch(std::span<const float>(x).first(7), y, 2), mwstrat::config_error);
  EXPECT_THROW(model.train_batch(x, std::span<const std::int64_t>(y).first(1), 2), mwstrat::config_error);
  EXPECT_NO_THROW(model.train_batch(x, y, 2));
}

}  // namespace model_test
