#pragma once
// A model and an optimizer with every piece of training state and nothing else (no arithmetic): parameters, a
// model state like batch norm's moving statistics, an RNG position, slots and a step count like Adam's, a rate.
// For tests of how the state moves (in-memory recovery, backups, the resume engine).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mwstrat::test {

struct tiny_model {
  std::vector<float> params = std::vector<float>(5, 0.0f);
  std::vector<float> grads = std::vector<float>(5, 0.0f);
  std::vector<float> state = std::vector<float>(2, 0.0f);  // like batch norm's moving statistics
  std::uint64_t rng = 0;
  std::span<float> parameters() { return params; }
  std::span<float> gradients() { return grads; }
  std::span<float> model_state() { return state; }
  std::string fingerprint() const { return "tiny(5)"; }
  std::uint64_t step() const { return rng; }
  void set_step(std::uint64_t n) { rng = n; }
};

struct tiny_adam {  // slots and a step count, like Adam's
  std::vector<float> slots = std::vector<float>(10, 0.0f);
  std::int64_t steps = 0;
  float rate = 0.001f;
  void apply(std::span<float>, std::span<const float>) {}
  std::span<float> state() { return slots; }
  std::int64_t iterations() const { return steps; }
  void set_iterations(std::int64_t n) { steps = n; }
  float learning_rate() const { return rate; }
  void set_learning_rate(double r) { rate = static_cast<float>(r); }
};

}  // namespace mwstrat::test
