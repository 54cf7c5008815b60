#pragma once
// The behaviour every collective backend must show, written once against the concept and run by the typed
// suite on local ranks (threads) and on ring ranks (processes). Checks against a plain reference and throws
// std::runtime_error describing the first mismatch.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

namespace mwstrat::test {

// Small integers, so every summation order gives the same exact float result and the reference is exact.
template <class T>
T input_value(int rank, std::size_t i) {
  return static_cast<T>(static_cast<long long>((i * 31 + static_cast<std::size_t>(rank) * 17) % 23) - 11);
}

template <class T>
T reference(int n, std::size_t i, reduce_op op) {
  T acc = input_value<T>(0, i);
  for (int k = 1; k < n; ++k) {
    const T v = input_value<T>(k, i);
    switch (op) {
      case reduce_op::sum:
      case reduce_op::mean: acc = static_cast<T>(acc + v); break;
      case reduce_op::min: acc = v < acc ? v : acc; break;
      case reduce_op::max: acc = acc < v ? v : acc; break;
    }
  }
  if (op == reduce_op::mean) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

template <class T>
void expect_equal(const std::vector<T>& got, std::size_t i, T want, const std::string& what) {
  if (got[i] != want)
    throw std::runtime_error(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                             ", expected " + std::to_string(want));
}

template <class T, collective C>
void check_all_reduce(C& c, std::size_t count, reduce_op op) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = input_value<T>(c.rank(), i);
  c.all_reduce(std::span<T>(data), op);
  const std::string what = std::string("all_reduce<") + typeid(T).name() + ">(" + std::to_string(count) + ", " +
                           std::string(to_string(op)) + ") on rank " + std::to_string(c.rank());
  for (std::size_t i = 0; i < count; ++i) expect_equal(data, i, reference<T>(c.size(), i, op), what);
}

template <class T, collective C>
void check_broadcast(C& c, std::size_t count, int root) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i) data[i] = input_value<T>(c.rank(), i);
  c.broadcast(std::span<T>(data), root);
  const std::string what = "broadcast(" + std::to_string(count) + ", root " + std::to_string(root) + ") on rank " +
                           std::to_string(c.rank());
  for (std::size_t i = 0; i < count; ++i) expect_equal(data, i, input_value<T>(root, i), what);
}

template <class T, collective C>
void check_all_gather(C& c, std::size_t count) {
  std::vector<T> mine(count), all(count * static_cast<std::size_t>(c.size()), T{-99});
  for (std::size_t i = 0; i < count; ++i) mine[i] = input_value<T>(c.rank(), i);
  c.all_gather(std::span<const T>(mine), std::span<T>(all));
  const std::string what = "all_gather(" + std::to_string(count) + ") on rank " + std::to_string(c.rank());
  for (int k = 0; k < c.size(); ++k)
    for (std::size_t i = 0; i < count; ++i)
      expect_equal(all, static_cast<std::size_t>(k) * count + i, input_value<T>(k, i), what);
}

// Buckets reduced asynchronously in issue order while this thread goes on, as the trainer does.
template <collective C>
void check_async(C& c) {
  const std::vector<std::size_t> buckets = {1000, 5001, 1, 0, 30000, 7};
  std::size_t total = 0;
  for (auto b : buckets) total += b;
  std::vector<float> grads(total);
  for (std::size_t i = 0; i < total; ++i) grads[i] = input_value<float>(c.rank(), i);
  using handle = decltype(c.all_reduce_async(std::span<float>(), reduce_op::mean));
  std::vector<handle> pending;
  std::size_t at = 0;
  for (auto b : buckets) {
    pending.push_back(c.all_reduce_async(std::span<float>(grads.data() + at, b), reduce_op::mean));
    at += b;
  }
  for (auto& h : pending) h.wait();
  // Reference: bucket boundaries do not change element-wise results.
  for (std::size_t i = 0; i < total; ++i) {
    float want = 0;
    for (int k = 0; k < c.size(); ++k) want += input_value<float>(k, i);
    want /= static_cast<float>(c.size());
    expect_equal(grads, i, want, "async all_reduce on rank " + std::to_string(c.rank()));
  }
  // A synchronous call after an un-waited asynchronous one still runs after it.
  std::vector<std::int64_t> a(3, c.rank()), b(5, 1);
  auto h = c.all_reduce_async(std::span<std::int64_t>(a), reduce_op::max);
  c.all_reduce(std::span<std::int64_t>(b), reduce_op::sum);
  h.wait();
  expect_equal(a, 2, std::int64_t{c.size() - 1}, "async then sync (max)");
  expect_equal(b, 4, std::int64_t{c.size()}, "async then sync (sum)");
}

// min and max with NaNs: an element is NaN in the result when it is NaN on any rank, whichever rank holds it and in
// whatever order the backend combines ranks (rank r holds a NaN at elements r and 2r + 1 of 40); the others are
// the plain minimum and maximum. Counts large enough to give every rank segments of its own in a ring.
template <class T, collective C>
void check_nan_min_max(C& c) {
  constexpr std::size_t count = 40;
  const auto nan_somewhere = [&](std::size_t i) {
    for (int r = 0; r < c.size(); ++r)
      if (i == static_cast<std::size_t>(r) || i == static_cast<std::size_t>(2 * r + 1)) return true;
    return false;
  };
  for (const reduce_op op : {reduce_op::min, reduce_op::max}) {
    std::vector<T> data(count);
    for (std::size_t i = 0; i < count; ++i) {
      const bool mine = i == static_cast<std::size_t>(c.rank()) || i == static_cast<std::size_t>(2 * c.rank() + 1);
      data[i] = mine ? std::numeric_limits<T>::quiet_NaN() : input_value<T>(c.rank(), i);
    }
    c.all_reduce(std::span<T>(data), op);
    for (std::size_t i = 0; i < count; ++i) {
      const bool want_nan = nan_somewhere(i);
      T plain = input_value<T>(0, i);  // over the ranks without a NaN here (every rank, where want_nan is false)
      for (int k = 1; k < c.size(); ++k) {
        const T v = input_value<T>(k, i);
        plain = op == reduce_op::min ? (v < plain ? v : plain) : (plain < v ? v : plain);
      }
      if (want_nan ? !std::isnan(data[i]) : data[i] != plain)
        throw std::runtime_error(std::string("all_reduce ") + std::string(to_string(op)) + " with NaNs on rank " +
                                 std::to_string(c.rank()) + ": element " + std::to_string(i) + " is " +
                                 std::to_string(data[i]) + ", expected " + (want_nan ? "NaN" : std::to_string(plain)));
    }
  }
}

// Integer sums that overflow wrap around (two's complement) on every backend, rather than being undefined: each
// rank adds the type's maximum.
template <class T, collective C>
void check_integer_wrap(C& c) {
  using U = std::make_unsigned_t<T>;
  std::vector<T> data(5, std::numeric_limits<T>::max());
  c.all_reduce(std::span<T>(data), reduce_op::sum);
  const auto want = static_cast<T>(static_cast<U>(std::numeric_limits<T>::max()) * static_cast<U>(c.size()));
  for (std::size_t i = 0; i < data.size(); ++i) expect_equal(data, i, want, "a wrapping integer sum");
}

template <class T, collective C>
void sweep_type(C& c, const std::vector<std::size_t>& counts) {
  for (auto count : counts)
    for (auto op : {reduce_op::sum, reduce_op::mean, reduce_op::min, reduce_op::max}) check_all_reduce<T>(c, count, op);
}

// all_reduce_update (the ring's fused sharded update) against all_reduce followed by the same update of every
// element: the same bits in `params` on every rank, and each element updated at most once here — only this rank's part,
// when there is more than one rank.
template <class T, class C>
void check_all_reduce_update(C& c, std::size_t count, reduce_op op) {
  std::vector<T> grads(count), params(count), expected(count);
  for (std::size_t i = 0; i < count; ++i) {
    grads[i] = input_value<T>(c.rank(), i) + static_cast<T>(0.3);  // not exact: the order of the sum shows in bits
    params[i] = input_value<T>(0, i) * static_cast<T>(0.7);
  }
  std::vector<T> reduced = grads;
  c.all_reduce(std::span<T>(reduced), op);
  const T rate = static_cast<T>(0.25);
  for (std::size_t i = 0; i < count; ++i) expected[i] = params[i] - rate * reduced[i];
  std::vector<int> updated(count, 0);
  std::size_t calls = 0;
  c.all_reduce_update(std::span<T>(grads), op, std::span<T>(params), [&](std::size_t first, std::size_t n) {
    ++calls;
    for (std::size_t i = first; i < first + n; ++i) {
      params[i] -= rate * grads[i];
      ++updated[i];
    }
  });
  const std::string what = "all_reduce_update(" + std::to_string(count) + ", " + std::string(to_string(op)) +
                           ") on rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size());
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(&params[i], &expected[i], sizeof(T)) != 0) expect_equal(params, i, expected[i], what);
    if (updated[i] > 1) throw std::runtime_error(what + ": element " + std::to_string(i) + " updated twice");
  }
  std::size_t mine = 0;
  for (const int u : updated) mine += static_cast<std::size_t>(u);
  const auto n = static_cast<std::size_t>(c.size());
  const std::size_t largest = (count + n - 1) / n;
  if (mine > largest || (count > 0 && n == 1 && mine != count) || (count == 0 && calls != 0))
    throw std::runtime_error(what + ": updated " + std::to_string(mine) + " elements here, expected this rank's " +
                             "part (at most " + std::to_string(largest) + ")");
}

// all_reduce_streamed (the ring's all-reduce that reports each final part) against all_reduce: the same bits, every
// element reported exactly once and holding its final value when reported; and the caller's change of a reported
// part (x -> 2x + 1) reaches no other rank — every rank ends with 2·(its all_reduce result) + 1 — so the collective
// reads no part after reporting it.
template <class T, class C>
void check_all_reduce_streamed(C& c, std::size_t count, reduce_op op) {
  std::vector<T> data(count);
  for (std::size_t i = 0; i < count; ++i)
    data[i] = input_value<T>(c.rank(), i) + static_cast<T>(0.3);  // not exact: the order of the sum shows in bits
  std::vector<T> reduced = data;
  c.all_reduce(std::span<T>(reduced), op);
  std::vector<int> reported(count, 0);
  std::string early;  // the first element reported before it was final
  std::size_t calls = 0;
  c.all_reduce_streamed(std::span<T>(data), op, [&](std::size_t first, std::size_t n) {
    ++calls;
    for (std::size_t i = first; i < first + n; ++i) {
      if (early.empty() && std::memcmp(&data[i], &reduced[i], sizeof(T)) != 0)
        early = "element " + std::to_string(i) + " was " + std::to_string(data[i]) + " when reported, final " +
                std::to_string(reduced[i]);
      ++reported[i];
      data[i] = static_cast<T>(data[i] * 2 + 1);
    }
  });
  const std::string what = std::string("all_reduce_streamed<") + typeid(T).name() + ">(" + std::to_string(count) +
                           ", " + std::string(to_string(op)) + ") on rank " + std::to_string(c.rank()) + " of " +
                           std::to_string(c.size());
  if (!early.empty()) throw std::runtime_error(what + ": " + early);
  if (count == 0 && calls != 0) throw std::runtime_error(what + ": reported a part of an empty buffer");
  for (std::size_t i = 0; i < count; ++i) {
    if (reported[i] != 1)
      throw std::runtime_error(what + ": element " + std::to_string(i) + " reported " + std::to_string(reported[i]) +
                               " times");
    const T want = static_cast<T>(reduced[i] * 2 + 1);
    if (std::memcmp(&data[i], &want, sizeof(T)) != 0) expect_equal(data, i, want, what + " (a reported part was read again)");
  }
}

// Everything, for one world size. `large`: also the 8M-float all-reduce (mean) and broadcast.
template <collective C>
void run_sweep(C& c, bool large) {
  const std::vector<std::size_t> counts = {0, 1, 7, 1001, 100003};
  sweep_type<float>(c, counts);
  sweep_type<double>(c, counts);
  sweep_type<std::int32_t>(c, counts);
  sweep_type<std::int64_t>(c, counts);
  check_nan_min_max<float>(c);
  check_nan_min_max<double>(c);
  check_integer_wrap<std::int32_t>(c);
  check_integer_wrap<std::int64_t>(c);
  for (int root : {0, c.size() - 1, c.size() / 2})
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{100003}}) check_broadcast<float>(c, count, root);
  check_broadcast<std::int64_t>(c, 1001, c.size() - 1);
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1001}}) {
    check_all_gather<float>(c, count);
    check_all_gather<std::int32_t>(c, count);
  }
  check_all_gather<double>(c, 20001);
  if constexpr (requires(std::span<float> v) { c.all_reduce_update(v, reduce_op::mean, v, [](std::size_t, std::size_t) {}); }) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}, std::size_t{100003}}) {
      check_all_reduce_update<float>(c, count, reduce_op::mean);
      check_all_reduce_update<double>(c, count, reduce_op::sum);
    }
    std::vector<float> grads(7), params(6);
    bool refused = false;
    try {
      c.all_reduce_update(std::span<float>(grads), reduce_op::mean, std::span<float>(params),
                          [](std::size_t, std::size_t) {});
    } catch (const config_error&) {
      refused = true;
    }
    if (!refused) throw std::runtime_error("all_reduce_update accepted 6 parameters for 7 gradients");
  }
  if constexpr (requires(std::span<float> v) { c.all_reduce_streamed(v, reduce_op::mean, [](std::size_t, std::size_t) {}); }) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}, std::size_t{100003}}) {
      check_all_reduce_streamed<float>(c, count, reduce_op::mean);
      check_all_reduce_streamed<double>(c, count, reduce_op::sum);
      check_all_reduce_streamed<std::int32_t>(c, count, reduce_op::max);
    }
  }
  for (int i = 0; i < 3; ++i) c.barrier();
  check_async(c);
  if (large) {
    check_all_reduce<float>(c, std::size_t{8} << 20, reduce_op::mean);
    check_broadcast<float>(c, std::size_t{8} << 20, 0);
  }
  c.barrier();
}

}  // namespace mwstrat::test
