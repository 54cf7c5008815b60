#pragma once
/// \file
/// The reference tensor: an owning, contiguous, row-major array with a shape.

#include <mwstrat/error.hpp>
#include <mwstrat/tensor/concepts.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace mwstrat {

/// An owning, contiguous, row-major tensor of `T` (float by default). Plugs into `tensor_like` through the
/// `mwstrat_elements` / `mwstrat_shape` hooks like any user type would.
///
/// Contract: an element count that `std::size_t` cannot hold, a number of values other than the extents' product,
/// an index count other than the rank, and an index outside its extent (negative included) throw `config_error`
/// (`[mwstrat.tensor] ...`) naming the shape, or the axis, index and extent. `T` is a cv-unqualified tensor element
/// other than `bool` (`std::vector<bool>` packs bits: there is no contiguous run of bools to view).
template <tensor_element T = float>
class basic_tensor {
  static_assert(!std::is_same_v<T, bool>,
                "[mwstrat.tensor] basic_tensor<bool> is not supported: std::vector<bool> packs bits, so there is "
                "no contiguous run of bools to view; use basic_tensor<std::uint8_t>, or a std::array<bool, N> "
                "(tensor_like as it is)");
  static_assert(std::is_same_v<T, std::remove_cv_t<T>>,
                "[mwstrat.tensor] basic_tensor<T> needs a cv-unqualified T; a read-only tensor is a "
                "const basic_tensor");

 public:
  using value_type = T;

  /// An empty tensor of shape {0}.
  basic_tensor() : shape_{0} {}
  /// A zero-filled tensor of the given extents.
  explicit basic_tensor(std::vector<std::size_t> extents) : shape_(std::move(extents)), data_(count(shape_)) {}
  /// A zero-filled tensor of the given extents.
  basic_tensor(std::initializer_list<std::size_t> extents) : basic_tensor(std::vector<std::size_t>(extents)) {}
  /// A tensor of the given extents holding `values` (row-major); their number must match the extents.
  basic_tensor(std::vector<std::size_t> extents, std::vector<T> values)
      : shape_(std::move(extents)), data_(std::move(values)) {
    const std::size_t n = count(shape_);
    if (n != data_.size()) {
      fail("tensor of shape " + shape_text(shape_) + " (" + std::to_string(n) + " elements) given " +
           std::to_string(data_.size()) + " values");
    }
  }

  /// The extents, outermost first.
  [[nodiscard]] const std::vector<std::size_t>& shape() const noexcept { return shape_; }
  /// The number of dimensions.
  [[nodiscard]] std::size_t rank() const noexcept { return shape_.size(); }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }
  /// The elements, row-major.
  [[nodiscard]] std::span<T> values() noexcept { return data_; }
  /// The elements, row-major.
  [[nodiscard]] std::span<const T> values() const noexcept { return data_; }
  /// Pointer to the first element.
  [[nodiscard]] T* data() noexcept { return data_.data(); }
  /// Pointer to the first element.
  [[nodiscard]] const T* data() const noexcept { return data_.data(); }

  /// Element access by multi-index (row-major); the number of indices must equal the rank and each index must lie
  /// in [0, extent) of its axis, or `config_error` is thrown.
  template <std::integral... I>
  [[nodiscard]] T& operator()(I... index) {
    return data_[offset(index...)];
  }
  /// Element access by multi-index (row-major); checked as the non-const form.
  template <std::integral... I>
  [[nodiscard]] const T& operator()(I... index) const {
    return data_[offset(index...)];
  }

  /// Gives the tensor new extents with the same number of elements.
  void reshape(std::vector<std::size_t> extents) {
    const std::size_t n = count(extents);
    if (n != data_.size()) {
      fail("cannot reshape " + std::to_string(data_.size()) + " elements to shape " + shape_text(extents) + " (" +
           std::to_string(n) + " elements)");
    }
    shape_ = std::move(extents);
  }

  friend std::span<T> mwstrat_elements(basic_tensor& t) noexcept { return t.data_; }
  friend std::span<const T> mwstrat_elements(const basic_tensor& t) noexcept { return t.data_; }
  friend const std::vector<std::size_t>& mwstrat_shape(const basic_tensor& t) noexcept { return t.shape_; }

  friend bool operator==(const basic_tensor&, const basic_tensor&) = default;

 private:
  [[noreturn]] static void fail(const std::string& detail) { throw config_error({"tensor"}, detail); }

  static std::string shape_text(const std::vector<std::size_t>& extents) {
    std::string out = "[";
    for (std::size_t i = 0; i < extents.size(); ++i) out += (i ? ", " : "") + std::to_string(extents[i]);
    return out + "]";
  }

  // The product of the extents; one that std::size_t cannot hold is refused rather than wrapped (a wrapped count
  // would allocate too little and let indexing run off the end). Any zero extent makes it 0, whatever the others.
  static std::size_t count(const std::vector<std::size_t>& extents) {
    if (std::find(extents.begin(), extents.end(), std::size_t{0}) != extents.end()) return 0;
    std::size_t n = 1;
    for (const std::size_t extent : extents) {
      if (extent > std::numeric_limits<std::size_t>::max() / n) {
        fail("shape " + shape_text(extents) + " has more elements than std::size_t can count");
      }
      n *= extent;
    }
    return n;
  }

  // The checked index on `axis`: negative or past the extent is a config_error, never a wrapped or aliased offset.
  template <std::integral I>
  std::size_t checked_index(std::size_t axis, I index) const {
    if constexpr (std::is_signed_v<I>) {
      if (index < 0) fail_index(axis, std::to_string(static_cast<std::intmax_t>(index)));
    }
    if (static_cast<std::uintmax_t>(index) >= shape_[axis]) {
      fail_index(axis, std::to_string(static_cast<std::uintmax_t>(index)));
    }
    return static_cast<std::size_t>(index);
  }
  [[noreturn]] void fail_index(std::size_t axis, const std::string& index) const {
    fail("index " + index + " on axis " + std::to_string(axis) + " is outside its extent " +
         std::to_string(shape_[axis]) + " (shape " + shape_text(shape_) + ")");
  }

  template <std::integral... I>
  std::size_t offset(I... index) const {
    if (sizeof...(I) != shape_.size()) {
      fail("tensor of shape " + shape_text(shape_) + " (rank " + std::to_string(shape_.size()) + ") indexed with " +
           std::to_string(sizeof...(I)) + " indices");
    }
    std::size_t off = 0;
    [[maybe_unused]] std::size_t axis = 0;
    ((off = off * shape_[axis] + checked_index(axis, index), ++axis), ...);
    return off;
  }

  std::vector<std::size_t> shape_;
  std::vector<T> data_;
};

/// The reference tensor of floats.
using tensor = basic_tensor<float>;

static_assert(tensor_like<basic_tensor<float>>);
static_assert(tensor_like<const basic_tensor<double>>);

}  // namespace mwstrat
