#pragma once
// Helpers for the checkpoint tests: a temporary folder, file bytes in and out, training states to save.

#include <mwstrat/checkpoint.hpp>

#include <support/temp_dir.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace mwstrat::test {

inline std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  for (std::size_t i = 0; i < chars.size(); ++i) out[i] = static_cast<std::byte>(chars[i]);
  return out;
}

inline void write_bytes(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> out(n);
  for (auto& v : out) v = dist(rng);
  return out;
}

/// A small but complete training state: two weights, Adam's two slots for each, every scalar field set.
inline training_state make_state(std::uint32_t seed, std::int64_t step = 7) {
  training_state s;
  s.epoch = 2;
  s.step = step;
  s.cursor = {2, 3, 0xDEADBEEFCAFEF00Dull + seed};
  std::mt19937_64 engine(seed);
  engine.discard(5);
  s.rng_state = rng_state_of(engine);
  s.world_size = 3;
  s.model_fingerprint = "cnn/conv32-dense128-" + std::to_string(seed);
  s.optimizer_iterations = step * 2;
  s.weights.push_back({"conv1/kernel", {3, 3, 1, 4}, random_floats(36, seed)});
  s.weights.push_back({"dense/bias", {5}, random_floats(5, seed + 1)});
  for (const auto& w : std::vector<float_tensor>(s.weights)) {
    s.optimizer_slots.push_back({"m/" + w.name, w.shape, random_floats(w.values.size(), seed + 2)});
    s.optimizer_slots.push_back({"v/" + w.name, w.shape, random_floats(w.values.size(), seed + 3)});
  }
  s.extra["note"] = "unit test";
  return s;
}

/// Runs `f` and returns the checkpoint_error it throws; fails the test if it throws nothing or something else.
template <class F>
checkpoint_error expect_checkpoint_error(F&& f) {
  try {
    f();
  } catch (const checkpoint_error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected checkpoint_error, got: " << e.what();
    return checkpoint_error({"checkpoint"}, "", "wrong exception");
  }
  ADD_FAILURE() << "expected checkpoint_error, nothing was thrown";
  return checkpoint_error({"checkpoint"}, "", "nothing thrown");
}

}  // namespace mwstrat::test
