#pragma once
// Who the ranks of one ring are, for every message that names one. Rank k of a ring listens at `address(k)` and its
// failures and start-up errors call it `rank k (address)`. A ring inside a hierarchical one (a host's ranks, or one
// rank of each host) also knows which rank of the job each of its ranks is: what it reports leaves it in the job's
// terms (`in_job_terms`: the culprit becomes the job's rank, the text says which ring), and the error a rank throws
// names the job's rank and address (abort.hpp: ring_error). The job's own ring is its own map.

#include <mwstrat/collective/ring/detail/failure.hpp>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat::detail {

class rank_map {
 public:
  rank_map() = default;

  // The job's ring: rank k is the job's rank k, at addresses[k].
  explicit rank_map(std::vector<std::string> addresses) : addresses_(std::move(addresses)) {}

  // A ring inside the job's (`scope`: "host ring", ...): its rank k listens at addresses[k] and is the job's rank
  // job_ranks[k] of `job`.
  rank_map(std::string scope, std::vector<std::string> addresses, std::vector<int> job_ranks, const rank_map& job)
      : addresses_(std::move(addresses)), scope_(std::move(scope)), job_ranks_(std::move(job_ranks)),
        job_addresses_(job.addresses_) {}

  [[nodiscard]] int size() const noexcept { return static_cast<int>(addresses_.size()); }
  // True for a ring inside a hierarchical one.
  [[nodiscard]] bool inner() const noexcept { return !job_ranks_.empty(); }

  // This ring's rank r: its address, and its name in messages.
  [[nodiscard]] const std::string& address(int r) const { return addresses_.at(static_cast<std::size_t>(r)); }
  [[nodiscard]] std::string peer(int r) const { return "rank " + std::to_string(r) + " (" + address(r) + ")"; }

  // The job's rank of this ring's rank r, and the address the job knows the job's rank g by.
  [[nodiscard]] int job_rank(int r) const { return inner() ? job_ranks_.at(static_cast<std::size_t>(r)) : r; }
  [[nodiscard]] const std::string& job_address(int g) const {
    return (inner() ? job_addresses_ : addresses_).at(static_cast<std::size_t>(g));
  }

  // `f` found on this ring, as the job names it: its culprit the job's rank (when it is one of this ring's), its
  // text prefixed by the ring it came from ("host ring, whose rank k is rank [0,2]: ...").
  [[nodiscard]] ring_failure in_job_terms(ring_failure f) const {
    if (!inner()) return f;
    if (f.culprit >= 0 && f.culprit < size()) f.culprit = job_rank(f.culprit);
    f.text = scope_ + ", whose rank k is rank " + job_names() + ": " + f.text;
    return f;
  }

 private:
  // "[0,2]": the job's rank of each of this ring's ranks.
  [[nodiscard]] std::string job_names() const {
    std::string s = "[";
    for (std::size_t k = 0; k < job_ranks_.size(); ++k) {
      if (k) s += ',';
      s += std::to_string(job_ranks_[k]);
    }
    return s + "]";
  }

  std::vector<std::string> addresses_;
  std::string scope_;
  std::vector<int> job_ranks_;              // empty: the job's ring
  std::vector<std::string> job_addresses_;  // the job's ring's addresses (an inner ring's only)
};

}  // namespace mwstrat::detail
