// Saving something that is not a storable tensor (a vector of a type with no safetensors dtype). Expected: the
// unsatisfied `storable_tensor` constraint.
#include <mwstrat/checkpoint/named_tensors.hpp>

#include <vector>

struct rgb {
  unsigned char r, g, b;
};

void misuse() {
  std::vector<rgb> pixels(4);
  mwstrat::save_tensors("pixels.safetensors", std::vector{mwstrat::named("pixels", pixels)});
}
