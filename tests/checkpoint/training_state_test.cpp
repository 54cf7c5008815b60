#include "checkpoint_test_util.hpp"

#include <mwstrat/checkpoint/training_state.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace training_state_test {

using namespace mwstrat;
using mwstrat::test::expect_checkpoint_error;
using mwstrat::test::make_state;
using mwstrat::test::read_bytes;
using mwstrat::test::temp_dir;
using mwstrat::test::write_bytes;

TEST(training_state, round_trip_restores_every_field) {
  temp_dir dir;
  const training_state state = make_state(1);
  save_training_state(dir / "s.safetensors", state);
  const training_state loaded = load_training_state(dir / "s.safetensors");
  EXPECT_EQ(loaded.epoch, state.epoch);
  EXPECT_EQ(loaded.step, state.step);
  EXPECT_EQ(loaded.cursor, state.cursor);
  EXPECT_EQ(loaded.rng_state, state.rng_state);
  EXPECT_EQ(loaded.world_size, state.world_size);
  EXPECT_EQ(loaded.model_fingerprint, state.model_fingerprint);
  EXPECT_EQ(loaded.optimizer_iterations, state.optimizer_iterations);
  EXPECT_EQ(loaded.weights, state.weights);
  EXPECT_EQ(loaded.optimizer_slots, state.optimizer_slots);
  EXPECT_EQ(loaded.extra, state.extra);
  EXPECT_TRUE(loaded == state);
}

TEST(training_state, rng_state_restores_the_exact_sequence) {
  std::mt19937_64 engine(99);
  engine.discard(1000);
  training_state state = make_state(2);
  state.rng_state = rng_state_of(engine);
  temp_dir dir;
  save_training_state(dir / "s", state);
  std::mt19937_64 restored;
  restore_rng(restored, load_training_state(dir / "s").rng_state);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(restored(), engine());
  expect_checkpoint_error([&] { restore_rng(restored, "not numbers"); });
}

TEST(training_state, edge_sizes_round_trip) {
  temp_dir dir;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1'000'003}}) {
    training_state state;
    state.weights.push_back({"w", {static_cast<std::int64_t>(n)}, mwstrat::test::random_floats(n, 5)});
    state.weights.push_back({"scalar", {}, {2.5f}});
    state.weights.push_back({"empty_a", {0}, {}});
    state.weights.push_back({"empty_b", {2, 0}, {}});
    state.optimizer_slots.push_back({"m/w", {static_cast<std::int64_t>(n)}, std::vector<float>(n, 0.25f)});
    save_training_state(dir / "s", state);
    EXPECT_TRUE(load_training_state(dir / "s") == state) << "n = " << n;
  }
}

TEST(training_state, same_state_gives_byte_identical_files) {
  temp_dir dir;
  save_training_state(dir / "a", make_state(3));
  save_training_state(dir / "b", make_state(3));
  EXPECT_EQ(read_bytes(dir / "a"), read_bytes(dir / "b"));
  EXPECT_EQ(read_bytes(dir / "a"), encode_training_state(make_state(3)));
  save_training_state(dir / "c", make_state(4));
  EXPECT_NE(read_bytes(dir / "a"), read_bytes(dir / "c"));
}

TEST(training_state, a_view_saves_the_same_bytes_as_the_owning_state) {
  temp_dir dir;
  const training_state state = make_state(5);
  save_training_state(dir / "owning", state);
  // A trainer's parameters in one arena, viewed in place.
  std::vector<float> arena;
  for (const auto& w : state.weights) arena.insert(arena.end(), w.values.begin(), w.values.end());
  training_state_view view = view_of(state);
  std::size_t offset = 0;
  for (auto& w : view.weights) {
    w.values = std::span<const float>(arena).subspan(offset, w.values.size());
    offset += w.values.size();
  }
  save_training_state(dir / "view", view);
  EXPECT_EQ(read_bytes(dir / "owning"), read_bytes(dir / "view"));
}

TEST(training_state, loading_into_an_existing_state_reuses_its_storage) {
  temp_dir dir;
  save_training_state(dir / "s", make_state(6));
  training_state into = load_training_state(dir / "s");
  const float* before = into.weights[0].values.data();
  save_training_state(dir / "s2", make_state(7));
  load_training_state(dir / "s2", into);
  EXPECT_EQ(into.weights[0].values.data(), before);
  EXPECT_TRUE(into == make_state(7));
}

TEST(training_state, a_snapshot_is_an_independent_copy_that_reuses_its_storage) {
  training_state source = make_state(8);
  training_state snapshot;
  snapshot_into(view_of(source), snapshot);
  EXPECT_TRUE(snapshot == source);
  const training_state expected = source;
  source.weights[0].values[0] += 1.0f;  // training goes on changing the values the view points at
  source.optimizer_slots.back().values.back() = -7.0f;
  EXPECT_TRUE(snapshot == expected) << "the snapshot does not alias the source";
  EXPECT_FALSE(snapshot == source);

  const float* weights_storage = snapshot.weights[0].values.data();
  const float* slot_storage = snapshot.optimizer_slots.back().values.data();
  snapshot_into(view_of(source), snapshot);
  EXPECT_TRUE(snapshot == source);
  EXPECT_EQ(snapshot.weights[0].values.data(), weights_storage) << "a second snapshot of the same shapes reuses it";
  EXPECT_EQ(snapshot.optimizer_slots.back().values.data(), slot_storage);

  training_state other = make_state(9, 40);  // fewer tensors and other fields: still an exact copy
  other.weights.pop_back();
  other.optimizer_slots.resize(1);
  other.extra.clear();
  snapshot_into(view_of(other), snapshot);
  EXPECT_TRUE(snapshot == other);
}

TEST(training_state, decode_of_encoded_bytes_round_trips) {
  const training_state state = make_state(8);
  const auto bytes = encode_training_state(state);
  EXPECT_TRUE(decode_training_state(bytes) == state);
}

TEST(training_state, invalid_states_are_refused_and_nothing_is_written) {
  temp_dir dir;
  const auto target = dir / "s";
  save_training_state(target, make_state(9));
  const auto before = read_bytes(target);
  {
    training_state bad = make_state(9);
    bad.weights[0].shape = {5, 5};
    expect_checkpoint_error([&] { save_training_state(target, bad); });
  }
  {
    training_state bad = make_state(9);
    bad.extra["mwstrat.epoch"] = "1";
    expect_checkpoint_error([&] { save_training_state(target, bad); });
  }
  {
    training_state bad = make_state(9);
    bad.weights[0].name = "optimizer/x";
    expect_checkpoint_error([&] { save_training_state(target, bad); });
  }
  {
    training_state bad = make_state(9);
    bad.optimizer_slots.push_back(bad.optimizer_slots[0]);  // duplicate name
    expect_checkpoint_error([&] { save_training_state(target, bad); });
  }
  EXPECT_EQ(read_bytes(target), before);
}

TEST(training_state, plain_safetensors_files_are_not_training_states) {
  temp_dir dir;
  std::vector<float> v{1, 2};
  std::vector<std::int32_t> i{1};
  save_safetensors(dir / "plain", std::vector{make_tensor_entry<float>("w", v)});
  auto e = expect_checkpoint_error([&] { (void)load_training_state(dir / "plain"); });
  EXPECT_NE(e.detail().find("not a training state"), std::string::npos) << e.what();

  save_safetensors(dir / "ints", std::vector{make_tensor_entry<std::int32_t>("i", i)},
                   {{"mwstrat.format", "training_state/1"}});
  e = expect_checkpoint_error([&] { (void)load_training_state(dir / "ints"); });
  EXPECT_NE(e.detail().find("has no mwstrat.epoch"), std::string::npos) << e.what();

  training_state state = make_state(1);
  const auto bytes = encode_training_state(state);
  // A wrong format version is named.
  metadata_map meta;
  meta["mwstrat.format"] = "training_state/999";
  save_safetensors(dir / "future", std::vector{make_tensor_entry<float>("w", v)}, meta);
  e = expect_checkpoint_error([&] { (void)load_training_state(dir / "future"); });
  EXPECT_NE(e.detail().find("training_state/999"), std::string::npos) << e.what();
}

TEST(training_state, truncated_and_bit_flipped_files_are_refused) {
  temp_dir dir;
  training_state state = make_state(10);
  state.rng_state = "5489 17";  // a short RNG string keeps the exhaustive sweep below fast
  const auto bytes = encode_training_state(state);
  ASSERT_LT(bytes.size(), 1500u);
  const auto path = dir / "bad";
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    expect_checkpoint_error([&] { (void)decode_training_state(std::span(bytes).first(length)); });
    if (length % 29 == 0) {  // the file path too, on a sample (file writes are slow on a busy disk)
      write_bytes(path, std::span(bytes).first(length));
      const auto e = expect_checkpoint_error([&] { (void)load_training_state(path); });
      EXPECT_EQ(e.path(), path.string());
    }
  }
  std::vector<std::byte> flipped = bytes;
  for (std::size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    flipped[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    expect_checkpoint_error([&] { (void)decode_training_state(flipped); });
    if (bit % 101 == 0) {
      write_bytes(path, flipped);
      expect_checkpoint_error([&] { (void)load_training_state(path); });
    }
    flipped[bit / 8] = bytes[bit / 8];
  }
}

}  // namespace training_state_test
