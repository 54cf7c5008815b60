#pragma once
/// \file
/// Keras's CSVLogger: one row per epoch (epoch, loss, accuracy, val_loss, val_accuracy, learning_rate, then each
/// metric of the logs and its val_ form; a value not known in an epoch is an empty cell), written by the chief only
/// and flushed at every epoch so a crashed job keeps what it logged. As in Keras, the columns are fixed by the first
/// epoch's logs, and the header is written then (unless rows are appended to a file that has them).

#include <mwstrat/detail/number_text.hpp>
#include <mwstrat/error.hpp>
#include <mwstrat/train/logs.hpp>

#include <concepts>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// Options of `csv_logger`, with Keras's names and defaults.
struct csv_logger_options {
  char separator = ',';  ///< between the cells of a row
  bool append = false;   ///< keep an existing file's rows (a resumed run); otherwise the file is started afresh
};

/// Writes epoch metrics to a CSV file on the chief.
class csv_logger {
 public:
  /// Never stops training (fit.hpp: no agreement after its hooks).
  static constexpr bool stops_one_worker = false;

  explicit csv_logger(std::string path, csv_logger_options options = {})
      : path_(std::move(path)), options_(options) {}
  /// `append` alone (the form before the options): a bool only, so that a separator string cannot convert to it.
  template <std::same_as<bool> Append>
  csv_logger(std::string path, Append append) : csv_logger(std::move(path), csv_logger_options{',', append}) {}

  template <class Ctx>
  void on_train_begin(Ctx& ctx) {
    if (!ctx.strategy.is_chief()) return;
    had_rows_ = options_.append && std::ifstream(path_).peek() != std::ifstream::traits_type::eof();
    columns_fixed_ = false;  // each fit fixes its own columns (and writes its header, unless appending to rows)
    metric_columns_.clear();
    out_.open(path_, options_.append ? std::ios::app : std::ios::trunc);
    if (!out_) throw io_error({"train.csv_logger", ctx.strategy.replica_id()}, path_ + ": cannot open for writing");
  }

  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int epoch, const epoch_logs& logs) {
    if (!out_.is_open()) return;
    const char sep = options_.separator;
    if (!columns_fixed_) {
      // Each metric of the first epoch and its val_ form, whether or not that epoch validated.
      for (const named_value& m : logs.metrics)
        if (!m.name.starts_with("val_")) {
          metric_columns_.push_back(m.name);
          metric_columns_.push_back("val_" + m.name);
        }
      columns_fixed_ = true;
      accuracy_columns_ = logs.has_accuracy;  // a model of another task than classification has none
      if (!had_rows_) {
        out_ << "epoch" << sep << "loss" << sep;
        if (accuracy_columns_) out_ << "accuracy" << sep;
        out_ << "val_loss" << sep;
        if (accuracy_columns_) out_ << "val_accuracy" << sep;
        out_ << "learning_rate";
        for (const std::string& name : metric_columns_) out_ << sep << name;
        out_ << '\n';
      }
    }
    // Every number as text of its own: the stream's locale would group the epoch ("1.000") or comma the decimals.
    out_ << std::to_string(epoch) << sep << number(logs.loss) << sep;
    if (accuracy_columns_) out_ << number(logs.accuracy) << sep;
    out_ << optional(logs.val_loss) << sep;
    if (accuracy_columns_) out_ << optional(logs.val_accuracy) << sep;
    out_ << optional(logs.learning_rate);
    for (const std::string& name : metric_columns_) out_ << sep << optional(logged_value(logs, name));
    out_ << '\n';
    out_.flush();
    if (!out_) throw io_error({"train.csv_logger", ctx.strategy.replica_id()}, path_ + ": write failed");
  }

  template <class Ctx>
  void on_train_end(Ctx&, const history&) {
    if (out_.is_open()) out_.close();
  }

 private:
  static std::string number(double v) { return detail::general_text(v, 9); }
  static std::string optional(const std::optional<double>& v) { return v ? number(*v) : std::string(); }

  std::string path_;
  csv_logger_options options_;
  bool had_rows_ = false;
  bool columns_fixed_ = false;
  bool accuracy_columns_ = true;  // the accuracy and val_accuracy columns (a classifier's)
  std::vector<std::string> metric_columns_;
  std::ofstream out_;
};

}  // namespace mwstrat
