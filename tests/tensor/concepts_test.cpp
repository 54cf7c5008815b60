#include <mwstrat/tensor/concepts.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace user {
// Opt-in through the hooks, as the concept's header documents.
struct matrix {
  std::size_t rows = 0, cols = 0;
  std::vector<float> data;
};
std::span<float> mwstrat_elements(matrix& m) { return m.data; }
std::span<const float> mwstrat_elements(const matrix& m) { return m.data; }
std::vector<std::size_t> mwstrat_shape(const matrix& m) { return {m.rows, m.cols}; }

struct bf16 {
  unsigned short bits;
};
struct bf16_buffer {
  std::vector<bf16> data;
};
std::span<bf16> mwstrat_elements(bf16_buffer& b) { return b.data; }
std::span<const bf16> mwstrat_elements(const bf16_buffer& b) { return b.data; }
struct vector_backed {  // 1: a hook may return an lvalue reference to a contiguous range (viewed as a span)
  std::vector<double> data;
};
std::vector<double>& mwstrat_elements(vector_backed& v) { return v.data; }
const std::vector<double>& mwstrat_elements(const vector_backed& v) { return v.data; }

// Near misses, one defect each.
struct no_hook {};                                         // 1: no elements hook and not a range
struct not_a_span {};                                      // 1: hook returns something that is not a span
int mwstrat_elements(not_a_span&) { return 0; }
struct strings {                                           // 2: elements are not tensor elements
  std::vector<std::string> data;
};
std::span<std::string> mwstrat_elements(strings& s) { return s.data; }
struct bad_shape {                                         // 3: shape hook returns a non-range
  std::vector<float> data;
};
std::span<float> mwstrat_elements(bad_shape& b) { return b.data; }
int mwstrat_shape(const bad_shape&) { return 3; }
struct bad_extents {                                       // 3: shape hook returns non-integral extents
  std::vector<float> data;
};
std::span<float> mwstrat_elements(bad_extents& b) { return b.data; }
std::vector<std::string> mwstrat_shape(const bad_extents&) { return {"3"}; }
struct non_const_elements_only {                           // 1: no elements through a const T& (no shape hook)
  std::vector<float> data;
};
std::span<float> mwstrat_elements(non_const_elements_only& m) { return m.data; }
struct non_const_elements_with_shape {                     // 1: no elements through a const T& (shape hook or not)
  std::vector<float> data;
};
std::span<float> mwstrat_elements(non_const_elements_with_shape& m) { return m.data; }
std::vector<std::size_t> mwstrat_shape(const non_const_elements_with_shape& m) { return {m.data.size()}; }
struct const_elements_differ {                             // 1: a const T& reaches elements of another type
  std::vector<float> data;
  std::vector<double> wide;
};
std::span<float> mwstrat_elements(const_elements_differ& m) { return m.data; }
std::span<const double> mwstrat_elements(const const_elements_differ& m) { return m.wide; }
struct span_convertible {                                  // 1: hook returns a type merely convertible to a span
  float* p;
  std::size_t n;
  operator std::span<float>() const { return {p, n}; }
};
struct converts_to_span {
  std::vector<float> data;
};
span_convertible mwstrat_elements(converts_to_span& m) { return {m.data.data(), m.data.size()}; }
span_convertible mwstrat_elements(const converts_to_span& m) {
  return {const_cast<float*>(m.data.data()), m.data.size()};
}
struct copies_out {                                        // 1: hook returns a container by value (a span would dangle)
  std::vector<float> data;
};
std::vector<float> mwstrat_elements(copies_out& m) { return m.data; }
std::vector<float> mwstrat_elements(const copies_out& m) { return m.data; }
struct non_const_shape {                                   // 3: shape hook for a non-const reference only
  std::size_t rows = 0, cols = 0;
  std::vector<float> data;
};
std::span<float> mwstrat_elements(non_const_shape& m) { return m.data; }
std::span<const float> mwstrat_elements(const non_const_shape& m) { return m.data; }
std::vector<std::size_t> mwstrat_shape(non_const_shape& m) { return {m.rows, m.cols}; }
}  // namespace user

template <>
inline constexpr bool mwstrat::enable_tensor_element<user::bf16> = true;

template <class T>
concept shape_reachable = requires(const T& t) { mwstrat::shape(t); };

// Requirement 1 and 3 defaults: contiguous sized ranges work as they are.
static_assert(mwstrat::tensor_like<std::vector<float>>);
static_assert(mwstrat::tensor_like<const std::vector<double>>);
static_assert(mwstrat::tensor_like<std::span<float>>);
static_assert(mwstrat::tensor_like<std::span<const float>>);
static_assert(mwstrat::tensor_like<std::array<std::int32_t, 4>>);
static_assert(mwstrat::tensor_like<std::array<bool, 4>>);  // bools in contiguous storage (not basic_tensor<bool>)
static_assert(mwstrat::tensor_like<user::matrix>);
static_assert(mwstrat::tensor_like<const user::matrix>);
static_assert(mwstrat::tensor_like<user::bf16_buffer>);  // 2: opted-in element type
static_assert(mwstrat::tensor_like<user::vector_backed>);
static_assert(std::is_same_v<mwstrat::tensor_element_t<user::vector_backed>, double>);
static_assert(std::is_same_v<mwstrat::tensor_element_t<const user::vector_backed>, const double>);

static_assert(!mwstrat::tensor_like<user::no_hook>);
static_assert(!mwstrat::tensor_like<user::not_a_span>);
static_assert(!mwstrat::tensor_like<user::strings>);
static_assert(!mwstrat::tensor_like<std::vector<std::string>>);
static_assert(!mwstrat::tensor_like<user::bad_shape>);
static_assert(!mwstrat::tensor_like<user::bad_extents>);
static_assert(!mwstrat::tensor_like<int>);
static_assert(!mwstrat::tensor_like<user::non_const_elements_only>);
static_assert(!shape_reachable<user::non_const_elements_only>);  // 3 cannot hold either
static_assert(!mwstrat::tensor_like<user::non_const_elements_with_shape>);
static_assert(!mwstrat::tensor_like<user::const_elements_differ>);
static_assert(!mwstrat::tensor_like<user::converts_to_span>);
static_assert(!mwstrat::tensor_like<user::copies_out>);
static_assert(!mwstrat::tensor_like<user::non_const_shape>);  // refused, not saved flat
static_assert(!mwstrat::tensor_like<const user::non_const_shape>);

static_assert(std::is_same_v<mwstrat::tensor_element_t<std::vector<float>>, float>);
static_assert(std::is_same_v<mwstrat::tensor_element_t<const std::vector<float>>, const float>);
static_assert(std::is_same_v<mwstrat::tensor_element_t<user::matrix>, float>);

TEST(TensorConcept, ElementsOfAUserTypeAreItsOwnStorage) {
  user::matrix m{2, 3, std::vector<float>(6, 0.0f)};
  auto e = mwstrat::elements(m);
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e.data(), m.data.data());
  e[4] = 7.0f;
  EXPECT_EQ(m.data[4], 7.0f);
  EXPECT_EQ(mwstrat::shape(m), (std::vector<std::size_t>{2, 3}));
}

TEST(TensorConcept, VectorsAndSpansAreFlatTensors) {
  std::vector<double> v(5, 1.0);
  EXPECT_EQ(mwstrat::elements(v).data(), v.data());
  EXPECT_EQ(mwstrat::shape(v), (std::vector<std::size_t>{5}));
  std::span<double> s(v);
  EXPECT_EQ(mwstrat::elements(s).size(), 5u);
  const std::vector<float> empty;
  EXPECT_EQ(mwstrat::elements(empty).size(), 0u);
  EXPECT_EQ(mwstrat::shape(empty), (std::vector<std::size_t>{0}));
}

TEST(TensorConcept, AHookReturningAVectorReferenceViewsTheTypesOwnStorage) {
  user::vector_backed v{std::vector<double>(3, 0.0)};
  EXPECT_EQ(mwstrat::elements(v).data(), v.data.data());
  const user::vector_backed& c = v;
  EXPECT_EQ(mwstrat::elements(c).data(), v.data.data());
  EXPECT_EQ(mwstrat::shape(c), (std::vector<std::size_t>{3}));
}
