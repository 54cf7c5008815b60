#pragma once
/// \file
/// The `cluster_resolver` concept: anything that can tell a process which cluster it is in and which task it is.
///
/// A type R models `cluster_resolver` when:
///   1. R is move-constructible (resolvers are passed by value into strategies);
///   2. `r.resolve()` on a `const R&` returns exactly a `mwstrat::cluster_config` (and throws `config_error`
///      when its input is invalid);
///   3. `r.name()` on a `const R&` is convertible to `std::string_view`: where the configuration comes from
///      ("TF_CONFIG", "Slurm"), for logs.
///
/// Opt-in scheme (the same for every mwstrat concept): structural — the members above are all; there is no tag.
///
/// The library's resolvers: `tf_config_resolver`, `slurm_resolver`, `simple_resolver`. Opting in a resolver of
/// your own takes only those two members, e.g. one that reads a launcher's variables:
///
///     struct my_launcher_resolver {
///       mwstrat::cluster_config resolve() const {
///         return mwstrat::simple_resolver(read_peer_list(), read_my_rank()).resolve();
///       }
///       std::string_view name() const noexcept { return "my-launcher"; }
///     };
///     static_assert(mwstrat::cluster_resolver<my_launcher_resolver>);

#include <mwstrat/cluster/cluster_config.hpp>

#include <concepts>
#include <string_view>

namespace mwstrat {

/// See the file comment for the numbered requirements.
template <class R>
concept cluster_resolver = std::move_constructible<R> && requires(const R& resolver) {
  { resolver.resolve() } -> std::same_as<cluster_config>;
  { resolver.name() } -> std::convertible_to<std::string_view>;
};

}  // namespace mwstrat
