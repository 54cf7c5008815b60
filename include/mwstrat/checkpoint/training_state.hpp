#pragma once
/// \file
/// The full state of a training run — weights, optimizer slots, progress, data cursor, RNG — as one safetensors
/// file, so a restarted job resumes exactly where it stopped.
///
/// File layout: the weights under their own names, then the optimizer slots under `optimizer/<slot name>`, all
/// F32, in the order given; `__metadata__` holds (all values are strings, integers in decimal):
///
///   | key                           | field                          |
///   |-------------------------------|--------------------------------|
///   | `mwstrat.format`              | `training_state/1`             |
///   | `mwstrat.epoch`               | `epoch`                        |
///   | `mwstrat.step`                | `step`                         |
///   | `mwstrat.cursor.epoch`        | `cursor.epoch`                 |
///   | `mwstrat.cursor.step`         | `cursor.step`                  |
///   | `mwstrat.cursor.seed`         | `cursor.seed` (unsigned)       |
///   | `mwstrat.rng`                 | `rng_state`                    |
///   | `mwstrat.world_size`          | `world_size`                   |
///   | `mwstrat.model_fingerprint`   | `model_fingerprint`            |
///   | `mwstrat.optimizer_iterations`| `optimizer_iterations`         |
///   | `mwstrat.crc32c`              | CRC32C of the data section     |
///   | `mwstrat.header_crc32c`       | CRC32C of the header's content |
///   | any other key                 | `extra`                        |

#include <mwstrat/checkpoint/atomic_file.hpp>
#include <mwstrat/checkpoint/crc32c.hpp>
#include <mwstrat/checkpoint/detail/fail.hpp>
#include <mwstrat/checkpoint/detail/posix_file.hpp>
#include <mwstrat/checkpoint/detail/safetensors_header.hpp>
#include <mwstrat/checkpoint/safetensors.hpp>
#include <mwstrat/data/cursor.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <locale>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

namespace mwstrat {

/// A named F32 tensor that owns its values; `tensor_like` (so `save_tensors`/`load_tensors` take it too).
struct float_tensor {
  std::string name;
  std::vector<std::int64_t> shape;  ///< its product is `values.size()` (an empty shape is a scalar)
  std::vector<float> values;
  friend bool operator==(const float_tensor&, const float_tensor&) = default;
  friend std::span<float> mwstrat_elements(float_tensor& t) noexcept { return t.values; }
  friend std::span<const float> mwstrat_elements(const float_tensor& t) noexcept { return t.values; }
  friend const std::vector<std::int64_t>& mwstrat_shape(const float_tensor& t) noexcept { return t.shape; }
};

/// A named F32 tensor viewing values owned elsewhere (a model's parameter arena, say): saving it copies nothing.
/// `tensor_like`, read-only.
struct float_tensor_view {
  std::string name;
  std::vector<std::int64_t> shape;  ///< its product is `values.size()` (an empty shape is a scalar)
  std::span<const float> values;
  friend std::span<const float> mwstrat_elements(const float_tensor_view& t) noexcept { return t.values; }
  friend const std::vector<std::int64_t>& mwstrat_shape(const float_tensor_view& t) noexcept { return t.shape; }
};

/// Everything a run needs to resume. `Tensor` is `float_tensor` (owning: what loading returns) or
/// `float_tensor_view` (viewing: what a trainer saves from without copying).
template <class Tensor>
struct basic_training_state {
  std::int64_t epoch = 0;                 ///< the epoch to resume in
  std::int64_t step = 0;                  ///< the global step count
  data::data_cursor cursor = {};          ///< the input pipeline's position (data/cursor.hpp)
  std::string rng_state;                  ///< the trainer's RNG, serialised (see `rng_state_of`)
  std::int64_t world_size = 1;            ///< number of workers that wrote it
  std::string model_fingerprint;          ///< identifies the architecture; checked on restore by the trainer
  std::int64_t optimizer_iterations = 0;  ///< the optimizer's own update count
  std::vector<Tensor> weights;            ///< model parameters
  std::vector<Tensor> optimizer_slots;    ///< e.g. Adam's `m/<param>` and `v/<param>`
  metadata_map extra;                     ///< anything else, as strings; keys must not start with "mwstrat." (but `mwstrat.architecture`)
};

namespace detail {
/// Every field of a training state but its tensors, as a tuple of references: the one list that copying between the
/// owning and the viewing form and comparing owning states go through, so a new field is added here once.
template <class State>
[[nodiscard]] auto progress_fields(State& s) noexcept {
  return std::tie(s.epoch, s.step, s.cursor, s.rng_state, s.world_size, s.model_fingerprint, s.optimizer_iterations,
                  s.extra);
}
}  // namespace detail

/// A training state that owns its tensors.
using training_state = basic_training_state<float_tensor>;
/// A training state that views its tensors.
using training_state_view = basic_training_state<float_tensor_view>;

/// Equality of owning states (bitwise for the values, except that NaN never equals itself).
[[nodiscard]] inline bool operator==(const training_state& a, const training_state& b) {
  return detail::progress_fields(a) == detail::progress_fields(b) && a.weights == b.weights &&
         a.optimizer_slots == b.optimizer_slots;
}

/// A checkpoint that a `checkpointer` restored: the state and where it came from (for messages and logs).
struct restored_checkpoint {
  std::filesystem::path path;  ///< the file (or object) it came from
  std::int64_t step = 0;       ///< the step (or epoch) it was saved under
  training_state state;        ///< its contents
};

/// A view of `state` (valid while `state` lives and its vectors are not resized).
[[nodiscard]] inline training_state_view view_of(const training_state& state) {
  training_state_view v;
  detail::progress_fields(v) = detail::progress_fields(state);
  const auto convert = [](const std::vector<float_tensor>& from, std::vector<float_tensor_view>& to) {
    to.reserve(from.size());
    for (const auto& t : from) to.push_back({t.name, t.shape, std::span<const float>(t.values)});
  };
  convert(state.weights, v.weights);
  convert(state.optimizer_slots, v.optimizer_slots);
  return v;
}

/// Copies `from` (values included) into `to`, reusing `to`'s storage: once `to` has held a state of the same
/// shapes, taking another snapshot allocates nothing. What a trainer does to write a state in the background while
/// training goes on changing the values `from` views.
inline void snapshot_into(const training_state_view& from, training_state& to) {
  detail::progress_fields(to) = detail::progress_fields(from);
  const auto copy = [](const std::vector<float_tensor_view>& views, std::vector<float_tensor>& tensors) {
    tensors.resize(views.size());
    for (std::size_t i = 0; i < views.size(); ++i) {
      tensors[i].name = views[i].name;
      tensors[i].shape = views[i].shape;
      tensors[i].values.assign(views[i].values.begin(), views[i].values.end());
    }
  };
  copy(from.weights, to.weights);
  copy(from.optimizer_slots, to.optimizer_slots);
}

/// The prefix under which optimizer slots are stored.
inline constexpr std::string_view optimizer_slot_prefix = "optimizer/";
/// `mwstrat.format` of a training state.
inline constexpr std::string_view training_state_format = "training_state/1";
/// The one `mwstrat.` key a training state's `extra` may hold: a saved model's architecture (contract 1:
/// train/saved_model.hpp writes it, Python reads it).
inline constexpr std::string_view architecture_metadata_key = "mwstrat.architecture";

/// `engine`'s state as text (any standard random engine, or anything with a matching `operator<<`).
template <class Engine>
[[nodiscard]] std::string rng_state_of(const Engine& engine) {
  std::ostringstream out;
  out.imbue(std::locale::classic());
  out << engine;
  return out.str();
}

/// Puts `engine` back in the state `rng_state_of` gave; throws `checkpoint_error` (naming `source`) if `state` is
/// not one.
template <class Engine>
void restore_rng(Engine& engine, std::string_view state, const std::filesystem::path& source = "<rng state>",
                 std::optional<int> rank = {}) {
  std::istringstream in{std::string(state)};
  in.imbue(std::locale::classic());
  Engine restored;
  in >> restored;
  if (in.fail() || !(in >> std::ws).eof()) detail::checkpoint_fail(rank, source, "not a valid RNG state");
  engine = restored;
}

namespace detail {

inline constexpr std::string_view key_format = "mwstrat.format";
inline constexpr std::string_view key_epoch = "mwstrat.epoch";
inline constexpr std::string_view key_step = "mwstrat.step";
inline constexpr std::string_view key_cursor_epoch = "mwstrat.cursor.epoch";
inline constexpr std::string_view key_cursor_step = "mwstrat.cursor.step";
inline constexpr std::string_view key_cursor_seed = "mwstrat.cursor.seed";
inline constexpr std::string_view key_rng = "mwstrat.rng";
inline constexpr std::string_view key_world_size = "mwstrat.world_size";
inline constexpr std::string_view key_fingerprint = "mwstrat.model_fingerprint";
inline constexpr std::string_view key_optimizer_iterations = "mwstrat.optimizer_iterations";

/// The entries and metadata of a training state, checked; entries view the state's values.
inline std::pair<std::vector<tensor_entry>, metadata_map> training_state_entries(const training_state_view& state,
                                                                                 const std::filesystem::path& target,
                                                                                 std::optional<int> rank) {
  metadata_map metadata;
  for (const auto& [key, value] : state.extra) {
    if (key.starts_with("mwstrat.") && key != architecture_metadata_key)
      checkpoint_fail(rank, target, "extra metadata key '" + key + "' uses the reserved prefix 'mwstrat.'");
    metadata.emplace(key, value);
  }
  metadata.emplace(key_format, training_state_format);
  metadata.emplace(key_epoch, std::to_string(state.epoch));
  metadata.emplace(key_step, std::to_string(state.step));
  metadata.emplace(key_cursor_epoch, std::to_string(state.cursor.epoch));
  metadata.emplace(key_cursor_step, std::to_string(state.cursor.step));
  metadata.emplace(key_cursor_seed, std::to_string(state.cursor.seed));
  metadata.emplace(key_rng, state.rng_state);
  metadata.emplace(key_world_size, std::to_string(state.world_size));
  metadata.emplace(key_fingerprint, state.model_fingerprint);
  metadata.emplace(key_optimizer_iterations, std::to_string(state.optimizer_iterations));

  std::vector<tensor_entry> entries;
  entries.reserve(state.weights.size() + state.optimizer_slots.size());
  const auto add = [&](const float_tensor_view& t, std::string name) {
    entries.push_back(checked_entry(std::move(name), t.values, t.shape, target, rank));
  };
  for (const auto& w : state.weights) {
    if (w.name.starts_with(optimizer_slot_prefix))
      checkpoint_fail(rank, target, "weight '" + w.name + "' uses the reserved prefix 'optimizer/'");
    add(w, w.name);
  }
  for (const auto& s : state.optimizer_slots) add(s, std::string(optimizer_slot_prefix) + s.name);
  return {std::move(entries), std::move(metadata)};
}

/// Fills the scalar fields of `state` from `metadata` (which must be a training state's) and moves the other keys
/// to `extra`.
template <class Tensor>
void read_training_metadata(const metadata_map& metadata, basic_training_state<Tensor>& state,
                            const std::filesystem::path& source, std::optional<int> rank) {
  const auto get = [&](std::string_view key) -> const std::string& {
    const auto it = metadata.find(key);
    if (it == metadata.end()) checkpoint_fail(rank, source, "not a training state: __metadata__ has no " + std::string(key));
    return it->second;
  };
  const auto integer = [&]<class Int>(std::string_view key, Int& out) {
    const std::string& text = get(key);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec != std::errc{} || end != text.data() + text.size() || text.empty())
      checkpoint_fail(rank, source, std::string(key) + " is not an integer: '" + text + "'");
  };
  if (get(key_format) != training_state_format)
    checkpoint_fail(rank, source, "unsupported mwstrat.format '" + get(key_format) + "' (this build reads " +
                                      std::string(training_state_format) + ")");
  integer(key_epoch, state.epoch);
  integer(key_step, state.step);
  integer(key_cursor_epoch, state.cursor.epoch);
  integer(key_cursor_step, state.cursor.step);
  integer(key_cursor_seed, state.cursor.seed);
  state.rng_state = get(key_rng);
  integer(key_world_size, state.world_size);
  state.model_fingerprint = get(key_fingerprint);
  integer(key_optimizer_iterations, state.optimizer_iterations);
  state.extra.clear();
  for (const auto& [key, value] : metadata)
    if (!key.starts_with("mwstrat.") || key == architecture_metadata_key) state.extra.emplace(key, value);
}

/// Which vector of `state` the stored tensor `name` belongs to, and its name there. Training states hold F32 only.
inline std::pair<std::vector<float_tensor>*, std::string> training_slot_for(training_state& state,
                                                                            const stored_tensor& t,
                                                                            const std::filesystem::path& source,
                                                                            std::optional<int> rank) {
  if (t.type != dtype::f32)
    checkpoint_fail(rank, source,
                    "tensor '" + t.name + "' is " + std::string(to_string(t.type)) +
                        "; a training state holds F32 tensors only");
  if (t.name.starts_with(optimizer_slot_prefix))
    return {&state.optimizer_slots, t.name.substr(optimizer_slot_prefix.size())};
  return {&state.weights, t.name};
}

/// Resizes `state`'s tensor vectors to the file's and returns, for each stored tensor in data order, the tensor to
/// fill. Existing tensors keep their capacity, so loading into the same state again allocates nothing.
inline std::vector<float_tensor*> shape_training_state(training_state& state, const parsed_header& header,
                                                       const std::filesystem::path& source, std::optional<int> rank) {
  std::size_t weights = 0;
  std::size_t slots = 0;
  for (const auto& t : header.tensors) {
    auto [vec, name] = training_slot_for(state, t, source, rank);
    (vec == &state.weights ? weights : slots) += 1;
  }
  state.weights.resize(weights);
  state.optimizer_slots.resize(slots);
  std::vector<float_tensor*> targets;
  targets.reserve(header.tensors.size());
  std::size_t wi = 0;
  std::size_t si = 0;
  for (const auto& t : header.tensors) {
    auto [vec, name] = training_slot_for(state, t, source, rank);
    float_tensor& target = vec == &state.weights ? state.weights[wi++] : state.optimizer_slots[si++];
    target.name = std::move(name);
    target.shape = t.shape;
    target.values.resize(static_cast<std::size_t>((t.end - t.begin) / sizeof(float)));
    targets.push_back(&target);
  }
  return targets;
}

}  // namespace detail

/// The bytes of the training-state file for `state` (what `save_training_state` writes), e.g. to broadcast.
[[nodiscard]] inline std::vector<std::byte> encode_training_state(const training_state_view& state,
                                                                  std::optional<int> rank = {}) {
  const auto [entries, metadata] = detail::training_state_entries(state, "<memory>", rank);
  return encode_safetensors(entries, metadata, rank);
}

/// As above, for an owning state.
[[nodiscard]] inline std::vector<std::byte> encode_training_state(const training_state& state,
                                                                  std::optional<int> rank = {}) {
  return encode_training_state(view_of(state), rank);
}

/// Writes `state` to `path` atomically and durably. Same state, same bytes. On failure `path` is untouched and a
/// `checkpoint_error` names it.
inline void save_training_state(const std::filesystem::path& path, const training_state_view& state,
                                const write_options& options = {}) {
  const auto [entries, metadata] = detail::training_state_entries(state, path, options.rank);
  save_safetensors(path, entries, metadata, options);
}

/// As above, for an owning state.
inline void save_training_state(const std::filesystem::path& path, const training_state& state,
                                const write_options& options = {}) {
  save_training_state(path, view_of(state), options);
}

/// Decodes training-state bytes (from `encode_training_state`); `source` names them in errors. The CRC32C is
/// required and checked.
[[nodiscard]] inline training_state decode_training_state(std::span<const std::byte> bytes,
                                                          const std::filesystem::path& source = "<memory>",
                                                          read_options options = {}) {
  options.require_crc = true;
  const safetensors_view view = safetensors_view::parse(bytes, source, options);
  training_state state;
  detail::read_training_metadata(view.metadata(), state, source, options.rank);
  detail::parsed_header header;  // the view's tensors, as the shaping step wants them
  std::uint64_t offset = 0;
  for (const auto& t : view.tensors()) {
    header.tensors.push_back({t.name, t.type, t.shape, offset, offset + t.data.size()});
    offset += t.data.size();
  }
  const std::vector<float_tensor*> targets = detail::shape_training_state(state, header, source, options.rank);
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (!view.tensors()[i].data.empty())
      std::memcpy(targets[i]->values.data(), view.tensors()[i].data.data(), view.tensors()[i].data.size());
  return state;
}

/// Loads the training state in `path` into `state`, reusing its vectors' storage (so a steady-state restore
/// allocates nothing) and reading each tensor straight into place. Validates the header, every offset and the
/// CRC32C; on any defect throws `checkpoint_error` naming the file, and `state` is then unspecified (but valid).
inline void load_training_state(const std::filesystem::path& path, training_state& state, read_options options = {}) {
  options.require_crc = true;
  const auto [fd, size, header_length] = detail::open_safetensors(path, options.rank);
  std::string header_text(static_cast<std::size_t>(header_length), '\0');
  detail::read_exact(fd.get(), std::as_writable_bytes(std::span(header_text)), 8, path, options.rank);
  const detail::parsed_header header =
      detail::parse_header(header_text, size - 8 - header_length, path, options.rank);
  detail::read_training_metadata(header.metadata, state, path, options.rank);
  const std::vector<float_tensor*> targets = detail::shape_training_state(state, header, path, options.rank);

  std::uint32_t crc = 0;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const std::span<std::byte> out = std::as_writable_bytes(std::span(targets[i]->values));
    crc = detail::read_exact_checksummed(fd.get(), out, header.data_offset() + header.tensors[i].begin, crc, path,
                                         options.rank);
  }
  safetensors_view::verify_checksums(header, crc, path, options);
}

/// Loads the training state in `path` (see the overload above).
[[nodiscard]] inline training_state load_training_state(const std::filesystem::path& path,
                                                        const read_options& options = {}) {
  training_state state;
  load_training_state(path, state, options);
  return state;
}

}  // namespace mwstrat
