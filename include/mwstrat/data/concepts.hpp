#pragma once
/// \file
/// The `sharding_policy` concept: how a data set's examples are divided among the workers of a job.
///
/// A policy maps (the data set's global example order and its files, the number of workers N, this worker's
/// index w, the global batch G) to this worker's examples, by returning a `shard_plan`:
///   - `shard_mode::replicate`: this worker reads every example (TensorFlow's OFF);
///   - `shard_mode::data`: every worker walks the same shuffled global order and keeps its G/N of each global
///     batch (TensorFlow's DATA);
///   - `shard_mode::file`: this worker reads only the files listed in `shard_plan::files` (TensorFlow's FILE).
/// docs/sharding.md gives the exact arithmetic with a worked example.
///
/// Opt-in scheme (the same for every mwstrat concept): structural — a type with the members below is a policy; there
/// is no tag to declare.
///
/// Requirements on a type `P` (each one has a near-miss test in tests/data/concepts_test.cpp):
///   1. `P` is copyable (policies are small values, passed by value: `distributed_batches(set, opts)`);
///   2. `p.name()` on a const `P` gives something convertible to `std::string_view` ("data", "file", ...);
///   3. `p.resolve(request)` on a const `P` and a `const shard_request&` returns a `shard_plan` (it may throw
///      `data_error` when the data cannot be sharded that way).
///
/// A policy of your own, e.g. one that gives every worker all files of the data set in file mode:
/// \code
///   struct every_file_shard {
///     std::string_view name() const noexcept { return "every_file"; }
///     mwstrat::data::shard_plan resolve(const mwstrat::data::shard_request& r) const {
///       mwstrat::data::shard_plan plan{mwstrat::data::shard_mode::file, {}};
///       for (std::size_t f = 0; f < r.file_counts.size(); ++f) plan.files.push_back(f);
///       return plan;
///     }
///   };
///   static_assert(mwstrat::data::sharding_policy<every_file_shard>);
/// \endcode

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace mwstrat::data {

/// How a worker's examples are chosen; the resolved form of a sharding policy.
enum class shard_mode {
  replicate,  ///< every worker reads every example (OFF)
  data,       ///< every worker keeps its contiguous G/N of each global batch of the global order (DATA)
  file,       ///< every worker reads only its files (FILE)
};

/// "replicate", "data" or "file".
[[nodiscard]] constexpr std::string_view to_string(shard_mode mode) noexcept {
  switch (mode) {
    case shard_mode::replicate: return "replicate";
    case shard_mode::data: return "data";
    case shard_mode::file: return "file";
  }
  return "?";
}

/// What a policy is asked: the shape of the data set and of the job.
struct shard_request {
  std::size_t num_examples = 0;                ///< examples in the data set
  std::span<const std::size_t> file_counts;    ///< examples in each source file, in order (sum = num_examples)
  int num_workers = 1;                         ///< N
  int worker_index = 0;                        ///< w, in [0, N)
  std::size_t global_batch = 0;                ///< G
  /// False when the set is streamed from record files and no file is opened yet: `resolve` is then asked first
  /// with one 0 per file (and `num_examples` 0), so that file sharding opens only this worker's files, and asked
  /// again once the counts are read (it must choose the same for this worker both times).
  bool counts_known = true;
};

/// What a policy answers: the mode, and for `shard_mode::file` the indices of this worker's files.
struct shard_plan {
  shard_mode mode = shard_mode::data;  ///< how this worker's examples are chosen
  std::vector<std::size_t> files;      ///< file mode only: this worker's files, ascending

  friend bool operator==(const shard_plan&, const shard_plan&) = default;
};

/// A value type that decides which examples a worker reads (see the requirements above).
template <class P>
concept sharding_policy = std::copyable<P> && requires(const P& policy, const shard_request& request) {
                            { policy.name() } -> std::convertible_to<std::string_view>;
                            { policy.resolve(request) } -> std::same_as<shard_plan>;
                          };

}  // namespace mwstrat::data
