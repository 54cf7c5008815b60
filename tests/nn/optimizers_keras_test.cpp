// Each optimizer and schedule against Keras's own: reference numbers computed ONCE with Keras 3.15.1 (JAX backend,
// float32) and pasted here, from tests/nn/keras_optimizer_reference.py:
//   python3 -m venv .cache/keras-venv && .cache/keras-venv/bin/pip install keras 'jax[cpu]'
//   KERAS_BACKEND=jax .cache/keras-venv/bin/python tests/nn/keras_optimizer_reference.py
// Every case starts from the same weights and applies the same three gradients; the expected arrays are the weights
// after each step. Keras computes in float32 in its own order of operations, so the comparison allows a few ulps.
#include <mwstrat/nn/optimizers.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace nn = mwstrat::nn;

namespace optimizers_keras_test {

using steps3 = std::array<std::array<float, 5>, 3>;

constexpr std::array<float, 5> w0{0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
constexpr steps3 grads{{{0.1f, -0.2f, 0.3f, -0.4f, 0.5f}, {-0.3f, 0.1f, 0.05f, 0.2f, -0.6f}, {0.2f, 0.2f, -0.1f, 0.0f, 0.4f}}};

// Applies the three gradients with `opt` and compares the weights after each step with Keras's.
template <class Opt>
void expect_keras(Opt& opt, const steps3& keras, const char* what) {
  std::vector<float> w(w0.begin(), w0.end());
  for (std::size_t s = 0; s < 3; ++s) {
    opt.apply(std::span<float>(w), std::span<const float>(grads[s]));
    for (std::size_t i = 0; i < 5; ++i)
      EXPECT_NEAR(w[i], keras[s][i], 3e-7 + 2e-6 * std::fabs(keras[s][i]))
          << what << ", step " << s + 1 << ", weight " << i;
  }
  EXPECT_EQ(opt.iterations(), 3u) << what;
}


TEST(NnOptimizersKeras, SgdMomentum) {
  nn::sgd opt({.learning_rate = 0.1, .momentum = 0.9});
  const steps3 keras{{{0.49000000953674316f, -0.9800000190734863f, 1.9700000286102295f, 0.28999999165534973f, -0.800000011920929f}, {0.5110000371932983f, -0.972000002861023f, 1.9380000829696655f, 0.3059999942779541f, -0.7850000262260437f}, {0.5099000334739685f, -0.9847999811172485f, 1.91920006275177f, 0.3203999996185303f, -0.8115000128746033f}}};
  expect_keras(opt, keras, "sgd_momentum");
}

TEST(NnOptimizersKeras, SgdNesterovWithWeightDecay) {
  nn::sgd opt({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01});
  const steps3 keras{{{0.4805000126361847f, -0.9610000252723694f, 1.940999984741211f, 0.3257499933242798f, -0.844249963760376f}, {0.528919517993927f, -0.9628390073776245f, 1.9052590131759644f, 0.3198242485523224f, -0.769905686378479f}, {0.5074005722999573f, -0.9933961629867554f, 1.8964338302612305f, 0.33246439695358276f, -0.8329857587814331f}}};
  expect_keras(opt, keras, "sgd_nesterov_weight_decay");
}

TEST(NnOptimizersKeras, Adam) {
  nn::adam opt(0.01);
  const steps3 keras{{{0.4900003969669342f, -0.9900002479553223f, 1.9900001287460327f, 0.2599998414516449f, -0.7599998712539673f}, {0.49494218826293945f, -0.9873369336128235f, 1.9821670055389404f, 0.2626631557941437f, -0.7585704326629639f}, {0.4947543144226074f, -0.9900638461112976f, 1.9784125089645386f, 0.26472193002700806f, -0.7605006694793701f}}};
  expect_keras(opt, keras, "adam");
}

TEST(NnOptimizersKeras, AdamW) {
  nn::adamw opt(0.01, 0.1);
  const steps3 keras{{{0.48950040340423584f, -0.9890002608299255f, 1.9880001544952393f, 0.2597498595714569f, -0.7592498660087585f}, {0.4939526915550232f, -0.9853479266166687f, 1.9781789779663086f, 0.26215341687202454f, -0.7570611834526062f}, {0.4932708740234375f, -0.9870895147323608f, 1.972446322441101f, 0.26395004987716675f, -0.7582343816757202f}}};
  expect_keras(opt, keras, "adamw");
}

TEST(NnOptimizersKeras, RMSprop) {
  nn::rmsprop opt({.learning_rate = 0.01});
  const steps3 keras{{{0.46837881207466125f, -0.9683775901794434f, 1.9683773517608643f, 0.28162267804145813f, -0.7816227078437805f}, {0.4985297918319702f, -0.9831216335296631f, 1.9629056453704834f, 0.26687851548194885f, -0.7568157911300659f}, {0.4809276759624481f, -1.005289077758789f, 1.9737426042556763f, 0.26687851548194885f, -0.7720822691917419f}}};
  expect_keras(opt, keras, "rmsprop");
}

TEST(NnOptimizersKeras, RMSpropCenteredWithMomentum) {
  nn::rmsprop opt({.learning_rate = 0.01, .rho = 0.8, .momentum = 0.5, .centered = true});
  const steps3 keras{{{0.4750007688999176f, -0.9750002026557922f, 1.9750001430511475f, 0.2749999463558197f, -0.7749999761581421f}, {0.485073447227478f, -0.9735058546066284f, 1.9578449726104736f, 0.2764942944049835f, -0.769442081451416f}, {0.47710660099983215f, -0.9897863268852234f, 1.9579637050628662f, 0.27724146842956543f, -0.778244137763977f}}};
  expect_keras(opt, keras, "rmsprop_centered_momentum");
}

TEST(NnOptimizersKeras, Adagrad) {
  nn::adagrad opt({.learning_rate = 0.1, .initial_accumulator_value = 0.2, .epsilon = 1e-6});
  const steps3 keras{{{0.4781782627105713f, -0.9591752290725708f, 1.9442914724349976f, 0.3166665732860565f, -0.8245354890823364f}, {0.5329504013061523f, -0.9791752099990845f, 1.9350464344024658f, 0.2850438356399536f, -0.7578688859939575f}, {0.4986507296562195f, -1.0163142681121826f, 1.953228235244751f, 0.2850438356399536f, -0.7984827160835266f}}};
  expect_keras(opt, keras, "adagrad");
}

TEST(NnOptimizersKeras, AdagradLargeEpsilon) {
  nn::adagrad opt({.learning_rate = 0.1, .initial_accumulator_value = 0.2, .epsilon = 0.5});
  const steps3 keras{{{0.48813217878341675f, -0.9767504930496216f, 1.966247320175171f, 0.29313310980796814f, -0.8012989163398743f}, {0.5216732025146484f, -0.9882975220680237f, 1.9606307744979858f, 0.27205124497413635f, -0.748876690864563f}, {0.49985140562057495f, -1.0107992887496948f, 1.9717936515808105f, 0.27205124497413635f, -0.7818681597709656f}}};
  expect_keras(opt, keras, "adagrad_large_epsilon");
}

TEST(NnOptimizersKeras, RMSpropLargeEpsilon) {
  nn::rmsprop opt({.learning_rate = 0.01, .epsilon = 0.3});
  const steps3 keras{{{0.49817728996276855f, -0.996372640132904f, 1.994603157043457f, 0.2571156919002533f, -0.7587705850601196f}, {0.503566324710846f, -0.9981845617294312f, 1.99370276927948f, 0.2535712718963623f, -0.7487496733665466f}, {0.49999096989631653f, -1.001787543296814f, 1.9955031871795654f, 0.2535712718963623f, -0.755337655544281f}}};
  expect_keras(opt, keras, "rmsprop_large_epsilon");
}

TEST(NnOptimizersKeras, AdamLargeEpsilon) {
  nn::adam opt({.learning_rate = 0.01, .epsilon = 0.2});
  const steps3 keras{{{0.49984434247016907f, -0.9996934533119202f, 1.9995471239089966f, 0.250594824552536f, -0.7507326602935791f}, {0.5000796318054199f, -0.9996025562286377f, 1.99918794631958f, 0.2507706582546234f, -0.7505755424499512f}, {0.5000691413879395f, -0.9997259974479675f, 1.999007225036621f, 0.25090649724006653f, -0.7508106231689453f}}};
  expect_keras(opt, keras, "adam_large_epsilon");
}

TEST(NnOptimizersKeras, SgdGlobalClipnorm) {
  nn::sgd opt({.learning_rate = 0.1, .global_clipnorm = 0.5});
  const steps3 keras{{{0.493257999420166f, -0.986515998840332f, 1.979773998260498f, 0.27696800231933594f, -0.7837100028991699f}, {0.514418363571167f, -0.9935694336891174f, 1.9762473106384277f, 0.26286110281944275f, -0.741389274597168f}, {0.49441835284233093f, -1.0135694742202759f, 1.9862473011016846f, 0.26286110281944275f, -0.7813892960548401f}}};
  expect_keras(opt, keras, "sgd_global_clipnorm");
}

TEST(NnOptimizersKeras, SgdClipnormIsTheGlobalNorm) {
  // The issue's `clipnorm`: one norm over the whole arena, the same as Keras's global_clipnorm.
  nn::sgd opt({.learning_rate = 0.1, .clipnorm = 0.5});
  const steps3 keras{{{0.493257999420166f, -0.986515998840332f, 1.979773998260498f, 0.27696800231933594f, -0.7837100028991699f}, {0.514418363571167f, -0.9935694336891174f, 1.9762473106384277f, 0.26286110281944275f, -0.741389274597168f}, {0.49441835284233093f, -1.0135694742202759f, 1.9862473011016846f, 0.26286110281944275f, -0.7813892960548401f}}};
  expect_keras(opt, keras, "sgd_global_clipnorm");
}

TEST(NnOptimizersKeras, SgdClipvalue) {
  nn::sgd opt({.learning_rate = 0.1, .clipvalue = 0.25});
  const steps3 keras{{{0.49000000953674316f, -0.9800000190734863f, 1.975000023841858f, 0.2750000059604645f, -0.7749999761581421f}, {0.5149999856948853f, -0.9900000095367432f, 1.9700000286102295f, 0.2549999952316284f, -0.75f}, {0.4949999749660492f, -1.0099999904632568f, 1.9800000190734863f, 0.2549999952316284f, -0.7749999761581421f}}};
  expect_keras(opt, keras, "sgd_clipvalue");
}

TEST(NnOptimizersKeras, SgdPiecewiseConstantDecay) {
  nn::sgd opt({.learning_rate = nn::piecewise_constant_decay({0, 1}, {0.1, 0.05, 0.01}), .momentum = 0.5});
  const steps3 keras{{{0.49000000953674316f, -0.9800000190734863f, 1.9700000286102295f, 0.28999999165534973f, -0.800000011920929f}, {0.5f, -0.9750000238418579f, 1.9524999856948853f, 0.29999998211860657f, -0.7950000166893005f}, {0.503000020980835f, -0.9745000004768372f, 1.9447499513626099f, 0.304999977350235f, -0.796500027179718f}}};
  expect_keras(opt, keras, "sgd_piecewise");
}

TEST(NnOptimizersKeras, AdamCosineDecayWithWarmup) {
  nn::adam opt({.learning_rate = nn::cosine_decay(0.001, 4, 0.1, 0.02, 2)});
  const steps3 keras{{{0.49900004267692566f, -0.9990000128746033f, 1.999000072479248f, 0.25099998712539673f, -0.7509999871253967f}, {0.5041889548301697f, -0.9962035417556763f, 1.9907753467559814f, 0.2537964880466461f, -0.7494990825653076f}, {0.5038132071495056f, -1.0016573667526245f, 1.9832663536071777f, 0.2579140365123749f, -0.7533596158027649f}}};
  expect_keras(opt, keras, "adam_cosine_warmup");
}

TEST(NnOptimizersKeras, Schedules) {
  const std::array<float, 16> cosine_warmup{{0.10000000149011612f, 0.15000000596046448f, 0.20000001788139343f, 0.25f, 0.30000001192092896f, 0.29302555322647095f, 0.27278491854667664f, 0.2412593960762024f, 0.2015349119901657f, 0.1574999988079071f, 0.11346505582332611f, 0.07374060899019241f, 0.042215071618556976f, 0.02197445183992386f, 0.015000000596046448f, 0.015000000596046448f}};
  const std::array<float, 12> cosine{{0.10000000149011612f, 0.09767518192529678f, 0.09092830866575241f, 0.08041980117559433f, 0.06717830151319504f, 0.05249999836087227f, 0.037821684032678604f, 0.024580202996730804f, 0.014071689918637276f, 0.0073248171247541904f, 0.005000000353902578f, 0.005000000353902578f}};
  const std::array<float, 9> piecewise{{1.0f, 1.0f, 1.0f, 1.0f, 0.5f, 0.5f, 0.5f, 0.10000000149011612f, 0.10000000149011612f}};
  const nn::cosine_decay cw(0.1, 10, 0.05, 0.3, 4), c(0.1, 10, 0.05);
  const nn::piecewise_constant_decay p({3, 6}, {1.0, 0.5, 0.1});
  for (std::size_t s = 0; s < cosine_warmup.size(); ++s)
    EXPECT_NEAR(cw(static_cast<std::int64_t>(s)), cosine_warmup[s], 1e-7) << "cosine with warm-up, step " << s;
  for (std::size_t s = 0; s < cosine.size(); ++s)
    EXPECT_NEAR(c(static_cast<std::int64_t>(s)), cosine[s], 1e-7) << "cosine, step " << s;
  for (std::size_t s = 0; s < piecewise.size(); ++s)
    EXPECT_NEAR(p(static_cast<std::int64_t>(s)), piecewise[s], 1e-7) << "piecewise, step " << s;
}

}  // namespace optimizers_keras_test
