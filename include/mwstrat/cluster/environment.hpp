#pragma once
/// \file
/// Where resolvers read their variables: the process environment, or a map given by a test or a launcher.
/// (`MWSTRAT_HOST_ID`, the host identity that decides which workers share memory, is read through this by
/// strategy/communication_options.hpp, like the other MWSTRAT_* variables; the launcher's protocol, by
/// cluster/launcher_environment.hpp.)

#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mwstrat {

/// Variable name -> value, as a resolver would find them in the environment.
using environment_map = std::map<std::string, std::string, std::less<>>;

/// A read-only view of environment variables: the process's own (default) or a fixed map.
class environment {
 public:
  /// The process environment, read at each `get` (so a resolver sees the value at `resolve()` time).
  environment() = default;
  /// A fixed set of variables; nothing is read from the process.
  explicit environment(environment_map variables) : variables_(std::move(variables)), fixed_(true) {}
  /// A fixed set of variables, written inline: `environment{{"TF_CONFIG", "{}"}, {"SLURM_PROCID", "0"}}`.
  /// (`environment{}` is the process environment; an empty fixed set is `environment(environment_map{})`.)
  environment(std::initializer_list<environment_map::value_type> variables)
      : variables_(environment_map(variables)), fixed_(true) {}

  /// The value of `name`, or nothing when it is not set. An empty value is returned as "" (set but empty).
  [[nodiscard]] std::optional<std::string> get(std::string_view name) const {
    if (fixed_) {
      const auto found = variables_.find(name);
      if (found == variables_.end()) return std::nullopt;
      return found->second;
    }
    const std::string key(name);
    if (const char* value = std::getenv(key.c_str())) return std::string(value);
    return std::nullopt;
  }

  /// True when this reads the process environment.
  [[nodiscard]] bool is_process_environment() const noexcept { return !fixed_; }

 private:
  // A flag beside the map rather than std::optional<map>: GCC 12 at -O3 takes a default-constructed optional map's
  // destructor for a read of uninitialised memory (-Wmaybe-uninitialized) wherever a default `environment{}` dies.
  environment_map variables_;
  bool fixed_ = false;  // variables_ is the whole environment (else: the process's, read at each get)
};

}  // namespace mwstrat
