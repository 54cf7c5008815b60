// libFuzzer target over the checkpoint readers: arbitrary bytes must give either a valid view or a
// checkpoint_error. Any other exception escapes to libFuzzer (a failure); ASan/UBSan catch the rest.
#include <mwstrat/checkpoint/safetensors.hpp>
#include <mwstrat/checkpoint/training_state.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto view = mwstrat::safetensors_view::parse(bytes, "fuzz");
    // Touch every byte each view claims, so a view outside the input is caught by ASan.
    unsigned sum = 0;
    for (const auto& t : view.tensors()) {
      for (const std::byte b : t.data) sum += static_cast<unsigned>(b);
      if (t.element_count() * mwstrat::size_of(t.type) != t.data.size()) __builtin_trap();
    }
    for (const auto& [key, value] : view.metadata()) sum += static_cast<unsigned>(key.size() + value.size());
    static volatile unsigned sink = 0;
    sink = sink + sum;
  } catch (const mwstrat::checkpoint_error&) {
  }
  try {
    const auto state = mwstrat::decode_training_state(bytes, "fuzz");
    std::size_t total = 0;
    for (const auto& w : state.weights) total += w.values.size();
    for (const auto& s : state.optimizer_slots) total += s.values.size();
    if (total * sizeof(float) > size) __builtin_trap();
  } catch (const mwstrat::checkpoint_error&) {
  }
  return 0;
}
