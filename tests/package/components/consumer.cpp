// A consumer that brings its own tensors, model, optimizer and batches, and takes from mwstrat only the multi-worker
// strategy (the TCP ring) and `fit`: it links mwstrat::core and mwstrat::ring and nothing else, so it must build
// and run where oneTBB (nn/'s kernels) and zlib (data/'s gzip IDX reader) are not there.
//
// It trains a softmax regression on Gaussian blobs with two worker processes on loopback (this program forks them)
// and checks that the loss fell and that both workers end with the same parameters, bit for bit. Exit code 0 means
// it worked.
#include <mwstrat/cluster/free_ports.hpp>
#include <mwstrat/cluster/tf_config.hpp>
#include <mwstrat/strategy/multi_worker_mirrored_strategy.hpp>
#include <mwstrat/tensor/concepts.hpp>
#include <mwstrat/train/fit.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace my {

/// The user's tensor: a named slice of the model's parameter arena.
struct tensor {
  std::string name;
  std::span<float> values;
  std::vector<std::size_t> dims;
};
inline std::span<float> mwstrat_elements(tensor& t) { return t.values; }
inline std::span<const float> mwstrat_elements(const tensor& t) { return t.values; }
inline std::vector<std::size_t> mwstrat_shape(const tensor& t) { return t.dims; }
static_assert(mwstrat::tensor_like<tensor>);

/// The user's batch type (not mwstrat's image batch).
struct batch {
  const std::vector<float>* x;
  const std::vector<std::int64_t>* y;
};

/// Softmax regression on the user's tensors: [W (features x classes), b (classes)] in one arena.
class softmax_regression {
 public:
  softmax_regression(std::size_t features, std::size_t classes)
      : features_(features), classes_(classes), params_(features * classes + classes), grads_(params_.size()),
        w_{"w", std::span<float>(params_).first(features * classes), {features, classes}},
        b_{"b", std::span<float>(params_).subspan(features * classes), {classes}} {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    for (float& v : mwstrat::elements(w_)) v = u(rng);
  }

  std::span<float> parameters() { return params_; }
  std::span<float> gradients() { return grads_; }
  std::string fingerprint() const {
    return "softmax_regression(" + std::to_string(features_) + "x" + std::to_string(classes_) + ")";
  }

  template <class OnReady>
  mwstrat::batch_stats train_batch(const batch& b, OnReady&& on_ready) {
    std::fill(grads_.begin(), grads_.end(), 0.0f);
    const auto stats = forward(b, true);
    const float scale = 1.0f / static_cast<float>(b.y->size());
    for (float& g : grads_) g *= scale;
    on_ready(features_ * classes_, classes_);  // b: the "last layer"
    on_ready(std::size_t{0}, features_ * classes_);
    return stats;
  }
  mwstrat::batch_stats evaluate_batch(const batch& b) { return forward(b, false); }

 private:
  mwstrat::batch_stats forward(const batch& b, bool backward) {
    mwstrat::batch_stats stats;
    const auto w = mwstrat::elements(w_);
    const auto bias = mwstrat::elements(b_);
    std::vector<float> p(classes_);
    for (std::size_t i = 0; i < b.y->size(); ++i) {
      const float* x = b.x->data() + i * features_;
      for (std::size_t k = 0; k < classes_; ++k) {
        p[k] = bias[k];
        for (std::size_t f = 0; f < features_; ++f) p[k] += x[f] * w[f * classes_ + k];
      }
      const float top = *std::max_element(p.begin(), p.end());
      const auto best = static_cast<std::size_t>(std::distance(p.begin(), std::max_element(p.begin(), p.end())));
      float total = 0;
      for (float& v : p) total += (v = std::exp(v - top));
      const auto label = static_cast<std::size_t>((*b.y)[i]);
      stats.loss_sum += -std::log(static_cast<double>(p[label] / total));
      stats.correct += best == label ? 1 : 0;
      stats.count += 1;
      if (!backward) continue;
      for (std::size_t k = 0; k < classes_; ++k) {
        const float d = p[k] / total - (k == label ? 1.0f : 0.0f);
        grads_[features_ * classes_ + k] += d;
        for (std::size_t f = 0; f < features_; ++f) grads_[f * classes_ + k] += x[f] * d;
      }
    }
    return stats;
  }

  std::size_t features_, classes_;
  std::vector<float> params_, grads_;
  tensor w_, b_;
};

/// Plain SGD.
struct sgd {
  float rate = 0.2f;
  void apply(std::span<float> p, std::span<const float> g) const {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= rate * g[i];
  }
};

/// Gaussian blobs, one per class; each worker reads its half of every global batch of 2 x 16 examples.
class blobs {
 public:
  static constexpr std::size_t features = 4, classes = 3, per_worker = 16, steps = 12;
  explicit blobs(int worker) : worker_(static_cast<std::size_t>(worker)), x_(per_worker * features), y_(per_worker) {}
  std::size_t steps_per_epoch() const { return steps; }
  batch batch_at(std::size_t epoch, std::size_t step) {
    std::mt19937 rng(static_cast<std::uint32_t>(1000 * epoch + 10 * step + worker_));
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (std::size_t i = 0; i < per_worker; ++i) {
      const std::size_t label = (i + step) % classes;
      y_[i] = static_cast<std::int64_t>(label);
      for (std::size_t f = 0; f < features; ++f) {
        x_[i * features + f] = noise(rng) + (f % classes == label ? 2.0f : 0.0f);
      }
    }
    return {&x_, &y_};
  }

 private:
  std::size_t worker_;
  std::vector<float> x_;
  std::vector<std::int64_t> y_;
};

}  // namespace my

namespace {

// Two loopback ports free now, outside the ephemeral range (as mwstrat-launch picks them).
std::vector<int> free_ports() {
  try {
    return mwstrat::free_listen_ports("127.0.0.1", 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    std::exit(2);
  }
}

// One worker: trains, writes its final parameters to `out`, exits 0 when the loss fell.
int worker(int index, const std::vector<int>& ports, const std::filesystem::path& out) {
  try {
    const std::string tf_config = R"({"cluster": {"worker": ["127.0.0.1:)" + std::to_string(ports[0]) +
                                  R"(", "127.0.0.1:)" + std::to_string(ports[1]) +
                                  R"("]}, "task": {"type": "worker", "index": )" + std::to_string(index) + "}}";
    auto strategy = mwstrat::make_multi_worker_mirrored_strategy(mwstrat::parse_tf_config(tf_config));
    my::softmax_regression model(my::blobs::features, my::blobs::classes);
    my::sgd optimizer;
    my::blobs train(index);
    mwstrat::fit_options options;
    options.epochs = 4;
    const auto history = mwstrat::fit(strategy, model, optimizer, train, options);
    const double first = history.epochs.front().loss, final = history.epochs.back().loss;
    std::ofstream(out, std::ios::binary)
        .write(reinterpret_cast<const char*>(model.parameters().data()),
               static_cast<std::streamsize>(model.parameters().size_bytes()));
    std::printf("worker %d: loss %.4f -> %.4f\n", index, first, final);
    std::fflush(stdout);  // the worker ends with _exit, which flushes nothing
    return final < 0.5 * first ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %d: %s\n", index, e.what());
    return 1;
  }
}

std::vector<char> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main() {
  const auto ports = free_ports();
  const auto dir = std::filesystem::temp_directory_path() / ("mwstrat_components_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<pid_t> children;
  for (int index = 0; index < 2; ++index) {
    const pid_t pid = ::fork();
    if (pid == 0) ::_exit(worker(index, ports, dir / std::to_string(index)));
    children.push_back(pid);
  }
  // Every wait bounded: the workers get 120 s, then are killed.
  int failures = 0;
  bool killed = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (const pid_t pid : children) {
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (!killed && std::chrono::steady_clock::now() > deadline) {
        killed = true;
        for (const pid_t p : children) ::kill(p, SIGKILL);
        std::fprintf(stderr, "consumer: FAILED: workers did not finish in 120 s\n");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  const auto a = read_all(dir / "0"), b = read_all(dir / "1");
  if (a.empty() || a != b) {
    std::fprintf(stderr, "consumer: FAILED: the workers' final parameters differ\n");
    ++failures;
  }
  std::filesystem::remove_all(dir);
  std::printf("mwstrat core+ring consumer: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
