#pragma once
/// \file
/// The one error hierarchy of mwstrat.
///
/// Every exception the library throws on purpose derives from `mwstrat::error`, and its message always has the
/// same shape, so logs can be grepped and a user can tell at once what failed and where:
///
///     [mwstrat.<component>] rank <r>: <what was wrong>
///
/// e.g. `[mwstrat.ring] rank 1: recv from rank 0 (127.0.0.1:12345): connection reset during all_reduce #42`.
/// "rank <r>: " is left out where no rank is known yet (while reading TF_CONFIG, say).
///
/// Kinds, so a caller can catch only what it can handle:
///   - `config_error`     a cluster description or an option is invalid;
///   - `io_error`         the operating system refused (files, sockets);
///     - `peer_lost_error`  a peer closed its connection or died; names the peer's rank and address;
///     - `protocol_error`   a peer (or a stranger) sent something the protocol forbids;
///   - `timeout_error`    an operation missed its deadline; names the peer waited for where known;
///   - `checkpoint_error` a checkpoint cannot be written or is corrupt; names the file;
///   - `data_error`       an input file or dataset is malformed; names the file.

#include <mwstrat/detail/platform.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace mwstrat {

/// What kind of failure an `error` reports; the same information as its dynamic type, as a value.
enum class error_kind { config, io, peer_lost, protocol, timeout, checkpoint, data };

/// The stable name of an error kind, as used in docs and logs.
[[nodiscard]] constexpr std::string_view to_string(error_kind kind) noexcept {
  switch (kind) {
    case error_kind::config: return "config";
    case error_kind::io: return "io";
    case error_kind::peer_lost: return "peer_lost";
    case error_kind::protocol: return "protocol";
    case error_kind::timeout: return "timeout";
    case error_kind::checkpoint: return "checkpoint";
    case error_kind::data: return "data";
  }
  return "unknown";
}

/// Where an error happened: the component that raised it and, where known, the rank of the raising worker.
struct error_origin {
  std::string component;        ///< e.g. "cluster", "ring", "checkpoint"; printed as "mwstrat.<component>"
  std::optional<int> rank = {};  ///< this worker's rank, if known when the error is raised
};

/// The base of every exception mwstrat throws on purpose.
class error : public std::runtime_error {
 public:
  error(error_kind kind, error_origin origin, std::string_view detail)
      : std::runtime_error(format(origin, detail)),
        kind_(kind),
        component_(std::move(origin.component)),
        rank_(origin.rank),
        detail_(detail) {}

  /// The kind of failure.
  [[nodiscard]] error_kind kind() const noexcept { return kind_; }
  /// The component that raised the error, without the "mwstrat." prefix.
  [[nodiscard]] const std::string& component() const noexcept { return component_; }
  /// The rank of the worker that raised it, if it was known.
  [[nodiscard]] std::optional<int> rank() const noexcept { return rank_; }
  /// The message without its "[mwstrat.component] rank r: " prefix.
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }

  /// Builds the message every mwstrat error carries.
  [[nodiscard]] static std::string format(const error_origin& origin, std::string_view detail) {
    std::string message = "[mwstrat.";
    message += origin.component;
    message += "] ";
    if (origin.rank) {
      message += "rank ";
      message += std::to_string(*origin.rank);
      message += ": ";
    }
    message += detail;
    return message;
  }

 private:
  error_kind kind_;
  std::string component_;
  std::optional<int> rank_;
  std::string detail_;
};

/// A cluster description, an option or an argument is invalid; nothing was started.
class config_error : public error {
 public:
  config_error(error_origin origin, std::string_view detail) : error(error_kind::config, std::move(origin), detail) {}
};

/// A variable of the process environment that mwstrat reads (the ring's MWSTRAT_RING_*, the launcher's protocol:
/// cluster/launcher_environment.hpp) is malformed. It is thrown before anything connects (strategies resolve the
/// environment first), so a program can answer it as it answers a bad argument: the examples exit with status 2.
class environment_error : public config_error {
 public:
  using config_error::config_error;
};

/// The operating system refused a file or socket operation.
class io_error : public error {
 public:
  io_error(error_origin origin, std::string_view detail) : io_error(error_kind::io, std::move(origin), detail) {}

 protected:
  io_error(error_kind kind, error_origin origin, std::string_view detail) : error(kind, std::move(origin), detail) {}
};

/// The exit status of a worker that ends because a peer was lost (`peer_lost_error`): sysexits' EX_UNAVAILABLE,
/// distinct from 1 (any other error), 2 (bad arguments) and 75 (`preempted_exit_code`: stopped for preemption, resume
/// me). The example programs exit with it; a launcher or scheduler can tell "another worker died" from "this worker
/// failed". See docs/fault-tolerance.md.
inline constexpr int peer_lost_exit_code = 69;

/// A peer closed its connection, died, or fell silent (stopped, frozen, cut off: no heartbeat within the ring's
/// liveness timeout). Carries the peer's rank and address; the message ends with the cause ("its connection closed",
/// "silent for N s", "refused"), in the same words on every surviving worker.
class peer_lost_error : public io_error {
 public:
  peer_lost_error(error_origin origin, int peer_rank, std::string peer_address, std::string_view detail)
      : io_error(error_kind::peer_lost, std::move(origin), detail),
        peer_rank_(peer_rank),
        peer_address_(std::move(peer_address)) {}

  /// The rank of the peer that was lost.
  [[nodiscard]] int peer_rank() const noexcept { return peer_rank_; }
  /// The peer's address as configured ("host:port").
  [[nodiscard]] const std::string& peer_address() const noexcept { return peer_address_; }

 private:
  int peer_rank_;
  std::string peer_address_;
};

/// The exit status of a worker that finds it was removed from an elastic job (`removed_error`): the others went on
/// without it while it was stopped or cut off, and it must not rejoin with its stale state. A launcher does not
/// restart it. See docs/fault-tolerance.md ("Elastic training").
inline constexpr int removed_exit_code = 78;

/// This worker is no longer a member of its elastic job: the survivors' verdict named it lost (it was stopped,
/// frozen or cut off past the liveness timeout) and they shrank without it. Exit with `removed_exit_code`.
class removed_error : public peer_lost_error {
 public:
  using peer_lost_error::peer_lost_error;
};

/// A peer, or a stranger on our port, sent bytes the protocol does not allow (bad magic, version, fingerprint,
/// token, frame header). The connection is refused; the job's data is not touched.
class protocol_error : public io_error {
 public:
  protocol_error(error_origin origin, std::string_view detail)
      : io_error(error_kind::protocol, std::move(origin), detail) {}
};

/// An operation missed its deadline. Carries the peer that was waited for, where one is known.
class timeout_error : public error {
 public:
  timeout_error(error_origin origin, std::string_view detail, std::optional<int> peer_rank = {})
      : error(error_kind::timeout, std::move(origin), detail), peer_rank_(peer_rank) {}

  /// The rank of the peer that did not answer in time, if the operation was waiting on one.
  [[nodiscard]] std::optional<int> peer_rank() const noexcept { return peer_rank_; }

 private:
  std::optional<int> peer_rank_;
};

/// A checkpoint cannot be written, or a checkpoint file is missing or corrupt. Carries the file's path.
class checkpoint_error : public error {
 public:
  checkpoint_error(error_origin origin, std::string path, std::string_view detail)
      : error(error_kind::checkpoint, std::move(origin), detail), path_(std::move(path)) {}

  /// The checkpoint file or folder concerned.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// An input file or dataset is malformed or does not fit what was asked of it. Carries the file's path, if any.
class data_error : public error {
 public:
  data_error(error_origin origin, std::string path, std::string_view detail)
      : error(error_kind::data, std::move(origin), detail), path_(std::move(path)) {}

  /// The file concerned; empty for in-memory data.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace mwstrat
