// Winograd's minimal filtering F(m x m, 3x3) for 3x3 stride-1 convolutions (Lavin & Gray, 2016): each m x m block of
// outputs is A^T [(G g G^T) . (B^T d B)] A over an (m+2) x (m+2) block d of the padded input. With m = 4, 36
// multiplies per input and output channel pair give 16 outputs where direct sums need 144 (2.25x fewer); m = 2
// (16 for 4, also 2.25x fewer, but with dearer transforms per output) serves outputs smaller than 4x4. The
// transforms are adds and multiplies by small constants; the element-wise products over channels are (m+2)^2 small
// GEMMs run by the direct path's register-blocked micro-kernel, or by fixed_products below where a layer has as many
// input as output channels of a count fixed at compile time. The data gradient of a 3x3 stride-1 convolution is
// itself one (of the output gradient with the flipped, transposed kernel), so it takes the same path.
//
// Bits: every output is a fixed sequence of operations on its own image, so they depend neither on the thread
// count nor on how the batch is split among replicas. They differ from the direct path's: the transforms round
// values several times the output's size, about 5x the direct sums' error (docs/nn.md has the figures;
// tests/nn/conv2d_kernels_test.cpp bounds it against double sums).
//
// A task is one image, worked in chunks of tiles whose transformed inputs and products stay in about 64 KiB; the
// transformed kernel ((m+2)^2 x in_c x out_c floats) is made once per call.

#include <mwstrat/nn/kernels/conv2d_geometry.hpp>
#include <mwstrat/nn/kernels/conv2d_image_hook.hpp>
#include <mwstrat/nn/detail/parallel.hpp>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <type_traits>

#define MWSTRAT_WINOGRAD_UNROLL _Pragma("GCC unroll 36")

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(nn::kernels::winograd) {

using direct::lanes;
using direct::V;

/// Whether a convolution's shape takes this path: a 3x3 kernel at stride 1 with whole vectors of channels on both
/// sides (the transforms work on vectors of channels, the products' tiles on vectors of output channels).
inline bool applies(const conv2d_geometry& g) {
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride_h == 1 && g.stride_w == 1 &&
         g.in_c % static_cast<std::size_t>(lanes) == 0 && g.out_c % static_cast<std::size_t>(lanes) == 0;
}

// Where element (ky, kx, i, o) of a 3x3 kernel lies: base + ky * s_ky + kx * s_kx + i * s_i + o * s_o. Negative
// strides read it flipped (the data gradient's kernel).
struct kernel_view {
  const float* base;
  std::ptrdiff_t s_ky, s_kx, s_i, s_o;
  [[nodiscard]] const float& at(std::size_t ky, std::size_t kx, std::size_t i, std::size_t o) const noexcept {
    return base[static_cast<std::ptrdiff_t>(ky) * s_ky + static_cast<std::ptrdiff_t>(kx) * s_kx +
                static_cast<std::ptrdiff_t>(i) * s_i + static_cast<std::ptrdiff_t>(o) * s_o];
  }
};

// The one-dimensional transforms of F(M, 3), M = 2 or 4 outputs from alpha = M + 2 inputs (Lavin & Gray's
// interpolation points: 0, 1, -1 for M = 2; 0, 1, -1, 2, -2 for M = 4; and infinity).
template <int M>
struct transforms;

template <>
struct transforms<2> {
  static constexpr int alpha = 4;
  // u = G g, G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1] (X: a float, or a vector of them).
  template <class X>
  static void kernel(const X* g, X* u) noexcept {
    u[0] = g[0];
    u[1] = 0.5f * (g[0] + g[1] + g[2]);
    u[2] = 0.5f * (g[0] - g[1] + g[2]);
    u[3] = g[2];
  }
  // v[i * s] = (B^T d)[i], in place: (d0 - d2, d1 + d2, d2 - d1, d1 - d3).
  static void input(V* v, std::size_t s) noexcept {
    const V a = v[0] - v[2 * s], b = v[s] + v[2 * s], c = v[2 * s] - v[s], e = v[s] - v[3 * s];
    v[0] = a;
    v[s] = b;
    v[2 * s] = c;
    v[3 * s] = e;
  }
  // y[i * ys] = (A^T m)[i], A^T = [1 1 1 0; 0 1 -1 -1].
  static void output(const V* m, std::size_t s, V* y, std::size_t ys) noexcept {
    y[0] = m[0] + m[s] + m[2 * s];
    y[ys] = m[s] - m[2 * s] - m[3 * s];
  }
};

template <>
struct transforms<4> {
  static constexpr int alpha = 6;
  // u = G g, G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1] (X: a float,
  // or a vector of them).
  template <class X>
  static void kernel(const X* g, X* u) noexcept {
    u[0] = g[0] / 4.0f;
    u[1] = -(g[0] + g[1] + g[2]) / 6.0f;
    u[2] = -(g[0] - g[1] + g[2]) / 6.0f;
    u[3] = g[0] / 24.0f + g[1] / 12.0f + g[2] / 6.0f;
    u[4] = g[0] / 24.0f - g[1] / 12.0f + g[2] / 6.0f;
    u[5] = g[2];
  }
  // B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1], in place.
  // Every product is by a power of two, so exact: whether the compiler fuses a multiply with an add (it may
  // choose otherwise where a tile's loads are known zeros) cannot change a bit. 4·d0 − 5·d2 + d4 is therefore
  // taken as 4·(d0 − d2) + (d4 − d2).
  static void input(V* v, std::size_t s) noexcept {
    const V d0 = v[0], d1 = v[s], d2 = v[2 * s], d3 = v[3 * s], d4 = v[4 * s], d5 = v[5 * s];
    const V t0 = d4 - 4.0f * d2, t1 = d3 - 4.0f * d1, t2 = d4 - d2, t3 = 2.0f * (d3 - d1);
    v[0] = 4.0f * (d0 - d2) + t2;
    v[s] = t0 + t1;
    v[2 * s] = t0 - t1;
    v[3 * s] = t2 + t3;
    v[4 * s] = t2 - t3;
    v[5 * s] = 4.0f * (d1 - d3) + (d5 - d3);
  }
  // A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
  static void output(const V* m, std::size_t s, V* y, std::size_t ys) noexcept {
    const V a = m[s] + m[2 * s], b = m[s] - m[2 * s], c = m[3 * s] + m[4 * s], d = m[3 * s] - m[4 * s];
    y[0] = m[0] + a + c;
    y[ys] = b + 2.0f * d;
    y[2 * ys] = a + 4.0f * c;
    y[3 * ys] = b + 8.0f * d + m[5 * s];
  }
  // The filter gradient's transforms (the transposed algorithm: the sum over outputs of dy . y is the sum over the
  // alpha points of (A dy) . (G g) . (B^T d), so its gradient in g is G^T [(A dy) . (B^T d)]).
  // v[i * s] = (A dy)[i] for the M values dy[j * s] (read from v[0], .., v[3 * s]), in place:
  // A = [1 0 0 0; 1 1 1 1; 1 -1 1 -1; 1 2 4 8; 1 -2 4 -8; 0 0 0 1].
  static void output_gradient(V* v, std::size_t s) noexcept {
    const V y0 = v[0], y1 = v[s], y2 = v[2 * s], y3 = v[3 * s];
    const V even = y0 + y2, odd = y1 + y3, even4 = y0 + 4.0f * y2, odd8 = 2.0f * y1 + 8.0f * y3;
    v[s] = even + odd;
    v[2 * s] = even - odd;
    v[3 * s] = even4 + odd8;
    v[4 * s] = even4 - odd8;
    v[5 * s] = y3;
  }
  // g[k * gs] = (G^T m)[k], the 3 taps' gradients from the alpha points' sums m[i * s]:
  // G^T = [1/4 -1/6 -1/6 1/24 1/24 0; 0 -1/6 1/6 1/12 -1/12 0; 0 -1/6 -1/6 1/6 1/6 1].
  static void filter(const V* m, std::size_t s, V* g, std::size_t gs) noexcept {
    const V a = m[s] + m[2 * s], b = m[s] - m[2 * s], c = m[3 * s] + m[4 * s], d = m[3 * s] - m[4 * s];
    g[0] = m[0] / 4.0f - a / 6.0f + c / 24.0f;
    g[gs] = d / 12.0f - b / 6.0f;
    g[2 * gs] = (c - a) / 6.0f + m[5 * s];
  }
};

// U[xi][block][i][width] = (G g G^T)[xi] for the kernel g of input channel i and output channel block * width + ..,
// a vector of output channels at a time (out_c is whole vectors: applies()).
template <int M>
void transform_kernel(const kernel_view& k, std::size_t in_c, std::size_t out_c, std::size_t width, float* U) {
  constexpr std::size_t alpha = transforms<M>::alpha;
  constexpr auto L = static_cast<std::size_t>(lanes);
  const std::size_t blocks = out_c / width;
  detail::parallel_tasks(in_c, [&](std::size_t i) {
    for (std::size_t o = 0; o < out_c; o += L) {
      V t[alpha][3];  // G g: the kernel's columns transformed
      for (std::size_t x = 0; x < 3; ++x) {
        V g[3];
        for (std::size_t y = 0; y < 3; ++y) {
          if (k.s_o == 1) {  // the forward kernel: output channels adjacent
            detail::vload(g[y], &k.at(y, x, i, o));
          } else {  // the data gradient's flipped, transposed kernel: gathered
            alignas(64) float lane_values[L];
            for (std::size_t l = 0; l < L; ++l) lane_values[l] = k.at(y, x, i, o + l);
            detail::vload(g[y], lane_values);
          }
        }
        V u[alpha];
        transforms<M>::kernel(g, u);
        for (std::size_t r = 0; r < alpha; ++r) t[r][x] = u[r];
      }
      const std::size_t blk = o / width, lane = o % width;
      for (std::size_t r = 0; r < alpha; ++r) {
        V u[alpha];
        transforms<M>::kernel(t[r], u);
        for (std::size_t c = 0; c < alpha; ++c)
          detail::vstore(U + (((r * alpha + c) * blocks + blk) * in_c + i) * width + lane, u[c]);
      }
    }
  });
}

// A count known at compile time (std::integral_constant) or only at run time (std::size_t). The transforms take
// either for their channel count and the stride between their alpha^2 points: with both fixed, a tile's 36 loads
// and stores are constant offsets from one address. With run-time strides GCC kept 36 addresses in registers and
// on the stack, and the forward pass of 16 channels spent more time on address arithmetic than on the transforms.
template <std::size_t N>
using fixed = std::integral_constant<std::size_t, N>;

// f(fixed<C>{}) for channel counts of 1, 2, 4 or 8 vectors (ResNet's 16, 32 and 64 on AVX-512 and AVX2), else f(C).
template <class Fn>
void with_fixed_channels(std::size_t C, Fn&& f) {
  constexpr auto L = static_cast<std::size_t>(lanes);
  switch (C) {
    case L: f(fixed<L>{}); break;
    case 2 * L: f(fixed<2 * L>{}); break;
    case 4 * L: f(fixed<4 * L>{}); break;
    case 8 * L: f(fixed<8 * L>{}); break;
    default: f(C);
  }
}

// Whether a channel count is one with_fixed_channels passes as fixed<C>.
inline bool is_fixed_channels(std::size_t C) {
  bool fixed_count = false;
  with_fixed_channels(C, [&](auto c) { fixed_count = !std::is_same_v<decltype(c), std::size_t>; });
  return fixed_count;
}

// The products of a layer with C = F input and output channels fixed at compile time: NV vectors of output
// channels by MR tiles a block (16 accumulators, or the ISA's budget), every row at a fixed offset from one
// address, and no call per point. With MR = 16, 8 and 4 for 16, 32 and 64 channels on AVX-512, a block divides the
// 64, 16 and 4 tiles of ResNet's 32x32, 16x16 and 8x8 images. Each sum runs over k in order from zero, as the
// direct path's micro-kernel does, so the bits are the same as with it.
template <std::size_t C>
struct fixed_products {
  static constexpr std::size_t vectors = C / static_cast<std::size_t>(lanes);
  static constexpr int nv = vectors % 4 == 0 && direct::max_nv >= 4 ? 4 : vectors % 2 == 0 ? 2 : 1;
  static constexpr int mr = std::min(16, direct::accumulator_budget) / nv;
  static constexpr std::size_t width = static_cast<std::size_t>(nv * lanes), blocks = C / width;

  // Mt[i * P * C + xi * C + o] = sum_k Vt[i * P * C + xi * C + k] * U[xi][o / width][k][o % width] for the mr tiles
  // i and every point xi.
  template <std::size_t P>
  static void run(const float* Vt, const float* U, float* Mt) noexcept {
    constexpr std::size_t row = P * C;
    for (std::size_t xi = 0; xi < P; ++xi)
      for (std::size_t blk = 0; blk < blocks; ++blk) {
        const float* w = U + (xi * blocks + blk) * C * width;
        const float* a = Vt + xi * C;
        V acc[mr][nv];
        MWSTRAT_WINOGRAD_UNROLL for (int i = 0; i < mr; ++i)
          MWSTRAT_WINOGRAD_UNROLL for (int v = 0; v < nv; ++v) acc[i][v] = V{};
        _Pragma("GCC unroll 16") for (std::size_t k = 0; k < C; ++k) {
          V bv[nv];
          MWSTRAT_WINOGRAD_UNROLL for (int v = 0; v < nv; ++v) {
            detail::vload(bv[v], w + k * width + static_cast<std::size_t>(v * lanes));
            detail::in_register(bv[v]);
          }
          MWSTRAT_WINOGRAD_UNROLL for (int i = 0; i < mr; ++i) {
            const float x = a[static_cast<std::size_t>(i) * row + k];
            MWSTRAT_WINOGRAD_UNROLL for (int v = 0; v < nv; ++v) detail::vfma(acc[i][v], x, bv[v]);
          }
        }
        float* out = Mt + xi * C + blk * width;
        MWSTRAT_WINOGRAD_UNROLL for (int i = 0; i < mr; ++i)
          MWSTRAT_WINOGRAD_UNROLL for (int v = 0; v < nv; ++v)
            detail::vstore(out + static_cast<std::size_t>(i) * row + static_cast<std::size_t>(v * lanes),
                                      acc[i][v]);
      }
  }
};

// The input transform B^T d B of one tile, its alpha x alpha values read by `load(v, r, x, c)` (the vector of
// channels c.. at row r, column x of the tile); transformed value xi (row r, column x of the alpha x alpha result,
// xi = r * alpha + x) of channel c goes to out[xi * xi_stride + c]. A vector of channels at a time: each column
// transformed, then each row. Channels and Stride: std::size_t or fixed<N>.
template <int M, class Load, class Channels, class Stride>
void transform_input_tile_by(Load&& load, Channels C, float* out, Stride xi_stride) noexcept {
  using T = transforms<M>;
  constexpr std::size_t alpha = T::alpha;
  constexpr auto L = static_cast<std::size_t>(lanes);
  for (std::size_t c = 0; c < static_cast<std::size_t>(C); c += L) {
    V v[alpha * alpha];
    MWSTRAT_WINOGRAD_UNROLL for (std::size_t x = 0; x < alpha; ++x) {
      V col[alpha];
      MWSTRAT_WINOGRAD_UNROLL for (std::size_t r = 0; r < alpha; ++r) load(col[r], r, x, c);
      T::input(col, 1);
      MWSTRAT_WINOGRAD_UNROLL for (std::size_t r = 0; r < alpha; ++r) v[r * alpha + x] = col[r];
    }
    MWSTRAT_WINOGRAD_UNROLL for (std::size_t r = 0; r < alpha; ++r) {
      T::input(v + r * alpha, 1);
      MWSTRAT_WINOGRAD_UNROLL for (std::size_t x = 0; x < alpha; ++x)
        detail::vstore(out + (r * alpha + x) * static_cast<std::size_t>(xi_stride) + c, v[r * alpha + x]);
    }
  }
}

// The input transform of the tile whose top-left input value is d, in an NHWC image `wp` pixels wide with C
// channels that holds the whole tile (a padded copy, or the image itself inside its edges).
template <int M, class Channels, class Stride>
void transform_input_tile(const float* d, std::size_t wp, Channels C, float* out, Stride xi_stride) noexcept {
  const std::size_t row = wp * static_cast<std::size_t>(C);
  transform_input_tile_by<M>(
      [d, row, C](V& v, std::size_t r, std::size_t x, std::size_t c) {
        detail::vload(v, d + r * row + x * static_cast<std::size_t>(C) + c);
      },
      C, out, xi_stride);
}

// The input transform of the tile whose top-left value is at (y0, x0) of an unpadded h x w NHWC image (y0 and x0
// may be negative; values outside the image are the padding's zeros), reading the image in place: a padded copy of
// every image took about 5% of a ResNet-20 training step on the Cascade Lake Xeon, and gathering the tiles that
// overhang an edge into a small padded window cost as much again. Those tiles load their values inside and take
// zeros for the rest; the transform's products are exact (transforms<M>::input), so their bits are a padded copy's.
template <int M, class Channels, class Stride>
void transform_image_tile(const float* image, std::size_t h, std::size_t w, Channels C, std::ptrdiff_t y0,
                          std::ptrdiff_t x0, float* out, Stride xi_stride) noexcept {
  constexpr auto alpha = static_cast<std::ptrdiff_t>(transforms<M>::alpha);
  const auto H = static_cast<std::ptrdiff_t>(h), W = static_cast<std::ptrdiff_t>(w);
  if (y0 >= 0 && x0 >= 0 && y0 + alpha <= H && x0 + alpha <= W) {
    transform_input_tile<M>(image + (static_cast<std::size_t>(y0) * w + static_cast<std::size_t>(x0)) *
                                        static_cast<std::size_t>(C),
                            w, C, out, xi_stride);
    return;
  }
  bool row_in[alpha];
  bool col_in[alpha];
  for (std::ptrdiff_t i = 0; i < alpha; ++i) {
    row_in[i] = y0 + i >= 0 && y0 + i < H;
    col_in[i] = x0 + i >= 0 && x0 + i < W;
  }
  const auto channels = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(C));
  // The address is formed only for a value inside: (y0, x0) itself may lie outside the image.
  transform_input_tile_by<M>(
      [&](V& v, std::size_t r, std::size_t x, std::size_t c) {
        if (row_in[r] && col_in[x])
          detail::vload(v, image + ((y0 + static_cast<std::ptrdiff_t>(r)) * W + x0 +
                                               static_cast<std::ptrdiff_t>(x)) * channels +
                                              static_cast<std::ptrdiff_t>(c));
        else
          v = V{};
      },
      C, out, xi_stride);
}

// The output transform A^T m A plus the bias (nullable) of one tile: point xi of channel f is m[xi * xi_stride + f];
// output (r, x) goes to y[r * y_row + x * F + f] for the rows x cols of its M x M outputs inside the output, or with
// `add` is added to what is there (one rounding more, as adding the finished output to y would round).
template <int M, class Channels, class Stride>
void transform_output_tile(const float* m, Stride xi_stride, Channels F, const float* bias, float* y,
                           std::size_t y_row, std::size_t rows, std::size_t cols, bool add = false) noexcept {
  using T = transforms<M>;
  constexpr std::size_t alpha = T::alpha;
  constexpr auto L = static_cast<std::size_t>(lanes);
  const auto f_count = static_cast<std::size_t>(F);
  const bool whole = rows == static_cast<std::size_t>(M) && cols == static_cast<std::size_t>(M);
  for (std::size_t f = 0; f < f_count; f += L) {
    V s[M * alpha];  // A^T m: each column of the tile's products reduced to M rows
    MWSTRAT_WINOGRAD_UNROLL for (std::size_t x = 0; x < alpha; ++x) {
      V col[alpha];
      MWSTRAT_WINOGRAD_UNROLL for (std::size_t r = 0; r < alpha; ++r)
        detail::vload(col[r], m + (r * alpha + x) * static_cast<std::size_t>(xi_stride) + f);
      T::output(col, 1, s + x, alpha);
    }
    V bv = {};
    if (bias != nullptr) detail::vload(bv, bias + f);
    const auto put = [add](float* to, const V& v) {
      if (add) {
        V old;
        detail::vload(old, to);
        detail::vstore(to, old + v);
      } else {
        detail::vstore(to, v);
      }
    };
    MWSTRAT_WINOGRAD_UNROLL for (std::size_t r = 0; r < static_cast<std::size_t>(M); ++r) {
      V out[M];
      T::output(s + r * alpha, 1, out, 1);
      if (whole) {
        MWSTRAT_WINOGRAD_UNROLL for (std::size_t x = 0; x < static_cast<std::size_t>(M); ++x)
          put(y + r * y_row + x * f_count + f, out[x] + bv);
      } else if (r < rows) {
        for (std::size_t x = 0; x < cols; ++x) put(y + r * y_row + x * f_count + f, out[x] + bv);
      }
    }
  }
}

// Tiles per chunk: the chunk's transformed inputs and products (alpha^2 x tiles x (in_c + out_c) floats) in about
// 64 KiB, and at least one micro-kernel's worth of tiles.
inline std::size_t chunk_tiles(std::size_t positions, std::size_t in_c, std::size_t out_c) {
  const std::size_t per_tile = positions * (in_c + out_c) * sizeof(float);
  return std::max<std::size_t>(direct::max_mr, (std::size_t{64} << 10) / per_tile);
}

// output = the 3x3 stride-1 convolution of input (after `transform`, then zero padding) with the kernel `k` plus
// bias (nullable), by F(M x M, 3 x 3), or with `add` output += it. The geometry's kernel and stride are 3x3 and 1
// (applies()).
template <int M>
void convolve(const conv2d_geometry& g, const float* input, const conv2d_input_transform* transform,
              const kernel_view& k, const float* bias, float* output, conv2d_workspace& ws, bool add = false,
              const conv2d_image_hook* hook = nullptr) {
  using T = transforms<M>;
  constexpr std::size_t alpha = T::alpha, P = alpha * alpha, m = M;
  const std::size_t C = g.in_c, F = g.out_c;
  const std::size_t th = (g.out_h + m - 1) / m, tw = (g.out_w + m - 1) / m, tiles = th * tw;
  const std::size_t hp = m * th + 2, wp = m * tw + 2;
  // With an input transform, each image is transformed into a padded copy first; without, it is read in place.
  std::optional<direct::staged_images> staged;
  if (transform != nullptr)
    staged.emplace(input, g.in_h, g.in_w, C, hp, wp, g.pad_top, g.pad_left, transform, 1, ws.buffer_a);

  const std::size_t vectors = F / static_cast<std::size_t>(lanes);
  // Layers with C = F of a fixed count take fixed_products for whole blocks of tiles (chunks a whole number of
  // them), the planned micro-kernels for the rest; other layers take the planned micro-kernels throughout.
  const bool fixed = C == F && is_fixed_channels(C);
  direct::blocking b;
  std::size_t chunk = 0;
  if (fixed) {
    with_fixed_channels(C, [&](auto Cc) {
      if constexpr (!std::is_same_v<decltype(Cc), std::size_t>) {
        using FP = fixed_products<decltype(Cc)::value>;
        const auto block = static_cast<std::size_t>(FP::mr);
        b = {FP::nv, FP::mr};
        chunk = std::min(tiles, block * std::max<std::size_t>(1, chunk_tiles(P, C, F) / block));
      }
    });
  } else {
    chunk = std::min(tiles, chunk_tiles(P, C, F));
    b = direct::plan(chunk, vectors, C * F * sizeof(float));
  }
  const std::size_t width = static_cast<std::size_t>(b.nv * lanes);
  const std::size_t blocks = vectors / static_cast<std::size_t>(b.nv);
  const std::size_t mr = std::min<std::size_t>(static_cast<std::size_t>(b.mr), direct::max_mr);
  const direct::tile_fn full = direct::tiles[static_cast<std::size_t>(b.nv - 1)][mr - 1];

  float* U = conv2d_workspace::ensure(ws.buffer_b, P * C * F);
  transform_kernel<M>(k, C, F, width, U);

  // Each thread's slot: the chunk's transformed inputs Vt[tile][xi][C], then its products Mt[tile][xi][F] (a tile's
  // points together, so its transforms address them at fixed offsets).
  const std::size_t slot_size = P * chunk * (C + F);
  const auto threads = static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
  float* slots = conv2d_workspace::ensure(ws.buffer_c, threads * slot_size);
  static constexpr std::ptrdiff_t one_tap[1] = {0};
  const auto pad_top = static_cast<std::ptrdiff_t>(g.pad_top), pad_left = static_cast<std::ptrdiff_t>(g.pad_left);

  for_each_image(g.batch, hook, [&](std::size_t n) {
    const float* image = staged ? staged->stage(n, 1) : input + n * g.in_h * g.in_w * C;
    float* out_image = output + n * g.out_h * g.out_w * F;
    const auto slot = static_cast<std::size_t>(std::max(0, tbb::this_task_arena::current_thread_index()));
    float* Vt = slots + slot * slot_size;
    float* Mt = Vt + P * chunk * C;
    for (std::size_t t0 = 0; t0 < tiles; t0 += chunk) {
      const std::size_t count = std::min(chunk, tiles - t0);
      // Input transform B^T d B of every tile of the chunk.
      with_fixed_channels(C, [&](auto Cc) {
        for (std::size_t t = 0; t < count; ++t) {
          const std::size_t ty = (t0 + t) / tw, tx = (t0 + t) % tw;
          if (staged)
            transform_input_tile<M>(image + (m * ty * wp + m * tx) * C, wp, Cc, Vt + t * P * C, Cc);
          else
            transform_image_tile<M>(image, g.in_h, g.in_w, Cc, static_cast<std::ptrdiff_t>(m * ty) - pad_top,
                                    static_cast<std::ptrdiff_t>(m * tx) - pad_left, Vt + t * P * C, Cc);
        }
      });
      // The alpha^2 element-wise products, each a (tiles x C) by (C x F) GEMM.
      std::size_t done = 0;
      if (fixed)
        with_fixed_channels(C, [&](auto Cc) {
          if constexpr (!std::is_same_v<decltype(Cc), std::size_t>) {
            using FP = fixed_products<decltype(Cc)::value>;
            for (; done + FP::mr <= count; done += FP::mr) FP::template run<P>(Vt + done * P * C, U, Mt + done * P * F);
          }
        });
      const std::size_t rest = count - done, rem = rest % mr;
      const direct::tile_fn tail = rem != 0 ? direct::tiles[static_cast<std::size_t>(b.nv - 1)][rem - 1] : nullptr;
      const auto in_px = static_cast<std::ptrdiff_t>(P * C), out_px = static_cast<std::ptrdiff_t>(P * F);
      if (rest != 0)
        for (std::size_t xi = 0; xi < P; ++xi)
          for (std::size_t blk = 0; blk < blocks; ++blk) {
            const float* w = U + (xi * blocks + blk) * C * width;
            const float* in = Vt + xi * C;
            float* out = Mt + xi * F + blk * width;
            std::size_t t = done;
            for (; t + mr <= count; t += mr)
              full(1, one_tap, C, in + t * P * C, in_px, w, out + t * P * F, out_px, nullptr, false);
            if (tail != nullptr) tail(1, one_tap, C, in + t * P * C, in_px, w, out + t * P * F, out_px, nullptr, false);
          }
      // Output transform A^T m A plus the bias; outputs past the edge are dropped.
      with_fixed_channels(F, [&](auto Fc) {
        for (std::size_t t = 0; t < count; ++t) {
          const std::size_t ty = (t0 + t) / tw, tx = (t0 + t) % tw;
          transform_output_tile<M>(Mt + t * P * F, Fc, Fc, bias, out_image + (m * ty * g.out_w + m * tx) * F,
                                   g.out_w * F, std::min(m, g.out_h - m * ty), std::min(m, g.out_w - m * tx), add);
        }
      });
    }
  });
}

// The output tile of the shapes this path runs: F(4x4, 3x3) (2.25 multiplies per output against F(2x2)'s 4, and
// cheaper transforms per output) wherever the output has room for whole 4x4 tiles, F(2x2, 3x3) for smaller ones.
inline int tile_size(const conv2d_geometry& g) { return g.out_h >= 4 && g.out_w >= 4 ? 4 : 2; }

inline void convolve(const conv2d_geometry& g, const float* input, const conv2d_input_transform* transform,
                     const kernel_view& k, const float* bias, float* output, conv2d_workspace& ws, bool add = false,
                     const conv2d_image_hook* hook = nullptr) {
  if (tile_size(g) == 4) convolve<4>(g, input, transform, k, bias, output, ws, add, hook);
  else convolve<2>(g, input, transform, k, bias, output, ws, add, hook);
}

/// The forward pass: output = conv(t(input), kernel) + bias, t the optional input transform; the hook (nullable)
/// runs on each output image once it is complete.
inline void forward(const conv2d_geometry& g, const float* input, const conv2d_input_transform* transform,
                    const float* kernel, const float* bias, float* output, conv2d_workspace& ws,
                    const conv2d_image_hook* hook = nullptr) {
  const auto F = static_cast<std::ptrdiff_t>(g.out_c);
  const auto C = static_cast<std::ptrdiff_t>(g.in_c);
  convolve(g, input, transform, kernel_view{kernel, 3 * C * F, C * F, F, 1}, bias, output, ws, false, hook);
}

/// The data gradient: the output gradient convolved with the kernel flipped in both axes and transposed (input
/// and output channels swapped), over the output gradient padded by 2 - pad on the top and left; with `add`,
/// added to grad_input. The hook (nullable) runs on each image of grad_input once it is complete.
inline void backward_data(const conv2d_geometry& g, const float* grad_output, const float* kernel,
                          float* grad_input, conv2d_workspace& ws, bool add = false,
                          const conv2d_image_hook* hook = nullptr) {
  const conv2d_geometry t{g.batch, g.out_h, g.out_w, g.out_c, g.in_c, 3, 3, 1, 1, 2 - g.pad_top, 2 - g.pad_left,
                          g.in_h, g.in_w};
  const auto OC = static_cast<std::ptrdiff_t>(g.out_c);
  const auto IC = static_cast<std::ptrdiff_t>(g.in_c);
  // (ky, kx, i = oc, o = ic) of the flipped kernel is kernel[2 - ky][2 - kx][ic][oc].
  const kernel_view flipped{kernel + 8 * IC * OC, -3 * IC * OC, -IC * OC, 1, OC};
  convolve(t, grad_output, nullptr, flipped, nullptr, grad_input, ws, add, hook);
}

}  // namespace nn::kernels::winograd

#undef MWSTRAT_WINOGRAD_UNROLL

#endif  // MWSTRAT_ISA_NS
