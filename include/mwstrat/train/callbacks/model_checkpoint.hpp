#pragma once
/// \file
/// Keras's ModelCheckpoint: saves the model on the chief at the end of every epoch or every N steps, to a path
/// formatted from the epoch and the logs (`ckpt/weights.{epoch:02d}-{val_loss:.2f}.safetensors`); optionally only
/// when a monitored metric improves, and optionally the weights only. Unlike BackupAndRestore it does not resume
/// training by itself: load a file with `load_model`.
///
/// `model_checkpoint` writes files named by `filepath` with `save_model`. `basic_model_checkpoint<K>` hands each
/// save to a `checkpointer` of the user's own instead (`k.save(state, global_step)`; `filepath` may then be empty),
/// e.g. one that uploads to an object store; `saved()` lists what it returned.

#include <mwstrat/checkpoint/concepts.hpp>
#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/callbacks/backup_and_restore.hpp>
#include <mwstrat/train/detail/run_state.hpp>
#include <mwstrat/train/logs.hpp>
#include <mwstrat/train/saved_model.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace mwstrat {

/// Options of `model_checkpoint`, with Keras's names.
struct model_checkpoint_options {
  std::string filepath;                 ///< may use {epoch}, {epoch:0Nd}, {loss}, {accuracy}, {val_loss}, ... {x:.Nf}
                                        ///< and the name of any metric in the logs (train/fit_metrics.hpp)
  std::string monitor = "val_loss";     ///< the metric `save_best_only` compares (any name in the logs)
  bool save_best_only = false;
  bool save_weights_only = false;
  std::string mode = "auto";            ///< "min", "max" or "auto" (max for accuracies, else min)
  save_frequency save_freq = save_frequency::epoch();
};

/// Saves the model on the chief (see the file comment): to files named by `filepath` (`Checkpointer` void) or
/// through a `checkpointer`.
template <class Checkpointer>
  requires(std::is_void_v<Checkpointer> || checkpointer<Checkpointer>)
class basic_model_checkpoint {
 public:
  /// Never stops training: fit need not agree on a stop after each step because of it (fit.hpp).
  static constexpr bool stops_one_worker = false;

  /// Saves to the files `options.filepath` names.
  explicit basic_model_checkpoint(model_checkpoint_options options)
    requires std::is_void_v<Checkpointer>
      : options_(std::move(options)) {
    if (options_.filepath.empty()) throw config_error({"train.model_checkpoint"}, "filepath is empty");
    validate();
  }
  /// Saves through `k` (on the chief), under the global step.
  basic_model_checkpoint(std::conditional_t<std::is_void_v<Checkpointer>, int, Checkpointer> k,
                         model_checkpoint_options options)
    requires(!std::is_void_v<Checkpointer>)
      : options_(std::move(options)), checkpointer_(std::move(k)) {
    validate();
  }

  /// The checkpointer, when saves go through one.
  [[nodiscard]] auto* save_checkpointer()
    requires(!std::is_void_v<Checkpointer>)
  {
    return &checkpointer_;
  }

 private:
  void validate() {
    if (options_.mode != "auto" && options_.mode != "min" && options_.mode != "max") {
      throw config_error({"train.model_checkpoint"}, "mode: '" + options_.mode + "' is not 'auto', 'min' or 'max'");
    }
    maximise_ = options_.mode == "max" ||
                (options_.mode == "auto" && options_.monitor.find("acc") != std::string::npos);
    // A malformed pattern is refused now, not after an epoch of training (a metric's name is known only then).
    (void)format(options_.filepath, 1, epoch_logs{}, true);
  }

 public:

  /// The files written so far by this worker (empty on workers other than the chief).
  [[nodiscard]] const std::vector<std::filesystem::path>& saved() const { return saved_; }

  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t step, const batch_logs& logs) {
    if (options_.save_freq.per_epoch() || ctx.global_step() % options_.save_freq.steps != 0) return;
    epoch_logs l;
    l.epoch = ctx.epoch;
    l.loss = logs.loss;
    l.accuracy = logs.accuracy;
    l.has_accuracy = logs.has_accuracy;
    l.metrics.assign(logs.metrics.begin(), logs.metrics.end());  // so a step save can monitor and name them too
    l.steps = step + 1;
    consider(ctx, l);
  }

  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int, const epoch_logs& logs) {
    if (options_.save_freq.per_epoch()) consider(ctx, logs);
  }

  /// `pattern` with its fields replaced from `epoch` (1-based, as Keras prints it) and `logs`. `syntax_only`: any
  /// field name is taken (the pattern's form is checked, before the logs exist).
  [[nodiscard]] static std::string format(const std::string& pattern, int epoch, const epoch_logs& logs,
                                          bool syntax_only = false) {
    std::string out;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] != '{') {
        out += pattern[i];
        continue;
      }
      const std::size_t close = pattern.find('}', i);
      if (close == std::string::npos) {
        throw config_error({"train.model_checkpoint"}, "filepath '" + pattern + "': '{' at " + std::to_string(i) +
                                                           " is never closed");
      }
      const std::string field = pattern.substr(i + 1, close - i - 1);
      const std::size_t colon = field.find(':');
      const std::string name = field.substr(0, colon);
      const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
      out += render(pattern, name, spec, epoch, logs, syntax_only);
      i = close;
    }
    return out;
  }

 private:
  template <class Ctx>
  void consider(Ctx& ctx, const epoch_logs& logs) {
    if (!ctx.strategy.is_chief()) return;
    if (options_.save_best_only) {
      const std::optional<double> value = metric(options_.monitor, logs);
      if (!value) {
        // As Keras: a val_* value is missing where nothing was validated (validation_freq > 1, or a save every N
        // steps, whose batch logs have no val_*): this save point is skipped, not an error. Where validation ran,
        // a missing val_* name is a misspelling, and refused below.
        const bool validated = logs.val_loss.has_value() || logs.val_accuracy.has_value();
        if (options_.monitor.rfind("val_", 0) == 0 && !validated) return;
        throw config_error({"train.model_checkpoint", ctx.strategy.replica_id()},
                           "monitor: '" + options_.monitor + "' is not among the logs (" + logged_names(logs) +
                               "; val_* need validation data)");
      }
      if (std::isnan(*value)) return;
      if (best_ && (maximise_ ? *value <= *best_ : *value >= *best_)) return;
      best_ = value;
    }
    const save_model_options what{!options_.save_weights_only, logs.epoch};
    if constexpr (std::is_void_v<Checkpointer>) {
      const std::filesystem::path path = format(options_.filepath, logs.epoch + 1, logs);
      save_model(path, ctx.model, ctx.optimizer, what);
      saved_.push_back(path);
    } else {
      training_state_view s = saved_model_view(ctx.model, ctx.optimizer, what);
      // Saved under the run's global step. At an epoch's end `fit` has already moved the position to step 0 of
      // this epoch: the save is of the next epoch's top.
      position_.capture(ctx);
      if (options_.save_freq.per_epoch() && ctx.step == 0) position_.move_to(logs.epoch + 1, 0);
      s.step = static_cast<std::int64_t>(position_.global_step(ctx.steps_per_epoch));
      s.world_size = ctx.strategy.num_replicas_in_sync();
      saved_.push_back(std::filesystem::path(checkpointer_.save(s, s.step)));
    }
  }

  // The monitored or formatted value: the built-in logs and every metric's (logs.hpp, logged_value).
  static std::optional<double> metric(const std::string& name, const epoch_logs& logs) {
    return logged_value(logs, name);
  }

  // "loss, accuracy, val_loss, val_accuracy, learning_rate" and the metrics' names, for a message.
  static std::string logged_names(const epoch_logs& logs) {
    std::string names = "loss, accuracy, val_loss, val_accuracy, learning_rate";
    for (const named_value& m : logs.metrics) names += ", " + m.name;
    return names;
  }

  static std::string render(const std::string& pattern, const std::string& name, const std::string& spec, int epoch,
                            const epoch_logs& logs, bool syntax_only) {
    auto bad = [&](const std::string& why) {
      return config_error({"train.model_checkpoint"}, "filepath '" + pattern + "': {" + name +
                                                          (spec.empty() ? "" : ":" + spec) + "}: " + why);
    };
    char buf[64];
    if (name == "epoch") {
      if (spec.empty()) return std::to_string(epoch);
      // {epoch:0Nd} or {epoch:Nd}
      if (spec.back() != 'd') throw bad("an epoch takes an integer format such as 02d");
      const std::string width = spec.substr(0, spec.size() - 1);
      if (width.find_first_not_of("0123456789") != std::string::npos) throw bad("bad width");
      const int w = width.empty() ? 0 : std::atoi(width.c_str());
      std::snprintf(buf, sizeof buf, width.starts_with("0") ? "%0*d" : "%*d", w, epoch);
      return buf;
    }
    const std::optional<double> value = metric(name, logs);
    const bool built_in = name == "loss" || name == "accuracy" || name == "val_loss" || name == "val_accuracy" ||
                          name == "learning_rate";
    if (name.empty() || name.find_first_of(" {}:") != std::string::npos) throw bad("not a field name");
    // A metric's name is known from the logs; a val_* one is absent where nothing was validated (written as nan,
    // as the built-in val_loss is).
    const bool validated = logs.val_loss.has_value() || logs.val_accuracy.has_value();
    if (!built_in && !value && !syntax_only && (validated || name.rfind("val_", 0) != 0))
      throw bad("unknown field (epoch, " + logged_names(logs) + ")");
    int precision = 6;
    if (!spec.empty()) {
      if (spec.size() < 3 || spec[0] != '.' || spec.back() != 'f' ||
          spec.substr(1, spec.size() - 2).find_first_not_of("0123456789") != std::string::npos) {
        throw bad("a metric takes a format such as .4f");
      }
      if (spec.size() > 5) throw bad("a precision of at most 100 digits");
      precision = std::atoi(spec.substr(1, spec.size() - 2).c_str());
      if (precision > 100) throw bad("a precision of at most 100 digits");
    }
    if (!value) return "nan";
    return detail::fixed_text(*value, precision);
  }

  model_checkpoint_options options_;
  bool maximise_ = false;
  std::optional<double> best_;
  std::vector<std::filesystem::path> saved_;
  detail::run_state position_;  // where the run is at a save (its memory is reused)
  struct no_checkpointer {};
  [[no_unique_address]] std::conditional_t<std::is_void_v<Checkpointer>, no_checkpointer, Checkpointer> checkpointer_;
};

/// Keras's ModelCheckpoint: files named by `filepath`, written with `save_model`.
using model_checkpoint = basic_model_checkpoint<void>;

}  // namespace mwstrat
