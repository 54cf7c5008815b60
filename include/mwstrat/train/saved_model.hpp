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
/// A `keras_layout_model` (the sequential reference CNN) is saved the way Keras users read it (contract 1,
/// docs/checkpointing.md): every weight as `<layer>/<weight>` in Keras's layout, the architecture as JSON under the
/// metadata key `mwstrat.architecture`, the optimizer's slots (arena order) under `optimizer/state`. `load_model`
/// reads such files whoever wrote them (Python's `safetensors` too: only the tensors are required), refuses one
/// whose architecture differs, naming both, and changes nothing in the model when it refuses. BackupAndRestore
/// keeps the arena's own layout (backups are for resuming, not for people).
///
/// Other models' weights go through `weight_views`: a model's own `tensor_like` tensors (`named_parameters_model`) are saved
/// under their names, read through `mwstrat::elements` / `mwstrat::shape`. For tensors of other element types, or
/// tensors that are not a model's, `save_tensors` / `load_tensors` (checkpoint/named_tensors.hpp).

#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/checkpoint_tensors.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mwstrat {

/// Capability: a model that saves in Keras's names and layouts — `keras_weights()` (records with `name`, `shape`,
/// `values`), `architecture()` (the JSON list of contract 1) and `set_keras_weight(name, shape, values)` (throws
/// `config_error` for an unknown name or another shape).
template <class M>
concept keras_layout_model = requires(M& m, const M& cm, std::string_view name, std::span<const std::int64_t> extents,
                                      std::span<const float> values) {
  requires std::ranges::range<decltype(cm.keras_weights())>;
  { cm.architecture() } -> std::convertible_to<std::string>;
  m.set_keras_weight(name, extents, values);
};

/// What `save_model` writes besides the weights.
struct save_model_options {
  bool include_optimizer = true;  ///< also the optimizer's slots and step count (to continue training exactly)
  std::int64_t epoch = 0;         ///< recorded in the file's metadata
};

/// What `save_model` writes, as a view of `model` (and `optimizer`'s state unless excluded): what a `checkpointer`
/// saves for ModelCheckpoint.
template <class Model, class Optimizer>
[[nodiscard]] training_state_view saved_model_view(Model& model, Optimizer& optimizer,
                                                   const save_model_options& options = {}) {
  static_assert(check_resume_hooks<Model, Optimizer>());
  training_state_view s;
  s.epoch = options.epoch;
  s.model_fingerprint = std::string(model.fingerprint());
  if constexpr (keras_layout_model<Model>) {
    for (const auto& w : model.keras_weights()) s.weights.push_back({w.name, w.shape, std::span<const float>(w.values)});
    s.extra.emplace(std::string(architecture_metadata_key), model.architecture());
  } else {
    s.weights = weight_views(model);
  }
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
  const training_state_view s = saved_model_view(model, optimizer, options);
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

namespace detail {

// "conv2d (Conv2D) [null,26,26,32], ..." for an architecture in a message.
inline std::string architecture_summary(const boost::json::value& v) {
  if (!v.is_array()) return "not a list of layers";
  std::string out;
  for (const auto& layer : v.as_array()) {
    if (!out.empty()) out += ", ";
    if (!layer.is_object()) {
      out += "?";
      continue;
    }
    const auto& o = layer.as_object();
    const auto field = [&](const char* k) { return o.contains(k) ? boost::json::serialize(o.at(k)) : std::string("?"); };
    out += field("name") + " " + field("class_name") + " " + field("output_shape");
  }
  return out;
}

// A non-negative decimal count, whole text; nothing otherwise.
inline std::optional<std::int64_t> parse_count(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

// load_model for a keras_layout_model: by name, whoever wrote the file; all or nothing.
template <class Model, class Optimizer>
void load_keras_layout(const safetensors_file& file, Model& model, Optimizer& optimizer) {
  const std::string where = file.path().string();
  const auto fail = [&](const std::string& what) { throw checkpoint_error({"train"}, where, where + ": " + what); };
  const auto& meta = file.metadata();
  if (const auto it = meta.find(architecture_metadata_key); it != meta.end()) {
    boost::system::error_code ec;
    const boost::json::value theirs = boost::json::parse(it->second, ec);
    if (ec) fail("metadata " + std::string(architecture_metadata_key) + " is not JSON: " + ec.message());
    const boost::json::value ours = boost::json::parse(model.architecture());
    if (theirs != ours)
      fail("the file holds another architecture (" + architecture_summary(theirs) + "); this model is " +
           architecture_summary(ours));
  }
  // Everything about the optimizer's part is checked before anything is written: a refused file leaves the model
  // and the optimizer as they were.
  const tensor_view* slots = nullptr;
  for (const auto& t : file.tensors())
    if (t.name == std::string(optimizer_slot_prefix) + "state") slots = &t;
  [[maybe_unused]] std::optional<std::vector<float>> slot_values;
  [[maybe_unused]] std::optional<std::int64_t> iterations;
  if constexpr (checkpointable_optimizer<Optimizer>) {
    if (slots != nullptr) {
      slot_values = slots->copy_values<float>();
      const std::size_t size = optimizer_slots(optimizer, model.parameters().size()).size();
      if (!slot_values || slot_values->size() != size)
        fail("optimizer/state holds " + std::to_string(slots->element_count()) + " values" +
             (slot_values ? "" : " of " + std::string(to_string(slots->type))) + "; the optimizer has " +
             std::to_string(size) + " F32 values");
      if (const auto it = meta.find("mwstrat.optimizer_iterations"); it != meta.end()) {
        iterations = parse_count(it->second);
        if (!iterations) fail("metadata mwstrat.optimizer_iterations is '" + it->second + "', not a step count");
      }
    }
  }
  std::vector<std::string> expected;
  for (const auto& w : model.keras_weights()) expected.push_back(w.name);
  // The weights are set one by one: what was there before is put back if one is refused. A graph model's Keras
  // weights include batch norm's moving statistics, which live in its model state.
  const std::vector<float> before(model.parameters().begin(), model.parameters().end());
  [[maybe_unused]] std::vector<float> state_before;
  if constexpr (stateful_model<Model>) state_before.assign(model.model_state().begin(), model.model_state().end());
  const auto put_back = [&] {
    std::ranges::copy(before, model.parameters().begin());
    if constexpr (stateful_model<Model>) std::ranges::copy(state_before, model.model_state().begin());
  };
  std::vector<std::string> seen;
  try {
    for (const auto& t : file.tensors()) {
      if (t.name.starts_with(optimizer_slot_prefix)) continue;
      const auto values = t.copy_values<float>();
      if (!values) fail("weight '" + t.name + "' is " + std::string(to_string(t.type)) + ", not F32");
      model.set_keras_weight(t.name, t.shape, std::span<const float>(*values));
      seen.push_back(t.name);
    }
    for (const auto& name : expected)
      if (std::ranges::find(seen, name) == seen.end()) fail("no weight '" + name + "' (the model has it)");
  } catch (const config_error& e) {
    put_back();
    fail(e.what());
  } catch (...) {
    put_back();
    throw;
  }
  if constexpr (checkpointable_optimizer<Optimizer>) {
    if (slot_values) {
      std::ranges::copy(*slot_values, optimizer_slots(optimizer, model.parameters().size()).begin());
      if (iterations) optimizer.set_iterations(static_cast<decltype(optimizer.iterations())>(*iterations));
    }
  }
}

}  // namespace detail

/// Loads a file written by `save_model`/`save_weights` into `model` (and `optimizer`, when the file has its
/// state). Throws `checkpoint_error` naming the file when it is corrupt or of another architecture.
template <class Model, class Optimizer>
void load_model(const std::filesystem::path& path, Model& model, Optimizer& optimizer) {
  static_assert(check_resume_hooks<Model, Optimizer>());
  if constexpr (keras_layout_model<Model>) {
    const safetensors_file file = safetensors_file::open(path);
    // A file of the arena layout (written before models had Keras's names) still loads by the path below.
    if (file.metadata().contains(architecture_metadata_key) || file.find("parameters") == nullptr) {
      detail::load_keras_layout(file, model, optimizer);
      return;
    }
  }
  const training_state s = load_training_state(path);
  const std::string fingerprint(model.fingerprint());
  if (s.model_fingerprint != fingerprint) {
    throw checkpoint_error({"train"}, path.string(),
                           path.string() + ": the file holds another architecture ('" + s.model_fingerprint +
                               "'; this model is '" + fingerprint + "')");
  }
  if constexpr (checkpointable_optimizer<Optimizer>) {
    // Checked before the weights are written, so a refused file leaves the model as it was.
    if (!s.optimizer_slots.empty()) {
      std::size_t total = 0;
      for (const auto& t : s.optimizer_slots) total += t.values.size();
      const std::size_t size = optimizer_slots(optimizer, model.parameters().size()).size();
      if (total != size)
        throw checkpoint_error({"train"}, path.string(),
                               path.string() + ": the file's optimizer slots hold " + std::to_string(total) +
                                   " values, the optimizer has " + std::to_string(size));
    }
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
