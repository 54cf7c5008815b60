// The public headers after tensor/concepts.hpp: nothing may declare a name that shadows `mwstrat::shape` (the
// customisation point object), which -Wshadow (on, with -Werror, in the dev build) refuses in a user's code that
// includes the tensor concepts first. safetensors.hpp and saved_model.hpp once did.
#include <mwstrat/tensor/concepts.hpp>

#include <mwstrat/mwstrat.hpp>

#include <gtest/gtest.h>

#include <vector>

TEST(include_order, the_umbrella_header_compiles_after_the_tensor_concepts) {
  const std::vector<float> values(6, 1.0f);
  const auto extents = mwstrat::shape(values);  // the object that must not be shadowed
  ASSERT_EQ(extents.size(), 1u);
  EXPECT_EQ(extents[0], 6u);
}
