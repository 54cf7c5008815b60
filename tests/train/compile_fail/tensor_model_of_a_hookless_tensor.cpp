// tensor_model over parameters whose tensor type mwstrat cannot reach (no mwstrat_elements hook, not a range).
// Expected: the unsatisfied `tensor_sequence` constraint, through `parameter_tensor`.
#include <mwstrat/train/tensor_model.hpp>

#include <array>
#include <string>

struct raw_tensor {
  float* data = nullptr;
  int size = 0;
};
struct param {
  std::string name;
  raw_tensor value, grad;
};
struct net {
  std::array<param, 1> params;
  std::array<param, 1>& parameter_tensors() { return params; }
};

void misuse(net& n) { mwstrat::tensor_model model(n); }
