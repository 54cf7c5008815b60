// The filter and bias gradients of a convolution with a small patch (kh * kw * c ≤ 12: a first layer on a few
// channels, such as the reference CNN's 3x3 on grey images) and a few vectors of filters, in one pass over the rows
// of the output gradient per group of filters: each row is masked by the ReLU, added to the bias sum and multiplied
// into the patch sums, all held in registers. A group is as many vectors of filters as the register file holds
// sums for (two with 32 registers, one with 16); the caller's rows are a chunk that stays in L2, so a second group
// re-reads them from there. The general path (relu_backward_range, then gemm_nn_block, then a bias loop) goes over
// the same rows three times and keeps its sums in memory.
//
// The sums are the same operations in the same order as the general path's (start at zero, then row by row,
// `acc += cols[m][p] * dz[m]` as one `vfma`, like gemm_nn's micro-kernel), so the bits are the same whichever path
// runs.


#include <cstddef>
#include <utility>

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

inline constexpr std::size_t small_patch_limit = 12;
inline constexpr std::size_t small_filter_limit = 64;  // filters (a multiple of the vector's lanes)

// Vectors of filters per pass: (patch + 1) x NV sums, NV gradient vectors and a few temporaries in registers.
inline constexpr int filter_group_vectors = vector_registers >= 32 ? 2 : 1;

// rows: output positions [0, rows); cols[m][p] (patch P), y[m][f] (the layer's ReLU output, nullptr without a
// ReLU), dy[m][f]; dz[m][f] receives the masked gradient when not nullptr. For the NV vectors of filters at
// column j0: out[p][f] = sum_m cols[m][p] dz[m][f], then out[P][f] = sum_m dz[m][f] (rows of `f` elements).
template <class T, int P, int NV, bool Relu>
void conv_filter_gradient_rows(std::size_t rows, std::size_t f, std::size_t j0, const T* cols, const T* y,
                               const T* dy, T* dz, T* out) noexcept {
  using V = vec_t<T>;
  constexpr int L = lanes_v<T>;
  V acc[P][NV];
  V bias[NV];
  const V zero = {};
  _Pragma("GCC unroll 32") for (int v = 0; v < NV; ++v) {
    bias[v] = zero;
    _Pragma("GCC unroll 32") for (int p = 0; p < P; ++p) acc[p][v] = zero;
  }
  for (std::size_t m = 0; m < rows; ++m) {
    V g[NV];
    const std::size_t at = m * f + j0;
    _Pragma("GCC unroll 32") for (int v = 0; v < NV; ++v) {
      vload(g[v], dy + at + static_cast<std::size_t>(v * L));
      if constexpr (Relu) {
        V yv;
        vload(yv, y + at + static_cast<std::size_t>(v * L));
        g[v] = yv > zero ? g[v] : zero;
      }
      if (dz != nullptr) vstore(dz + at + static_cast<std::size_t>(v * L), g[v]);
      bias[v] += g[v];
    }
    const T* c = cols + m * static_cast<std::size_t>(P);
    _Pragma("GCC unroll 32") for (int p = 0; p < P; ++p) {
      const T s = c[p];
      _Pragma("GCC unroll 32") for (int v = 0; v < NV; ++v) vfma(acc[p][v], s, g[v]);
    }
  }
  _Pragma("GCC unroll 32") for (int v = 0; v < NV; ++v) {
    _Pragma("GCC unroll 32") for (int p = 0; p < P; ++p)
      vstore(out + static_cast<std::size_t>(p) * f + j0 + static_cast<std::size_t>(v * L), acc[p][v]);
    vstore(out + static_cast<std::size_t>(P) * f + j0 + static_cast<std::size_t>(v * L), bias[v]);
  }
}

// Whether conv_filter_gradient handles a patch of `patch` values and `filters` filters.
template <class T>
constexpr bool small_filter_gradient(std::size_t patch, std::size_t filters) noexcept {
  constexpr auto L = static_cast<std::size_t>(lanes_v<T>);
  return patch >= 1 && patch <= small_patch_limit && filters >= L && filters % L == 0 &&
         filters <= small_filter_limit;
}

// Runs the kernel for patch P + 1 over every group of filters when `patch` is P + 1; true if it ran.
template <class T, std::size_t P>
bool conv_filter_gradient_if(std::size_t patch, std::size_t f, std::size_t rows, const T* cols, const T* y,
                             const T* dy, T* dz, T* out) noexcept {
  if (patch != P + 1) return false;
  constexpr int p = static_cast<int>(P + 1);
  constexpr int G = filter_group_vectors;
  constexpr auto L = static_cast<std::size_t>(lanes_v<T>);
  std::size_t j = 0;
  for (; j + G * L <= f; j += G * L) {
    if (y != nullptr) conv_filter_gradient_rows<T, p, G, true>(rows, f, j, cols, y, dy, dz, out);
    else conv_filter_gradient_rows<T, p, G, false>(rows, f, j, cols, y, dy, dz, out);
  }
  for (; j < f; j += L) {
    if (y != nullptr) conv_filter_gradient_rows<T, p, 1, true>(rows, f, j, cols, y, dy, dz, out);
    else conv_filter_gradient_rows<T, p, 1, false>(rows, f, j, cols, y, dy, dz, out);
  }
  return true;
}

// Dispatches to the kernel for (patch, ReLU or not); requires small_filter_gradient<T>(patch, filters).
template <class T>
void conv_filter_gradient(std::size_t patch, std::size_t filters, std::size_t rows, const T* cols, const T* y,
                          const T* dy, T* dz, T* out) noexcept {
  [&]<std::size_t... P>(std::index_sequence<P...>) {
    (void)(conv_filter_gradient_if<T, P>(patch, filters, rows, cols, y, dy, dz, out) || ...);
  }(std::make_index_sequence<small_patch_limit>{});
}

}  // namespace mwstrat::detail

#endif  // MWSTRAT_ISA_NS
