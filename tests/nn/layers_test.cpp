// Forward values of each layer against small cases computed by hand.
#include <mwstrat/error.hpp>
#include <mwstrat/nn.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace nn = mwstrat::nn;

namespace layers_test {
std::vector<float> run(nn::sequential& model, const std::vector<float>& x, std::size_t batch, bool training = false) {
  auto out = model.predict(x, batch, training);
  return {out.begin(), out.end()};
}
void set_params(nn::sequential& model, const std::vector<float>& values) {
  auto p = model.parameters();
  ASSERT_EQ(p.size(), values.size());
  std::copy(values.begin(), values.end(), p.begin());
}

TEST(NnLayers, Conv2dValid) {
  nn::sequential model{nn::input{{3, 3, 1}}, nn::conv2d{1, {2, 2}}};
  set_params(model, {1, 2, 3, 4, 0.5f});  // kernel [kh][kw][in][out], then bias
  EXPECT_EQ(run(model, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 1), (std::vector<float>{37.5f, 47.5f, 67.5f, 77.5f}));
}

TEST(NnLayers, Conv2dSameWithStridePadsLikeKeras) {
  // 3x3 input, 2x2 kernel, stride 2, same: output 2x2, one row/column of zeros after the input (none before).
  nn::sequential model{nn::input{{3, 3, 1}}, nn::conv2d{1, {2, 2}, nn::activation::linear, {2, 2}, nn::padding::same}};
  set_params(model, {1, 2, 3, 4, 0.5f});
  EXPECT_EQ(model.output_shape(), (nn::shape_t{2, 2, 1}));
  EXPECT_EQ(run(model, {1, 2, 3, 4, 5, 6, 7, 8, 9}, 1), (std::vector<float>{37.5f, 21.5f, 23.5f, 9.5f}));
}

TEST(NnLayers, Conv2dChannelsAndRelu) {
  // 1x1 input with 2 channels, 1x1 kernel, 2 filters: out[f] = relu(sum_c x[c] k[c][f] + b[f]).
  nn::sequential model{nn::input{{1, 1, 2}}, nn::conv2d{2, {1, 1}, nn::activation::relu}};
  set_params(model, {1, -1, 2, -2, 0.25f, 0.5f});  // k[c=0] = {1, -1}, k[c=1] = {2, -2}, b = {0.25, 0.5}
  EXPECT_EQ(run(model, {1, 2, 3, 1}, 2), (std::vector<float>{5.25f, 0, 5.25f, 0}));
  EXPECT_EQ(run(model, {-1, -2, 0, 0}, 2), (std::vector<float>{0, 5.5f, 0.25f, 0.5f}));
}

// `algorithm`: a 3x3 stride-1 Conv2D over whole vectors of channels takes Winograd by default (other bits than the
// direct sums, within float rounding of them) and the direct sums with conv_algorithm::direct; a model's
// fingerprint (config) does not depend on it.
TEST(NnLayers, Conv2dAlgorithmChoosesWinogradOrDirectSums) {
  const std::size_t h = 8, c = 16, f = 16, batch = 2;
  nn::conv2d spec{f, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same};
  nn::conv2d direct_spec = spec;
  direct_spec.algorithm = nn::conv_algorithm::direct;
  nn::sequential fast{nn::input{{h, h, c}}, spec};
  nn::sequential direct{nn::input{{h, h, c}}, direct_spec};
  std::vector<float> params(3 * 3 * c * f + f);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(static_cast<int>(i % 11) - 5) / 8.0f;
  set_params(fast, params);
  set_params(direct, params);
  std::vector<float> x(batch * h * h * c);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 13) - 6) / 7.0f;
  const auto a = run(fast, x, batch);
  const auto b = run(direct, x, batch);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NE(a, b) << "the automatic algorithm gave the direct sums' bits: Winograd was not taken";
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1.0 + std::abs(b[i]))) << i;
  EXPECT_EQ(fast.fingerprint(), direct.fingerprint());
}

TEST(NnLayers, Conv2dSamePaddingOnAllSidesMatchesDirectSum) {
  // 5x4 input with 2 channels, 3x3 kernel, stride 1, same: every border row and column of windows touches the
  // padding; checked against the convolution summed directly.
  const std::size_t h = 5, w = 4, c = 2, f = 3;
  nn::sequential model{nn::input{{h, w, c}}, nn::conv2d{f, {3, 3}, nn::activation::linear, {1, 1}, nn::padding::same}};
  std::vector<float> params(3 * 3 * c * f + f);
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  set_params(model, params);
  std::vector<float> x(2 * h * w * c);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 5) - 2);
  const auto y = run(model, x, 2);
  ASSERT_EQ(y.size(), 2 * h * w * f);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t oy = 0; oy < h; ++oy)
      for (std::size_t ox = 0; ox < w; ++ox)
        for (std::size_t o = 0; o < f; ++o) {
          float s = params[3 * 3 * c * f + o];
          for (std::size_t ky = 0; ky < 3; ++ky)
            for (std::size_t kx = 0; kx < 3; ++kx) {
              const auto iy = static_cast<std::ptrdiff_t>(oy + ky) - 1;
              const auto ix = static_cast<std::ptrdiff_t>(ox + kx) - 1;
              if (iy < 0 || ix < 0 || iy >= static_cast<std::ptrdiff_t>(h) || ix >= static_cast<std::ptrdiff_t>(w))
                continue;
              for (std::size_t ch = 0; ch < c; ++ch)
                s += x[((b * h + static_cast<std::size_t>(iy)) * w + static_cast<std::size_t>(ix)) * c + ch] *
                     params[((ky * 3 + kx) * c + ch) * f + o];
            }
          EXPECT_EQ(y[((b * h + oy) * w + ox) * f + o], s) << b << " " << oy << " " << ox << " " << o;
        }
}

TEST(NnLayers, MaxPool) {
  nn::sequential valid{nn::input{{4, 4, 1}}, nn::max_pool2d{}};
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>((i * 7) % 16);
  // rows: 0 7 14 5 | 12 3 10 1 | 8 15 6 13 | 4 11 2 9
  EXPECT_EQ(run(valid, x, 1), (std::vector<float>{12, 14, 15, 13}));
  nn::sequential same{nn::input{{3, 3, 1}}, nn::max_pool2d{{2, 2}, {2, 2}, nn::padding::same}};
  EXPECT_EQ(run(same, {-1, -2, -3, -4, -5, -6, -7, -8, -9}, 1), (std::vector<float>{-1, -3, -7, -9}));
  nn::sequential strided{nn::input{{1, 3, 2}}, nn::max_pool2d{{1, 2}, {1, 1}}};
  EXPECT_EQ(run(strided, {1, 6, 3, 2, 2, 4}, 1), (std::vector<float>{3, 6, 3, 4}));
}

TEST(NnLayers, DenseOutputMajorKernel) {
  nn::sequential model{nn::input{{3}}, nn::dense{2}};
  set_params(model, {1, 2, 3, 4, 5, 6, 0.5f, -1});
  EXPECT_EQ(run(model, {1, 1, 2}, 1), (std::vector<float>{9.5f, 20}));
  nn::sequential relu{nn::input{{3}}, nn::dense{2, nn::activation::relu}};
  set_params(relu, {1, 2, 3, -4, -5, -6, 0.5f, -1});
  EXPECT_EQ(run(relu, {1, 1, 2, 0, 0, 0}, 2), (std::vector<float>{9.5f, 0, 0.5f, 0}));
}

TEST(NnLayers, DenseOnTheLastAxis) {
  nn::sequential model{nn::input{{2, 2}}, nn::dense{1}};
  set_params(model, {1, 10, 0});
  EXPECT_EQ(model.output_shape(), (nn::shape_t{2, 1}));
  EXPECT_EQ(run(model, {1, 2, 3, 4}, 1), (std::vector<float>{21, 43}));
}

TEST(NnLayers, ReluSoftmaxReshapeFlatten) {
  nn::sequential relu{nn::input{{4}}, nn::relu{}};
  EXPECT_EQ(run(relu, {-1, 0, 2, -0.5f}, 1), (std::vector<float>{0, 0, 2, 0}));
  nn::sequential soft{nn::input{{2}}, nn::softmax{}};
  auto p = run(soft, {0, std::log(3.0f), 1000, 1000}, 2);
  EXPECT_NEAR(p[0], 0.25f, 1e-6f);
  EXPECT_NEAR(p[1], 0.75f, 1e-6f);
  EXPECT_NEAR(p[2], 0.5f, 1e-6f);
  nn::sequential shape{nn::input{{2, 3}}, nn::reshape{{3, 2}}, nn::flatten{}};
  EXPECT_EQ(shape.output_shape(), (nn::shape_t{6}));
  EXPECT_EQ(run(shape, {1, 2, 3, 4, 5, 6}, 1), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW((nn::sequential{nn::input{{2, 3}}, nn::reshape{{4, 2}}}), mwstrat::config_error);
}

TEST(NnLayers, DropoutIsSeededScaledAndOffInInference) {
  const std::size_t n = 20000;
  nn::sequential model({nn::input{{n}}, nn::dropout{0.25}}, {.seed = 7});
  std::vector<float> x(n, 1.0f);
  EXPECT_EQ(run(model, x, 1, false), x);
  auto a = run(model, x, 1, true);
  auto b = run(model, x, 1, true);
  EXPECT_EQ(a, b);  // same step, same mask
  std::size_t zeros = 0;
  for (float v : a) {
    if (v == 0.0f) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / n, 0.25, 0.015);
  model.set_step(1);
  EXPECT_NE(run(model, x, 1, true), a);
  nn::sequential other({nn::input{{n}}, nn::dropout{0.25}}, {.seed = 8});
  EXPECT_NE(run(other, x, 1, true), a);
  EXPECT_THROW((nn::sequential{nn::input{{2}}, nn::dropout{1.0}}), mwstrat::config_error);
}

TEST(NnLoss, CrossEntropyFromLogitsIsStable) {
  std::vector<double> logits{1000, 0, -1000};
  std::vector<double> grad(3);
  EXPECT_NEAR(nn::sparse_categorical_crossentropy<double>(logits, 0, grad), 0.0, 1e-12);
  EXPECT_NEAR(nn::sparse_categorical_crossentropy<double>(logits, 1), 1000.0, 1e-9);
  EXPECT_NEAR(nn::sparse_categorical_crossentropy<double>(logits, 2), 2000.0, 1e-9);
  EXPECT_NEAR(grad[0] + grad[1] + grad[2], 0.0, 1e-15);
  std::vector<float> uniform{2, 2, 2, 2};
  EXPECT_NEAR(nn::sparse_categorical_crossentropy<float>(uniform, 3), std::log(4.0f), 1e-6f);
  EXPECT_THROW((void)nn::sparse_categorical_crossentropy<float>(uniform, 4), mwstrat::data_error);
  std::vector<float> probs(4);
  nn::apply_softmax<float>(std::vector<float>{0, 0, 1000, 1000}, probs, 2);
  EXPECT_EQ(probs, (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}));
}

// Keras's label smoothing: the target (1 − ε)·onehot + ε/K, the loss −Σ target·log softmax, computed here in long
// double from its definition; the gradient against finite differences of the library's own loss.
TEST(NnLoss, LabelSmoothingIsTheCrossEntropyAgainstTheSmoothedTarget) {
  const std::vector<double> z{0.3, -1.2, 2.0, 0.7};
  for (const double eps : {0.0, 0.1, 0.5, 1.0}) {
    long double log_sum = 0;
    for (double v : z) log_sum += std::exp(static_cast<long double>(v));
    log_sum = std::log(log_sum);
    long double expected = 0;
    for (std::size_t j = 0; j < z.size(); ++j) {
      const long double target = (j == 1 ? 1 - eps : 0) + eps / static_cast<double>(z.size());
      expected -= target * (z[j] - log_sum);
    }
    std::vector<double> grad(4);
    const double loss = nn::sparse_categorical_crossentropy<double>(z, 1, grad, 0.5, eps);
    EXPECT_NEAR(loss, static_cast<double>(expected), 1e-12) << eps;
    double grad_sum = 0;
    for (std::size_t j = 0; j < z.size(); ++j) {
      auto zp = z, zm = z;
      zp[j] += 1e-6;
      zm[j] -= 1e-6;
      const double fd = 0.5 *
                        (nn::sparse_categorical_crossentropy<double>(zp, 1, {}, 1.0, eps) -
                         nn::sparse_categorical_crossentropy<double>(zm, 1, {}, 1.0, eps)) / 2e-6;
      EXPECT_NEAR(fd, grad[j], 1e-7) << eps << " " << j;
      grad_sum += grad[j];
    }
    EXPECT_NEAR(grad_sum, 0.0, 1e-15) << eps;  // the targets sum to 1, as the probabilities do
  }
  // ε = 0 is the plain loss, to the bit; uniform logits lose log K whatever ε.
  std::vector<float> g0(4), g1(4);
  const std::vector<float> zf{0.3f, -1.2f, 2.0f, 0.7f};
  EXPECT_EQ(nn::sparse_categorical_crossentropy<float>(zf, 2, g0, 0.25f),
            nn::sparse_categorical_crossentropy<float>(zf, 2, g1, 0.25f, 0.0f));
  EXPECT_EQ(g0, g1);
  EXPECT_NEAR(nn::sparse_categorical_crossentropy<float>(std::vector<float>{2, 2, 2, 2}, 3, {}, 1.0f, 0.3f),
              std::log(4.0f), 1e-6f);
}

// A model with `label_smoothing` reports the smoothed loss in evaluation and trains on its gradient, whichever kind
// (the sequential model, and the graph model the ResNets are); a smoothing outside [0, 1] is refused when the model
// is made, by name.
template <class Model>
void expect_smoothed_loss_and_gradient(Model& model) {
  auto p = model.parameters();
  ASSERT_EQ(p.size(), 6U);
  std::copy_n(std::vector<float>{1, 0, 0, 1, 0, 0}.begin(), 6, p.begin());  // identity kernel, zero bias
  const std::vector<float> x{3, 1, 0, 2};
  const std::vector<std::int64_t> y{0, 0};
  // Sample 0: logits (3, 1); sample 1: logits (0, 2); both labelled 0. With ε = 0.2, targets (0.9, 0.1).
  auto smoothed = [](double z_label, double z_other) {
    const double log_sum = std::log(std::exp(z_label) + std::exp(z_other));
    return -(0.9 * (z_label - log_sum) + 0.1 * (z_other - log_sum));
  };
  const auto st = model.evaluate_batch(x, y, 2);
  EXPECT_NEAR(st.loss_sum, smoothed(3, 1) + smoothed(0, 2), 1e-5);
  (void)model.train_batch(x, y, 2);
  // dL/db_0 = mean over the batch of (p_0 − 0.9): the bias gradient is the logits' gradient summed over samples.
  const double p00 = 1 / (1 + std::exp(-2.0)), p10 = 1 / (1 + std::exp(2.0));
  EXPECT_NEAR(model.gradients()[4], ((p00 - 0.9) + (p10 - 0.9)) / 2, 1e-6);
  EXPECT_NEAR(model.gradients()[5], ((0.9 - p00) + (0.9 - p10)) / 2, 1e-6);  // p_1 − 0.1 = 0.9 − p_0
  // The kernel's gradient is x^T times the logits' gradient, over the batch (its diagonal: whichever order the
  // kernel is stored in): dk_00 = mean of x_0 · (p_0 − 0.9), dk_11 = mean of x_1 · (0.9 − p_0).
  EXPECT_NEAR(model.gradients()[0], (3 * (p00 - 0.9) + 0 * (p10 - 0.9)) / 2, 1e-6);
  EXPECT_NEAR(model.gradients()[3], (1 * (0.9 - p00) + 2 * (0.9 - p10)) / 2, 1e-6);
}

TEST(NnLoss, ModelsTrainAndEvaluateOnTheSmoothedLoss) {
  const double eps = 0.2;
  {
    SCOPED_TRACE("sequential");
    nn::sequential model({nn::input{{2}}, nn::dense{2}}, {.label_smoothing = eps});
    expect_smoothed_loss_and_gradient(model);
  }
  {
    SCOPED_TRACE("graph model");
    const nn::symbolic_tensor in = nn::input_tensor({2});
    nn::graph_model model(in, nn::dense{2}(in), {.label_smoothing = eps});
    expect_smoothed_loss_and_gradient(model);
  }

  for (const double bad : {-0.1, 1.5, std::nan("")}) {
    try {
      nn::sequential refused({nn::input{{2}}, nn::dense{2}}, {.label_smoothing = bad});
      FAIL() << "expected config_error for " << bad;
    } catch (const mwstrat::config_error& e) {
      EXPECT_NE(std::string(e.what()).find("sequential: label_smoothing"), std::string::npos) << e.what();
    }
    const nn::symbolic_tensor in = nn::input_tensor({2});
    EXPECT_THROW((nn::graph_model(in, nn::dense{2}(in), {.label_smoothing = bad})), mwstrat::config_error);
  }
}

TEST(NnLoss, CrossEntropyGradientMatchesFiniteDifferences) {
  std::vector<double> z{0.3, -1.2, 2.0, 0.7};
  std::vector<double> grad(4);
  (void)nn::sparse_categorical_crossentropy<double>(z, 2, grad, 0.5);
  for (std::size_t j = 0; j < z.size(); ++j) {
    auto zp = z, zm = z;
    zp[j] += 1e-6;
    zm[j] -= 1e-6;
    const double fd = 0.5 * (nn::sparse_categorical_crossentropy<double>(zp, 2) -
                             nn::sparse_categorical_crossentropy<double>(zm, 2)) / 2e-6;
    EXPECT_LT(std::abs(fd - grad[j]) / std::max(std::abs(grad[j]), 1e-12), 1e-6) << j;
  }
}

}  // namespace layers_test
