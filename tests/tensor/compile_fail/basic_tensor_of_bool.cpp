// A reference tensor of bools: std::vector<bool> packs bits, so there is no contiguous run of bools for
// `mwstrat::elements` to view. Expected: basic_tensor's static_assert, not an error deep inside its hooks.
#include <mwstrat/tensor/tensor.hpp>

void misuse() {
  mwstrat::basic_tensor<bool> mask{2, 2};
  (void)mask;
}
