#pragma once
/// \file
/// The reference tensor: an owning, contiguous, row-major array with a shape.

#include <mwstrat/error.hpp>
#include <mwstrat/tensor/concepts.hpp>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mwstrat {

/// An owning, contiguous, row-major tensor of `T` (float by default). Plugs into `tensor_like` through the
/// `mwstrat_elements` / `mwstrat_shape` hooks like any user type would.
template <tensor_element T = float>
class basic_tensor {
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
    if (count(shape_) != data_.size()) {
      throw config_error({"tensor"}, "tensor of " + std::to_string(count(shape_)) + " elements given " +
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

  /// Element access by multi-index (row-major); the number of indices must equal the rank.
  template <class... I>
  [[nodiscard]] T& operator()(I... index) {
    return data_[offset({static_cast<std::size_t>(index)...})];
  }
  /// Element access by multi-index (row-major).
  template <class... I>
  [[nodiscard]] const T& operator()(I... index) const {
    return data_[offset({static_cast<std::size_t>(index)...})];
  }

  /// Gives the tensor new extents with the same number of elements.
  void reshape(std::vector<std::size_t> extents) {
    if (count(extents) != data_.size()) {
      throw config_error({"tensor"}, "cannot reshape " + std::to_string(data_.size()) + " elements to " +
                                         std::to_string(count(extents)));
    }
    shape_ = std::move(extents);
  }

  friend std::span<T> mwstrat_elements(basic_tensor& t) noexcept { return t.data_; }
  friend std::span<const T> mwstrat_elements(const basic_tensor& t) noexcept { return t.data_; }
  friend const std::vector<std::size_t>& mwstrat_shape(const basic_tensor& t) noexcept { return t.shape_; }

  friend bool operator==(const basic_tensor&, const basic_tensor&) = default;

 private:
  static std::size_t count(const std::vector<std::size_t>& extents) {
    return std::accumulate(extents.begin(), extents.end(), std::size_t{1}, std::multiplies<>{});
  }
  std::size_t offset(std::initializer_list<std::size_t> index) const {
    if (index.size() != shape_.size()) {
      throw config_error({"tensor"}, "tensor of rank " + std::to_string(shape_.size()) + " indexed with " +
                                         std::to_string(index.size()) + " indices");
    }
    std::size_t off = 0;
    std::size_t axis = 0;
    for (auto i : index) off = off * shape_[axis++] + i;
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
