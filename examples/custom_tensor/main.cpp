// A model on the user's own tensor type — separate Eigen matrices, one per parameter and one per gradient, with its
// own kernels — trained by mwstrat without including mwstrat/nn. `mwstrat::tensor_model` lays the tensors out in
// mwstrat's own arena (the model has none); the rest is composed by hand: a collective (local ranks as threads), the
// mirrored strategy over it, a sharding policy for the input, `fit`, a checkpointer, and the model's own tensors
// stored and reloaded in place through `tensor_like` (`save_tensors` / `load_tensors`).
//
//   custom_tensor [--data-dir .cache/mnist] [--replicas 2] [--batch 32] [--steps 150] [--checkpoint-dir DIR]
//                 [--weights-out FILE] [--help]
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
#include <fstream>
#include <iostream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace my {

/// The user's tensor: an Eigen matrix that owns its values (column-major, as Eigen likes it).
struct matrix {
  Eigen::MatrixXf values;
};
// The two hooks that make it `mwstrat::tensor_like`; they live here, beside the type, found by ADL.
inline std::span<float> mwstrat_elements(matrix& m) { return {m.values.data(), static_cast<std::size_t>(m.values.size())}; }
inline std::span<const float> mwstrat_elements(const matrix& m) {
  return {m.values.data(), static_cast<std::size_t>(m.values.size())};
}
inline std::vector<std::size_t> mwstrat_shape(const matrix& m) {
  return {static_cast<std::size_t>(m.values.rows()), static_cast<std::size_t>(m.values.cols())};
}

/// One parameter: its name, its value and its gradient, each a tensor of its own.
struct parameter {
  std::string name;
  matrix value, grad;
};

/// A two-layer perceptron 784 → hidden (ReLU) → 10, written with Eigen: four separate parameters
/// W1 (hidden×784), b1, W2 (10×hidden), b2, each with its own gradient matrix. No arena: `tensor_model` owns one.
class mlp {
 public:
  mlp(int hidden, unsigned seed)
      : hidden_(hidden),
        params_{make("dense/kernel", hidden, 784), make("dense/bias", hidden, 1), make("dense_1/kernel", 10, hidden),
                make("dense_1/bias", 10, 1)} {
    std::mt19937 rng(seed);
    auto glorot = [&](matrix& m) {
      const float limit = std::sqrt(6.0f / static_cast<float>(m.values.rows() + m.values.cols()));
      std::uniform_real_distribution<float> u(-limit, limit);
      for (auto& v : mwstrat::elements(m)) v = u(rng);
    };
    glorot(w1().value);
    glorot(w2().value);
  }

  // What tensor_model asks of a model: its tensors, a training and an evaluation step (and, here, a fingerprint).
  std::array<parameter, 4>& parameter_tensors() { return params_; }
  std::string fingerprint() const { return "mlp(784-" + std::to_string(hidden_) + "-10)"; }

  template <class TensorReady>
  mwstrat::batch_stats train_batch(const mwstrat::data::image_batch& batch, TensorReady&& tensor_ready) {
    const std::span<const float> x = batch.inputs;
    const std::span<const std::int64_t> y = batch.labels;
    const std::size_t n = batch.size;
    const auto stats = forward(x, y, n);
    // Backward: d(mean loss)/d(logits) = (softmax - onehot) / n, then the layers last-first.
    Eigen::MatrixXf d2 = probs_;
    for (std::size_t i = 0; i < n; ++i) d2(static_cast<Eigen::Index>(y[i]), static_cast<Eigen::Index>(i)) -= 1.0f;
    d2 /= static_cast<float>(n);
    b2().grad.values = d2.rowwise().sum();
    tensor_ready(3);  // b2 is final: its reduction may start while the rest is computed
    w2().grad.values.noalias() = d2 * h_.transpose();
    tensor_ready(2);
    Eigen::MatrixXf d1 = (w2().value.values.transpose() * d2).cwiseProduct((h_.array() > 0.0f).cast<float>().matrix());
    w1().grad.values.noalias() = d1 * input(x, n).transpose();
    b1().grad.values = d1.rowwise().sum();
    tensor_ready(0);  // any order: tensor_model reports them to the reduction last-first
    tensor_ready(1);
    return stats;
  }

  mwstrat::batch_stats evaluate_batch(const mwstrat::data::image_batch& batch) {
    return forward(batch.inputs, batch.labels, batch.size);
  }

 private:
  static parameter make(std::string name, Eigen::Index rows, Eigen::Index cols) {
    return {std::move(name), {Eigen::MatrixXf::Zero(rows, cols)}, {Eigen::MatrixXf::Zero(rows, cols)}};
  }
  parameter& w1() { return params_[0]; }
  parameter& b1() { return params_[1]; }
  parameter& w2() { return params_[2]; }
  parameter& b2() { return params_[3]; }
  static Eigen::Map<const Eigen::MatrixXf> input(std::span<const float> x, std::size_t n) {
    return {x.data(), 784, static_cast<Eigen::Index>(n)};  // each image is one column
  }

  mwstrat::batch_stats forward(std::span<const float> x, std::span<const std::int64_t> y, std::size_t n) {
    mwstrat::batch_stats s;
    if (n == 0) return s;
    h_ = ((w1().value.values * input(x, n)).colwise() + b1().value.values.col(0)).cwiseMax(0.0f);
    probs_ = (w2().value.values * h_).colwise() + b2().value.values.col(0);
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
  std::array<parameter, 4> params_;
  Eigen::MatrixXf h_, probs_;
};

static_assert(mwstrat::storable_tensor<matrix> && mwstrat::restorable_tensor<matrix>);
static_assert(mwstrat::tensor_sequence_model<mlp, mwstrat::data::image_batch>);
static_assert(mwstrat::trainable_model<mwstrat::tensor_model<mlp>, mwstrat::data::image_batch>);
static_assert(mwstrat::named_parameters_model<mwstrat::tensor_model<mlp>>);

/// The user's optimizer: plain SGD.
struct sgd {
  float rate;
  void apply(std::span<float> p, std::span<const float> g) const {
    Eigen::Map<Eigen::VectorXf>(p.data(), static_cast<Eigen::Index>(p.size())) -=
        rate * Eigen::Map<const Eigen::VectorXf>(g.data(), static_cast<Eigen::Index>(g.size()));
  }
};

}  // namespace my

// Saves the final weights with any `checkpointer` (here mwstrat's manager of safetensors files), tensor by tensor
// under the user's names (`weight_views` reads the adapter's `named_parameters`).
template <mwstrat::checkpointer Checkpointer>
void save_final(Checkpointer& k, mwstrat::tensor_model<my::mlp>& model, std::int64_t step) {
  mwstrat::training_state_view state;
  state.step = step;
  state.model_fingerprint = model.fingerprint();
  state.weights = mwstrat::weight_views(model);
  std::cout << "saved " << k.save(state, step).string() << "\n";
}

// Stores the model's own tensors as plain named tensors and loads them back, in place, into a fresh model: the
// file is checked tensor by tensor (name, dtype, shape) against the user's types.
bool round_trip(my::mlp& model, const std::filesystem::path& file) {
  std::vector<mwstrat::named_tensor<my::matrix>> named;
  for (auto& t : model.parameter_tensors()) named.push_back(mwstrat::named(t.name, t.value));
  mwstrat::save_tensors(file, named);

  my::mlp fresh(64, 99u);
  std::vector<mwstrat::named_tensor<my::matrix>> into;
  for (auto& t : fresh.parameter_tensors()) into.push_back(mwstrat::named(t.name, t.value));
  mwstrat::load_tensors(file, into);
  bool same = true;
  for (std::size_t i = 0; i < 4; ++i)
    same = same && fresh.parameter_tensors()[i].value.values == model.parameter_tensors()[i].value.values;
  std::cout << "reloaded " << file.string() << ": " << (same ? "same weights" : "DIFFERENT weights") << "\n";
  return same;
}

const char* const usage =
    "usage: custom_tensor [--data-dir D (.cache/mnist)] [--replicas N (2)] [--batch N per replica (32)] [--steps N (150)]\n"
    "  [--checkpoint-dir DIR] [--weights-out FILE (the final weights as raw float32, for comparisons)] [--help]\n"
    "A bad flag or value is refused at once (status 2). Exit status: 0 trained, 1 an error, 75 preempted\n"
    "(SIGTERM or SIGINT stops every replica at the next step: mwstrat::preempted_exit_code).\n";

int main(int argc, char** argv) {
  std::string data_dir = ".cache/mnist", checkpoint_dir, weights_out;
  int replicas = 2;
  std::size_t batch = 32;
  std::size_t steps = 150;
  constexpr auto max_steps = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());  // a checkpoint's step
  example_flags::reader args(argc, argv, "custom_tensor", usage);
  while (args.next()) {
    if (args.is("--data-dir")) data_dir = args.value();
    else if (args.is("--replicas")) replicas = args.whole(1);
    else if (args.is("--steps")) steps = args.whole<std::size_t>(1, max_steps);
    else if (args.is("--batch")) batch = args.whole<std::size_t>(1, 60000);
    else if (args.is("--weights-out")) weights_out = args.value();
    else if (args.is("--checkpoint-dir")) checkpoint_dir = args.value();
    else args.unknown();
  }
  try {
    const auto train_set = mwstrat::data::load_mnist(data_dir, mwstrat::data::mnist_split::train);
    const auto test_set = mwstrat::data::load_mnist(data_dir, mwstrat::data::mnist_split::test);
    // A collective of `replicas` ranks (threads), a mirrored strategy over each rank's end of it.
    mwstrat::spawn_ranks(replicas, [&](mwstrat::local_collective& collective) {
      mwstrat::mirrored_strategy<mwstrat::local_collective&> strategy(collective);
      my::mlp net(64, 1234u + static_cast<unsigned>(collective.rank()));  // differs per replica: fit mirrors it
      mwstrat::tensor_model model(net);  // the arena the strategy reduces and the optimizer updates
      my::sgd optimizer{0.1f};
      const std::size_t global_batch = batch * static_cast<std::size_t>(replicas);
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
          if (!round_trip(net, std::filesystem::path(checkpoint_dir) / "mlp-tensors.safetensors")) std::exit(1);
        }
        if (!weights_out.empty()) {  // fit left the final values in the user's own tensors
          std::ofstream out(weights_out, std::ios::binary);
          for (const auto& t : net.parameter_tensors())
            out.write(reinterpret_cast<const char*>(t.value.values.data()),
                      static_cast<std::streamsize>(sizeof(float) * static_cast<std::size_t>(t.value.values.size())));
          if (!out) throw mwstrat::io_error({"custom_tensor"}, weights_out + ": write failed");
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
