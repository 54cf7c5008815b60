#pragma once
/// \file
/// TensorFlow's four auto-shard policies as small values: `off_shard`, `data_shard`, `file_shard`, `auto_shard`,
/// and `any_shard_policy`, which holds any `sharding_policy` (what `distribution_options::policy` stores).
///
/// | policy       | TensorFlow                   | each worker reads                                               |
/// |--------------|------------------------------|-----------------------------------------------------------------|
/// | `off_shard`  | `AutoShardPolicy.OFF`        | every example (not recommended: workers see the same data)      |
/// | `data_shard` | `AutoShardPolicy.DATA`       | its contiguous G/N of each global batch of the shared order      |
/// | `file_shard` | `AutoShardPolicy.FILE`       | the files f with f % N == w; error when files < N               |
/// | `auto_shard` | `AutoShardPolicy.AUTO`       | file sharding when there are at least N files, else data        |
///
/// docs/sharding.md has the exact rules and a worked example.

#include <mwstrat/data/concepts.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace mwstrat::data {

/// TensorFlow's OFF: no sharding, every worker reads the whole data set. With the same seed every worker then
/// trains on the same examples at every step, so N workers do the work of one: not recommended.
struct off_shard {
  /// "off".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "off"; }
  /// Always `shard_mode::replicate`.
  [[nodiscard]] static shard_plan resolve(const shard_request& /*request*/) { return {shard_mode::replicate, {}}; }
  friend constexpr bool operator==(off_shard, off_shard) noexcept { return true; }
};

/// TensorFlow's DATA: every worker walks the same (seeded) global order; global step s is the same G examples
/// whatever N is, and worker w keeps its contiguous G/N of them. The only policy under which a job may resume
/// with a different number of workers and see exactly the same global batches.
struct data_shard {
  /// "data".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "data"; }
  /// Always `shard_mode::data`.
  [[nodiscard]] static shard_plan resolve(const shard_request& /*request*/) { return {shard_mode::data, {}}; }
  friend constexpr bool operator==(data_shard, data_shard) noexcept { return true; }
};

/// TensorFlow's FILE: worker w reads the files f with f % N == w, and only those. Throws data_error when the
/// data set has fewer files than there are workers (some worker would have nothing to read).
struct file_shard {
  /// "file".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "file"; }
  /// This worker's files, or a data_error naming the counts.
  [[nodiscard]] static shard_plan resolve(const shard_request& request) {
    const auto workers = static_cast<std::size_t>(request.num_workers);
    if (request.file_counts.size() < workers) {
      throw data_error({"data", request.worker_index}, "",
                       "file sharding needs at least one input file per worker: " +
                           std::to_string(request.file_counts.size()) + " file(s) for " + std::to_string(workers) +
                           " workers (use data_shard{} or auto_shard{})");
    }
    shard_plan plan{shard_mode::file, {}};
    for (std::size_t f = static_cast<std::size_t>(request.worker_index); f < request.file_counts.size(); f += workers) {
      plan.files.push_back(f);
    }
    return plan;
  }
  friend constexpr bool operator==(file_shard, file_shard) noexcept { return true; }
};

/// TensorFlow's AUTO (its default): file sharding when the data set has at least as many files as workers,
/// data sharding otherwise. One worker, or a single-file set such as MNIST, always resolves to data.
struct auto_shard {
  /// "auto".
  [[nodiscard]] static constexpr std::string_view name() noexcept { return "auto"; }
  /// file_shard's plan when possible, else data_shard's.
  [[nodiscard]] static shard_plan resolve(const shard_request& request) {
    if (request.num_workers > 1 && request.file_counts.size() >= static_cast<std::size_t>(request.num_workers)) {
      return file_shard::resolve(request);
    }
    return data_shard::resolve(request);
  }
  friend constexpr bool operator==(auto_shard, auto_shard) noexcept { return true; }
};

/// Any sharding policy, held by value (type-erased), so options can store a user's own policy too.
class any_shard_policy {
 public:

  /// TensorFlow's default: `auto_shard`.
  any_shard_policy() : any_shard_policy(auto_shard{}) {}

  /// Holds a copy of `policy`.
  template <class P>  // the same-type test comes first, or checking copyable<any_shard_policy> would recurse
    requires(!std::is_same_v<std::remove_cvref_t<P>, any_shard_policy> && sharding_policy<P>)
  any_shard_policy(P policy)  // NOLINT(google-explicit-constructor): a policy is meant to convert implicitly
      : name_(policy.name()), resolve_([p = std::move(policy)](const shard_request& r) { return p.resolve(r); }) {}

  /// The held policy's name.
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  /// The held policy's plan.
  [[nodiscard]] shard_plan resolve(const shard_request& request) const { return resolve_(request); }

 private:
  std::string name_;
  std::function<shard_plan(const shard_request&)> resolve_;
};

static_assert(sharding_policy<off_shard>);
static_assert(sharding_policy<data_shard>);
static_assert(sharding_policy<file_shard>);
static_assert(sharding_policy<auto_shard>);
static_assert(sharding_policy<any_shard_policy>);

}  // namespace mwstrat::data
