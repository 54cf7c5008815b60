// fit over ring ranks on one host with update_placement::shared_host_copy: one parameter copy in a host_arena, the
// same bits as the ring's fused sharded update and as every replica updating everything.
#include <mwstrat/collective.hpp>
#include <mwstrat/nn/sequential.hpp>
#include <mwstrat/nn/optimizers.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/fit.hpp>

#include <support/process.hpp>
#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace shared_parameters_test {

using namespace mwstrat;
using namespace std::chrono_literals;
using test::blob_batches;
using test::softmax_regression;

constexpr std::size_t features = 8, classes = 4, examples = 512;

bool have_dev_shm() { return ::access("/dev/shm", W_OK | X_OK) == 0; }

// The ring's shared-memory objects of this process still in /dev/shm (their names carry the creator's pid).
std::vector<std::string> shm_leftovers() {
  std::vector<std::string> left;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const auto name = entry.path().filename().string();
    if (name.starts_with("mwstrat-ring-" + std::to_string(::getpid()) + "-")) left.push_back(name);
  }
  return left;
}

static_assert(storage_adopting_model<softmax_regression>);
static_assert(storage_adopting_model<nn::sequential>);

enum class path { shared, sharded, whole };

// Records whether the model stepped in adopted (shared) storage.
struct arena_watch {
  int* in_arena;
  template <class Context>
  void on_train_batch_end(Context& ctx, std::size_t, const batch_logs&) {
    *in_arena = ctx.model.adopted() ? 1 : 0;
  }
};

struct outcome {
  std::vector<std::vector<float>> params;  // every replica's, after fit
  std::vector<int> in_arena;               // per replica: 1 if it stepped in shared storage
  std::vector<int> own_after;              // per replica: 1 if it had its own storage again after fit
  std::vector<std::uint64_t> steps;
};

outcome train(path p, ring_transport transport) {
  constexpr int n = 3;
  const auto ports = test::free_ports(n);
  outcome out;
  out.params.resize(n);
  out.in_arena.assign(n, -1);
  out.own_after.assign(n, -1);
  out.steps.assign(n, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      const auto me = static_cast<std::size_t>(r);
      ring_options o;
      for (int port : ports) o.addresses.push_back("127.0.0.1:" + std::to_string(port));
      o.rank = r;
      o.connect_timeout = 10s;
      o.op_timeout = 10s;
      o.job_token = "";
      o.transport = transport;
      ring_collective ring(o);
      gradient_sync_options sync;
      sync.overlap = reduction_overlap::never;  // one reduction after backward
      sync.update = p == path::shared    ? update_placement::shared_host_copy
                    : p == path::sharded ? update_placement::sharded
                                         : update_placement::replicated;
      mirrored_strategy<ring_collective&> strategy(ring, sync);
      softmax_regression model(features, classes, 300u + static_cast<std::uint32_t>(r));  // differ: mirrored
      nn::sgd sgd(0.1);
      blob_batches data(examples, features, classes, 48, n, r, 9);
      fit_options options;
      options.epochs = 2;
      arena_watch w{&out.in_arena[me]};
      fit(strategy, model, sgd, data, options, w);
      out.own_after[me] = model.adopted() ? 0 : 1;
      out.params[me].assign(model.parameters().begin(), model.parameters().end());
      out.steps[me] = sgd.iterations();
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST(shared_parameters, one_host_copy_gives_the_bits_of_the_sharded_and_the_whole_update) {
  if (!have_dev_shm()) GTEST_SKIP() << "no writable /dev/shm";
  const auto shared = train(path::shared, ring_transport::automatic);
  const auto sharded = train(path::sharded, ring_transport::automatic);
  const auto whole = train(path::whole, ring_transport::automatic);
  EXPECT_EQ(shared.in_arena, (std::vector<int>{1, 1, 1})) << "the replicas did not share their parameters";
  EXPECT_EQ(sharded.in_arena, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(shared.own_after, (std::vector<int>{1, 1, 1})) << "fit must hand the model its own storage back";
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(shared.params[r], shared.params[0]) << "replica " << r;
    EXPECT_EQ(shared.params[r], sharded.params[r]) << "replica " << r;
    EXPECT_EQ(shared.params[r], whole.params[r]) << "replica " << r;
    EXPECT_EQ(shared.steps[r], 2u * (examples / 48));
  }
  EXPECT_EQ(shm_leftovers(), std::vector<std::string>{});
}

TEST(shared_parameters, payloads_over_tcp_keep_each_replica_its_own_copy_with_the_same_bits) {
  const auto tcp = train(path::shared, ring_transport::tcp);
  EXPECT_EQ(tcp.in_arena, (std::vector<int>{0, 0, 0}));
  if (!have_dev_shm()) return;
  EXPECT_EQ(tcp.params, train(path::shared, ring_transport::automatic).params);
}

}  // namespace shared_parameters_test
