#pragma once
/// \file
/// Saving and loading a whole model (architecture fingerprint + weights, and optionally the optimizer) as one
/// safetensors file that Python's `safetensors`/numpy can read.
///
/// The same weights give a byte-identical file (no timestamps, a fixed key order). In a multi-worker job only the
/// chief writes (`save_model(strategy, ...)`): the replicas are identical, so the others have nothing to add, and
/// since saving sends nothing over the network it cannot deadlock however many workers call it. Loading checks the
/// architecture and raises `checkpoint_error` naming the file when it differs.
///
/// The weights go through `weight_views`: a model's own `tensor_like` tensors (`named_parameters_model`) are saved
/// under their names, read through `mwstrat::elements` / `mwstrat::shape`. For tensors of other element types, or
/// tensors that are not a model's, `save_tensors` / `load_tensors` (checkpoint/named_tensors.hpp).

#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/model_state.hpp>

#include <filesystem>
#include <string>

namespace mwstrat {

/// What `save_model` writes besides the weights.
struct save_model_options {
  bool include_optimizer = true;  ///< also the optimizer's slots and step count (to continue training exactly)
  std::int64_t epoch = 0;         ///< recorded in the file's metadata
};

/// What `save_model` writes, as a view of `model` (and `optimizer`'s state unless excluded): what a `checkpointer`
/// saves for ModelCheckpoint.
template <class Model, class Optimizer>
[[nodiscard]] training_state_view model_state_view(Model& model, Optimizer& optimizer,
                                                   const save_model_options& options = {}) {
  static_assert(check_resume_hooks<Model, Optimizer>());
  training_state_view s;
  s.epoch = options.epoch;
  s.model_fingerprint = std::string(model.fingerprint());
  s.weights = weight_views(model);
  if (options.include_optimizer) {
    s.optimizer_slots = slot_views(optimizer, model.parameters().size());
    if constexpr (checkpointable_optimizer<Optimizer>) {
      s.optimizer_iterations = static_cast<std::int64_t>(optimizer.iterations());
    }
  }
  return s;
}

/// Writes `model` (and `optimizer`'s state unless excluded) to `path` atomically.
template <class Model, class Optimizer>
void save_model(const std::filesystem::path& path, Model& model, Optimizer& optimizer,
                const save_model_options& options = {}) {
  const training_state_view s = model_state_view(model, optimizer, options);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  save_training_state(path, s);
}

/// Writes `model`'s weights only.
template <class Model>
void save_weights(const std::filesystem::path& path, Model& model, std::int64_t epoch = 0) {
  struct none {} no_optimizer;
  save_model(path, model, no_optimizer, {false, epoch});
}

/// As `save_model`, but only on the chief of `strategy`; returns whether this worker wrote.
template <class Strategy, class Model, class Optimizer>
bool save_model(Strategy& strategy, const std::filesystem::path& path, Model& model, Optimizer& optimizer,
                const save_model_options& options = {}) {
  if (!strategy.is_chief()) return false;
  save_model(path, model, optimizer, options);
  return true;
}

/// Loads a file written by `save_model`/`save_weights` into `model` (and `optimizer`, when the file has its
/// state). Throws `checkpoint_error` naming the file when it is corrupt or of another architecture.
template <class Model, class Optimizer>
void load_model(const std::filesystem::path& path, Model& model, Optimizer& optimizer) {
  static_assert(check_resume_hooks<Model, Optimizer>());
  const training_state s = load_training_state(path);
  const std::string fingerprint(model.fingerprint());
  if (s.model_fingerprint != fingerprint) {
    throw checkpoint_error({"train"}, path.string(),
                           path.string() + ": the file holds another architecture ('" + s.model_fingerprint +
                               "'; this model is '" + fingerprint + "')");
  }
  copy_weights_into(s.weights, model, "the file's weights", path.string(), {});
  if constexpr (checkpointable_optimizer<Optimizer>) {
    if (!s.optimizer_slots.empty()) {
      copy_tensors_into(s.optimizer_slots, optimizer_slots(optimizer, model.parameters().size()),
                        "the file's optimizer slots", path.string(), {});
      optimizer.set_iterations(static_cast<decltype(optimizer.iterations())>(s.optimizer_iterations));
    }
  }
}

/// Loads only the weights of a file written by `save_model`/`save_weights` into `model`.
template <class Model>
void load_weights(const std::filesystem::path& path, Model& model) {
  struct none {} no_optimizer;
  load_model(path, model, no_optimizer);
}

}  // namespace mwstrat
