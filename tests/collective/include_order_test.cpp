// The ring's host_arena maker (`make_host_arena`, found by argument-dependent lookup: host_arena_collective) must be
// found whatever a translation unit includes first, or the gradient synchroniser would choose another update path in
// one unit than in another — two definitions of collective_gradient_sync<ring_collective, ...> in one program. It
// once was found only because ring_collective.hpp ended by including host_arena.hpp; now it is a hidden friend of
// the ring, and ring_collective.hpp checks the capability right after the class (which that old header fails).
// This unit sees the ring alone first; include_order_other.cpp sees the synchroniser, then host_arena.hpp, first.
#include <mwstrat/collective/ring/ring_collective.hpp>

#include <mwstrat/strategy/gradient_sync.hpp>

#include <gtest/gtest.h>

#include <concepts>
#include <typeinfo>

namespace mwstrat::test {
const std::type_info& arena_type_when_the_synchroniser_comes_first();  // include_order_other.cpp
}

namespace include_order_test {

using namespace mwstrat;

static_assert(host_arena_collective<ring_collective>, "the ring alone brings its host_arena maker");
static_assert(std::same_as<detail::arena_for<ring_collective>::type, host_arena>);

TEST(include_order, the_ring_offers_its_host_arena_whatever_was_included_first) {
  EXPECT_EQ(typeid(detail::arena_for<ring_collective>::type), test::arena_type_when_the_synchroniser_comes_first());
  EXPECT_EQ(typeid(host_arena), test::arena_type_when_the_synchroniser_comes_first());
}

}  // namespace include_order_test
