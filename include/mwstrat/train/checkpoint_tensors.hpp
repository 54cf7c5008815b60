#pragma once
/// \file
/// Moving a model's weights and an optimizer's slots in and out of a checkpoint `training_state`.
///
/// A model may name its tensors (`named_parameters_model`: a range of the user's own `tensor_like` tensors with a
/// `name`, or of records with `name`, `shape` and `values`, in arena order) so that files read well from Python
/// (`conv2d/kernel`, ...); otherwise its arena is saved as one tensor `parameters`. An optimizer's slots are saved
/// when it is a `checkpointable_optimizer`, sized first for the model when it is a `resizable_optimizer` (slots
/// created lazily by the first update). All of these capabilities are named in train/concepts.hpp.

#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/tensor/concepts.hpp>
#include <mwstrat/train/concepts.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace mwstrat {

/// The slots of a `checkpointable_optimizer`, sized for `parameters` values first where the optimizer can.
template <checkpointable_optimizer O>
std::span<float> optimizer_slots(O& o, std::size_t parameters) {
  if constexpr (resizable_optimizer<O>) o.resize(parameters);
  if constexpr (requires { { o.state() } -> std::convertible_to<std::span<float>>; }) {
    return o.state();
  } else {
    return o.slots();
  }
}

/// Views of `model`'s weights, named when the model names them.
template <class Model>
std::vector<float_tensor_view> weight_views(Model& model) {
  std::vector<float_tensor_view> out;
  if constexpr (named_parameters_model<Model>) {
    for (const auto& p : model.named_parameters()) {
      using P = std::remove_cvref_t<decltype(p)>;
      if constexpr (tensor_like<const P>) {  // the user's own tensor type, through tensor_like
        const std::vector<std::size_t> extents = mwstrat::shape(p);
        out.push_back({std::string(p.name), std::vector<std::int64_t>(extents.begin(), extents.end()),
                       mwstrat::elements(p)});
      } else {
        out.push_back({std::string(p.name), std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                       std::span<const float>(p.values)});
      }
    }
  } else {
    const std::span<float> all = model.parameters();
    out.push_back({"parameters", {static_cast<std::int64_t>(all.size())}, std::span<const float>(all)});
    if constexpr (stateful_model<Model>) {
      const std::span<float> st = model.model_state();
      if (!st.empty())
        out.push_back({"model_state", {static_cast<std::int64_t>(st.size())}, std::span<const float>(st)});
    }
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

/// Copies saved weights (as `weight_views` wrote them) into `model`: its parameters, then its `model_state()` when
/// it is a `stateful_model`; the sizes must match exactly.
template <class Model>
void copy_weights_into(const std::vector<float_tensor>& from, Model& model, const std::string& what,
                       const std::string& source, std::optional<int> rank) {
  if constexpr (stateful_model<Model>) {
    const std::span<float> params = model.parameters();
    const std::span<float> st = model.model_state();
    std::size_t total = 0;
    for (const auto& t : from) total += t.values.size();
    if (total != params.size() + st.size()) {
      throw checkpoint_error({"train", rank}, source,
                             source + ": " + what + " hold " + std::to_string(total) + " values, the model has " +
                                 std::to_string(params.size()) + " parameters and " + std::to_string(st.size()) +
                                 " values of state");
    }
    std::size_t at = 0;
    for (const auto& t : from)
      for (const float v : t.values) {
        if (at < params.size()) {
          params[at] = v;
        } else {
          st[at - params.size()] = v;
        }
        ++at;
      }
  } else {
    copy_tensors_into(from, model.parameters(), what, source, rank);
  }
}

}  // namespace mwstrat
