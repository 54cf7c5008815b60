// The data gradient of a stride-2 3x3 convolution whose input has one vector of channels (16 on AVX-512, 8 with
// AVX2): ResNet's first downsampling layer (16 -> 32 channels at 32x32).
//
// The direct kernels (conv2d_direct.hpp) split this gradient by phase into stride-1 correlations whose tiles hold
// one vector of input channels per pixel, so every multiply-add needs its own broadcast: more loads than
// multiply-adds, and the loads, not the FMA units, set the pace. Here each output-gradient value is broadcast once
// and scattered instead: a tile takes M output-gradient pixels of one row and one kernel row, and adds
// dy[q][oc] * w[ky][kx][.][oc] into the 2(M - 1) + 3 input-gradient pixels the M windows cover (three
// multiply-adds per broadcast, all useful). Windows of neighbouring pixels share a column, as do neighbouring
// tiles: a tile reads back the column the tile before it wrote.
//
// Each input-gradient row takes its (one or two) kernel rows in a fixed order, and within a call the sums run over
// the output channels in order, so the bits depend on the shape only: one task per image, any thread count.

#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/kernels/conv2d_geometry.hpp>
#include <mwstrat/nn/kernels/conv2d_image_hook.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

#define MWSTRAT_SCATTER_UNROLL _Pragma("GCC unroll 32")

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(nn::kernels::scatter) {

using V = detail::vec_t<float>;
inline constexpr int lanes = detail::lanes_v<float>;
inline constexpr int stride = 2;
inline constexpr int kernel = 3;
// Pixels per tile: its 2(M - 1) + 3 accumulators, the three weight vectors and a broadcast fill the registers.
inline constexpr int max_m = (detail::vector_registers - kernel - 1 - (kernel - stride)) / stride;

// dx[(ix0 + p) * lanes ...] for p in [0, P), P = 2(M - 1) + 3, gets the sum over oc of dy[m * OC + oc] *
// w[(kx * OC + oc) * lanes ...] for 2m + kx = p. Pixels outside [0, in_w) are neither read nor written. A pixel
// starts from what dx holds unless this is its row's first kernel row (`first`), and then still does for the
// columns the tile before it in the row wrote (`continues`): the first kernel - stride ones.
template <int M>
void tile(std::size_t OC, const float* dy, const float* w, float* dx, std::ptrdiff_t ix0, std::ptrdiff_t in_w,
          bool first, bool continues) noexcept {
  constexpr int P = stride * (M - 1) + kernel;
  constexpr int shared = kernel - stride;
  V acc[P];
  MWSTRAT_SCATTER_UNROLL for (int p = 0; p < P; ++p) {
    const std::ptrdiff_t ix = ix0 + p;
    acc[p] = V{};
    if (ix >= 0 && ix < in_w && (!first || (continues && p < shared)))
      detail::vload(acc[p], dx + ix * lanes);
  }
  const std::ptrdiff_t oc_step = static_cast<std::ptrdiff_t>(OC) * lanes;
  for (std::size_t oc = 0; oc < OC; ++oc) {
    V wk[kernel];
    MWSTRAT_SCATTER_UNROLL for (int kx = 0; kx < kernel; ++kx) {
      detail::vload(wk[kx], w + kx * oc_step + static_cast<std::ptrdiff_t>(oc) * lanes);
      detail::in_register(wk[kx]);
    }
    MWSTRAT_SCATTER_UNROLL for (int m = 0; m < M; ++m) {
      const float s = dy[static_cast<std::size_t>(m) * OC + oc];
      MWSTRAT_SCATTER_UNROLL for (int kx = 0; kx < kernel; ++kx)
        detail::vfma(acc[stride * m + kx], s, wk[kx]);
    }
  }
  MWSTRAT_SCATTER_UNROLL for (int p = 0; p < P; ++p) {
    const std::ptrdiff_t ix = ix0 + p;
    if (ix >= 0 && ix < in_w) detail::vstore(dx + ix * lanes, acc[p]);
  }
}

using tile_fn = void (*)(std::size_t, const float*, const float*, float*, std::ptrdiff_t, std::ptrdiff_t, bool,
                         bool) noexcept;

template <std::size_t... I>
constexpr std::array<tile_fn, max_m> tile_table(std::index_sequence<I...>) {
  return {&tile<static_cast<int>(I) + 1>...};
}

inline constexpr auto tiles = tile_table(std::make_index_sequence<max_m>{});

inline bool applies(const conv2d_geometry& g) {
  return g.stride_h == stride && g.stride_w == stride && g.kernel_h == kernel && g.kernel_w == kernel &&
         g.in_c == static_cast<std::size_t>(lanes) && g.pad_top < kernel && g.pad_left < kernel;
}

// Pixels per tile for a row of `extent`: the fewest tiles, then equal ones.
inline std::size_t pixels_per_tile(std::size_t extent) {
  const std::size_t count = (extent + max_m - 1) / static_cast<std::size_t>(max_m);
  return (extent + count - 1) / count;
}

inline void backward_data(const conv2d_geometry& g, const float* grad_output, const float* kernel_hwio,
                          float* grad_input, conv2d_workspace& ws, const conv2d_image_hook* hook = nullptr) {
  const std::size_t OC = g.out_c;
  constexpr auto L = static_cast<std::size_t>(lanes);
  constexpr auto K = static_cast<std::size_t>(kernel);
  // packed[ky][kx][oc][ic] = kernel[ky][kx][ic][oc]
  float* packed = conv2d_workspace::ensure(ws.buffer_b, K * K * OC * L);
  for (std::size_t t = 0; t < K * K; ++t)
    for (std::size_t oc = 0; oc < OC; ++oc)
      for (std::size_t ic = 0; ic < L; ++ic) packed[(t * OC + oc) * L + ic] = kernel_hwio[(t * L + ic) * OC + oc];
  const std::size_t m = pixels_per_tile(g.out_w);
  // Columns past the last window's end get no gradient (a `valid` convolution can leave some).
  const std::size_t covered = std::min(g.in_w, (g.out_w - 1) * stride + K - g.pad_left);
  const auto in_w = static_cast<std::ptrdiff_t>(g.in_w);
  for_each_image(g.batch, hook, [&](std::size_t n) {
    const float* dy_image = grad_output + n * g.out_h * g.out_w * OC;
    float* dx_image = grad_input + n * g.in_h * g.in_w * L;
    for (std::size_t iy = 0; iy < g.in_h; ++iy) {
      float* dx_row = dx_image + iy * g.in_w * L;
      bool first = true;
      // The kernel rows reaching this row, the last first: output rows qy with qy * stride + ky = iy + pad_top.
      for (std::size_t ky = K; ky-- > 0;) {
        const std::size_t at = iy + g.pad_top;
        if (at < ky || (at - ky) % stride != 0 || (at - ky) / stride >= g.out_h) continue;
        const float* dy_row = dy_image + (at - ky) / stride * g.out_w * OC;
        const float* w = packed + ky * K * OC * L;
        for (std::size_t q0 = 0; q0 < g.out_w; q0 += m) {
          const std::size_t count = std::min(m, g.out_w - q0);
          const auto ix0 = static_cast<std::ptrdiff_t>(q0 * stride) - static_cast<std::ptrdiff_t>(g.pad_left);
          tiles[count - 1](OC, dy_row + q0 * OC, w, dx_row, ix0, in_w, first, q0 > 0);
        }
        first = false;
      }
      if (first) std::fill_n(dx_row, g.in_w * L, 0.0f);
      else std::fill(dx_row + covered * L, dx_row + g.in_w * L, 0.0f);
    }
  });
}

}  // namespace nn::kernels::scatter

#undef MWSTRAT_SCATTER_UNROLL

#endif  // MWSTRAT_ISA_NS
