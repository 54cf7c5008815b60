#pragma once
// JSON reading for the cluster family: a parse that reports line, column and the text at the error, and
// rendering of offending values for messages. Boost.JSON stays inside cluster/ (and checkpoint/).

#include <mwstrat/cluster/detail/diagnostics.hpp>

#include <boost/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace mwstrat::detail {

/// A JSON value as a message shows it: strings quoted and escaped, everything else serialized; both cut short.
[[nodiscard]] inline std::string render_json(const boost::json::value& value) {
  if (const auto* text = value.if_string()) return quote(std::string_view(text->data(), text->size()));
  if (const auto* list = value.if_array(); list != nullptr && list->empty()) return "[]";
  if (const auto* object = value.if_object(); object != nullptr && object->empty()) return "{}";
  // Serialize at most a bounded prefix: a huge array must not cost a huge message.
  boost::json::serializer writer;
  writer.reset(&value);
  char buffer[cluster_quote_limit];
  const std::string_view head = writer.read(buffer, sizeof buffer);
  return escape(head, head.size(), false) + (writer.done() ? "" : "...");
}

/// The JSON kind of a value in words ("a string", "an array", ...), for "expected X, got Y" messages.
[[nodiscard]] inline const char* json_kind(const boost::json::value& value) {
  switch (value.kind()) {
    case boost::json::kind::null: return "JSON null";
    case boost::json::kind::bool_: return "a boolean";
    case boost::json::kind::int64:
    case boost::json::kind::uint64: return "an integer";
    case boost::json::kind::double_: return "a number";
    case boost::json::kind::string: return "a string";
    case boost::json::kind::array: return "an array";
    case boost::json::kind::object: return "an object";
  }
  return "a value";
}

/// Parses one JSON document; throws config_error "<source>: not valid JSON: <why> at line L, column C near ..."
[[nodiscard]] inline boost::json::value parse_json_document(std::string_view text, std::string_view source) {
  boost::json::parse_options options;
  options.max_depth = 64;
  boost::json::stream_parser parser({}, options);
  boost::system::error_code ec;
  std::size_t offset = parser.write(text.data(), text.size(), ec);
  if (!ec) {
    parser.finish(ec);
    if (ec) offset = text.size();
  }
  if (ec) {
    offset = offset > text.size() ? text.size() : offset;
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    std::string what = "not valid JSON: " + ec.message() + " at line " + std::to_string(line) + ", column " +
                       std::to_string(offset - line_start + 1);
    if (offset < text.size()) {
      what += " near " + quote(text.substr(offset), 24);
    } else {
      what += " (end of input)";
    }
    throw_cluster_error(source, {}, what);
  }
  return parser.release();
}

}  // namespace mwstrat::detail
