// libFuzzer target: the TF_CONFIG parser, the address parser and the Slurm host list must turn any input into
// either a valid configuration or a mwstrat::error. Any other exception is a crash. A valid configuration must
// also hold its invariants and survive a round trip through make_tf_config.
#include <mwstrat/cluster.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

namespace {

[[noreturn]] void crash(const char* what, const char* detail) {
  std::fprintf(stderr, "fuzz_tf_config: %s: %s\n", what, detail);
  std::abort();
}

void check(bool condition, const char* what) {
  if (!condition) crash("invariant broken", what);
}

void check_config(const mwstrat::cluster_config& c) {
  check(c.world_size() >= 1, "world_size >= 1");
  check(c.rank() >= 0 && c.rank() < c.world_size(), "0 <= rank < world_size");
  check(c.num_workers() >= 1, "num_workers >= 1");
  if (c.is_local()) {
    check(c.is_chief() && c.world_size() == 1, "local worker is a chief alone");
    return;
  }
  const auto addresses = c.spec().training_addresses();
  check(static_cast<int>(addresses.size()) == c.spec().num_workers(), "one address per training task");
  if (c.is_training_task()) {
    check(c.spec().task_at_rank(c.rank()) == c.task(), "rank maps back to the task");
    check(c.self_address().has_value(), "a training task has an address");
    check(c.is_chief() == (c.rank() == 0), "the chief is rank 0");
  }
  for (const std::string& a : addresses) check(mwstrat::parse_address(a).to_string() == a, "canonical address");
  const mwstrat::cluster_config again = mwstrat::parse_tf_config(mwstrat::make_tf_config(c));
  check(again == c, "make_tf_config round trip");
  check(again.spec().fingerprint() == c.spec().fingerprint(), "fingerprint is stable");
}

template <class F>
void guarded(const char* stage, F&& f) {
  try {
    f();
  } catch (const mwstrat::error&) {
    // Expected for malformed input.
  } catch (const std::exception& e) {
    crash(stage, e.what());
  } catch (...) {
    crash(stage, "an exception that is not a std::exception");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  guarded("parse_tf_config", [&] { check_config(mwstrat::parse_tf_config(text)); });
  // The same bytes as an address, inside a cluster (deep validation even for inputs that are not JSON), and as a
  // Slurm host list.
  guarded("parse_address", [&] { (void)mwstrat::parse_address(text); });
  guarded("address in TF_CONFIG", [&] {
    std::string quoted;
    for (const char ch : text) {
      const auto u = static_cast<unsigned char>(ch);
      if (u < 0x20 || u >= 0x7f) continue;  // keep the document valid JSON
      if (ch == '"' || ch == '\\') quoted += '\\';
      quoted += ch;
    }
    check_config(mwstrat::parse_tf_config(R"({"cluster": {"worker": ["a:1", ")" + quoted +
                                          R"("]}, "task": {"type": "worker", "index": 1}})"));
  });
  guarded("expand_hostlist", [&] {
    const auto hosts = mwstrat::expand_hostlist(text);
    check(!hosts.empty() && hosts.size() <= mwstrat::max_hostlist_hosts, "host count bounded");
  });
  guarded("expand_tasks_per_node", [&] { (void)mwstrat::expand_tasks_per_node(text); });
  return 0;
}
