#pragma once
/// \file
/// Keras's TensorBoard callback, scalars only: at the end of every epoch `epoch_loss`, `epoch_accuracy` and
/// `epoch_learning_rate` (when the optimizer has one) in `<log_dir>/train`, and `epoch_loss`, `epoch_accuracy` of
/// the validation in `<log_dir>/validation`, at step = epoch; with `update_freq` N > 0 also `batch_loss` (this
/// global batch), `batch_accuracy` (the epoch so far, as Keras's running metric) and `batch_learning_rate` every N
/// global steps, at step = the global step. Written by the chief only, in TensorBoard's own event-file format
/// (train/detail/event_file.hpp), so `tensorboard --logdir <log_dir>` shows the run.
///
///     mwstrat::tensorboard tb({.log_dir = "logs/run1", .update_freq = 100});
///     mwstrat::fit(strategy, model, optimizer, data, options, tb);

#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/detail/event_file.hpp>
#include <mwstrat/train/logs.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

/// Keras's TensorBoard arguments that apply to scalars.
struct tensorboard_options {
  std::filesystem::path log_dir = "logs";  ///< empty: the callback writes nothing (a flag left unset)
  std::size_t update_freq = 0;  ///< 0: per epoch only (Keras's "epoch"); N: also every N global steps
};

/// The TensorBoard callback (see the file comment).
class tensorboard {
 public:
  /// Never stops training: fit need not agree on a stop after each step because of it (fit.hpp).
  static constexpr bool stops_one_worker = false;

  explicit tensorboard(tensorboard_options options = {}) : options_(std::move(options)) {}

  template <class Ctx>
  void on_train_begin(Ctx& ctx) {
    if (!ctx.strategy.is_chief() || options_.log_dir.empty()) return;
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    host_ = host[0] != '\0' ? host : "localhost";
    train_.emplace(options_.log_dir / "train", host_);
  }

  template <class Ctx>
  void on_train_batch_end(Ctx& ctx, std::size_t, const batch_logs& logs) {
    if (!train_ || options_.update_freq == 0) return;
    const std::uint64_t step = ctx.global_step();  // already counts this batch
    if (step % options_.update_freq != 0) return;
    std::vector<std::pair<std::string, double>> v{{"batch_loss", logs.batch_loss}};
    if (logs.has_accuracy) v.emplace_back("batch_accuracy", logs.accuracy);
    if constexpr (has_learning_rate<std::remove_cvref_t<decltype(ctx.optimizer)>>)
      v.emplace_back("batch_learning_rate", static_cast<double>(ctx.optimizer.learning_rate()));
    for (const named_value& m : logs.metrics) v.emplace_back("batch_" + m.name, m.value);
    train_->scalars(static_cast<std::int64_t>(step), v);
  }

  template <class Ctx>
  void on_epoch_end(Ctx&, int epoch, const epoch_logs& logs) {
    if (!train_) return;
    std::vector<std::pair<std::string, double>> v{{"epoch_loss", logs.loss}};
    if (logs.has_accuracy) v.emplace_back("epoch_accuracy", logs.accuracy);
    if (logs.learning_rate) v.emplace_back("epoch_learning_rate", *logs.learning_rate);
    std::vector<std::pair<std::string, double>> w;
    if (logs.val_loss) w.emplace_back("epoch_loss", *logs.val_loss);
    if (logs.val_accuracy) w.emplace_back("epoch_accuracy", *logs.val_accuracy);
    // The metrics given to fit, by name; their validation values (val_ + name) go to the validation run, as Keras.
    for (const named_value& m : logs.metrics) {
      const std::string_view name = m.name;
      if (name.starts_with("val_")) {
        w.emplace_back("epoch_" + std::string(name.substr(4)), m.value);
      } else {
        v.emplace_back("epoch_" + std::string(name), m.value);
      }
    }
    train_->scalars(epoch, v);
    if (!w.empty()) {
      if (!validation_) validation_.emplace(options_.log_dir / "validation", host_);
      validation_->scalars(epoch, w);
    }
  }

  /// The training events file (empty on a worker that is not the chief, or before training).
  [[nodiscard]] std::filesystem::path train_file() const { return train_ ? train_->path() : std::filesystem::path{}; }

 private:
  tensorboard_options options_;
  std::string host_;
  std::optional<detail::event_file_writer> train_;
  std::optional<detail::event_file_writer> validation_;
};

}  // namespace mwstrat
