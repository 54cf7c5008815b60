// tensor_model over double tensors: the arena, the optimizers and the wire are float32, so it is refused rather than
// silently trained in float32. Expected: tensor_model's static_assert.
#include <mwstrat/train/tensor_model.hpp>

#include <array>
#include <string>
#include <vector>

struct param {
  std::string name;
  std::vector<double> value, grad;
};
struct net {
  std::array<param, 1> params;
  std::array<param, 1>& parameter_tensors() { return params; }
};

void misuse(net& n) { mwstrat::tensor_model model(n); }
