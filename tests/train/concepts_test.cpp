// Near misses of the train family's concepts and optional capabilities (train/concepts.hpp, train/callback.hpp):
// a complete archetype, then one type per missing requirement, one static_assert per defect.
#include <mwstrat/data/image_batch.hpp>
#include <mwstrat/train/callback.hpp>
#include <mwstrat/train/concepts.hpp>
#include <mwstrat/train/logs.hpp>

#include <support/softmax_regression.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace concepts_test {

using namespace mwstrat;

struct batch {};

// ------------------------------------------------------------------------------------------------ batch_result
struct result {
  double loss_sum, correct, count;
};
struct result_no_loss {
  double correct, count;
};
struct result_no_correct {
  double loss_sum, count;
};
struct result_no_count {
  double loss_sum, correct;
};
static_assert(batch_result<result> && batch_result<batch_stats>);
static_assert(!batch_result<result_no_loss>);     // 1
// 2: `correct` is a classifier's only: any task's result is a batch_result, and only a classifier's reports accuracy.
static_assert(batch_result<result_no_correct> && !classification_result<result_no_correct>);
static_assert(classification_result<result> && classification_result<batch_stats>);
static_assert(!batch_result<result_no_count>);    // 3

// ------------------------------------------------------------------------------------------------ batch_source
struct source {
  std::size_t steps_per_epoch() const { return 1; }
  batch batch_at(std::size_t, std::size_t) { return {}; }
};
struct source_no_steps {
  batch batch_at(std::size_t, std::size_t) { return {}; }
};
struct source_no_batch_at {
  std::size_t steps_per_epoch() const { return 1; }
};
struct source_stream {  // a stream, not a pure function of (epoch, step)
  std::size_t steps_per_epoch() const { return 1; }
  batch next() { return {}; }
};
static_assert(batch_source<source>);
static_assert(!batch_source<source_no_steps>);     // 1
static_assert(!batch_source<source_no_batch_at>);  // 2
static_assert(!batch_source<source_stream>);       // 2

// ------------------------------------------------------------------------------------------------ trainable_model
struct model {
  std::span<float> parameters() { return {}; }
  std::span<float> gradients() { return {}; }
  std::string fingerprint() const { return "m"; }
  template <class OnReady>
  batch_stats train_batch(const batch&, OnReady&&) { return {}; }
  batch_stats evaluate_batch(const batch&) { return {}; }
};
struct model_no_parameters {
  std::span<float> gradients() { return {}; }
  std::string fingerprint() const { return "m"; }
  template <class OnReady>
  batch_stats train_batch(const batch&, OnReady&&) { return {}; }
  batch_stats evaluate_batch(const batch&) { return {}; }
};
struct model_no_gradients {
  std::span<float> parameters() { return {}; }
  std::string fingerprint() const { return "m"; }
  template <class OnReady>
  batch_stats train_batch(const batch&, OnReady&&) { return {}; }
  batch_stats evaluate_batch(const batch&) { return {}; }
};
struct model_mutable_fingerprint {
  std::span<float> parameters() { return {}; }
  std::span<float> gradients() { return {}; }
  std::string fingerprint() { return "m"; }
  template <class OnReady>
  batch_stats train_batch(const batch&, OnReady&&) { return {}; }
  batch_stats evaluate_batch(const batch&) { return {}; }
};
struct model_no_train {
  std::span<float> parameters() { return {}; }
  std::span<float> gradients() { return {}; }
  std::string fingerprint() const { return "m"; }
  batch_stats evaluate_batch(const batch&) { return {}; }
};
struct model_train_without_on_ready {
  std::span<float> parameters() { return {}; }
  std::span<float> gradients() { return {}; }
  std::string fingerprint() const { return "m"; }
  batch_stats train_batch(const batch&) { return {}; }
  batch_stats evaluate_batch(const batch&) { return {}; }
};
struct model_train_returns_nothing {
  std::span<float> parameters() { return {}; }
  std::span<float> gradients() { return {}; }
  std::string fingerprint() const { return "m"; }
  template <class OnReady>
  void train_batch(const batch&, OnReady&&) {}
  batch_stats evaluate_batch(const batch&) { return {}; }
};
struct model_no_evaluate {
  std::span<float> parameters() { return {}; }
  std::span<float> gradients() { return {}; }
  std::string fingerprint() const { return "m"; }
  template <class OnReady>
  batch_stats train_batch(const batch&, OnReady&&) { return {}; }
};
// Only the images form (inputs, labels, size, on_ready): the generic concept has one form, the batch's.
struct model_images_form_only {
  std::span<float> parameters() { return {}; }
  std::span<float> gradients() { return {}; }
  std::string fingerprint() const { return "m"; }
  template <class OnReady>
  batch_stats train_batch(std::span<const float>, std::span<const std::int64_t>, std::size_t, OnReady&&) {
    return {};
  }
  batch_stats evaluate_batch(std::span<const float>, std::span<const std::int64_t>, std::size_t) { return {}; }
};
static_assert(trainable_model<model, batch>);
static_assert(!trainable_model<model, data::image_batch>);  // another batch type
static_assert(!trainable_model<model_no_parameters, batch>);           // 1
static_assert(!trainable_model<model_no_gradients, batch>);            // 1
static_assert(!trainable_model<model_mutable_fingerprint, batch>);     // 2
static_assert(!trainable_model<model_no_train, batch>);                // 3
static_assert(!trainable_model<model_train_without_on_ready, batch>);  // 3
static_assert(!trainable_model<model_train_returns_nothing, batch>);   // 3
static_assert(!trainable_model<model_no_evaluate, batch>);             // 4
static_assert(!trainable_model<model_images_form_only, data::image_batch>);
static_assert(trainable_model<test::softmax_regression, data::image_batch>);

// ------------------------------------------------------------------------------------------------ optimizer_for
struct optimizer {
  void apply(std::span<float>, std::span<const float>) {}
};
struct optimizer_no_apply {
  void update(std::span<float>, std::span<const float>) {}
};
static_assert(optimizer_for<optimizer>);
static_assert(!optimizer_for<optimizer_no_apply>);

// ------------------------------------------------------------------------------------------- model capabilities
// model_with_threads and model_with_executor: tests/strategy/gradient_sync_test.cpp, beside their concepts.
struct stepped {
  std::uint64_t step() const { return 0; }
  void set_step(std::uint64_t) {}
};
struct step_only {
  std::uint64_t step() const { return 0; }
};
struct set_step_only {
  void set_step(std::uint64_t) {}
};
struct step_not_const {
  std::uint64_t step() { return 0; }
  void set_step(std::uint64_t) {}
};
static_assert(model_with_step<stepped>);
static_assert(!model_with_step<step_only>);      // set_step missing
static_assert(!model_with_step<set_step_only>);  // step missing
static_assert(!model_with_step<step_not_const>);

struct record {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<float> values;
};
struct record_no_name {
  std::vector<std::int64_t> shape;
  std::span<float> values;
};
struct record_no_values {
  std::string name;
  std::vector<std::int64_t> shape;
};
struct record_double_values {
  std::string name;
  std::vector<std::int64_t> shape;
  std::span<double> values;
};
struct own_tensor {  // the user's tensor_like type, with a name
  std::string name;
  std::vector<float> data;
  friend std::span<const float> mwstrat_elements(const own_tensor& t) { return t.data; }
};
struct own_tensor_no_name {
  std::vector<float> data;
  friend std::span<const float> mwstrat_elements(const own_tensor_no_name& t) { return t.data; }
};
static_assert(named_parameter<record> && named_parameter<own_tensor>);
static_assert(!named_parameter<record_no_name>);
static_assert(!named_parameter<record_no_values>);
static_assert(!named_parameter<record_double_values>);
static_assert(!named_parameter<own_tensor_no_name>);

template <class P>
struct names {
  std::vector<P> named_parameters() { return {}; }
};
struct names_not_a_range {
  int named_parameters() { return 0; }
};
static_assert(named_parameters_model<names<record>> && named_parameters_model<names<own_tensor>>);
static_assert(!named_parameters_model<names<record_no_name>>);
static_assert(!named_parameters_model<names_not_a_range>);
static_assert(!named_parameters_model<model>);

// --------------------------------------------------------------------------------------- optimizer capabilities
struct checkpointable {
  std::span<float> state() { return {}; }
  std::int64_t iterations() const { return 0; }
  void set_iterations(std::int64_t) {}
};
struct checkpointable_slots {
  std::span<float> slots() { return {}; }
  std::int64_t iterations() const { return 0; }
  void set_iterations(std::int64_t) {}
};
struct no_state {
  std::int64_t iterations() const { return 0; }
  void set_iterations(std::int64_t) {}
};
struct no_iterations {
  std::span<float> state() { return {}; }
  void set_iterations(std::int64_t) {}
};
struct no_set_iterations {
  std::span<float> state() { return {}; }
  std::int64_t iterations() const { return 0; }
};
struct misspelt_set_iterations {  // the misspelling a resume must never swallow (see tests/compile_fail)
  std::span<float> state() { return {}; }
  std::int64_t iterations() const { return 0; }
  void set_iteraton(std::int64_t) {}
};
struct state_of_doubles {
  std::span<double> state() { return {}; }
  std::int64_t iterations() const { return 0; }
  void set_iterations(std::int64_t) {}
};
static_assert(checkpointable_optimizer<checkpointable> && checkpointable_optimizer<checkpointable_slots>);
static_assert(!checkpointable_optimizer<no_state>);
static_assert(!checkpointable_optimizer<no_iterations>);
static_assert(!checkpointable_optimizer<no_set_iterations>);
static_assert(!checkpointable_optimizer<misspelt_set_iterations>);
static_assert(!checkpointable_optimizer<state_of_doubles>);
static_assert(checkpointable_optimizer<test::momentum_sgd> && !checkpointable_optimizer<test::plain_sgd>);

struct resizable {
  void resize(std::size_t) {}
};
static_assert(resizable_optimizer<resizable>);
static_assert(!resizable_optimizer<optimizer>);

struct with_rate {
  double learning_rate() const { return 0.1; }
  void set_learning_rate(double) {}
};
struct rate_read_only {
  double learning_rate() const { return 0.1; }
};
struct rate_write_only {
  void set_learning_rate(double) {}
};
static_assert(has_learning_rate<with_rate>);
static_assert(!has_learning_rate<rate_read_only>);
static_assert(!has_learning_rate<rate_write_only>);

// Complete groups pass the resume check; a type with no member of a group passes too (it has nothing to resume).
static_assert(check_resume_hooks<stepped, checkpointable>());
static_assert(check_resume_hooks<model, optimizer>());
static_assert(check_resume_hooks<test::softmax_regression, test::momentum_sgd>());

// ------------------------------------------------------------------------------------------- callback hooks
struct ctx {};
struct every_hook {
  void on_train_begin(ctx&) {}
  void on_train_end(ctx&, const history&) {}
  void on_epoch_begin(ctx&, int) {}
  void on_epoch_end(ctx&, int, const epoch_logs&) {}
  void on_train_batch_begin(ctx&, std::size_t) {}
  void on_train_batch_end(ctx&, std::size_t, const batch_logs&) {}
  void on_test_begin(ctx&) {}
  void on_test_end(ctx&, const evaluation&) {}
};
struct misspelt_hook {  // on_epoch_ends: no hook at all, so not a callback
  void on_epoch_ends(ctx&, int, const epoch_logs&) {}
};
struct hook_wrong_arguments {
  void on_epoch_end(ctx&) {}
};
static_assert(has_on_train_begin<every_hook, ctx> && has_on_train_end<every_hook, ctx> &&
              has_on_epoch_begin<every_hook, ctx> && has_on_epoch_end<every_hook, ctx> &&
              has_on_train_batch_begin<every_hook, ctx> && has_on_train_batch_end<every_hook, ctx> &&
              has_on_test_begin<every_hook, ctx> && has_on_test_end<every_hook, ctx>);
static_assert(!has_on_train_begin<misspelt_hook, ctx> && !has_on_train_end<misspelt_hook, ctx> &&
              !has_on_epoch_begin<misspelt_hook, ctx> && !has_on_epoch_end<misspelt_hook, ctx> &&
              !has_on_train_batch_begin<misspelt_hook, ctx> && !has_on_train_batch_end<misspelt_hook, ctx> &&
              !has_on_test_begin<misspelt_hook, ctx> && !has_on_test_end<misspelt_hook, ctx>);
static_assert(callback_for<every_hook, ctx>);
static_assert(!callback_for<misspelt_hook, ctx>);
static_assert(!callback_for<hook_wrong_arguments, ctx>);

TEST(train_concepts, near_misses_are_compile_time_checks) {
  EXPECT_EQ(model{}.fingerprint(), "m");  // the static_asserts above are the test
}

}  // namespace concepts_test
