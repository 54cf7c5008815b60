#pragma once
/// \file
/// `dataset<T>`: a lazy, composable pipeline in the spirit of tf.data.
///
///     auto batches = data::range(set.count())
///                        .shuffle(seed)                 // a new order each iteration (epoch)
///                        .repeat(3)                     // three epochs; repeat() for ever
///                        .batch(64, /*drop_remainder=*/true)
///                        .map(to_float_batch)           // any callable T -> U
///                        .prefetch(2);                  // produced on a background thread
///     for (const auto& b : batches) { ... }
///
/// A dataset is a recipe: building one reads nothing; each `begin()` / `make_iterator()` starts an independent
/// pass. Copies share the recipe. The results are deterministic for a given seed: an order depends only on
/// (seed, iteration number of that shuffle), and `prefetch` changes timing, never order. The iteration number
/// counts the passes that shuffle's dataset has started (`repeat` starts one per round), so with
/// `reshuffle_each_iteration` every epoch gets a new order, as in tf.data; without it every pass repeats the first.
///
/// `prefetch(n)` runs the upstream pipeline on a thread of its own with at most n elements waiting. Destroying
/// the iterator stops and joins that thread (also mid-stream, also while it waits for room); an exception thrown
/// upstream (in a `map`, say) is rethrown to the consumer at the point in the stream where it happened.
///
/// For the training loop of a multi-worker job use `distributed_batches` (distributed.hpp): random access by
/// `data_cursor` and no allocation per step. This pipeline is the general tool (and what `from_images` feeds).

#include <mwstrat/data/detail/shuffle.hpp>
#include <mwstrat/data/labeled_images.hpp>
#include <mwstrat/error.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat::detail {

/// One pass over a dataset: yields elements until it returns nullopt.
template <class T>
class pass {
 public:
  pass() = default;
  pass(const pass&) = delete;
  pass& operator=(const pass&) = delete;
  virtual ~pass() = default;
  virtual std::optional<T> next() = 0;
};

/// A recipe that can start passes.
template <class T>
class recipe {
 public:
  recipe() = default;
  recipe(const recipe&) = delete;
  recipe& operator=(const recipe&) = delete;
  virtual ~recipe() = default;
  [[nodiscard]] virtual std::unique_ptr<pass<T>> start() const = 0;
};

template <class T, class Next>
class lambda_pass final : public pass<T> {
 public:
  explicit lambda_pass(Next next) : next_(std::move(next)) {}
  std::optional<T> next() override { return next_(); }

 private:
  Next next_;
};

template <class T, class Next>
[[nodiscard]] std::unique_ptr<pass<T>> make_pass(Next next) {
  return std::make_unique<lambda_pass<T, Next>>(std::move(next));
}

template <class T, class Start>
class lambda_recipe final : public recipe<T> {
 public:
  explicit lambda_recipe(Start start) : start_(std::move(start)) {}
  [[nodiscard]] std::unique_ptr<pass<T>> start() const override { return start_(); }

 private:
  Start start_;
};

template <class T>
class prefetch_pass final : public pass<T> {
 public:
  prefetch_pass(std::unique_ptr<pass<T>> upstream, std::size_t depth)
      : upstream_(std::move(upstream)), depth_(depth), worker_([this] { produce(); }) {}

  prefetch_pass(const prefetch_pass&) = delete;
  prefetch_pass& operator=(const prefetch_pass&) = delete;

  ~prefetch_pass() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    room_.notify_all();
    worker_.join();
  }

  std::optional<T> next() override {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return !queue_.empty() || done_; });
    if (!queue_.empty()) {
      std::optional<T> value(std::move(queue_.front()));
      queue_.pop_front();
      lock.unlock();
      room_.notify_one();
      return value;
    }
    if (error_) {
      std::exception_ptr e = std::exchange(error_, nullptr);
      std::rethrow_exception(e);
    }
    return std::nullopt;
  }

 private:
  void produce() noexcept {
    try {
      for (;;) {
        {
          std::unique_lock lock(mutex_);
          room_.wait(lock, [&] { return stop_ || queue_.size() < depth_; });
          if (stop_) {
            break;
          }
        }
        std::optional<T> value = upstream_->next();  // outside the lock: this is the slow part
        std::lock_guard lock(mutex_);
        if (!value || stop_) {
          break;
        }
        queue_.push_back(std::move(*value));
        ready_.notify_one();
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    done_ = true;
    ready_.notify_all();
  }

  std::unique_ptr<pass<T>> upstream_;
  std::size_t depth_;
  std::mutex mutex_;
  std::condition_variable ready_;  // consumer waits: an element or the end arrived
  std::condition_variable room_;   // producer waits: room in the queue, or stop
  std::deque<T> queue_;
  bool stop_ = false;
  bool done_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace mwstrat::detail

namespace mwstrat::data {

template <class T>
class dataset;

/// A lazy recipe for a stream of `T` (see the file comment). Cheap to copy; copies share the recipe.
template <class T>
class dataset {
 public:
  using element_type = T;

  /// An input iterator over one pass; compares equal to `std::default_sentinel` at the end.
  class iterator {
   public:
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(std::unique_ptr<mwstrat::detail::pass<T>> p) : pass_(std::move(p)) { ++*this; }

    /// The current element.
    [[nodiscard]] const T& operator*() const { return *current_; }
    /// Moves to the next element.
    iterator& operator++() {
      current_ = pass_->next();
      return *this;
    }
    /// Moves to the next element (input iterator: no copy of the old position).
    void operator++(int) { ++*this; }
    /// True at the end of the pass.
    friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept { return !it.current_; }

    /// The next element, or nullopt at the end (an alternative to ++ and *).
    std::optional<T> next() {
      std::optional<T> out = std::move(current_);
      if (out) {
        current_ = pass_->next();
      }
      return out;
    }

   private:
    std::unique_ptr<mwstrat::detail::pass<T>> pass_;
    std::optional<T> current_;
  };

  /// Wraps a recipe; use the factory functions (`from_vector`, `range`, `from_images`) instead.
  explicit dataset(std::shared_ptr<const mwstrat::detail::recipe<T>> r) : recipe_(std::move(r)) {}

  /// Starts a pass.
  [[nodiscard]] iterator begin() const { return iterator(recipe_->start()); }
  /// The end of any pass.
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }
  /// Starts a pass (same as begin()).
  [[nodiscard]] iterator make_iterator() const { return begin(); }

  /// Shuffles. `buffer_size` 0 (the default) shuffles each whole pass uniformly, so it reads the whole upstream
  /// pass first: put it before `repeat()`, not after an endless one. n > 0 is tf.data's streaming shuffle (each
  /// output drawn uniformly from the next n waiting elements), which works on endless streams. The order of the
  /// k-th pass is a function of (seed, k), or of seed alone when `reshuffle_each_iteration` is false.
  [[nodiscard]] dataset shuffle(std::uint64_t seed, bool reshuffle_each_iteration = true,
                                std::size_t buffer_size = 0) const {
    auto counter = std::make_shared<std::atomic<std::uint64_t>>(0);
    return make([up = recipe_, seed, reshuffle_each_iteration, buffer_size, counter] {
      const std::uint64_t k = reshuffle_each_iteration ? counter->fetch_add(1) : 0;
      mwstrat::detail::splitmix64 gen(mwstrat::detail::stream_seed(seed, k));
      auto source = up->start();
      if (buffer_size == 0) {
        std::vector<T> all;
        while (auto v = source->next()) {
          all.push_back(std::move(*v));
        }
        mwstrat::detail::shuffle_in_place(std::span<T>(all), mwstrat::detail::stream_seed(seed, k));
        return mwstrat::detail::make_pass<T>([all = std::move(all), i = std::size_t{0}]() mutable -> std::optional<T> {
          if (i == all.size()) {
            return std::nullopt;
          }
          return std::move(all[i++]);
        });
      }
      return mwstrat::detail::make_pass<T>([source = std::move(source), gen, buffer_size,
                                            buffer = std::vector<T>()]() mutable -> std::optional<T> {
        while (buffer.size() < buffer_size) {
          auto v = source->next();
          if (!v) {
            break;
          }
          buffer.push_back(std::move(*v));
        }
        if (buffer.empty()) {
          return std::nullopt;
        }
        const auto j = static_cast<std::size_t>(mwstrat::detail::uniform_below(gen, buffer.size()));
        using std::swap;
        swap(buffer[j], buffer.back());
        T out = std::move(buffer.back());
        buffer.pop_back();
        return out;
      });
    });
  }

  /// Repeats the dataset `count` times, starting a new pass of it each time.
  [[nodiscard]] dataset repeat(std::size_t count) const { return repeat_impl(count); }
  /// Repeats the dataset for ever (stops only if a pass is empty, rather than spin).
  [[nodiscard]] dataset repeat() const { return repeat_impl(std::nullopt); }

  /// Groups consecutive elements into vectors of `size`; the last, shorter group is kept unless `drop_remainder`.
  [[nodiscard]] dataset<std::vector<T>> batch(std::size_t size, bool drop_remainder = false) const {
    if (size == 0) {
      throw config_error({"data"}, "batch size must be positive");
    }
    return dataset<std::vector<T>>::make([up = recipe_, size, drop_remainder] {
      return mwstrat::detail::make_pass<std::vector<T>>(
          [source = up->start(), size, drop_remainder]() mutable -> std::optional<std::vector<T>> {
            std::vector<T> group;
            group.reserve(size);
            while (group.size() < size) {
              auto v = source->next();
              if (!v) {
                break;
              }
              group.push_back(std::move(*v));
            }
            if (group.empty() || (drop_remainder && group.size() < size)) {
              return std::nullopt;
            }
            return group;
          });
    });
  }

  /// Applies `f` to each element (lazily, once per element per pass).
  template <class F>
    requires std::invocable<const F&, const T&>
  [[nodiscard]] auto map(F f) const {
    using U = std::remove_cvref_t<std::invoke_result_t<const F&, const T&>>;
    // Shared, not referenced: a pass may outlive the dataset (and recipe) that started it.
    return dataset<U>::make([up = recipe_, fn = std::make_shared<const F>(std::move(f))] {
      return mwstrat::detail::make_pass<U>([source = up->start(), fn]() mutable -> std::optional<U> {
        auto v = source->next();
        if (!v) {
          return std::nullopt;
        }
        return std::invoke(*fn, std::as_const(*v));
      });
    });
  }

  /// Keeps every `num_shards`-th element starting at `index` (tf.data's shard).
  [[nodiscard]] dataset shard(std::size_t num_shards, std::size_t index) const {
    if (num_shards == 0 || index >= num_shards) {
      throw config_error({"data"}, "shard index " + std::to_string(index) + " is not in [0, " +
                                       std::to_string(num_shards) + ")");
    }
    return make([up = recipe_, num_shards, index] {
      return mwstrat::detail::make_pass<T>(
          [source = up->start(), num_shards, index, position = std::size_t{0}]() mutable -> std::optional<T> {
            while (auto v = source->next()) {
              if (position++ % num_shards == index) {
                return v;
              }
            }
            return std::nullopt;
          });
    });
  }

  /// The first `count` elements.
  [[nodiscard]] dataset take(std::size_t count) const {
    return make([up = recipe_, count] {
      return mwstrat::detail::make_pass<T>([source = up->start(), left = count]() mutable -> std::optional<T> {
        if (left == 0) {
          return std::nullopt;
        }
        --left;
        return source->next();
      });
    });
  }

  /// Produces elements on a background thread, at most `depth` (> 0) ahead of the consumer.
  [[nodiscard]] dataset prefetch(std::size_t depth) const {
    if (depth == 0) {
      throw config_error({"data"}, "prefetch depth must be positive");
    }
    return make([up = recipe_, depth]() -> std::unique_ptr<mwstrat::detail::pass<T>> {
      return std::make_unique<mwstrat::detail::prefetch_pass<T>>(up->start(), depth);
    });
  }

  /// A dataset whose passes are made by `start` (a callable returning unique_ptr<detail::pass<T>>).
  template <class Start>
  [[nodiscard]] static dataset make(Start start) {
    return dataset(std::make_shared<const mwstrat::detail::lambda_recipe<T, Start>>(std::move(start)));
  }

 private:
  [[nodiscard]] dataset repeat_impl(std::optional<std::size_t> count) const {
    return make([up = recipe_, count] {
      return mwstrat::detail::make_pass<T>(
          [up, count, round = std::size_t{0}, source = up->start(),
           yielded = false]() mutable -> std::optional<T> {
            for (;;) {
              if (count && round >= *count) {
                return std::nullopt;
              }
              if (auto v = source->next()) {
                yielded = true;
                return v;
              }
              ++round;
              if (!yielded) {
                return std::nullopt;  // an empty pass would repeat for ever without yielding
              }
              yielded = false;
              if (count && round >= *count) {
                return std::nullopt;
              }
              source = up->start();
            }
          });
    });
  }

  std::shared_ptr<const mwstrat::detail::recipe<T>> recipe_;
};

/// A dataset of the given elements, in order.
template <class T>
[[nodiscard]] dataset<T> from_vector(std::vector<T> elements) {
  auto shared = std::make_shared<const std::vector<T>>(std::move(elements));
  return dataset<T>::make([shared] {
    return mwstrat::detail::make_pass<T>([shared, i = std::size_t{0}]() mutable -> std::optional<T> {
      if (i == shared->size()) {
        return std::nullopt;
      }
      return (*shared)[i++];
    });
  });
}

/// The indices 0, 1, ..., count - 1.
[[nodiscard]] inline dataset<std::size_t> range(std::size_t count) {
  return dataset<std::size_t>::make([count] {
    return mwstrat::detail::make_pass<std::size_t>([count, i = std::size_t{0}]() mutable -> std::optional<std::size_t> {
      if (i == count) {
        return std::nullopt;
      }
      return i++;
    });
  });
}

/// One example of a `labeled_images`: a view of its pixels (valid while the set lives) and its label.
struct image_example {
  std::span<const std::uint8_t> pixels;  ///< example_size() bytes, 0..255
  std::int64_t label = 0;                ///< the label
  std::size_t index = 0;                 ///< its index in the set
};

/// The examples of `set`, in order (the dataset keeps the set alive).
[[nodiscard]] inline dataset<image_example> from_images(labeled_images set) {
  return range(set.count()).map([set](std::size_t i) { return image_example{set.image(i), set.label(i), i}; });
}

}  // namespace mwstrat::data
