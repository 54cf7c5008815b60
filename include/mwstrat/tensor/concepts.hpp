#pragma once
/// \file
/// The `tensor_like` concept: how mwstrat reaches the numbers inside a user's tensor.
///
/// mwstrat moves parameters and gradients as flat, contiguous runs of numbers (all-reduce, broadcast,
/// checkpoint). A type is `tensor_like` when `mwstrat::elements(t)` yields a `std::span` over its elements and
/// `mwstrat::shape(t)` its extents. Requirements, in order:
///   1. `mwstrat::elements(t)` is valid, on a `T&` and on a `const T&` (saving and shapes read through const
///      references), and both give the same element type up to `const`. Either an ADL hook
///      `mwstrat_elements(t)`, declared in the type's own namespace, returns a `std::span<E>` or an lvalue
///      reference to a contiguous, sized range of `E` (`std::vector<E>&`, viewed as a span); or, without a hook,
///      the type is a contiguous, sized range (std::vector, std::array, std::span, ...). Nothing else is
///      accepted: not a type merely convertible to `std::span<E>`, not a container returned by value (the span
///      would outlive it).
///   2. The element type `E` is a tensor element: arithmetic, or opted in by specialising
///      `mwstrat::enable_tensor_element<E>` (a bf16 struct, say).
///   3. `mwstrat::shape(t)` is valid on a `const T&`: an ADL hook `mwstrat_shape(const T&)` returning a range of
///      `std::size_t`-convertible extents, or, without a hook, the shape `{size}`. A hook that takes a non-const
///      reference only is refused (`mwstrat::shape` stops with a static_assert naming it) rather than passed over
///      for the flat default. The product of the extents must equal the number of elements (checked where a
///      shape is used, not by the concept).
///
/// Opt-in scheme (the same for every mwstrat concept): structural — the hooks are all a type needs; there is no
/// tag. (`enable_tensor_element<E>` is a trait on the element type, letting a non-arithmetic number type in.)
/// The library consumes it in checkpoint/named_tensors.hpp (`storable_tensor`: save and load named tensors of any
/// such type) and in train/checkpoint_tensors.hpp (a model's own named tensors in checkpoints and `save_model`).
///
/// Opting in a type of your own (no edit of mwstrat; the hooks live beside your type):
///
///     namespace my {
///     struct matrix { std::size_t rows, cols; std::vector<float> data; };
///     std::span<float> mwstrat_elements(matrix& m) { return m.data; }
///     std::span<const float> mwstrat_elements(const matrix& m) { return m.data; }
///     std::vector<std::size_t> mwstrat_shape(const matrix& m) { return {m.rows, m.cols}; }
///     }
///     static_assert(mwstrat::tensor_like<my::matrix>);

#include <concepts>
#include <cstddef>
#include <ranges>
#include <span>
#include <type_traits>
#include <vector>

namespace mwstrat {

/// Specialise to `true` to let a non-arithmetic element type (bf16, fp16 structs) into `tensor_like`.
template <class E>
inline constexpr bool enable_tensor_element = std::is_arithmetic_v<E>;

/// True for the types a tensor may hold (requirement 2).
template <class E>
concept tensor_element = enable_tensor_element<std::remove_cv_t<E>>;

namespace detail {

// Poison pills: only hooks found by ADL count, never an unrelated function of the same name in mwstrat.
void mwstrat_elements() = delete;
void mwstrat_shape() = delete;

template <class T>
concept has_elements_hook = requires(T& t) { mwstrat_elements(t); };

// Shapes are read through const references: only a hook callable on a `const T&` counts.
template <class T>
concept has_shape_hook = requires(const T& t) { mwstrat_shape(t); };

// A shape hook for a non-const reference only: ignoring it would save a matrix flat without a word, so it is refused.
template <class T>
concept has_non_const_shape_hook = !has_shape_hook<T> && requires(std::remove_cv_t<T>& t) { mwstrat_shape(t); };

template <class S>
struct span_element {};
template <class E, std::size_t N>
struct span_element<std::span<E, N>> {
  using type = E;
};

template <class T>
auto elements_of(T& t) {
  if constexpr (has_elements_hook<T>) {
    using result = decltype(mwstrat_elements(t));
    // borrowed_range: a span, or an lvalue reference to the type's own storage; never a container by value.
    if constexpr (std::ranges::contiguous_range<result> && std::ranges::sized_range<result> &&
                  std::ranges::borrowed_range<result>) {
      return std::span<std::remove_reference_t<std::ranges::range_reference_t<result>>>(mwstrat_elements(t));
    } else {
      return mwstrat_elements(t);  // not a span: rejected by the concept below
    }
  } else {
    return std::span<std::remove_reference_t<std::ranges::range_reference_t<T>>>(std::ranges::data(t),
                                                                                 std::ranges::size(t));
  }
}

template <class T>
concept elements_reachable =
    has_elements_hook<T> || (std::ranges::contiguous_range<T> && std::ranges::sized_range<T>);

}  // namespace detail

/// The elements of a tensor-like value as a span (requirement 1).
struct elements_fn {
  template <class T>
    requires detail::elements_reachable<T>
  auto operator()(T& t) const {
    return detail::elements_of(t);
  }
};
/// `mwstrat::elements(t)`: the contiguous elements of `t`, through its hook or as a contiguous range.
inline constexpr elements_fn elements{};

/// The extents of a tensor-like value (requirement 3); `{size}` for a type without a shape hook.
struct shape_fn {
  template <class T>
  std::vector<std::size_t> operator()(const T& t) const
    requires(detail::has_shape_hook<T> || detail::has_non_const_shape_hook<T> || detail::elements_reachable<const T>)
  {
    static_assert(!detail::has_non_const_shape_hook<T>,
                  "[mwstrat.tensor] mwstrat_shape(T&) takes a non-const reference; mwstrat reads shapes through "
                  "const references: declare it mwstrat_shape(const T&)");
    if constexpr (detail::has_shape_hook<T>) {
      std::vector<std::size_t> out;
      for (auto extent : mwstrat_shape(t)) out.push_back(static_cast<std::size_t>(extent));
      return out;
    } else {
      return {detail::elements_of(t).size()};
    }
  }
};
/// `mwstrat::shape(t)`: the extents of `t`.
inline constexpr shape_fn shape{};

namespace detail {
template <class T>
concept shape_hook_ok = !has_shape_hook<T> || requires(const T& t) {
  requires std::ranges::input_range<decltype(mwstrat_shape(t))>;
  requires std::convertible_to<std::ranges::range_value_t<decltype(mwstrat_shape(t))>, std::size_t>;
};

template <class T>
using element_of = typename span_element<decltype(elements_of(std::declval<T&>()))>::type;

// Requirement 1 on a const T: saving reads the elements through a const reference, and must find the same ones.
template <class T>
concept const_elements_reachable =
    elements_reachable<const T> &&
    requires(const T& t) {
      { mwstrat::elements(t) } -> std::same_as<std::span<typename span_element<decltype(mwstrat::elements(t))>::type>>;
    } &&
    std::same_as<std::remove_cv_t<element_of<const T>>, std::remove_cv_t<element_of<T>>>;
}  // namespace detail

/// A value whose elements mwstrat can read and write in place as one contiguous run, with a shape.
template <class T>
concept tensor_like = detail::elements_reachable<T> &&
                      requires(T& t) {
                        { mwstrat::elements(t) } -> std::same_as<std::span<typename detail::span_element<
                                                      decltype(mwstrat::elements(t))>::type>>;
                      } &&
                      tensor_element<detail::element_of<T>> && detail::const_elements_reachable<T> &&
                      !detail::has_non_const_shape_hook<T> && detail::shape_hook_ok<T> &&
                      requires(const T& t) { mwstrat::shape(t); };

/// The element type of a tensor-like type (const-qualified for a read-only view).
template <tensor_like T>
using tensor_element_t =
    typename detail::span_element<decltype(mwstrat::elements(std::declval<T&>()))>::type;

}  // namespace mwstrat
