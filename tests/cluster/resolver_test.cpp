// The cluster_resolver concept (near misses: one type per missing requirement) and the simple resolver.
#include <mwstrat/cluster.hpp>

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace resolver_test {

using mwstrat::cluster_config;
using mwstrat::cluster_resolver;

// The opt-in example of concepts.hpp, verbatim in spirit.
struct launcher_resolver {
  [[nodiscard]] cluster_config resolve() const {
    return mwstrat::simple_resolver({"127.0.0.1:4000", "127.0.0.1:4001"}, 1).resolve();
  }
  [[nodiscard]] std::string_view name() const noexcept { return "my-launcher"; }
};
static_assert(cluster_resolver<launcher_resolver>);
static_assert(cluster_resolver<mwstrat::tf_config_resolver>);
static_assert(cluster_resolver<mwstrat::slurm_resolver>);
static_assert(cluster_resolver<mwstrat::simple_resolver>);

// Requirement 1 missing: not move-constructible.
struct pinned_resolver {
  pinned_resolver() = default;
  pinned_resolver(pinned_resolver&&) = delete;
  cluster_config resolve() const { return {}; }
  std::string_view name() const { return "pinned"; }
};
static_assert(!cluster_resolver<pinned_resolver>);

// Requirement 2 missing: no resolve().
struct no_resolve {
  std::string_view name() const { return "x"; }
};
static_assert(!cluster_resolver<no_resolve>);

// Requirement 2 missing: resolve() only on a mutable resolver.
struct mutable_resolve {
  cluster_config resolve() { return {}; }
  std::string_view name() const { return "x"; }
};
static_assert(!cluster_resolver<mutable_resolve>);

// Requirement 2 missing: resolve() returns something else than a cluster_config.
struct resolves_to_spec {
  mwstrat::cluster_spec resolve() const { return {}; }
  std::string_view name() const { return "x"; }
};
static_assert(!cluster_resolver<resolves_to_spec>);

// Requirement 3 missing: no name().
struct no_name {
  cluster_config resolve() const { return {}; }
};
static_assert(!cluster_resolver<no_name>);

// Requirement 3 missing: name() not convertible to string_view.
struct numeric_name {
  cluster_config resolve() const { return {}; }
  int name() const { return 7; }
};
static_assert(!cluster_resolver<numeric_name>);

// A strategy-like consumer: takes any resolver by value.
template <cluster_resolver Resolver>
std::string describe(Resolver resolver) {
  const cluster_config config = resolver.resolve();
  return std::string(resolver.name()) + " rank " + std::to_string(config.rank()) + "/" +
         std::to_string(config.world_size());
}

TEST(cluster_resolver, user_resolvers_plug_in) { EXPECT_EQ(describe(launcher_resolver{}), "my-launcher rank 1/2"); }

TEST(simple_resolver, builds_workers_in_rank_order) {
  const mwstrat::simple_resolver resolver({"h0:1", "h1:1", "[::1]:7"}, 2, "grpc");
  const cluster_config c = resolver.resolve();
  EXPECT_EQ(c.rank(), 2);
  EXPECT_EQ(c.task_type(), "worker");
  EXPECT_EQ(c.task_id(), 2);
  EXPECT_FALSE(c.is_chief());
  EXPECT_EQ(c.num_workers(), 3);
  EXPECT_EQ(c.rpc_layer(), "grpc");
  EXPECT_EQ(c.spec().training_addresses(), (std::vector<std::string>{"h0:1", "h1:1", "[::1]:7"}));
  EXPECT_TRUE(mwstrat::simple_resolver({"h0:1"}, 0).resolve().is_chief());
  EXPECT_EQ(describe(resolver), "simple_resolver rank 2/3");
}

TEST(simple_resolver, errors_name_the_argument) {
  const auto message = [](std::vector<std::string> addresses, int rank) {
    try {
      (void)mwstrat::simple_resolver(std::move(addresses), rank).resolve();
    } catch (const mwstrat::config_error& e) {
      return e.detail();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({}, 0), "simple_resolver: addresses: [] is empty; give at least this process's \"host:port\"");
  EXPECT_EQ(message({"a:1", "b:1"}, 2), "simple_resolver: rank: 2 is out of range (2 addresses)");
  EXPECT_EQ(message({"a:1"}, -1), "simple_resolver: rank: -1 is out of range (1 address)");
  EXPECT_EQ(message({"a:1", "a:1"}, 0),
            "simple_resolver: addresses[1]: \"a:1\" is already the address of addresses[0]; every task needs its "
            "own host:port");
  EXPECT_EQ(message({"a:1", "b"}, 0),
            "simple_resolver: addresses[1]: \"b\": the address has no port; expected host:port");
}

TEST(cluster_spec, from_jobs_validates) {
  EXPECT_THROW((void)mwstrat::cluster_spec::from_jobs({}), mwstrat::config_error);
  EXPECT_THROW((void)mwstrat::cluster_spec::from_jobs({{"ps", {"a:1"}}, {"worker", {"b:1"}}}), mwstrat::config_error);
  const auto spec = mwstrat::cluster_spec::from_jobs({{"worker", {"a:1", "b:2"}}, {"evaluator", {"e:3"}}});
  EXPECT_EQ(spec.num_workers(), 2);
  EXPECT_EQ(spec.num_tasks("evaluator"), 1);
  EXPECT_EQ(spec.num_tasks("chief"), 0);
  EXPECT_TRUE(spec.has_job("evaluator"));
  EXPECT_EQ(spec.job_addresses("worker").at(1).port, 2);
  EXPECT_TRUE(spec.job_addresses("chief").empty());
  EXPECT_EQ(spec.rank_of({"worker", 1}), 1);
  EXPECT_FALSE(spec.rank_of({"worker", 2}).has_value());
  EXPECT_FALSE(spec.address_of({"worker", -1}).has_value());
}

}  // namespace resolver_test
