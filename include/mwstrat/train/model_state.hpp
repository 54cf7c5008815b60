#pragma once
/// \file
/// Moving a model's weights and an optimizer's slots in and out of a checkpoint `training_state`.
///
/// A model may name its tensors with `named_parameters()` — a range of objects with `name`, `shape` (int64s) and
/// `values` (`std::span<float>` into the arena, in arena order) — so that files read well from Python
/// (`conv2d/kernel`, ...); otherwise its arena is saved as one tensor `parameters`. An optimizer with slots opts in
/// with `state()` or `slots()` (a `std::span<float>`), `iterations()` and `set_iterations(n)`, and may size its
/// slots for n parameters with `resize(n)` (slots created lazily by the first update).

#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/error.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mwstrat {

/// An optimizer whose slots and step count can be saved and restored exactly.
template <class O>
concept checkpointable_optimizer =
    (requires(O& o) {
      { o.state() } -> std::convertible_to<std::span<float>>;
    } || requires(O& o) {
      { o.slots() } -> std::convertible_to<std::span<float>>;
    }) && requires(O& o, std::int64_t n) {
      { o.iterations() } -> std::convertible_to<std::int64_t>;
      o.set_iterations(n);
    };

/// The slots of a `checkpointable_optimizer`, sized for `parameters` values first where the optimizer can.
template <checkpointable_optimizer O>
std::span<float> optimizer_slots(O& o, std::size_t parameters) {
  if constexpr (requires { o.resize(parameters); }) o.resize(parameters);
  if constexpr (requires { o.state(); }) {
    return o.state();
  } else {
    return o.slots();
  }
}

/// Views of `model`'s weights, named when the model names them.
template <class Model>
std::vector<float_tensor_view> weight_views(Model& model) {
  std::vector<float_tensor_view> out;
  if constexpr (requires { model.named_parameters(); }) {
    for (const auto& p : model.named_parameters()) {
      out.push_back({std::string(p.name), std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                     std::span<const float>(p.values)});
    }
  } else {
    const std::span<float> all = model.parameters();
    out.push_back({"parameters", {static_cast<std::int64_t>(all.size())}, std::span<const float>(all)});
  }
  return out;
}

/// Views of `optimizer`'s slots for a model of `parameters` values (none for an optimizer without state).
template <class Optimizer>
std::vector<float_tensor_view> slot_views(Optimizer& optimizer, std::size_t parameters) {
  std::vector<float_tensor_view> out;
  if constexpr (checkpointable_optimizer<Optimizer>) {
    const std::span<float> s = optimizer_slots(optimizer, parameters);
    if (!s.empty()) out.push_back({"state", {static_cast<std::int64_t>(s.size())}, std::span<const float>(s)});
  }
  return out;
}

/// Copies the tensors of `from` (in order) into `into`, which must have exactly their total size; `what` and
/// `source` name them in the error.
inline void copy_tensors_into(const std::vector<float_tensor>& from, std::span<float> into, const std::string& what,
                              const std::string& source, std::optional<int> rank) {
  std::size_t total = 0;
  for (const auto& t : from) total += t.values.size();
  if (total != into.size()) {
    throw checkpoint_error({"train", rank}, source,
                           source + ": " + what + " hold " + std::to_string(total) + " values, the model has " +
                               std::to_string(into.size()));
  }
  std::size_t at = 0;
  for (const auto& t : from) {
    std::copy(t.values.begin(), t.values.end(), into.begin() + static_cast<std::ptrdiff_t>(at));
    at += t.values.size();
  }
}

}  // namespace mwstrat
