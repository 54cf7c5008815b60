// The steady-state step allocates nothing: the synchroniser's overlapped (bucketed) path, its sharded update and its
// replicated path, on 2 and 3 replicas as threads over the local collective and over the ring (and the ring's shared
// host copy).
//
// This translation unit replaces the global operator new and delete for the whole strategy test executable; they
// count only while `counting` is set, inside a window that every replica enters and leaves through a barrier. The
// barriers' own allocations, if any, are measured by an empty window and subtracted. Allocations seen in the
// window are listed (size and call stack, through backtrace_symbols_fd) so their origin can be found.
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/collective/ring/host_arena.hpp>
#include <mwstrat/collective/ring/ring_collective.hpp>
#include <mwstrat/strategy/gradient_sync.hpp>
#include <mwstrat/strategy/gradient_sync_options.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/train/tensor_model.hpp>

#include <support/ring_threads.hpp>

#include <gtest/gtest.h>

#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <numeric>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace gradient_sync_allocation_test {

std::atomic<bool> counting{false};
std::atomic<std::size_t> allocations{0};

// The first allocations of a window, recorded without allocating: size and call stack.
constexpr std::size_t recorded_max = 16, frames_max = 12;
struct record {
  std::size_t bytes = 0;
  std::array<void*, frames_max> frames{};
  int depth = 0;
};
std::array<record, recorded_max> recorded;

void count(std::size_t bytes) {
  if (!counting.load(std::memory_order_relaxed)) return;
  const std::size_t k = allocations.fetch_add(1);
  if (k < recorded_max) {
    recorded[k].bytes = bytes;
    recorded[k].depth = ::backtrace(recorded[k].frames.data(), static_cast<int>(frames_max));
  }
}

}  // namespace gradient_sync_allocation_test

// The replacements are malloc/free pairs by design; GCC, inlining them into new-expressions, takes the free for a
// mismatch (-Wmismatched-new-delete in optimised and sanitizer builds).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t bytes) {
  gradient_sync_allocation_test::count(bytes);
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t bytes, std::align_val_t align) {
  gradient_sync_allocation_test::count(bytes);
  const auto a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (bytes + a - 1) / a * a + (bytes == 0 ? a : 0))) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace gradient_sync_allocation_test {

using namespace mwstrat;
using namespace std::chrono_literals;

// Layers of these sizes in one arena; backward reports them last first.
const std::vector<std::size_t> layers{3000, 1000, 2000, 500, 7};

struct layered_model {
  std::vector<float> own_p, own_g;
  std::span<float> p, g;  // the own vectors, or storage the synchroniser lends (a shared host copy)
  layered_model() {
    const std::size_t n = std::accumulate(layers.begin(), layers.end(), std::size_t{0});
    own_p.assign(n, 0.5f);
    own_g.assign(n, 0.0f);
    p = own_p;
    g = own_g;
  }
  std::span<float> parameters() { return p; }
  std::span<float> gradients() { return g; }
  void adopt_storage(std::span<float> params, std::span<float> grads) {
    p = params;
    g = grads;
  }
  void use_own_storage() {
    std::copy(p.begin(), p.end(), own_p.begin());
    p = own_p;
    g = own_g;
  }
};

// Plain SGD with the part- and range-update members, so the sharded placement and the streamed update apply.
struct sgd {
  void apply(std::span<float> p, std::span<const float> g) const {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.01f * g[i];
  }
  [[nodiscard]] bool elementwise_stateless() const { return true; }
  void apply_part(std::span<float> p, std::span<const float> g) const { apply(p, g); }
  [[nodiscard]] bool elementwise() const { return true; }
  void apply_range(std::span<float> p, std::span<const float> g, std::size_t first, std::size_t count) const {
    apply(p.subspan(first, count), g.subspan(first, count));
  }
  void count_step() {}
};

// The same layers as separate tensors of the user's own type (no arena): tensor_model owns the layout. Backward
// reports them in an order of its own (each layer's pair last-first, the second-last layer before the last), which
// the adapter turns into last-first slices.
struct no_result {
  double loss_sum = 0, count = 0;
};
struct separate_layers {
  struct parameter {
    std::string name;
    std::vector<float> value, grad;
  };
  std::vector<parameter> tensors;
  int rank = 0, step = 0;
  separate_layers() {
    for (std::size_t i = 0; i < layers.size(); ++i)
      tensors.push_back({"layer" + std::to_string(i), std::vector<float>(layers[i], 0.5f),
                         std::vector<float>(layers[i], 0.0f)});
  }
  std::vector<parameter>& parameter_tensors() { return tensors; }
  template <class Ready>
  no_result train_batch(const int&, Ready&& ready) {
    for (std::size_t t = 0; t < tensors.size(); ++t)
      for (std::size_t i = 0; i < tensors[t].grad.size(); ++i)
        tensors[t].grad[i] = static_cast<float>((i + t + static_cast<std::size_t>(rank + step)) % 5);
    const std::size_t n = tensors.size();
    ready(n - 2);
    ready(n - 1);
    for (std::size_t t = n - 2; t-- > 0;) ready(t);
    ++step;
    return {};
  }
  no_result evaluate_batch(const int&) { return {}; }
};
struct measured {
  std::size_t window = 0, barriers_only = 0;
  update_placement placement = update_placement::automatic;
  bool overlaps = false;
};

void print_records(std::size_t n) {
  for (std::size_t k = 0; k < std::min(n, recorded_max); ++k) {
    std::fprintf(stderr, "allocation %zu: %zu bytes\n", k, recorded[k].bytes);
    ::backtrace_symbols_fd(recorded[k].frames.data(), recorded[k].depth, STDERR_FILENO);
  }
}

// The body every rank runs: warm-up steps, a window of barriers alone, then the same barriers around `steps` steps.
template <class Collective>
void run_rank(Collective& c, const gradient_sync_options& options, int steps, measured& m) {
  mirrored_strategy<Collective&> strategy(c, options);
  layered_model model;
  sgd opt;
  auto sync = strategy.make_gradient_sync(model, opt);
  int step = 0;
  const auto backward = [&](auto&& on_ready) {
    std::size_t end = model.g.size();
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      end -= *it;
      for (std::size_t i = end; i < end + *it; ++i)
        model.g[i] = static_cast<float>((i + static_cast<std::size_t>(c.rank() + step)) % 5);
      on_ready(end, *it);
    }
    return step;
  };
  for (; step < 3; ++step) sync.step(backward);  // warm-up: the first step decides and sizes everything

  // The barriers alone.
  c.barrier();
  if (c.rank() == 0) allocations = 0, counting = true;
  c.barrier();
  c.barrier();
  if (c.rank() == 0) counting = false, m.barriers_only = allocations.load();
  // The same barriers around the steps.
  c.barrier();
  if (c.rank() == 0) allocations = 0, counting = true;
  c.barrier();
  for (int s = 0; s < steps; ++s, ++step) sync.step(backward);
  c.barrier();
  if (c.rank() == 0) {
    counting = false;
    m.window = allocations.load();
    m.placement = sync.placement();
    m.overlaps = sync.overlaps();
  }
}

// run_rank for a model of separate tensors behind tensor_model: its gathering and reporting allocate nothing either.
template <class Collective>
void run_tensor_rank(Collective& c, const gradient_sync_options& options, int steps, measured& m) {
  mirrored_strategy<Collective&> strategy(c, options);
  separate_layers net;
  net.rank = c.rank();
  tensor_model model(net);
  sgd opt;
  auto sync = strategy.make_gradient_sync(model, opt);
  const int batch = 0;
  const auto backward = [&](auto&& on_ready) {
    model.train_batch(batch, on_ready);
    return 0;
  };
  for (int s = 0; s < 3; ++s) sync.step(backward);
  c.barrier();
  if (c.rank() == 0) allocations = 0, counting = true;
  c.barrier();
  c.barrier();
  if (c.rank() == 0) counting = false, m.barriers_only = allocations.load();
  c.barrier();
  if (c.rank() == 0) allocations = 0, counting = true;
  c.barrier();
  for (int s = 0; s < steps; ++s) sync.step(backward);
  c.barrier();
  if (c.rank() == 0) {
    counting = false;
    m.window = allocations.load();
    m.placement = sync.placement();
    m.overlaps = sync.overlaps();
  }
}

void warm_backtrace() {  // backtrace loads its unwinder on first use (which allocates): do that outside every window
  std::array<void*, 2> warm{};
  (void)::backtrace(warm.data(), 2);
}

enum class backend { local, ring };

measured measure(backend b, int n, gradient_sync_options options, int steps) {
  measured m;
  warm_backtrace();
  if (b == backend::local) {
    spawn_ranks(n, [&](local_collective& c) { run_rank(c, options, steps, m); });
    return m;
  }
  test::on_ring_threads(n, [](ring_options& o) { o.job_token = ""; },
                        [&](ring_collective& ring) { run_rank(ring, options, steps, m); });
  return m;
}

void expect_no_allocation(backend b, int n, gradient_sync_options options, bool overlapped,
                          update_placement placement) {
  constexpr int steps = 5;
  const measured m = measure(b, n, options, steps);
  EXPECT_EQ(m.overlaps, overlapped);
  EXPECT_EQ(m.placement, placement);
  const std::size_t per_window = m.window >= m.barriers_only ? m.window - m.barriers_only : 0;
  std::fprintf(stderr,
               "%s, %d replicas, overlap %s, placement %s: %zu allocations in %d steps (barriers alone: %zu)\n",
               b == backend::local ? "local" : "ring", n, overlapped ? "yes" : "no",
               std::string(to_string(m.placement)).c_str(), per_window, steps, m.barriers_only);
  if (m.window != m.barriers_only) print_records(m.window);
  EXPECT_EQ(m.window, m.barriers_only) << per_window << " allocations in " << steps << " steady-state steps of "
                                       << n << " replicas over the " << (b == backend::local ? "local" : "ring")
                                       << " collective (stacks above)";
}

gradient_sync_options policy(reduction_overlap overlap, update_placement update) {
  gradient_sync_options o;
  o.overlap = overlap;
  o.update = update;
  o.bucket_bytes = 4000;  // 1000 floats: several buckets per step
  return o;
}

// The brief's promise over the local collective: the overlapped path (its asynchronous all-reduce goes through the
// collective's op queue), then the paths that reduce after backward.
TEST(gradient_sync_allocation, the_overlapped_path_allocates_nothing_per_step) {
  for (int n : {2, 3}) {
    expect_no_allocation(backend::local, n, policy(reduction_overlap::always, update_placement::automatic), true,
                         update_placement::replicated);
  }
}

TEST(gradient_sync_allocation, the_sharded_and_replicated_paths_allocate_nothing_per_step) {
  for (int n : {2, 3}) {
    expect_no_allocation(backend::local, n, policy(reduction_overlap::never, update_placement::sharded), false,
                         update_placement::sharded);
    expect_no_allocation(backend::local, n, policy(reduction_overlap::never, update_placement::replicated), false,
                         update_placement::replicated);
  }
}

// The same over the ring (ranks as threads on loopback), with its shared host copy: what multi-worker training runs.
TEST(gradient_sync_allocation, every_path_over_the_ring_allocates_nothing_per_step) {
  for (int n : {2, 3}) {
    expect_no_allocation(backend::ring, n, policy(reduction_overlap::always, update_placement::automatic), true,
                         update_placement::replicated);
    expect_no_allocation(backend::ring, n, policy(reduction_overlap::never, update_placement::sharded), false,
                         update_placement::sharded);
    expect_no_allocation(backend::ring, n, policy(reduction_overlap::never, update_placement::replicated), false,
                         update_placement::replicated);
    if (::access("/dev/shm", W_OK | X_OK) == 0) {
      expect_no_allocation(backend::ring, n, policy(reduction_overlap::never, update_placement::shared_host_copy),
                           false, update_placement::shared_host_copy);
    }
  }
}

// A model of separate tensors (tensor_model) over the ring, overlapped and after backward: nothing per step either.
TEST(gradient_sync_allocation, a_model_of_separate_tensors_allocates_nothing_per_step) {
  for (const auto overlap : {reduction_overlap::always, reduction_overlap::never}) {
    measured m;
    warm_backtrace();
    test::on_ring_threads(2, [](ring_options& o) { o.job_token = ""; }, [&](ring_collective& ring) {
      run_tensor_rank(ring, policy(overlap, update_placement::replicated), 5, m);
    });
    EXPECT_EQ(m.overlaps, overlap == reduction_overlap::always);
    if (m.window != m.barriers_only) print_records(m.window);
    EXPECT_EQ(m.window, m.barriers_only) << "allocations in 5 steady-state steps of a tensor_model";
  }
}

}  // namespace gradient_sync_allocation_test
