// The ReLU mask applied to a gradient: shared by the ReLU layer and the layers that fuse a ReLU.

#include <mwstrat/error.hpp>
#include <mwstrat/nn/detail/aligned.hpp>
#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/detail/layer_impl.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

// dz[i] = dy[i] where y[i] > 0, else 0, for i in [b, e): a vector select, no branch on the data.
template <class T>
void relu_backward_range(std::size_t b, std::size_t e, const T* y, const T* dy, T* dz) noexcept {
  using V = vec_t<T>;
  constexpr std::size_t L = lanes_v<T>;
  const V zero = {};
  std::size_t i = b;
  for (; i + L <= e; i += L) {
    V yv;
    V g;
    vload(yv, y + i);
    vload(g, dy + i);
    const V r = yv > zero ? g : zero;
    vstore(dz + i, r);
  }
  for (; i < e; ++i) dz[i] = y[i] > T{} ? dy[i] : T{};
}

// The same over [0, n) in fixed chunks.
template <class T>
void relu_backward(std::size_t n, const T* y, const T* dy, T* dz) {
  parallel_chunks(n, 1 << 16, [y, dy, dz](std::size_t b, std::size_t e) { relu_backward_range(b, e, y, dy, dz); });
}

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
