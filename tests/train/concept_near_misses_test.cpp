// Near misses of train/'s capability concepts: an archetype with every requirement, then one type per missing or
// mistyped requirement, each refused (the collective concept's test is the model).
#include <mwstrat/train.hpp>

#include <gtest/gtest.h>

#include <array>
#include <list>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace concept_near_misses_test {

using mwstrat::metric_input;

struct batch {};
using input = metric_input<batch>;

// ---------------------------------------------------------------------------------------------- metric_for
// 1 name() const, 2 static state_size, 3 update_state(state, input), 4 result(reduced) const -> double.
struct with_state_size {
  static constexpr std::size_t state_size = 2;
};
struct without_state_size {};

template <bool Name = true, bool Size = true, bool Update = true, bool Result = true, bool ConstResult = true>
struct metric_archetype : std::conditional_t<Size, with_state_size, without_state_size> {
  std::string_view name() const
    requires Name
  {
    return "m";
  }
  void update_state(std::span<double>, const input&)
    requires Update
  {}
  double result(std::span<const double>) const
    requires(Result && ConstResult)
  {
    return 0;
  }
  double result(std::span<const double>)
    requires(Result && !ConstResult)
  {
    return 0;
  }
};
struct metric_with_a_text_result : with_state_size {
  std::string_view name() const { return "m"; }
  void update_state(std::span<double>, const input&) {}
  std::string result(std::span<const double>) const { return "0"; }
};
struct metric_for_another_batch : with_state_size {
  std::string_view name() const { return "m"; }
  void update_state(std::span<double>, const metric_input<int>&) {}
  double result(std::span<const double>) const { return 0; }
};

static_assert(mwstrat::metric_for<metric_archetype<>, batch>);
static_assert(!mwstrat::metric_for<metric_archetype<false>, batch>, "1: name()");
static_assert(!mwstrat::metric_for<metric_archetype<true, false>, batch>, "2: state_size");
static_assert(!mwstrat::metric_for<metric_archetype<true, true, false>, batch>, "3: update_state");
static_assert(!mwstrat::metric_for<metric_archetype<true, true, true, false>, batch>, "4: result");
static_assert(!mwstrat::metric_for<metric_archetype<true, true, true, true, false>, batch>, "4: result is const");
static_assert(!mwstrat::metric_for<metric_with_a_text_result, batch>, "4: result is a number");
static_assert(!mwstrat::metric_for<metric_for_another_batch, batch>, "3: updates from this batch type's input");
static_assert(mwstrat::metric_for<mwstrat::mean_loss, batch>, "a built-in metric takes any batch");

// ---------------------------------------------------------------------------------------------- model_with_outputs
// 1 outputs() const -> span<const float>, 2 output_size() const -> size_t.
template <bool Outputs = true, bool Size = true, bool ConstOutputs = true>
struct outputs_archetype {
  std::vector<float> out;
  std::span<const float> outputs() const
    requires(Outputs && ConstOutputs)
  {
    return out;
  }
  std::span<const float> outputs()
    requires(Outputs && !ConstOutputs)
  {
    return out;
  }
  std::size_t output_size() const
    requires Size
  {
    return 10;
  }
};
struct double_outputs {
  std::vector<double> out;
  std::span<const double> outputs() const { return out; }
  std::size_t output_size() const { return 10; }
};

static_assert(mwstrat::model_with_outputs<outputs_archetype<>>);
static_assert(!mwstrat::model_with_outputs<outputs_archetype<false>>, "1: outputs()");
static_assert(!mwstrat::model_with_outputs<outputs_archetype<true, false>>, "2: output_size()");
static_assert(!mwstrat::model_with_outputs<outputs_archetype<true, true, false>>, "1: outputs() is const");
static_assert(!mwstrat::model_with_outputs<double_outputs>, "1: the outputs are floats");

// ---------------------------------------------------------------------------------------------- keras_layout_model
// 1 keras_weights() const, a range; 2 architecture() const -> string; 3 set_keras_weight(name, extents, values).
struct keras_weight_record {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};
template <bool Weights = true, bool Architecture = true, bool Set = true, bool WeightsARange = true>
struct keras_archetype {
  std::vector<keras_weight_record> keras_weights() const
    requires(Weights && WeightsARange)
  {
    return {};
  }
  int keras_weights() const
    requires(Weights && !WeightsARange)
  {
    return 0;
  }
  std::string architecture() const
    requires Architecture
  {
    return "[]";
  }
  void set_keras_weight(std::string_view, std::span<const std::int64_t>, std::span<const float>)
    requires Set
  {}
};

static_assert(mwstrat::keras_layout_model<keras_archetype<>>);
static_assert(!mwstrat::keras_layout_model<keras_archetype<false>>, "1: keras_weights()");
static_assert(!mwstrat::keras_layout_model<keras_archetype<true, true, true, false>>, "1: keras_weights() is a range");
static_assert(!mwstrat::keras_layout_model<keras_archetype<true, false>>, "2: architecture()");
static_assert(!mwstrat::keras_layout_model<keras_archetype<true, true, false>>, "3: set_keras_weight");

// ---------------------------------------------------------------------------------------------- saves_training_state
// A callback declares `static constexpr bool saves_training_state = true;` to have its epoch end run last.
struct saves {
  static constexpr bool saves_training_state = true;
};
struct declares_false {
  static constexpr bool saves_training_state = false;
};
struct declares_nothing {};
struct a_member_not_a_static {
  bool saves_training_state = true;
};

static_assert(mwstrat::saves_training_state<saves>);
static_assert(mwstrat::saves_training_state<const saves&>, "any reference to such a callback");
static_assert(!mwstrat::saves_training_state<declares_false>, "declared false");
static_assert(!mwstrat::saves_training_state<declares_nothing>, "not declared");
static_assert(!mwstrat::saves_training_state<a_member_not_a_static>, "a data member is not a declaration");
static_assert(mwstrat::saves_training_state<mwstrat::backup_and_restore>);
static_assert(!mwstrat::saves_training_state<mwstrat::progress_logger>);

// ---------------------------------------------------------------------------------------------- tensor sequences
// parameter_tensor: 1 name, 2 value (tensor_like), 3 grad (tensor_like). tensor_sequence_model: 4 a random-access,
// sized range of them from parameter_tensors(), 5 train_batch(b, tensor_ready) -> batch_result, 6 evaluate_batch(b).
struct seq_tensor {
  std::vector<float> v;
};
std::span<float> mwstrat_elements(seq_tensor& t) { return t.v; }
std::span<const float> mwstrat_elements(const seq_tensor& t) { return t.v; }
struct hookless_tensor {  // no elements hook and not a range: not tensor_like
  float* data = nullptr;
};
struct loss_only {
  double loss_sum = 0, count = 0;
};

template <bool Name = true, bool Value = true, bool Grad = true, class T = seq_tensor>
struct param_archetype {};
template <class T>
struct param_archetype<true, true, true, T> { std::string name; T value, grad; };
template <class T>
struct param_archetype<false, true, true, T> { T value, grad; };
template <class T>
struct param_archetype<true, false, true, T> { std::string name; T grad; };
template <class T>
struct param_archetype<true, true, false, T> { std::string name; T value; };

static_assert(mwstrat::parameter_tensor<param_archetype<>>);
static_assert(!mwstrat::parameter_tensor<param_archetype<false>>, "1: name");
static_assert(!mwstrat::parameter_tensor<param_archetype<true, false>>, "2: value");
static_assert(!mwstrat::parameter_tensor<param_archetype<true, true, false>>, "3: grad");
static_assert(!mwstrat::parameter_tensor<param_archetype<true, true, true, hookless_tensor>>,
              "2, 3: a tensor type without an elements hook is not tensor_like");

template <class Range = std::vector<param_archetype<>>, bool Train = true, bool Evaluate = true, class R = loss_only>
struct sequence_archetype {
  Range params;
  Range& parameter_tensors() { return params; }
  template <class Ready>
  R train_batch(const batch&, Ready&&)
    requires Train
  {
    return {};
  }
  R evaluate_batch(const batch&)
    requires Evaluate
  {
    return {};
  }
};
struct not_a_result {
  double loss = 0;
};

static_assert(mwstrat::tensor_sequence_model<sequence_archetype<>, batch>);
static_assert(mwstrat::tensor_sequence_model<sequence_archetype<std::array<param_archetype<>, 3>>, batch>);
static_assert(!mwstrat::tensor_sequence_model<sequence_archetype<std::vector<int>>, batch>, "4: a range of parameters");
static_assert(!mwstrat::tensor_sequence_model<sequence_archetype<std::list<param_archetype<>>>, batch>,
              "4: random access (tensor i is found by its index)");
static_assert(!mwstrat::tensor_sequence_model<sequence_archetype<std::vector<param_archetype<>>, false>, batch>, "5");
static_assert(!mwstrat::tensor_sequence_model<sequence_archetype<std::vector<param_archetype<>>, true, false>, batch>,
              "6");
static_assert(!mwstrat::tensor_sequence_model<
                  sequence_archetype<std::vector<param_archetype<>>, true, true, not_a_result>, batch>,
              "5, 6: results with loss_sum and count");
static_assert(mwstrat::trainable_model<mwstrat::tensor_model<sequence_archetype<>>, batch>);

// batch_result / classification_result / result_with_targets
struct with_targets {
  double loss_sum = 0, count = 0;
  std::span<const float> predictions, targets;
};
struct predictions_only {
  double loss_sum = 0, count = 0;
  std::span<const float> predictions;
};
static_assert(mwstrat::batch_result<loss_only> && !mwstrat::classification_result<loss_only>);
static_assert(mwstrat::result_with_targets<with_targets>);
static_assert(!mwstrat::result_with_targets<predictions_only>, "predictions and targets together");

TEST(train_concepts, near_misses_are_checked_at_compile_time) { SUCCEED(); }

}  // namespace concept_near_misses_test
