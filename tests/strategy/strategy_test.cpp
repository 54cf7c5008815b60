#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/collective/ring/ring_collective.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/bucketed_reduction.hpp>
#include <mwstrat/strategy/concepts.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>

#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <string_view>
#include <vector>

namespace strategy_test {

using namespace mwstrat;

// Near misses: one type per missing requirement of `strategy`.
struct complete {
  int num_replicas_in_sync() const { return 1; }
  int replica_id() const { return 0; }
  bool is_chief() const { return true; }
  void verify_same(std::string_view, std::string_view) {}
  void mirror(std::span<float>) {}
  void mirror(std::span<double>) {}
  void mean_gradients(std::span<float>) {}
  void sum_metrics(std::span<double>) {}
  void barrier() {}
};
struct no_replicas { int replica_id() const; bool is_chief() const; void verify_same(std::string_view, std::string_view);
  void mirror(std::span<float>); void mirror(std::span<double>); void mean_gradients(std::span<float>); void sum_metrics(std::span<double>); void barrier(); };
struct no_replica_id { int num_replicas_in_sync() const; bool is_chief() const; void verify_same(std::string_view, std::string_view);
  void mirror(std::span<float>); void mirror(std::span<double>); void mean_gradients(std::span<float>); void sum_metrics(std::span<double>); void barrier(); };
struct no_is_chief { int num_replicas_in_sync() const; int replica_id() const; void verify_same(std::string_view, std::string_view);
  void mirror(std::span<float>); void mirror(std::span<double>); void mean_gradients(std::span<float>); void sum_metrics(std::span<double>); void barrier(); };
struct no_verify { int num_replicas_in_sync() const; int replica_id() const; bool is_chief() const;
  void mirror(std::span<float>); void mirror(std::span<double>); void mean_gradients(std::span<float>); void sum_metrics(std::span<double>); void barrier(); };
struct no_mirror { int num_replicas_in_sync() const; int replica_id() const; bool is_chief() const;
  void verify_same(std::string_view, std::string_view); void mean_gradients(std::span<float>); void sum_metrics(std::span<double>); void barrier(); };
struct no_mean { int num_replicas_in_sync() const; int replica_id() const; bool is_chief() const;
  void verify_same(std::string_view, std::string_view); void mirror(std::span<float>); void mirror(std::span<double>); void sum_metrics(std::span<double>); void barrier(); };
struct no_sum { int num_replicas_in_sync() const; int replica_id() const; bool is_chief() const;
  void verify_same(std::string_view, std::string_view); void mirror(std::span<float>); void mirror(std::span<double>); void mean_gradients(std::span<float>); void barrier(); };
struct no_barrier { int num_replicas_in_sync() const; int replica_id() const; bool is_chief() const;
  void verify_same(std::string_view, std::string_view); void mirror(std::span<float>); void mirror(std::span<double>); void mean_gradients(std::span<float>); void sum_metrics(std::span<double>); };

static_assert(strategy<complete>);
static_assert(!strategy<no_replicas>);
static_assert(!strategy<no_replica_id>);
static_assert(!strategy<no_is_chief>);
static_assert(!strategy<no_verify>);
static_assert(!strategy<no_mirror>);
static_assert(!strategy<no_mean>);
static_assert(!strategy<no_sum>);
static_assert(!strategy<no_barrier>);
static_assert(strategy<mirrored_strategy<local_collective&>>);

TEST(mirrored_strategy, mirrors_the_chiefs_values_and_averages_gradients) {
  for (int n : {1, 2, 3, 4, 7}) {
    spawn_ranks(n, [&](local_collective& c) {
      mirrored_strategy<local_collective&> s(c, {"worker", c.rank()});
      EXPECT_EQ(s.num_replicas_in_sync(), n);
      EXPECT_EQ(s.is_chief(), c.rank() == 0);
      EXPECT_EQ(s.task_id(), c.rank());
      std::vector<float> params(5, static_cast<float>(c.rank() + 10));
      s.mirror(std::span<float>(params));
      EXPECT_EQ(params, std::vector<float>(5, 10.0f));
      std::vector<float> grads(3, static_cast<float>(c.rank()));
      s.mean_gradients(grads);
      EXPECT_FLOAT_EQ(grads[0], static_cast<float>(n - 1) / 2.0f);
      std::vector<double> sums{1.0, static_cast<double>(c.rank())};
      s.sum_metrics(sums);
      EXPECT_DOUBLE_EQ(sums[0], n);
      s.verify_same("model fingerprint", "same everywhere");
      s.barrier();
    });
  }
}

TEST(mirrored_strategy, verify_same_names_every_differing_rank) {
  std::vector<std::string> messages(4);
  spawn_ranks(4, [&](local_collective& c) {
    mirrored_strategy<local_collective&> s(c);
    try {
      s.verify_same("model fingerprint", c.rank() % 2 == 1 ? "dense(10)" : "dense(12)");
    } catch (const config_error& e) {
      messages[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  EXPECT_EQ(messages[0], "[mwstrat.strategy] rank 0: model fingerprint differs from the chief's (rank 0) on rank(s) "
                         "1, 3: every worker must build the same model");
  EXPECT_NE(messages[1].find("this replica's is 'dense(10)'"), std::string::npos) << messages[1];
}

TEST(bucketed_reduction, equals_one_mean_and_sends_whole_layers) {
  const std::vector<std::size_t> layers{7, 1000, 3, 50};  // arena order; backward reports them last-first
  const std::size_t total = std::accumulate(layers.begin(), layers.end(), std::size_t{0});
  for (std::size_t bucket : {std::size_t{1}, std::size_t{60}, std::size_t{100000}}) {
    spawn_ranks(3, [&](local_collective& c) {
      std::vector<float> g(total), expected(total);
      for (std::size_t i = 0; i < total; ++i) g[i] = expected[i] = static_cast<float>((i * 7 + c.rank()) % 11);
      c.all_reduce(std::span<float>(expected), reduce_op::mean);
      bucketed_reduction<local_collective> r(c, g, bucket);
      r.begin();
      std::size_t end = total;
      for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
        end -= *it;
        r.on_ready(end, *it);
      }
      r.finish();
      EXPECT_EQ(g, expected);
      EXPECT_EQ(r.buckets_sent(), bucket == 1 ? 4u : bucket == 60 ? 2u : 1u);
    });
  }
}

// The fused sharded update is offered by the ring and the local collective (their typed suite checks it bit for
// bit against all_reduce and a full update, tests/collective/sweep.hpp) and used by fit for plain SGD only:
// optimizers with slots take the full update. These keep those checks from being skipped silently by a changed
// signature.
static_assert(fused_update_collective<ring_collective>);
static_assert(fused_update_collective<local_collective>);
// The streamed all-reduce (each part updated as soon as its mean is final) is the ring's alone; the local
// collective's replicated update stays the whole update after the all-reduce.
static_assert(streamed_reduce_collective<ring_collective>);
static_assert(!streamed_reduce_collective<local_collective>);
static_assert(part_update_optimizer<nn::sgd>);
static_assert(!part_update_optimizer<nn::adam>);

// An arena model for the synchroniser: its backward writes fixed gradients (no layers to report).
struct arena_model {
  std::vector<float> p, g;
  std::span<float> parameters() { return p; }
  std::span<float> gradients() { return g; }
};

// Plain SGD at 0.5 that records how many elements it updated in parts (a sharded update) and in whole.
struct recording_sgd {
  nn::sgd sgd{0.5};
  std::size_t in_parts = 0, whole = 0;
  void apply(std::span<float> p, std::span<const float> g) {
    whole += p.size();
    sgd.apply(p, g);
  }
  [[nodiscard]] bool elementwise_stateless() const { return sgd.elementwise_stateless(); }
  void apply_part(std::span<float> p, std::span<const float> g) {
    in_parts += p.size();
    sgd.apply_part(p, g);
  }
  void count_step() { sgd.count_step(); }
};

// The synchroniser's sharded update (the collective's fused all_reduce_update) against mean_gradients and a whole
// update: fused with 3 replicas, the plain path with 1.
void expect_fused_update_equals_mean_then_update(int replicas) {
  std::vector<std::vector<float>> fused(static_cast<std::size_t>(replicas)), plain(fused.size());
  spawn_ranks(replicas, [&](local_collective& c) {
    gradient_sync_options sharded;
    sharded.update = update_placement::sharded;
    mirrored_strategy<local_collective&> strategy(c, sharded);
    const auto r = static_cast<std::size_t>(c.rank());
    arena_model model{std::vector<float>(5001), std::vector<float>(5001)};
    std::vector<float> g(5001);
    for (std::size_t i = 0; i < g.size(); ++i) {
      g[i] = static_cast<float>((i * 7 + r * 13) % 17) * 0.1f;
      model.p[i] = static_cast<float>(i % 5) * 0.3f;
    }
    std::vector<float> g2 = g, p2 = model.p;
    recording_sgd sgd;
    auto sync = strategy.make_gradient_sync(model, sgd);
    sync.step([&](auto&&) {
      model.g = g;
      return 0;
    });
    EXPECT_EQ(sync.placement() == update_placement::sharded, replicas > 1);
    const std::size_t updated = sgd.in_parts + sgd.whole;
    EXPECT_LE(updated, (g.size() + c.size() - 1) / static_cast<std::size_t>(c.size()));  // only its own part
    strategy.mean_gradients(std::span<float>(g2));
    for (std::size_t i = 0; i < p2.size(); ++i) p2[i] -= 0.5f * g2[i];
    fused[r] = model.p;
    plain[r] = p2;
  });
  for (std::size_t r = 0; r < fused.size(); ++r) {
    EXPECT_EQ(fused[r], plain[r]) << "rank " << r;
    EXPECT_EQ(fused[r], fused[0]) << "rank " << r;
  }
}

TEST(gradient_sync, the_sharded_update_equals_the_mean_then_the_whole_update) {
  expect_fused_update_equals_mean_then_update(3);
  expect_fused_update_equals_mean_then_update(1);
}

TEST(sgd, apply_part_is_apply_on_a_part_and_needs_no_momentum) {
  std::vector<float> p(100, 1.0f), q(100, 1.0f), g(100);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i) * 0.01f;
  nn::sgd whole(0.1), parts(0.1);
  whole.apply(std::span<float>(p), std::span<const float>(g));
  parts.apply_part(std::span<float>(q).subspan(0, 37), std::span<const float>(g).subspan(0, 37));
  parts.apply_part(std::span<float>(q).subspan(37), std::span<const float>(g).subspan(37));
  parts.count_step();
  EXPECT_EQ(p, q);
  EXPECT_EQ(whole.iterations(), parts.iterations());
  EXPECT_TRUE(parts.elementwise_stateless());
  nn::sgd momentum(0.1, 0.9);
  EXPECT_FALSE(momentum.elementwise_stateless());
  EXPECT_THROW(momentum.apply_part(std::span<float>(q), std::span<const float>(g)), config_error);
}

TEST(bucketed_reduction, rejects_slices_out_of_order) {
  spawn_ranks(1, [&](local_collective& c) {
    std::vector<float> g(10);
    bucketed_reduction<local_collective> r(c, g, 4);
    EXPECT_THROW(r.on_ready(0, 5), config_error);
  });
}

}  // namespace strategy_test
