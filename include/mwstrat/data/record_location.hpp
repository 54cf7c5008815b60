#pragma once
/// \file
/// Where a record lives: its file and the byte offset at which it starts. Every error about a record's framing, its
/// `tf.train.Example` or one of its features names both, in one greppable line:
///
///     [mwstrat.tfrecord] /data/train-00003-of-00008: record at byte 1048576: feature 'label': ...
///
/// The offset is the one `tfrecord_reader` reports for the record (for a compressed file, the offset in the
/// uncompressed record stream, which is where TensorFlow's readers count too).

#include <mwstrat/error.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace mwstrat::data {

/// A record's file and the offset of its first byte (its length field).
struct record_location {
  std::string file;          ///< the file's path as given to the reader
  std::uint64_t offset = 0;  ///< byte offset of the record in the (uncompressed) record stream
};

/// "<file>: record at byte <offset>", the start of every message about the record.
[[nodiscard]] inline std::string describe(const record_location& at) {
  return at.file + ": record at byte " + std::to_string(at.offset);
}

/// A `data_error` about the record at `at`: "<file>: record at byte <offset>: <what>", component `component`.
[[nodiscard]] inline data_error record_error(const record_location& at, std::string_view what,
                                             std::string component = "tfrecord") {
  std::string message = describe(at);
  message += ": ";
  message += what;
  return data_error({std::move(component)}, at.file, message);
}

/// A `data_error` about feature `feature` of the record at `at`: "... record at byte N: feature '<name>': <what>".
[[nodiscard]] inline data_error feature_error(const record_location& at, std::string_view feature_name,
                                              std::string_view what, std::string component = "tfrecord") {
  std::string message = "feature '";
  message += feature_name;
  message += "': ";
  message += what;
  return record_error(at, message, std::move(component));
}

}  // namespace mwstrat::data
