// The other order of include_order_test.cpp: the gradient synchroniser and host_arena.hpp before the ring.
#include <mwstrat/strategy/gradient_sync.hpp>

#include <mwstrat/collective/ring/host_arena.hpp>

#include <mwstrat/collective/ring/ring_collective.hpp>

#include <concepts>
#include <typeinfo>

static_assert(mwstrat::host_arena_collective<mwstrat::ring_collective>);
static_assert(std::same_as<mwstrat::detail::arena_for<mwstrat::ring_collective>::type, mwstrat::host_arena>);

namespace mwstrat::test {
const std::type_info& arena_type_when_the_synchroniser_comes_first() {
  return typeid(detail::arena_for<ring_collective>::type);
}
}  // namespace mwstrat::test
