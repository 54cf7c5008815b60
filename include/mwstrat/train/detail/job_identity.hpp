#pragma once
// What a joiner must share with an elastic job before the job hands it its state (train/in_memory_recovery.hpp,
// "Growing"): this worker's identity, and the collective comparison that names the joiners whose identity differs.

#include <mwstrat/detail/hash.hpp>
#include <mwstrat/train/concepts.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace mwstrat::detail {

// What a joiner must share with the job before it is given the job's state: the model (its fingerprint's digest and
// length) and the training data's shape (steps in a pass, the examples of its first and last global batch). A
// joiner with another model or other data is refused, and the job goes on without it.
struct job_identity {
  std::array<std::int64_t, 6> words{};
  static constexpr const char* names[] = {"model fingerprint", "model fingerprint", "steps in a pass over the data",
                                          "examples in the data's first global batch",
                                          "examples in the data's last global batch",
                                          "training data (its examples, labels, global batch or shuffle)"};
  // Words compared as numbers (the others are digests: only "differs" is said).
  static constexpr bool counted(std::size_t k) { return k >= 2 && k <= 4; }
};

// This worker's identity: `model`'s fingerprint, and the shape of `train` where it can say it (reshardable data).
template <class Model, class Train>
job_identity identity_of(Model& model, const Train& train, std::size_t steps_per_pass) {
  job_identity id;
  const std::string fingerprint(model.fingerprint());
  id.words[0] = static_cast<std::int64_t>(fnv1a64(fingerprint));
  id.words[1] = static_cast<std::int64_t>(fingerprint.size());
  id.words[2] = static_cast<std::int64_t>(steps_per_pass);
  if constexpr (reshardable_source<Train>) {
    if (steps_per_pass > 0) {
      id.words[3] = static_cast<std::int64_t>(train.global_count_at(0, 0));
      id.words[4] = static_cast<std::int64_t>(train.global_count_at(0, steps_per_pass - 1));
    }
  }
  if constexpr (requires { { train.data_fingerprint() } -> std::convertible_to<std::uint64_t>; }) {
    id.words[5] = static_cast<std::int64_t>(train.data_fingerprint());
  }
  return id;
}

// Collective, on a ring that has just taken joiners in (they hold ranks `first` and up): compares every rank's
// identity with the chief's. Returns the joiners whose identity differs, and why, the same on every rank.
template <class Strategy>
std::vector<std::pair<int, std::string>> mismatched_joiners(Strategy& strategy, const job_identity& mine, int first) {
  const int n = strategy.num_replicas_in_sync();
  constexpr std::size_t w = std::tuple_size_v<decltype(mine.words)>;
  std::vector<std::int64_t> all(w * static_cast<std::size_t>(n));
  strategy.collective().all_gather(std::span<const std::int64_t>(mine.words), std::span<std::int64_t>(all));
  std::vector<std::pair<int, std::string>> out;
  for (int r = first; r < n; ++r) {
    for (std::size_t k = 0; k < w; ++k) {
      const auto theirs = all[static_cast<std::size_t>(r) * w + k];
      if (theirs == all[k]) continue;
      out.emplace_back(r, std::string(job_identity::names[k]) +
                              (!job_identity::counted(k) ? " differs from the job's"
                                                         : ": " + std::to_string(theirs) + ", the job's " +
                                                               std::to_string(all[k])));
      break;
    }
  }
  return out;
}

}  // namespace mwstrat::detail
