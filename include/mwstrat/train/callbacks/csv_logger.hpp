#pragma once
/// \file
/// Keras's CSVLogger: one row per epoch (epoch, loss, accuracy, and val_*/learning_rate when known), written by
/// the chief only and flushed at every epoch so a crashed job keeps what it logged.

#include <mwstrat/error.hpp>
#include <mwstrat/train/logs.hpp>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

namespace mwstrat {

/// Writes epoch metrics to a CSV file on the chief.
class csv_logger {
 public:
  /// Never stops training (fit.hpp: no agreement after its hooks).
  static constexpr bool stops_one_worker = false;

  /// `append` keeps an existing file's rows (a resumed run); otherwise the file is started afresh.
  explicit csv_logger(std::string path, bool append = false) : path_(std::move(path)), append_(append) {}

  template <class Ctx>
  void on_train_begin(Ctx& ctx) {
    if (!ctx.strategy.is_chief()) return;
    const bool had_rows = append_ && std::ifstream(path_).peek() != std::ifstream::traits_type::eof();
    out_.open(path_, append_ ? std::ios::app : std::ios::trunc);
    if (!out_) throw io_error({"train.csv_logger", ctx.strategy.replica_id()}, path_ + ": cannot open for writing");
    if (!had_rows) out_ << "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate\n";
  }

  template <class Ctx>
  void on_epoch_end(Ctx& ctx, int epoch, const epoch_logs& logs) {
    if (!out_.is_open()) return;
    out_ << epoch << ',' << number(logs.loss) << ',' << number(logs.accuracy) << ',' << optional(logs.val_loss)
         << ',' << optional(logs.val_accuracy) << ',' << optional(logs.learning_rate) << '\n';
    out_.flush();
    if (!out_) throw io_error({"train.csv_logger", ctx.strategy.replica_id()}, path_ + ": write failed");
  }

  template <class Ctx>
  void on_train_end(Ctx&, const history&) {
    if (out_.is_open()) out_.close();
  }

 private:
  static std::string number(double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
  }
  static std::string optional(const std::optional<double>& v) { return v ? number(*v) : std::string(); }

  std::string path_;
  bool append_;
  std::ofstream out_;
};

}  // namespace mwstrat
