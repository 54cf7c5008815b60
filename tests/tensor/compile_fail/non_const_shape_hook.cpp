// A shape hook that takes a non-const reference (an easy slip). mwstrat reads shapes through const references, so
// the hook could never be called; passing it over would save the matrix flat. Expected: the static_assert in
// `mwstrat::shape` naming the hook.
#include <mwstrat/tensor/concepts.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace my {
struct matrix {
  std::size_t rows, cols;
  std::vector<float> data;
};
inline std::span<float> mwstrat_elements(matrix& m) { return m.data; }
inline std::span<const float> mwstrat_elements(const matrix& m) { return m.data; }
inline std::vector<std::size_t> mwstrat_shape(matrix& m) { return {m.rows, m.cols}; }  // should take const matrix&
}  // namespace my

std::vector<std::size_t> misuse() {
  my::matrix m{2, 3, std::vector<float>(6)};
  return mwstrat::shape(m);
}
