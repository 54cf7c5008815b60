#pragma once
/// \file
/// `checkpoint_manager`: a folder of numbered training-state checkpoints with an index naming the latest, that
/// keeps the newest `max_to_keep` and, on restore, falls back to the newest good one when the latest is corrupt.
///
/// Files in the folder (prefix "ckpt"):
///   - `ckpt-<step>.safetensors`  one training state each (see training_state.hpp);
///   - `ckpt.index.json`          `{"format":"mwstrat.checkpoint_index/1","latest":"ckpt-42.safetensors",
///                                  "checkpoints":["ckpt-40.safetensors","ckpt-42.safetensors"]}`, oldest first;
///   - `.ckpt-<step>.safetensors.tmp-<pid>-<n>`, `.ckpt.index.json.tmp-<pid>-<n>`: temporary files of an
///                                interrupted write, deleted by the next `save` (and only this prefix's).
///
/// Contract:
///   - every file, the index included, is replaced atomically (write_file_atomically); a crash at any instant
///     leaves the previous checkpoints and the previous index usable;
///   - a failed `save` (bad state, full disk, a fault hook) throws `checkpoint_error` and leaves the earlier
///     checkpoints and the index as they were; nothing already saved is lost on bad input;
///   - the order is the order of saving: `latest()` is the checkpoint saved last (which is the highest step in
///     any normal run); `max_to_keep` deletes the oldest ones once the index no longer names them;
///   - if the index is missing or unreadable (a warning), the folder is scanned and steps order the files;
///   - one process writes (the chief); any number may read. `save` and `remove_all` delete temporaries of
///     interrupted writes, so they must not run in two processes on the same folder at once.

#include <mwstrat/checkpoint/atomic_file.hpp>
#include <mwstrat/checkpoint/concepts.hpp>
#include <mwstrat/checkpoint/detail/fail.hpp>
#include <mwstrat/checkpoint/training_state.hpp>
#include <mwstrat/error.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace mwstrat {

/// Options of a `checkpoint_manager`.
struct checkpoint_manager_options {
  /// How checkpoint and index files are written (rank for messages, fsync, test hooks).
  write_options write = {};
  /// Where warnings go (a corrupt latest checkpoint, an unreadable index, a file that could not be deleted).
  /// Empty: one line each on stderr, "[mwstrat.checkpoint] rank r: warning: ...".
  std::function<void(std::string_view)> warn = {};
};

/// Numbered training-state checkpoints in one folder; see the file comment for the contract.
class checkpoint_manager {
 public:
  /// `max_to_keep` for a manager that never deletes a checkpoint.
  static constexpr std::size_t keep_all = std::numeric_limits<std::size_t>::max();

  /// Manages `directory` (created by the first `save`). `prefix` names the files: letters, digits, '_', '-', '.'
  /// and not starting with '.'. Throws `config_error` for `max_to_keep == 0` or a bad prefix.
  explicit checkpoint_manager(std::filesystem::path directory, std::size_t max_to_keep = 5,
                              std::string prefix = "ckpt", checkpoint_manager_options options = {})
      : directory_(std::move(directory)),
        max_to_keep_(max_to_keep),
        prefix_(std::move(prefix)),
        options_(std::move(options)) {
    if (max_to_keep_ == 0)
      throw config_error({"checkpoint", options_.write.rank},
                         "checkpoint_manager: max_to_keep must be at least 1 (keep_all keeps every checkpoint)");
    const bool good = !prefix_.empty() && prefix_.front() != '.' &&
                      std::all_of(prefix_.begin(), prefix_.end(), [](char c) {
                        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                               c == '_' || c == '-' || c == '.';
                      });
    if (!good)
      throw config_error({"checkpoint", options_.write.rank},
                         "checkpoint_manager: prefix '" + prefix_ +
                             "' must be letters, digits, '_', '-', '.' and not start with '.'");
  }

  /// Saves `state` as checkpoint `step` (a step or an epoch number, >= 0), makes it the latest, and deletes the
  /// oldest checkpoints beyond `max_to_keep`. Returns the new file's path. Saving a step that exists replaces it.
  std::filesystem::path save(const training_state_view& state, std::int64_t step) {
    if (step < 0) detail::checkpoint_fail(rank(), directory_, "cannot save a checkpoint for negative step " + std::to_string(step));
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec) detail::checkpoint_fail(rank(), directory_, "cannot create the checkpoint folder: " + ec.message());
    remove_own_temporaries();

    const std::string name = file_name(step);
    const std::filesystem::path target = directory_ / name;
    save_training_state(target, state, options_.write);

    std::vector<std::string> order = save_order();
    std::erase(order, name);
    order.push_back(name);
    const std::size_t keep = std::min(order.size(), max_to_keep_);
    const std::vector<std::string> dropped(order.begin(), order.end() - static_cast<std::ptrdiff_t>(keep));
    const std::vector<std::string> kept(order.end() - static_cast<std::ptrdiff_t>(keep), order.end());
    write_index(kept);
    for (const auto& old : dropped) {
      std::error_code remove_ec;
      std::filesystem::remove(directory_ / old, remove_ec);
      if (remove_ec) warn("cannot delete old checkpoint " + (directory_ / old).string() + ": " + remove_ec.message());
    }
    return target;
  }

  /// As above, for an owning state.
  std::filesystem::path save(const training_state& state, std::int64_t step) { return save(view_of(state), step); }

  /// The latest checkpoint file that exists (not checked for corruption: `restore_latest` does that).
  [[nodiscard]] std::optional<std::filesystem::path> latest() const {
    for (const auto& name : candidates()) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(directory_ / name, ec)) return directory_ / name;
    }
    return std::nullopt;
  }

  /// The checkpoints the index names (or, without a usable index, those in the folder), oldest first.
  [[nodiscard]] std::vector<std::filesystem::path> checkpoints() const {
    std::vector<std::filesystem::path> out;
    for (const auto& name : indexed_or_scanned()) out.push_back(directory_ / name);
    return out;
  }

  /// Loads the newest good checkpoint: the latest, or, if it is corrupt or missing, the one before it (with a
  /// warning for each one skipped), then any other checkpoint file in the folder by descending step. Nothing if
  /// the folder holds no checkpoint; `checkpoint_error` if it holds some and none is good.
  [[nodiscard]] std::optional<restored_checkpoint> restore_latest_checkpoint() const {
    const std::vector<std::string> names = candidates();
    std::string failures;
    for (const auto& name : names) {
      const std::filesystem::path path = directory_ / name;
      try {
        restored_checkpoint out{path, *step_of(name), load_training_state(path, read_options{rank(), true})};
        return out;
      } catch (const checkpoint_error& e) {
        warn("skipping unusable checkpoint (" + e.detail() + "); falling back to the one before it");
        failures += "\n  ";
        failures += e.detail();
      }
    }
    if (names.empty()) return std::nullopt;
    detail::checkpoint_fail(rank(), directory_,
                            "none of the " + std::to_string(names.size()) + " checkpoints is usable:" + failures);
  }

  /// The state of the newest good checkpoint (see `restore_latest_checkpoint`).
  [[nodiscard]] std::optional<training_state> restore_latest() const {
    auto restored = restore_latest_checkpoint();
    if (!restored) return std::nullopt;
    return std::move(restored->state);
  }

  /// Deletes every checkpoint of this prefix (oldest first, so an interruption leaves the newest), the index and
  /// any temporary files, then the folder if that left it empty. Throws `checkpoint_error` naming a file that
  /// could not be deleted (after trying all of them).
  void remove_all() {
    std::error_code ec;
    if (!std::filesystem::exists(directory_, ec)) return;
    std::vector<std::string> names = scanned();
    std::optional<std::filesystem::path> failed;
    std::string reason;
    const auto remove = [&](const std::filesystem::path& path) {
      std::error_code remove_ec;
      std::filesystem::remove(path, remove_ec);
      if (remove_ec && !failed) {
        failed = path;
        reason = remove_ec.message();
      }
    };
    for (const auto& name : names) remove(directory_ / name);
    remove(index_path());
    remove_own_temporaries();
    std::error_code dir_ec;
    if (std::filesystem::is_empty(directory_, dir_ec) && !dir_ec) std::filesystem::remove(directory_, dir_ec);
    if (failed) detail::checkpoint_fail(rank(), *failed, "cannot delete: " + reason);
  }

  /// The folder managed.
  [[nodiscard]] const std::filesystem::path& directory() const noexcept { return directory_; }
  /// The prefix of file names.
  [[nodiscard]] const std::string& prefix() const noexcept { return prefix_; }
  /// How many checkpoints are kept.
  [[nodiscard]] std::size_t max_to_keep() const noexcept { return max_to_keep_; }
  /// The file checkpoint `step` is saved to.
  [[nodiscard]] std::filesystem::path path_for(std::int64_t step) const { return directory_ / file_name(step); }
  /// The index file.
  [[nodiscard]] std::filesystem::path index_path() const { return directory_ / (prefix_ + ".index.json"); }

 private:
  static constexpr std::string_view index_format = "mwstrat.checkpoint_index/1";
  static constexpr std::string_view extension = ".safetensors";

  [[nodiscard]] std::optional<int> rank() const noexcept { return options_.write.rank; }

  void warn(const std::string& message) const {
    if (options_.warn) {
      options_.warn(message);
      return;
    }
    std::cerr << error::format({"checkpoint", rank()}, "warning: " + message) << std::endl;
  }

  /// Temporaries of exactly this prefix's checkpoint files and index: "ckpt" must leave alone those of "ckpt_best"
  /// and of "ckpt-best" (whose names start with "ckpt-"), which may belong to a save in flight.
  void remove_own_temporaries() const {
    remove_stale_temporaries_if(directory_, [&](std::string_view target) {
      return step_of(target).has_value() || target == index_path().filename().string();
    });
  }

  [[nodiscard]] std::string file_name(std::int64_t step) const {
    return prefix_ + "-" + std::to_string(step) + std::string(extension);
  }

  /// The step in `name` if it is exactly "<prefix>-<digits>.safetensors" (so an index cannot point elsewhere).
  [[nodiscard]] std::optional<std::int64_t> step_of(std::string_view name) const {
    if (!name.starts_with(prefix_) || !name.ends_with(extension)) return std::nullopt;
    name.remove_prefix(prefix_.size());
    name.remove_suffix(extension.size());
    if (name.size() < 2 || name.front() != '-') return std::nullopt;
    name.remove_prefix(1);
    if (!std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
    if (name.size() > 1 && name.front() == '0') return std::nullopt;  // one spelling per step
    std::int64_t step = 0;
    const auto [end, errc] = std::from_chars(name.data(), name.data() + name.size(), step);
    if (errc != std::errc{} || end != name.data() + name.size()) return std::nullopt;
    return step;
  }

  /// Checkpoint files in the folder, by ascending step.
  [[nodiscard]] std::vector<std::string> scanned() const {
    std::vector<std::pair<std::int64_t, std::string>> found;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(directory_, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (const auto step = step_of(name)) found.emplace_back(*step, std::move(name));
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> out;
    out.reserve(found.size());
    for (auto& f : found) out.push_back(std::move(f.second));
    return out;
  }

  /// The index's list, oldest first; nothing if there is no index; a warning and nothing if it is unusable.
  [[nodiscard]] std::optional<std::vector<std::string>> read_index() const {
    const std::filesystem::path path = index_path();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return std::nullopt;
    try {
      detail::unique_fd fd = detail::open_for_reading(path, rank());
      const std::uint64_t size = detail::file_size(fd.get(), path, rank());
      if (size > (1u << 24)) detail::checkpoint_fail(rank(), path, "index is larger than 16 MiB");
      std::string text(static_cast<std::size_t>(size), '\0');
      detail::read_exact(fd.get(), std::as_writable_bytes(std::span(text)), 0, path, rank());
      boost::system::error_code json_ec;
      const boost::json::value root = boost::json::parse(text, json_ec);
      const boost::json::object* object = json_ec ? nullptr : root.if_object();
      if (object == nullptr) detail::checkpoint_fail(rank(), path, "index is not a JSON object");
      const auto* format = object->if_contains("format");
      if (format == nullptr || !format->is_string() || format->get_string() != index_format)
        detail::checkpoint_fail(rank(), path, "index has no format \"" + std::string(index_format) + "\"");
      const auto* list = object->if_contains("checkpoints");
      if (list == nullptr || !list->is_array()) detail::checkpoint_fail(rank(), path, "index has no checkpoints list");
      std::vector<std::string> names;
      for (const auto& item : list->get_array()) {
        const auto* s = item.if_string();
        if (s == nullptr || !step_of(std::string_view(*s)))
          detail::checkpoint_fail(rank(), path, "index names something that is not one of its checkpoints");
        names.emplace_back(*s);
      }
      const auto* latest = object->if_contains("latest");
      const bool latest_ok = latest != nullptr && (names.empty() ? latest->is_null()
                                                                 : latest->is_string() && latest->get_string() == names.back());
      if (!latest_ok) detail::checkpoint_fail(rank(), path, "index's latest is not the last of its checkpoints");
      return names;
    } catch (const checkpoint_error& e) {
      warn("ignoring the checkpoint index (" + e.detail() + "); scanning the folder instead");
      return std::nullopt;
    }
  }

  [[nodiscard]] std::vector<std::string> indexed_or_scanned() const {
    if (auto indexed = read_index()) return std::move(*indexed);
    return scanned();
  }

  /// The order `save` keeps: files the index does not name (left by a save whose index update failed) first, so
  /// they are the first to go, then the index's list.
  [[nodiscard]] std::vector<std::string> save_order() const {
    auto indexed = read_index();
    if (!indexed) return scanned();
    std::vector<std::string> out;
    for (auto& name : scanned())
      if (std::find(indexed->begin(), indexed->end(), name) == indexed->end()) out.push_back(std::move(name));
    out.insert(out.end(), indexed->begin(), indexed->end());
    return out;
  }

  /// Names to try on restore, best first: the index's newest first, then unindexed files by descending step.
  [[nodiscard]] std::vector<std::string> candidates() const {
    std::vector<std::string> out;
    if (auto indexed = read_index()) out.assign(indexed->rbegin(), indexed->rend());
    std::vector<std::string> all = scanned();
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (std::find(out.begin(), out.end(), *it) == out.end()) out.push_back(*it);
    return out;
  }

  void write_index(const std::vector<std::string>& names) {
    boost::json::object root;
    root.emplace("format", index_format);
    if (names.empty()) root.emplace("latest", nullptr);
    else root.emplace("latest", names.back());
    boost::json::array list;
    for (const auto& n : names) list.emplace_back(n);
    root.emplace("checkpoints", std::move(list));
    std::string text = boost::json::serialize(root);
    text += '\n';
    write_bytes_atomically(index_path(), std::as_bytes(std::span(text)), options_.write);
  }

  std::filesystem::path directory_;
  std::size_t max_to_keep_;
  std::string prefix_;
  checkpoint_manager_options options_;
};

}  // namespace mwstrat

static_assert(mwstrat::checkpointer<mwstrat::checkpoint_manager>);
