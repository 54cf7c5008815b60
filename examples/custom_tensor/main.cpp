// A model on the user's own tensor type — Eigen matrices over one parameter arena, with its own kernels — trained
// by mwstrat without including mwstrat/nn. It composes the library's parts by hand: a collective (local ranks as
// threads), the mirrored strategy over it, a sharding policy for the input, `fit`, a checkpointer, and the model's own
// tensors stored and reloaded in place through `tensor_like` (`save_tensors` / `load_tensors`).
//
//   custom_tensor [--data-dir .cache/mnist] [--replicas 2] [--steps 150] [--checkpoint-dir DIR] [--help]
#include <mwstrat/checkpoint.hpp>
#include <mwstrat/collective/local/local_collective.hpp>
#include <mwstrat/data.hpp>
#include <mwstrat/strategy/mirrored_strategy.hpp>
#include <mwstrat/tensor/concepts.hpp>
#include <mwstrat/train.hpp>

#include <Eigen/Core>

#include "common/flags.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace my {

/// The user's tensor: an Eigen matrix view of a slice of the model's arena (column-major, as Eigen likes it).
struct matrix {
  std::string name;
  Eigen::Map<Eigen::MatrixXf> values;
};
// The two hooks that make it `mwstrat::tensor_like`; they live here, beside the type, found by ADL.
inline std::span<float> mwstrat_elements(matrix& m) { return {m.values.data(), static_cast<std::size_t>(m.values.size())}; }
inline std::span<const float> mwstrat_elements(const matrix& m) {
  return {m.values.data(), static_cast<std::size_t>(m.values.size())};
}
inline std::vector<std::size_t> mwstrat_shape(const matrix& m) {
  return {static_cast<std::size_t>(m.values.rows()), static_cast<std::size_t>(m.values.cols())};
}

/// A two-layer perceptron 784 → hidden (ReLU) → 10, written with Eigen, its parameters in one arena:
/// [W1 (hidden×784), b1, W2 (10×hidden), b2]; gradients in a second arena of the same layout.
class mlp {
 public:
  mlp(int hidden, unsigned seed)
      : hidden_(hidden), params_(size(hidden)), grads_(size(hidden)),
        w1_(view(params_, 0, hidden, 784, "dense/kernel")), b1_(view(params_, at_b1(), hidden, 1, "dense/bias")),
        w2_(view(params_, at_w2(), 10, hidden, "dense_1/kernel")), b2_(view(params_, at_b2(), 10, 1, "dense_1/bias")),
        gw1_(view(grads_, 0, hidden, 784, "")), gb1_(view(grads_, at_b1(), hidden, 1, "")),
        gw2_(view(grads_, at_w2(), 10, hidden, "")), gb2_(view(grads_, at_b2(), 10, 1, "")) {
    std::mt19937 rng(seed);
    auto glorot = [&](matrix& m) {
      const float limit = std::sqrt(6.0f / static_cast<float>(m.values.rows() + m.values.cols()));
      std::uniform_real_distribution<float> u(-limit, limit);
      for (auto& v : mwstrat::elements(m)) v = u(rng);
    };
    glorot(w1_);
    glorot(w2_);
  }

  // What fit asks of a model: the arenas, a fingerprint, a training and an evaluation step.
  std::span<float> parameters() { return params_; }
  std::span<float> gradients() { return grads_; }
  std::string fingerprint() const { return "mlp(784-" + std::to_string(hidden_) + "-10)"; }
  // The model's own tensors, named: checkpoints store them through `tensor_like` (readable from Python).
  std::array<matrix, 4> named_parameters() const { return {w1_, b1_, w2_, b2_}; }

  template <class OnReady>
  mwstrat::batch_stats train_batch(const mwstrat::data::image_batch& batch, OnReady&& on_ready) {
    const std::span<const float> x = batch.inputs;
    const std::span<const std::int64_t> y = batch.labels;
    const std::size_t n = batch.size;
    const auto stats = forward(x, y, n);
    // Backward: d(mean loss)/d(logits) = (softmax - onehot) / n, then the layers last-first.
    Eigen::MatrixXf d2 = probs_;
    for (std::size_t i = 0; i < n; ++i) d2(static_cast<Eigen::Index>(y[i]), static_cast<Eigen::Index>(i)) -= 1.0f;
    d2 /= static_cast<float>(n);
    gw2_.values.noalias() = d2 * h_.transpose();
    gb2_.values = d2.rowwise().sum();
    on_ready(static_cast<std::size_t>(at_w2()), static_cast<std::size_t>(size(hidden_) - at_w2()));  // layer 2 final
    Eigen::MatrixXf d1 = (w2_.values.transpose() * d2).cwiseProduct((h_.array() > 0.0f).cast<float>().matrix());
    gw1_.values.noalias() = d1 * input(x, n).transpose();
    gb1_.values = d1.rowwise().sum();
    on_ready(std::size_t{0}, static_cast<std::size_t>(at_w2()));  // layer 1 final
    return stats;
  }

  mwstrat::batch_stats evaluate_batch(const mwstrat::data::image_batch& batch) {
    return forward(batch.inputs, batch.labels, batch.size);
  }

 private:
  static Eigen::Index size(int h) { return Eigen::Index{h} * 784 + h + 10 * Eigen::Index{h} + 10; }
  Eigen::Index at_b1() const { return Eigen::Index{hidden_} * 784; }
  Eigen::Index at_w2() const { return at_b1() + hidden_; }
  Eigen::Index at_b2() const { return at_w2() + 10 * Eigen::Index{hidden_}; }
  static matrix view(std::vector<float>& arena, Eigen::Index at, Eigen::Index rows, Eigen::Index cols, std::string n) {
    return {std::move(n), Eigen::Map<Eigen::MatrixXf>(arena.data() + at, rows, cols)};
  }
  static Eigen::Map<const Eigen::MatrixXf> input(std::span<const float> x, std::size_t n) {
    return {x.data(), 784, static_cast<Eigen::Index>(n)};  // each image is one column
  }

  mwstrat::batch_stats forward(std::span<const float> x, std::span<const std::int64_t> y, std::size_t n) {
    mwstrat::batch_stats s;
    if (n == 0) return s;
    h_ = ((w1_.values * input(x, n)).colwise() + b1_.values.col(0)).cwiseMax(0.0f);
    probs_ = (w2_.values * h_).colwise() + b2_.values.col(0);
    for (Eigen::Index i = 0; i < probs_.cols(); ++i) {
      auto col = probs_.col(i);
      Eigen::Index best = 0;
      const float top = col.maxCoeff(&best);
      col = (col.array() - top).exp().matrix();
      col /= col.sum();
      s.loss_sum -= std::log(static_cast<double>(col(static_cast<Eigen::Index>(y[static_cast<std::size_t>(i)]))));
      s.correct += best == y[static_cast<std::size_t>(i)] ? 1.0 : 0.0;
      s.count += 1.0;
    }
    return s;
  }

  int hidden_;
  std::vector<float> params_, grads_;
  matrix w1_, b1_, w2_, b2_, gw1_, gb1_, gw2_, gb2_;
  Eigen::MatrixXf h_, probs_;
};

static_assert(mwstrat::storable_tensor<matrix> && mwstrat::restorable_tensor<matrix>);
static_assert(mwstrat::trainable_model<mlp, mwstrat::data::image_batch>);
static_assert(mwstrat::named_parameters_model<mlp>);

/// The user's optimizer: plain SGD.
struct sgd {
  float rate;
  void apply(std::span<float> p, std::span<const float> g) const {
    Eigen::Map<Eigen::VectorXf>(p.data(), static_cast<Eigen::Index>(p.size())) -=
        rate * Eigen::Map<const Eigen::VectorXf>(g.data(), static_cast<Eigen::Index>(g.size()));
  }
};

}  // namespace my

// Saves the final weights with any `checkpointer` (here mwstrat's manager of safetensors files); the model's own
// tensors go in through `tensor_like` (`weight_views` reads them with mwstrat::elements / mwstrat::shape).
template <mwstrat::checkpointer Checkpointer>
void save_final(Checkpointer& k, my::mlp& model, std::int64_t step) {
  mwstrat::training_state_view state;
  state.step = step;
  state.model_fingerprint = model.fingerprint();
  state.weights = mwstrat::weight_views(model);
  std::cout << "saved " << k.save(state, step).string() << "\n";
}

// Stores the model's own tensors as plain named tensors and loads them back, in place, into a fresh model: the
// file is checked tensor by tensor (name, dtype, shape) against the user's types.
bool round_trip(my::mlp& model, const std::filesystem::path& file) {
  auto tensors = model.named_parameters();
  std::vector<mwstrat::named_tensor<my::matrix>> named;
  for (auto& t : tensors) named.push_back(mwstrat::named(t.name, t));
  mwstrat::save_tensors(file, named);

  my::mlp fresh(64, 99u);
  auto fresh_tensors = fresh.named_parameters();
  std::vector<mwstrat::named_tensor<my::matrix>> into;
  for (auto& t : fresh_tensors) into.push_back(mwstrat::named(t.name, t));
  mwstrat::load_tensors(file, into);
  const bool same = std::ranges::equal(fresh.parameters(), model.parameters());
  std::cout << "reloaded " << file.string() << ": " << (same ? "same weights" : "DIFFERENT weights") << "\n";
  return same;
}

const char* const usage =
    "usage: custom_tensor [--data-dir D (.cache/mnist)] [--replicas N (2)] [--steps N (150)] [--checkpoint-dir DIR]\n"
    "  [--help]\n"
    "A bad flag or value is refused at once (status 2). Exit status: 0 trained, 1 an error, 75 preempted\n"
    "(SIGTERM or SIGINT stops every replica at the next step: mwstrat::preempted_exit_code).\n";

int main(int argc, char** argv) {
  std::string data_dir = ".cache/mnist", checkpoint_dir;
  int replicas = 2;
  std::size_t steps = 150;
  constexpr auto max_steps = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());  // a checkpoint's step
  example_flags::reader args(argc, argv, "custom_tensor", usage);
  while (args.next()) {
    if (args.is("--data-dir")) data_dir = args.value();
    else if (args.is("--replicas")) replicas = args.whole(1);
    else if (args.is("--steps")) steps = args.whole<std::size_t>(1, max_steps);
    else if (args.is("--checkpoint-dir")) checkpoint_dir = args.value();
    else args.unknown();
  }
  try {
    const auto train_set = mwstrat::data::load_mnist(data_dir, mwstrat::data::mnist_split::train);
    const auto test_set = mwstrat::data::load_mnist(data_dir, mwstrat::data::mnist_split::test);
    // A collective of `replicas` ranks (threads), a mirrored strategy over each rank's end of it.
    mwstrat::spawn_ranks(replicas, [&](mwstrat::local_collective& collective) {
      mwstrat::mirrored_strategy<mwstrat::local_collective&> strategy(collective);
      my::mlp model(64, 1234u + static_cast<unsigned>(collective.rank()));  // differs per replica: fit mirrors it
      my::sgd optimizer{0.1f};
      const std::size_t global_batch = 32 * static_cast<std::size_t>(replicas);
      mwstrat::distributed_input train(train_set, global_batch, strategy, /*seed=*/3, mwstrat::data::data_shard{});
      auto test = mwstrat::distributed_input::for_evaluation(test_set, 1000, strategy);
      mwstrat::fit_options options;
      options.steps_per_epoch = steps;
      mwstrat::progress_logger progress;
      mwstrat::fit(strategy, model, optimizer, train, options, progress);
      const mwstrat::evaluation e = mwstrat::evaluate(strategy, model, test);
      if (strategy.is_chief()) {
        std::printf("test: loss=%.4f accuracy=%.4f\n", e.loss, e.accuracy);
        if (!checkpoint_dir.empty()) {
          mwstrat::checkpoint_manager manager(checkpoint_dir, 1, "mlp");
          save_final(manager, model, static_cast<std::int64_t>(steps));
          if (!round_trip(model, std::filesystem::path(checkpoint_dir) / "mlp-tensors.safetensors")) std::exit(1);
        }
      }
    });
  } catch (const mwstrat::preempted& p) {
    // SIGTERM/SIGINT: every replica stopped after the same step (fit's preemption is not an mwstrat::error).
    std::cerr << p.what() << "\n";
    return mwstrat::preempted_exit_code;
  } catch (const mwstrat::error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {  // not mwstrat's (out of memory, a thread that could not start): still a message
    std::cerr << "custom_tensor: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
