// Gradient synchronisation as one component: its concepts (near misses, one type per missing requirement), the
// policy value's validation, and the decisions it takes (overlap, placement, fallbacks) on replicas as threads.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/collective/ring/ring_collective.hpp>
#include <mwstrat/nn/sequential.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/detail/deferred_exception.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>
#include <mwstrat/strategy/local_mirrored_strategy.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>

#include <support/ring_threads.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradient_sync_test {

using namespace mwstrat;

// ---------------------------------------------------------------------------------------- part_update_optimizer
struct part_complete {
  bool elementwise_stateless() const { return true; }
  void apply_part(std::span<float>, std::span<const float>) {}
  void count_step() {}
};
struct part_no_stateless {
  void apply_part(std::span<float>, std::span<const float>) {}
  void count_step() {}
};
struct part_no_apply_part {
  bool elementwise_stateless() const { return true; }
  void count_step() {}
};
struct part_no_count_step {
  bool elementwise_stateless() const { return true; }
  void apply_part(std::span<float>, std::span<const float>) {}
};
struct part_stateless_not_bool {
  void elementwise_stateless() const {}
  void apply_part(std::span<float>, std::span<const float>) {}
  void count_step() {}
};
static_assert(part_update_optimizer<part_complete>);
static_assert(!part_update_optimizer<part_no_stateless>);
static_assert(!part_update_optimizer<part_no_apply_part>);
static_assert(!part_update_optimizer<part_no_count_step>);
static_assert(!part_update_optimizer<part_stateless_not_bool>);
static_assert(part_update_optimizer<nn::sgd>);
static_assert(!part_update_optimizer<nn::adam>);

// --------------------------------------------------------------------------------------- range_update_optimizer
struct range_complete {
  bool elementwise() const { return true; }
  void apply_range(std::span<float>, std::span<const float>, std::size_t, std::size_t) {}
  void count_step() {}
};
struct range_no_elementwise {
  void apply_range(std::span<float>, std::span<const float>, std::size_t, std::size_t) {}
  void count_step() {}
};
struct range_no_apply_range {
  bool elementwise() const { return true; }
  void count_step() {}
};
struct range_takes_parts_not_ranges {
  bool elementwise() const { return true; }
  void apply_range(std::span<float>, std::span<const float>) {}
  void count_step() {}
};
struct range_no_count_step {
  bool elementwise() const { return true; }
  void apply_range(std::span<float>, std::span<const float>, std::size_t, std::size_t) {}
};
static_assert(range_update_optimizer<range_complete>);
static_assert(!range_update_optimizer<range_no_elementwise>);
static_assert(!range_update_optimizer<range_no_apply_range>);
static_assert(!range_update_optimizer<range_takes_parts_not_ranges>);
static_assert(!range_update_optimizer<range_no_count_step>);
// Every optimizer of nn/optimizers.hpp streams: a changed signature must not silently turn it off.
static_assert(range_update_optimizer<nn::sgd>);
static_assert(range_update_optimizer<nn::adam>);
static_assert(range_update_optimizer<nn::adamw>);
static_assert(range_update_optimizer<nn::rmsprop>);
static_assert(range_update_optimizer<nn::adagrad>);

// --------------------------------------------------------------------------------------- storage_adopting_model
struct adopt_complete {
  void adopt_storage(std::span<float>, std::span<float>) {}
  void use_own_storage() {}
};
struct adopt_no_adopt {
  void use_own_storage() {}
};
struct adopt_no_own {
  void adopt_storage(std::span<float>, std::span<float>) {}
};
static_assert(storage_adopting_model<adopt_complete>);
static_assert(!storage_adopting_model<adopt_no_adopt>);
static_assert(!storage_adopting_model<adopt_no_own>);

// --------------------------------------------------------------------------------------- model_with_threads
struct threads_complete {
  int threads() const { return 2; }
};
struct threads_missing {};
struct threads_not_const {
  int threads() { return 2; }
};
struct threads_not_a_number {
  void threads() const {}
};
static_assert(model_with_threads<threads_complete>);
static_assert(!model_with_threads<threads_missing>);
static_assert(!model_with_threads<threads_not_const>);
static_assert(!model_with_threads<threads_not_a_number>);

// ----------------------------------------------------------------------------------------------- model_with_executor
struct execute_complete {
  template <class F>
  void execute(F&& f) {
    f();
  }
};
struct execute_missing {};
struct execute_takes_no_task {
  void execute() {}
};
static_assert(model_with_executor<execute_complete>);
static_assert(!model_with_executor<execute_missing>);
static_assert(!model_with_executor<execute_takes_no_task>);

// The reference model has every optional capability the synchroniser uses: a changed signature there must not
// silently move the update out of the model's threads, or turn off the overlap decision or the shared copy.
static_assert(model_with_executor<nn::sequential>);
static_assert(model_with_threads<nn::sequential>);
static_assert(storage_adopting_model<nn::sequential>);

// ----------------------------------------------------------------------------------------- gradient_synchronizer
struct sync_complete {
  template <class Backward>
  auto step(Backward&& backward) {
    return backward([](std::size_t, std::size_t) {});
  }
};
struct sync_no_step {};
struct sync_drops_the_result {
  template <class Backward>
  void step(Backward&& backward) {
    backward([](std::size_t, std::size_t) {});
  }
};
static_assert(gradient_synchronizer<sync_complete>);
static_assert(!gradient_synchronizer<sync_no_step>);
static_assert(!gradient_synchronizer<sync_drops_the_result>);

// ---------------------------------------------------------------------------------------- gradient_sync_strategy
struct arena_only_model {
  std::vector<float> p, g;
  std::span<float> parameters() { return p; }
  std::span<float> gradients() { return g; }
};
struct plain_optimizer {
  void apply(std::span<float> p, std::span<const float> g) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.1f * g[i];
  }
};
#define MWSTRAT_TEST_STRATEGY_MEMBERS                                    \
  int num_replicas_in_sync() const { return 1; }                         \
  int replica_id() const { return 0; }                                   \
  bool is_chief() const { return true; }                                 \
  void verify_same(std::string_view, std::string_view) {}                \
  void mirror(std::span<float>) {}                                       \
  void mirror(std::span<double>) {}                                      \
  void mean_gradients(std::span<float>) {}                               \
  void sum_metrics(std::span<double>) {}
struct offers_complete {
  MWSTRAT_TEST_STRATEGY_MEMBERS
  void barrier() {}
  template <class M, class O>
  sync_complete make_gradient_sync(M&, O&) { return {}; }
};
struct offers_but_no_strategy {  // no barrier(): not a strategy
  MWSTRAT_TEST_STRATEGY_MEMBERS
  template <class M, class O>
  sync_complete make_gradient_sync(M&, O&) { return {}; }
};
struct offers_no_synchronizer {
  MWSTRAT_TEST_STRATEGY_MEMBERS
  void barrier() {}
  template <class M, class O>
  sync_no_step make_gradient_sync(M&, O&) { return {}; }
};
struct offers_nothing {
  MWSTRAT_TEST_STRATEGY_MEMBERS
  void barrier() {}
};
#undef MWSTRAT_TEST_STRATEGY_MEMBERS
static_assert(gradient_sync_strategy<offers_complete, arena_only_model, plain_optimizer>);
static_assert(!gradient_sync_strategy<offers_but_no_strategy, arena_only_model, plain_optimizer>);
static_assert(!gradient_sync_strategy<offers_no_synchronizer, arena_only_model, plain_optimizer>);
static_assert(!gradient_sync_strategy<offers_nothing, arena_only_model, plain_optimizer>);
static_assert(gradient_sync_strategy<mirrored_strategy<local_collective&>, arena_only_model, nn::sgd>);

// make_gradient_sync: the strategy's own synchroniser where it offers one, else the replicated one.
static_assert(std::is_same_v<decltype(make_gradient_sync(std::declval<offers_complete&>(),
                                                         std::declval<arena_only_model&>(),
                                                         std::declval<plain_optimizer&>())),
                             sync_complete>);
static_assert(std::is_same_v<decltype(make_gradient_sync(std::declval<offers_nothing&>(),
                                                         std::declval<arena_only_model&>(),
                                                         std::declval<plain_optimizer&>())),
                             replicated_gradient_sync<offers_nothing, arena_only_model, plain_optimizer>>);
static_assert(std::is_same_v<decltype(make_gradient_sync(std::declval<mirrored_strategy<local_collective&>&>(),
                                                         std::declval<arena_only_model&>(),
                                                         std::declval<nn::sgd&>())),
                             collective_gradient_sync<local_collective, arena_only_model, nn::sgd>>);

// ------------------------------------------------------------------------------------------------------ options
std::string refusal(const gradient_sync_options& o) {
  std::string message;
  spawn_ranks(1, [&](local_collective& c) {
    try {
      mirrored_strategy<local_collective&> s(c, o);
    } catch (const config_error& e) {
      message = e.what();
    }
  });
  return message;
}

TEST(gradient_sync_options, options_that_contradict_themselves_are_refused_when_the_strategy_is_made) {
  gradient_sync_options zero;
  zero.bucket_bytes = 0;
  EXPECT_EQ(refusal(zero), "[mwstrat.strategy] rank 0: gradient_sync_options.bucket_bytes is 0: a bucket holds at "
                           "least one gradient (reduction_overlap::never reduces once after backward)");
  for (const auto update : {update_placement::sharded, update_placement::shared_host_copy}) {
    gradient_sync_options o;
    o.overlap = reduction_overlap::always;
    o.update = update;
    EXPECT_EQ(refusal(o), "[mwstrat.strategy] rank 0: gradient_sync_options: overlap = always contradicts update = " +
                              std::string(to_string(update)) + ": that update needs the whole gradient after backward");
  }
  for (const auto update : {update_placement::automatic, update_placement::replicated}) {
    gradient_sync_options o;
    o.overlap = reduction_overlap::always;
    o.update = update;
    EXPECT_EQ(refusal(o), "");
  }
  EXPECT_EQ(refusal(gradient_sync_options{}), "");
}

// ---------------------------------------------------------------------------------------------------- decisions
struct decision {
  bool overlaps = false;
  update_placement placement = update_placement::automatic;
  std::vector<float> params;
  bool operator==(const decision&) const = default;
};

// Runs two steps of the synchroniser on `n` replicas; returns every replica's decision and parameters.
template <class Optimizer>
std::vector<decision> decide(int n, gradient_sync_options options, Optimizer optimizer) {
  std::vector<decision> out(static_cast<std::size_t>(n));
  spawn_ranks(n, [&](local_collective& c) {
    mirrored_strategy<local_collective&> strategy(c, options);
    arena_only_model model{std::vector<float>(300, 1.0f), std::vector<float>(300)};
    Optimizer opt = optimizer;
    auto sync = strategy.make_gradient_sync(model, opt);
    for (int s = 0; s < 2; ++s) {
      const int result = sync.step([&](auto&& on_ready) {
        for (std::size_t i = 0; i < model.g.size(); ++i)
          model.g[i] = static_cast<float>((i * 3 + static_cast<std::size_t>(c.rank() + s)) % 7);
        on_ready(std::size_t{200}, std::size_t{100});  // two "layers", the last first
        on_ready(std::size_t{0}, std::size_t{200});
        return s + 40;
      });
      EXPECT_EQ(result, s + 40);
    }
    auto& d = out[static_cast<std::size_t>(c.rank())];
    d.overlaps = sync.overlaps();
    d.placement = sync.placement();
    d.params = model.p;
  });
  for (const auto& d : out) EXPECT_EQ(d, out[0]) << "the replicas must decide alike";
  return out;
}

gradient_sync_options with(reduction_overlap overlap, update_placement update) {
  gradient_sync_options o;
  o.overlap = overlap;
  o.update = update;
  o.bucket_bytes = 400;  // 100 floats: the layers above make two buckets
  return o;
}

TEST(collective_gradient_sync, automatic_takes_the_sharded_update_for_plain_sgd_and_falls_back_for_slots) {
  using enum update_placement;
  const auto never = reduction_overlap::never;
  const auto sharded_run = decide(3, with(never, automatic), nn::sgd(0.1));
  EXPECT_EQ(sharded_run[0].placement, sharded);  // no host_arena over the local collective
  EXPECT_FALSE(sharded_run[0].overlaps);
  const auto replicated_run = decide(3, with(never, replicated), nn::sgd(0.1));
  EXPECT_EQ(replicated_run[0].placement, replicated);
  EXPECT_EQ(sharded_run[0].params, replicated_run[0].params);
  // Optimizer slots (momentum): the update cannot be sharded, whatever was asked.
  EXPECT_EQ(decide(3, with(never, automatic), nn::sgd(0.1, 0.9))[0].placement, replicated);
  EXPECT_EQ(decide(3, with(never, sharded), nn::sgd(0.1, 0.9))[0].placement, replicated);
  // No optimizer parts at all: replicated.
  EXPECT_EQ(decide(3, with(never, sharded), plain_optimizer{})[0].placement, replicated);
  // One replica: nothing to share or shard.
  EXPECT_EQ(decide(1, with(never, automatic), nn::sgd(0.1))[0].placement, replicated);
}

TEST(collective_gradient_sync, a_shared_host_copy_that_cannot_be_made_falls_back_to_the_sharded_update) {
  using enum update_placement;
  const auto run = decide(2, with(reduction_overlap::never, shared_host_copy), nn::sgd(0.1));
  EXPECT_EQ(run[0].placement, sharded);  // the local collective shares no region
  EXPECT_EQ(run[0].params, decide(2, with(reduction_overlap::never, replicated), nn::sgd(0.1))[0].params);
}

TEST(collective_gradient_sync, overlap_follows_the_policy_and_an_explicit_placement) {
  using enum update_placement;
  const auto always = decide(3, with(reduction_overlap::always, automatic), nn::sgd(0.1));
  EXPECT_TRUE(always[0].overlaps);
  EXPECT_EQ(always[0].placement, replicated);
  EXPECT_EQ(always[0].params, decide(3, with(reduction_overlap::never, replicated), nn::sgd(0.1))[0].params);
  // An explicit sharded or shared update needs the whole gradient after backward: automatic overlap yields to it.
  EXPECT_FALSE(decide(3, with(reduction_overlap::automatic, sharded), nn::sgd(0.1))[0].overlaps);
  EXPECT_FALSE(decide(3, with(reduction_overlap::automatic, shared_host_copy), nn::sgd(0.1))[0].overlaps);
  // One replica never overlaps: there is nothing to wait for.
  EXPECT_FALSE(decide(1, with(reduction_overlap::always, automatic), nn::sgd(0.1))[0].overlaps);
}

TEST(replicated_gradient_sync, means_then_updates_through_the_strategy_concept_alone) {
  offers_nothing solo;
  arena_only_model model{std::vector<float>(4, 1.0f), std::vector<float>(4)};
  plain_optimizer opt;
  auto sync = make_gradient_sync(solo, model, opt);
  EXPECT_EQ(sync.placement(), update_placement::replicated);
  const int r = sync.step([&](auto&&) {
    model.g = {1.0f, 2.0f, 3.0f, 4.0f};
    return 7;
  });
  EXPECT_EQ(r, 7);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(model.p[i], 1.0f - 0.1f * static_cast<float>(i + 1));
}

// ----------------------------------------------------------------------------------- regularisation after the mean
// A model that leaves its L2 gradient (2λ·w) to the synchroniser, as the graph model does: backward adds it only
// while not deferred. Every update path must add it exactly once per parameter per step, after the mean.
struct l2_model : arena_only_model {
  static constexpr float two_lambda = 0.5f;  // large, so a lost or doubled term cannot hide in rounding
  int deferrals = 0;
  int additions = 0;  // parameters the synchroniser added the term to
  void defer_regularization_gradients(bool d) { deferrals += d ? 1 : (deferrals > 0 ? -1 : 0); }
  void add_regularization_gradients(std::size_t first, std::size_t count) {
    for (std::size_t i = first; i < first + count; ++i) g[i] += two_lambda * p[i];
    additions += static_cast<int>(count);
  }
  // Backward: the raw gradient of this rank, plus the term unless a synchroniser defers it.
  void backward(int rank, int step) {
    for (std::size_t i = 0; i < g.size(); ++i) {
      g[i] = static_cast<float>((i * 5 + static_cast<std::size_t>(rank * 3 + step)) % 11) / 8.0f;
      if (deferrals == 0) g[i] += two_lambda * p[i];
    }
  }
};

TEST(collective_gradient_sync, every_update_path_adds_the_deferred_regularisation_once_after_the_mean) {
  using enum update_placement;
  constexpr int ranks = 2, steps = 2;
  constexpr std::size_t n = 300;
  // Expected: w -= lr · (mean of the raw gradients + 2λ·w), with lr 0.1.
  std::vector<float> expected(n, 1.0f);
  for (int s = 0; s < steps; ++s) {
    l2_model a, b;
    a.p = b.p = expected;
    a.g = b.g = std::vector<float>(n);
    a.deferrals = b.deferrals = 1;
    a.backward(0, s);
    b.backward(1, s);
    for (std::size_t i = 0; i < n; ++i) expected[i] -= 0.1f * ((a.g[i] + b.g[i]) * 0.5f + l2_model::two_lambda * expected[i]);
  }
  for (const auto& path : {std::pair{reduction_overlap::never, replicated},
                            std::pair{reduction_overlap::never, sharded},
                            std::pair{reduction_overlap::always, replicated}}) {
    const reduction_overlap overlap = path.first;  // named variables: clang before 16 cannot capture bindings
    const update_placement update = path.second;
    std::vector<std::vector<float>> params(ranks);
    spawn_ranks(ranks, [&](local_collective& c) {
      mirrored_strategy<local_collective&> strategy(c, with(overlap, update));
      l2_model model;
      model.p = std::vector<float>(n, 1.0f);
      model.g = std::vector<float>(n);
      nn::sgd opt(0.1);
      {
        auto sync = strategy.make_gradient_sync(model, opt);
        EXPECT_EQ(model.deferrals, 1) << "the synchroniser defers the term for its lifetime";
        for (int s = 0; s < steps; ++s)
          sync.step([&](auto&& on_ready) {
            model.backward(c.rank(), s);
            on_ready(std::size_t{200}, std::size_t{100});
            on_ready(std::size_t{0}, std::size_t{200});
            return 0;
          });
        EXPECT_EQ(sync.placement(), update);
      }
      EXPECT_EQ(model.deferrals, 0) << "and gives it back";
      // Each parameter once per step: on every rank (replicated) or on its owner alone (sharded).
      if (update == replicated) {
        EXPECT_EQ(model.additions, steps * static_cast<int>(n));
      }
      params[static_cast<std::size_t>(c.rank())] = model.p;
    });
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(params[0][i], expected[i], 1e-6f) << "parameter " << i << ", update " << to_string(update);
      ASSERT_EQ(params[1][i], params[0][i]);
    }
  }
  // The synchroniser of a strategy that offers none: the same rule.
  offers_nothing solo;
  l2_model model;
  model.p = std::vector<float>(4, 1.0f);
  model.g = std::vector<float>(4);
  plain_optimizer opt;
  {
    auto sync = make_gradient_sync(solo, model, opt);
    sync.step([&](auto&&) {
      model.backward(0, 0);
      return 0;
    });
  }
  EXPECT_EQ(model.deferrals, 0);
  EXPECT_EQ(model.additions, 4);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_FLOAT_EQ(model.p[i], 1.0f - 0.1f * (static_cast<float>((i * 5) % 11) / 8.0f + l2_model::two_lambda));
}

// The replicated update over the ring streams: each part of the mean gradient gets its regularisation term and its
// update as soon as it is final on a rank, while the rest still travels. Over 2 and 3 ranks as threads on loopback
// (small chunks: many parts; 3 ranks forward parts before they are final), by TCP and through shared memory: the
// term once per parameter per step, after the mean, and the same parameters on every rank.
TEST(collective_gradient_sync, the_streamed_update_over_the_ring_adds_the_regularisation_once_after_the_mean) {
  constexpr int steps = 2;
  constexpr std::size_t n = 5000;
  for (const int ranks : {2, 3}) {
    for (const auto transport : {ring_transport::tcp, ring_transport::automatic}) {
      // Expected: w -= lr · (mean of the raw gradients + 2λ·w), with lr 0.1 (within rounding: the ring sums in
      // its own order).
      std::vector<float> expected(n, 1.0f);
      for (int s = 0; s < steps; ++s) {
        std::vector<float> mean(n, 0.0f);
        for (int r = 0; r < ranks; ++r) {
          l2_model m;
          m.p = expected;
          m.g = std::vector<float>(n);
          m.deferrals = 1;
          m.backward(r, s);
          for (std::size_t i = 0; i < n; ++i) mean[i] += m.g[i];
        }
        for (std::size_t i = 0; i < n; ++i)
          expected[i] -= 0.1f * (mean[i] / static_cast<float>(ranks) + l2_model::two_lambda * expected[i]);
      }
      std::vector<std::vector<float>> params(static_cast<std::size_t>(ranks));
      std::vector<int> additions(static_cast<std::size_t>(ranks), 0);
      std::vector<update_placement> placements(static_cast<std::size_t>(ranks));
      const auto configure = [&](ring_options& o) {
        o.chunk_bytes = 4096;  // 1024 floats: several parts per segment
        o.transport = transport;
      };
      test::on_ring_threads(ranks, configure, [&](ring_collective& ring) {
        const int r = ring.rank();
        mirrored_strategy<ring_collective&> strategy(ring, with(reduction_overlap::never, update_placement::replicated));
        l2_model model;
        model.p = std::vector<float>(n, 1.0f);
        model.g = std::vector<float>(n);
        nn::sgd opt(0.1);
        {
          auto sync = strategy.make_gradient_sync(model, opt);
          for (int s = 0; s < steps; ++s)
            sync.step([&](auto&&) {
              model.backward(r, s);
              return 0;
            });
          placements[static_cast<std::size_t>(r)] = sync.placement();
        }
        EXPECT_EQ(opt.iterations(), static_cast<std::uint64_t>(steps)) << "one step counted per step";
        params[static_cast<std::size_t>(r)] = model.p;
        additions[static_cast<std::size_t>(r)] = model.additions;
      });
      const std::string what = std::to_string(ranks) + " ranks, " + (transport == ring_transport::tcp ? "tcp" : "automatic");
      for (int r = 0; r < ranks; ++r) {
        const auto k = static_cast<std::size_t>(r);
        EXPECT_EQ(placements[k], update_placement::replicated) << what;
        EXPECT_EQ(additions[k], steps * static_cast<int>(n)) << what << ": rank " << r;
        ASSERT_EQ(params[k].size(), n) << what;
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_NEAR(params[k][i], expected[i], 1e-5f) << what << ": parameter " << i << " on rank " << r;
          ASSERT_EQ(params[k][i], params[0][i]) << what << ": parameter " << i << " on rank " << r;
        }
      }
    }
  }
}

// A model that says how many threads it computes on and runs tasks "in" them (counted).
struct threaded_model : arena_only_model {
  int compute_threads = 1;
  int executed = 0;
  int threads() const { return compute_threads; }
  template <class F>
  void execute(F&& f) {
    ++executed;
    f();
  }
};

// The streamed update runs part by part on the thread that drives the ring: a model on one thread takes it, a model
// on several keeps its whole update inside its own threads (execute) — with the same bits, for every optimizer,
// slots included (weight decay and value clipping too: they come before each element's rule).
template <class Optimizer>
void expect_streamed_and_whole_updates_agree(const std::string& what, const Optimizer& prototype) {
  constexpr int ranks = 2, steps = 3;
  constexpr std::size_t n = 3001;  // not a whole number of vectors: ranges end mid-vector
  std::vector<float> single;  // rank 0's parameters with one compute thread
  for (const int compute_threads : {1, 2}) {
    std::vector<std::vector<float>> params(ranks);
    std::vector<int> executed(ranks, -1);
    std::vector<std::uint64_t> iterations(ranks, 0);
    test::on_ring_threads(ranks, [](ring_options& o) { o.chunk_bytes = 4096; }, [&](ring_collective& ring) {
      const auto r = static_cast<std::size_t>(ring.rank());
      mirrored_strategy<ring_collective&> strategy(ring, with(reduction_overlap::never, update_placement::replicated));
      threaded_model model;
      model.compute_threads = compute_threads;
      model.p = std::vector<float>(n, 1.0f);
      model.g = std::vector<float>(n);
      Optimizer opt = prototype;
      auto sync = strategy.make_gradient_sync(model, opt);
      for (int s = 0; s < steps; ++s)
        sync.step([&](auto&&) {
          for (std::size_t i = 0; i < n; ++i)
            model.g[i] = static_cast<float>((i * 7 + r * 3 + static_cast<std::size_t>(s)) % 13) / 5.0f - 1.0f;
          return 0;
        });
      params[r] = model.p;
      executed[r] = model.executed;
      iterations[r] = opt.iterations();
    });
    for (std::size_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(executed[r], compute_threads == 1 ? 0 : steps)
          << what << ", " << compute_threads << " threads, rank " << r;
      EXPECT_EQ(iterations[r], static_cast<std::uint64_t>(steps)) << what << ": one step counted per step";
      EXPECT_EQ(params[r], params[0]) << what << ", " << compute_threads << " threads, rank " << r;
    }
    EXPECT_NE(params[0], std::vector<float>(n, 1.0f)) << what << ": nothing was updated";
    if (compute_threads == 1) single = params[0];
    else EXPECT_EQ(params[0], single) << what << ": the streamed and the whole update give different bits";
  }
}

TEST(collective_gradient_sync, only_a_model_on_one_thread_streams_its_update_over_the_ring) {
  expect_streamed_and_whole_updates_agree("sgd", nn::sgd(0.1));
  expect_streamed_and_whole_updates_agree("sgd nesterov, weight decay",
                                          nn::sgd({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true,
                                                   .weight_decay = 1e-2}));
  expect_streamed_and_whole_updates_agree("adam, clipvalue", nn::adam({.learning_rate = 0.01, .clipvalue = 0.5}));
  expect_streamed_and_whole_updates_agree("rmsprop centered, momentum",
                                          nn::rmsprop({.learning_rate = 0.01, .momentum = 0.5, .centered = true}));
  expect_streamed_and_whole_updates_agree("adagrad", nn::adagrad({.learning_rate = 0.05}));
}

// A norm-clipping optimizer's update is not elementwise (every element needs the whole gradient's norm): it is
// never streamed, and its whole update runs inside the model's threads.
TEST(collective_gradient_sync, an_optimizer_that_clips_by_the_global_norm_is_not_streamed) {
  constexpr int ranks = 2;
  std::vector<int> executed(ranks, -1);
  test::on_ring_threads(ranks, [](ring_options&) {}, [&](ring_collective& ring) {
    mirrored_strategy<ring_collective&> strategy(ring, with(reduction_overlap::never, update_placement::replicated));
    threaded_model model;
    model.p = std::vector<float>(100, 1.0f);
    model.g = std::vector<float>(100, 0.5f);
    nn::sgd opt({.learning_rate = 0.1, .momentum = 0.9, .clipnorm = 1.0});
    auto sync = strategy.make_gradient_sync(model, opt);
    sync.step([&](auto&&) { return 0; });
    executed[static_cast<std::size_t>(ring.rank())] = model.executed;
  });
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(executed[static_cast<std::size_t>(r)], 1) << "rank " << r;
}

}  // namespace gradient_sync_test

namespace gradient_sync_test {

// An optimizer whose update throws on rank 0, in each of the calls the collectives make mid-operation: the sharded
// update's apply_part and the streamed update's apply_range (after the first part, so a part was done).
struct throwing_optimizer {
  int rank = 0;
  int parts = 0;
  bool elementwise_stateless() const { return true; }
  bool elementwise() const { return true; }
  void update(std::span<float> p, std::span<const float> g) {
    if (rank == 0 && ++parts > 1) throw std::runtime_error("the optimizer found a non-finite gradient");
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.1f * g[i];
  }
  void apply(std::span<float> p, std::span<const float> g) { update(p, g); }
  void apply_part(std::span<float> p, std::span<const float> g) { update(p, g); }
  void apply_range(std::span<float> p, std::span<const float> g, std::size_t first, std::size_t count) {
    update(p.subspan(first, count), g.subspan(first, count));
  }
  void count_step() {}
};

// The collectives call an update back in the middle of an operation, where it must not throw: an in-process group
// waited without end for the rank that threw, or read its freed buffers (ASan). The step now fails on that rank
// with the optimizer's exception once the collective is done, and the other ranks finish theirs.
TEST(collective_gradient_sync, an_update_that_throws_fails_its_step_without_hanging_the_other_replicas) {
  constexpr std::size_t n = 1 << 16;
  const auto run_step = [&](auto& strategy, int rank) {
    arena_only_model model;
    model.p = std::vector<float>(n, 1.0f);
    model.g = std::vector<float>(n, 1.0f);
    throwing_optimizer opt{rank};
    auto sync = strategy.make_gradient_sync(model, opt);
    sync.step([](auto&&) { return 0; });
    return sync.placement();
  };
  // In-process replicas, the sharded update (all_reduce_update).
  local_options lo;
  lo.op_timeout = std::chrono::seconds(20);
  std::atomic<int> finished{0};
  try {
    run_mirrored_replicas(
        2,
        [&](local_mirrored_strategy& s) {
          EXPECT_EQ(run_step(s, s.replica_id()), update_placement::sharded);
          ++finished;
        },
        lo, with(reduction_overlap::never, update_placement::sharded));
    ADD_FAILURE() << "the optimizer's exception was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite gradient"), std::string::npos) << e.what();
  }
  EXPECT_EQ(finished.load(), 1) << "rank 1 finishes its step";
  // A ring's ranks (threads), the sharded update and the streamed one (all_reduce_streamed); every thread returns
  // (on_ring_threads joins them all) and rank 0's error is the optimizer's.
  for (const auto placement : {update_placement::sharded, update_placement::replicated}) {
    std::atomic<int> done{0};
    try {
      test::on_ring_threads(2, [](ring_options& o) { o.chunk_bytes = 4096; }, [&](ring_collective& ring) {
        mirrored_strategy<ring_collective&> strategy(ring, with(reduction_overlap::never, placement));
        (void)run_step(strategy, ring.rank());
        ++done;
      });
      ADD_FAILURE() << "the optimizer's exception was lost";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("non-finite gradient"), std::string::npos) << e.what();
    }
    // Rank 1 finishes its step, or finds rank 0 gone as it leaves (its ring closes while rank 1 still reads the
    // last frames): either way it returns.
    EXPECT_LE(done.load(), 1);
  }
}

// The first exception is kept, the calls after it are skipped, and it comes out once, where the caller asks.
TEST(deferred_exception, keeps_the_first_exception_skips_the_rest_and_rethrows_it_once) {
  detail::deferred_exception held;
  int ran = 0;
  held.run([&] { ++ran; });
  EXPECT_NO_THROW(held.rethrow_if_any());
  held.run([&] {
    ++ran;
    throw std::runtime_error("first");
  });
  held.run([&] {
    ++ran;
    throw std::logic_error("second");
  });
  EXPECT_EQ(ran, 2) << "the call after the failure was skipped";
  try {
    held.rethrow_if_any();
    ADD_FAILURE() << "nothing rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first");
  }
  EXPECT_NO_THROW(held.rethrow_if_any()) << "rethrown once";
  held.run([&] { ++ran; });
  EXPECT_EQ(ran, 3) << "after the rethrow, calls run again";
}

// A strategy whose rejoin failed (no replacement came) holds no collective: its rank and size still answer (the
// error paths of fit and the examples ask is_chief), and a collective call is a config_error, not a crash.
TEST(mirrored_strategy, a_strategy_whose_rejoin_failed_answers_its_rank_and_refuses_collectives) {
  using ring_strategy = mirrored_strategy<std::unique_ptr<ring_collective>>;
  EXPECT_THROW(ring_strategy(std::unique_ptr<ring_collective>{}), config_error);
  const auto ports = test::free_ports(2);
  std::vector<ring_options> opts(2);
  for (int r = 0; r < 2; ++r) {
    auto& o = opts[static_cast<std::size_t>(r)];
    for (int port : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(port));
    o.rank = r;
    o.connect_timeout = std::chrono::seconds(20);
    o.log = [](std::string_view) {};
  }
  std::thread other([&] { ring_collective ring(opts[1]); });  // joins the first ring, then leaves for good
  ring_strategy chief(std::make_unique<ring_collective>(opts[0]));
  other.join();
  EXPECT_THROW(chief.rejoin_collective(std::chrono::milliseconds(300)), mwstrat::error);
  EXPECT_TRUE(chief.is_chief());
  EXPECT_EQ(chief.replica_id(), 0);
  EXPECT_EQ(chief.num_replicas_in_sync(), 2);
  try {
    chief.barrier();
    ADD_FAILURE() << "a barrier without a collective returned";
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no collective"), std::string::npos) << e.what();
  }
}

}  // namespace gradient_sync_test
