#pragma once
/// \file
/// TF_CONFIG: TensorFlow's JSON cluster description, read into a `cluster_config`.
///
///     {"cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"],
///                  "evaluator": ["host3:2222"]},
///      "task": {"type": "worker", "index": 1},
///      "rpc_layer": "grpc"}
///
/// - No TF_CONFIG, an empty or all-blank one, or `{}` means a single local worker, as in TensorFlow.
/// - `cluster` and `task` go together: one without the other is an error.
/// - Unknown keys are errors that list the allowed keys (a typo such as "clsuter" must not silently turn a
///   four-worker job into four single workers). Keys that TensorFlow's own launchers write and that mean
///   nothing to mwstrat are accepted and ignored: top-level `environment` and `job`, `task.trial`, `task.cloud`.
/// - `task.index` is a non-negative integer, or a string of decimal digits (TensorFlow reads it with int()).
/// - When a key appears twice in one object, the last one counts (as with Python's json, which TensorFlow uses).
/// Every error is a `config_error` that names the source ("TF_CONFIG"), the JSON path and the offending value:
/// `[mwstrat.cluster] TF_CONFIG: task.index: 3 is out of range for 'worker' (2 tasks)`. docs/cluster.md lists
/// them all.

#include <mwstrat/cluster/cluster_config.hpp>
#include <mwstrat/cluster/cluster_spec.hpp>
#include <mwstrat/cluster/concepts.hpp>
#include <mwstrat/cluster/detail/diagnostics.hpp>
#include <mwstrat/cluster/detail/json.hpp>
#include <mwstrat/cluster/environment.hpp>
#include <mwstrat/cluster/task_info.hpp>

#include <boost/json.hpp>

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mwstrat {

namespace detail {

inline void reject_unknown_keys(const boost::json::object& object, std::string_view source, std::string_view path,
                                std::initializer_list<std::string_view> allowed,
                                std::initializer_list<std::string_view> meaningful) {
  for (const auto& entry : object) {
    const std::string_view key(entry.key().data(), entry.key().size());
    bool known = false;
    for (const std::string_view name : allowed) known = known || key == name;
    if (!known) {
      throw_cluster_error(source, path_member(path, key),
                          "unknown key " + quote(key, 40) + " (allowed: " + join_names(meaningful) + ")" +
                              did_you_mean(key, meaningful));
    }
  }
}

[[nodiscard]] inline bool is_blank(std::string_view text) {
  for (const char c : text) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return false;
  }
  return true;
}

[[nodiscard]] inline cluster_spec tf_config_cluster(const boost::json::value& value, std::string_view source) {
  const auto* object = value.if_object();
  if (object == nullptr) {
    throw_cluster_error(source, "cluster",
                        render_json(value) + " is " + json_kind(value) +
                            ", not an object; expected {\"worker\": [\"host:port\", ...]}");
  }
  std::map<std::string, std::vector<std::string>> jobs;
  for (const auto& entry : *object) {
    const std::string_view name(entry.key().data(), entry.key().size());
    const std::string path = path_member("cluster", name);
    if (auto why = job_rejection(name); !why.empty()) throw_cluster_error(source, path, quote(name, 40) + " " + why);
    const auto* list = entry.value().if_array();
    if (list == nullptr) {
      throw_cluster_error(source, path,
                          render_json(entry.value()) + " is " + json_kind(entry.value()) +
                              ", not a list of addresses; expected [\"host:port\", ...]");
    }
    std::vector<std::string> addresses;
    addresses.reserve(list->size());
    for (std::size_t i = 0; i < list->size(); ++i) {
      const auto* text = (*list)[i].if_string();
      if (text == nullptr) {
        throw_cluster_error(source, path_index(path, i),
                            render_json((*list)[i]) + " is " + json_kind((*list)[i]) +
                                ", not an address; expected a string \"host:port\"");
      }
      addresses.emplace_back(text->data(), text->size());
    }
    jobs.emplace(std::string(name), std::move(addresses));
  }
  return cluster_spec::from_jobs(jobs, source, "cluster");
}

// task.index as TensorFlow reads it (int(...)): an integer, or a string of decimal digits.
[[nodiscard]] inline int tf_config_task_index(const boost::json::value& value, std::string_view source,
                                              std::string_view type, const cluster_spec& spec) {
  const auto out_of_range = [&](std::string_view shown) {
    const int tasks = spec.num_tasks(type);
    throw_cluster_error(source, "task.index",
                        std::string(shown) + " is out of range for '" + escape(type, 40) + "' (" +
                            std::to_string(tasks) + (tasks == 1 ? " task)" : " tasks)"));
  };
  if (const auto* i = value.if_int64()) {
    if (*i < 0) throw_cluster_error(source, "task.index", std::to_string(*i) + " is negative; task indices start at 0");
    if (*i > INT_MAX) out_of_range(std::to_string(*i));
    return static_cast<int>(*i);
  }
  if (const auto* u = value.if_uint64()) out_of_range(std::to_string(*u));
  if (const auto* text = value.if_string()) {
    const std::string_view digits(text->data(), text->size());
    bool ok = !digits.empty();
    for (const char c : digits) ok = ok && c >= '0' && c <= '9';
    if (!ok) {
      throw_cluster_error(source, "task.index",
                          render_json(value) + " is not an integer; write the task's 0-based index, e.g. 0");
    }
    std::int64_t parsed = 0;
    for (const char c : digits) {
      parsed = parsed * 10 + (c - '0');
      if (parsed > INT_MAX) out_of_range(render_json(value));
    }
    return static_cast<int>(parsed);
  }
  throw_cluster_error(source, "task.index",
                      render_json(value) + " is " + json_kind(value) +
                          ", not an integer; write the task's 0-based index, e.g. 0");
}

[[nodiscard]] inline bool is_protocol_name(std::string_view text) {
  if (text.empty() || text.size() > 32) return false;
  const auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!letter(text.front())) return false;
  for (const char c : text) {
    if (!letter(c) && !(c >= '0' && c <= '9') && c != '+' && c != '-' && c != '.') return false;
  }
  return true;
}

}  // namespace detail

/// Parses a TF_CONFIG document. `source` names it in error messages ("TF_CONFIG", a file name, ...).
/// Blank text or `{}` gives a single local worker. Throws `config_error` (component "cluster") on any defect.
[[nodiscard]] inline cluster_config parse_tf_config(std::string_view text, std::string_view source = "TF_CONFIG") {
  const std::string name(source);
  if (detail::is_blank(text)) return cluster_config::local(name + " (empty)");
  const boost::json::value document = detail::parse_json_document(text, source);
  const auto* root = document.if_object();
  if (root == nullptr) {
    detail::throw_cluster_error(source, {},
                                detail::render_json(document) + " is " + detail::json_kind(document) +
                                    ", not a JSON object; expected {\"cluster\": {...}, \"task\": {...}}");
  }
  detail::reject_unknown_keys(*root, source, {}, {"cluster", "task", "rpc_layer", "environment", "job"}, {"cluster", "task", "rpc_layer"});

  std::string rpc_layer;
  if (const auto* value = root->if_contains("rpc_layer")) {
    const auto* text_value = value->if_string();
    if (text_value == nullptr || !detail::is_protocol_name(std::string_view(text_value->data(), text_value->size()))) {
      detail::throw_cluster_error(source, "rpc_layer",
                                  detail::render_json(*value) +
                                      " is not a protocol name; write e.g. \"grpc\" or leave rpc_layer out");
    }
    rpc_layer.assign(text_value->data(), text_value->size());
  }

  const auto* cluster = root->if_contains("cluster");
  const auto* task = root->if_contains("task");
  if (cluster == nullptr && task == nullptr) {
    return detail::cluster_config_access::make_local(std::move(rpc_layer), name + " (no cluster)");
  }
  if (cluster == nullptr) {
    detail::throw_cluster_error(source, "cluster",
                                "missing, but task " + detail::render_json(*task) +
                                    " is given; add \"cluster\": {\"worker\": [\"host:port\", ...]}");
  }
  cluster_spec spec = detail::tf_config_cluster(*cluster, source);
  if (task == nullptr) {
    detail::throw_cluster_error(source, "task",
                                "missing; add \"task\": {\"type\": \"worker\", \"index\": <this worker's index>}");
  }
  const auto* task_object = task->if_object();
  if (task_object == nullptr) {
    detail::throw_cluster_error(source, "task",
                                detail::render_json(*task) + " is " + detail::json_kind(*task) +
                                    ", not an object; expected {\"type\": \"worker\", \"index\": 0}");
  }
  detail::reject_unknown_keys(*task_object, source, "task", {"type", "index", "trial", "cloud"}, {"type", "index"});
  const auto* type_value = task_object->if_contains("type");
  if (type_value == nullptr) {
    detail::throw_cluster_error(source, "task.type", "missing; expected \"chief\", \"worker\" or \"evaluator\"");
  }
  const auto* type_text = type_value->if_string();
  if (type_text == nullptr) {
    detail::throw_cluster_error(source, "task.type",
                                detail::render_json(*type_value) + " is " + detail::json_kind(*type_value) +
                                    ", not a job name; expected \"chief\", \"worker\" or \"evaluator\"");
  }
  std::string type(type_text->data(), type_text->size());
  const auto* index_value = task_object->if_contains("index");
  if (index_value == nullptr) {
    detail::throw_cluster_error(source, "task.index",
                                "missing; expected this task's 0-based position in cluster." +
                                    detail::escape(type, 40));
  }
  // The job is checked before the index, so that "ps" says why before "index out of range" could.
  if (auto why = detail::job_rejection(type); !why.empty()) {
    detail::throw_cluster_error(source, "task.type", detail::quote(type, 40) + " " + why);
  }
  const int index = detail::tf_config_task_index(*index_value, source, type, spec);
  return detail::cluster_config_access::make(std::move(spec), task_info{std::move(type), index},
                                             std::move(rpc_layer), name, "task.type", "task.index");
}

/// The TF_CONFIG text that describes `spec` with this process as `task` (what a launcher exports to each
/// worker). The empty spec gives "{}" (a local worker). Parsing the result gives back the same configuration.
[[nodiscard]] inline std::string make_tf_config(const cluster_spec& spec, const task_info& task,
                                                std::string_view rpc_layer = {}) {
  if (spec.empty()) {
    if (rpc_layer.empty()) return "{}";
    boost::json::object root;
    root["rpc_layer"] = rpc_layer;
    return boost::json::serialize(root);
  }
  boost::json::object jobs;
  for (const auto& [name, list] : spec.jobs()) {
    boost::json::array addresses;
    for (const address& a : list) addresses.emplace_back(a.to_string());
    jobs[name] = std::move(addresses);
  }
  boost::json::object root;
  root["cluster"] = std::move(jobs);
  root["task"] = boost::json::object{{"type", task.type}, {"index", task.index}};
  if (!rpc_layer.empty()) root["rpc_layer"] = rpc_layer;
  return boost::json::serialize(root);
}

/// `make_tf_config(config.spec(), config.task(), config.rpc_layer())`.
[[nodiscard]] inline std::string make_tf_config(const cluster_config& config) {
  return make_tf_config(config.spec(), config.task(), config.rpc_layer());
}

/// Resolves the cluster from TF_CONFIG: the `TF_CONFIG` environment variable (read at `resolve()` time), a
/// given environment, or a given text.
class tf_config_resolver {
 public:
  /// Reads `TF_CONFIG` from the process environment when `resolve()` is called.
  tf_config_resolver() = default;

  /// Reads `TF_CONFIG` from `env` (tests, launchers).
  explicit tf_config_resolver(environment env) : env_(std::move(env)) {}

  /// Parses `text` instead of any environment; `source` names it in messages (e.g. a file's path).
  [[nodiscard]] static tf_config_resolver from_string(std::string text, std::string source = "TF_CONFIG") {
    tf_config_resolver resolver;
    resolver.text_ = std::move(text);
    resolver.source_ = std::move(source);
    return resolver;
  }

  /// The cluster as TF_CONFIG describes it; a single local worker when TF_CONFIG is not set or blank.
  [[nodiscard]] cluster_config resolve() const {
    if (text_) return parse_tf_config(*text_, source_);
    const std::optional<std::string> value = env_.get("TF_CONFIG");
    if (!value) return cluster_config::local(source_ + " (not set)");
    return parse_tf_config(*value, source_);
  }

  /// Where the configuration comes from ("TF_CONFIG" unless given otherwise).
  [[nodiscard]] std::string_view name() const noexcept { return source_; }

 private:
  environment env_;
  std::optional<std::string> text_;
  std::string source_ = "TF_CONFIG";
};

static_assert(cluster_resolver<tf_config_resolver>);

}  // namespace mwstrat
