// Batches per second of the MNIST input pipeline, single-threaded: shuffle + batch 64 + normalise to float.
//   BM_DistributedBatches   the trainer's path: distributed_batches::next into caller-owned buffers (bytes kept,
//                           normalised per batch), per worker batch 64, for N = 1 and N = 2 (worker 0)
//   BM_FloatStorageGather   the alternative design: all images normalised once at load (float storage), a batch
//                           is a gather-copy of floats; measured to choose between bytes and floats
//   BM_DatasetPipeline      the general tf.data-like pipeline: range.shuffle.repeat.batch(64).map(normalise)
//   BM_DatasetPrefetch      the same with prefetch(2) (a second thread; for information)
// Items/s are examples per second; the "batches/s" counter is what RESULTS.md reports.

#include <mwstrat/data.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <filesystem>
#include <vector>

namespace {

namespace data = mwstrat::data;

const data::labeled_images& mnist() {
  static const data::labeled_images set = data::load_mnist(MWSTRAT_BENCH_MNIST_DIR, data::mnist_split::train);
  return set;
}

void BM_DistributedBatches(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  data::distribution_options o;
  o.global_batch = 64 * static_cast<std::size_t>(workers);
  o.num_workers = workers;
  o.worker_index = 0;
  o.seed = 42;
  data::distributed_batches batches(mnist(), o);
  std::vector<float> images(64 * 784);
  std::vector<std::int64_t> labels(64);
  std::size_t examples = 0;
  for (auto _ : state) {
    examples += batches.next(images, labels);
    benchmark::DoNotOptimize(images.data());
    benchmark::DoNotOptimize(labels.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(examples));
  state.counters["batches/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DistributedBatches)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

void BM_FloatStorageGather(benchmark::State& state) {
  const auto& set = mnist();
  std::vector<float> all(set.count() * 784);
  for (std::size_t i = 0; i < set.count(); ++i) {
    set.normalized(i, std::span<float>(all).subspan(i * 784, 784));
  }
  std::vector<std::size_t> order(set.count());
  std::uint64_t epoch = 0;
  mwstrat::detail::fill_permutation(order, mwstrat::detail::stream_seed(42, epoch));
  std::vector<float> images(64 * 784);
  std::vector<std::int64_t> labels(64);
  std::size_t pos = 0;
  for (auto _ : state) {
    if (pos + 64 > order.size()) {
      mwstrat::detail::fill_permutation(order, mwstrat::detail::stream_seed(42, ++epoch));
      pos = 0;
    }
    for (std::size_t i = 0; i < 64; ++i) {
      const std::size_t e = order[pos + i];
      std::copy_n(all.data() + e * 784, 784, images.data() + i * 784);
      labels[i] = set.label(e);
    }
    pos += 64;
    benchmark::DoNotOptimize(images.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 64);
  state.counters["batches/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FloatStorageGather)->Unit(benchmark::kMicrosecond);

struct float_batch {
  std::vector<float> images;
  std::vector<std::int64_t> labels;
};

data::dataset<float_batch> pipeline(const data::labeled_images& set) {
  return data::range(set.count())
      .shuffle(42)
      .repeat()
      .batch(64, true)
      .map([set](const std::vector<std::size_t>& idx) {
        float_batch b{std::vector<float>(idx.size() * 784), std::vector<std::int64_t>(idx.size())};
        for (std::size_t i = 0; i < idx.size(); ++i) {
          set.normalized(idx[i], std::span<float>(b.images).subspan(i * 784, 784));
          b.labels[i] = set.label(idx[i]);
        }
        return b;
      });
}

void run_dataset(benchmark::State& state, const data::dataset<float_batch>& ds) {
  auto it = ds.begin();
  for (auto _ : state) {
    benchmark::DoNotOptimize((*it).images.data());
    ++it;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 64);
  state.counters["batches/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_DatasetPipeline(benchmark::State& state) { run_dataset(state, pipeline(mnist())); }
BENCHMARK(BM_DatasetPipeline)->Unit(benchmark::kMicrosecond);

void BM_DatasetPrefetch(benchmark::State& state) { run_dataset(state, pipeline(mnist()).prefetch(2)); }
BENCHMARK(BM_DatasetPrefetch)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
