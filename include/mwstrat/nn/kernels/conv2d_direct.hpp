// The fast convolution path: direct convolution over a zero-padded NHWC copy of the input (or over the input
// itself where nothing pads before its start: see forward_reads_in_place), with register-blocked
// micro-kernels sized for the ISA at hand (nn/detail/simd.hpp: 16 floats per vector and 32 registers with
// AVX-512, 8 and 16 with AVX2/FMA, 4 and 16 otherwise) and weights repacked once per call into blocks of NV
// vectors of output channels.
//
// One micro-kernel does the forward pass and the data gradient: MR output pixels of one row (or, at an overhanging
// edge, of one column) by NV vectors of output channels, summing over "taps" (kernel rows) whose inner run of K
// values is contiguous in the padded input (the kx and channel indices of a kernel row, [kx][c] in both the padded
// NHWC image and the HWIO kernel).
// The data gradient of a strided convolution is split by the phase (iy mod stride, ix mod stride) of the input
// position: each phase is a stride-1 correlation of the padded output gradient with a subset of the (flipped,
// transposed) taps, so no multiply is spent on zeros.
//
// The filter gradient's tiles and sums are in conv2d_direct_filter.hpp.

#include <mwstrat/nn/detail/parallel.hpp>
#include <mwstrat/nn/kernels/conv2d_geometry.hpp>
#include <mwstrat/nn/kernels/conv2d_image_hook.hpp>

#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <utility>

#define MWSTRAT_CONV_UNROLL _Pragma("GCC unroll 32")

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(nn::kernels::direct) {

using V = detail::vec_t<float>;
inline constexpr int lanes = detail::lanes_v<float>;
// Accumulators a micro-kernel may hold (the rest of the register file takes the weight vectors and a broadcast).
inline constexpr int accumulator_budget = detail::vector_registers >= 32 ? 24 : 12;
inline constexpr int max_nv = detail::vector_registers >= 32 ? 4 : 2;
inline constexpr int max_mr = 12;  // pixels per tile: more would not keep their addresses in registers

// ---------------------------------------------------------------------------------------------- micro-kernels

// out[i * out_px + v * L] = start + sum_t sum_k in[tap_off[t] + i * in_px + k] * w[(t * K + k) * NV*L + v * L],
// where start is out's own value (accumulate: the sums of earlier taps, continued in the same order, so splitting
// the taps over calls gives the same bits), else the bias (or zero).
template <int MR, int NV>
void tile(std::size_t taps, const std::ptrdiff_t* tap_off, std::size_t K, const float* in, std::ptrdiff_t in_px,
          const float* w, float* out, std::ptrdiff_t out_px, const float* bias, bool accumulate) noexcept {
  constexpr std::size_t width = static_cast<std::size_t>(NV * lanes);
  V acc[MR][NV];
  if (accumulate) {
    MWSTRAT_CONV_UNROLL for (int i = 0; i < MR; ++i)
      MWSTRAT_CONV_UNROLL for (int v = 0; v < NV; ++v) detail::vload(acc[i][v], out + i * out_px + v * lanes);
  } else {
    MWSTRAT_CONV_UNROLL for (int v = 0; v < NV; ++v) {
      V init = {};
      if (bias != nullptr) detail::vload(init, bias + v * lanes);
      MWSTRAT_CONV_UNROLL for (int i = 0; i < MR; ++i) acc[i][v] = init;
    }
  }
  for (std::size_t t = 0; t < taps; ++t) {
    const float* a = in + tap_off[t];
    const float* b = w + t * K * width;
    for (std::size_t k = 0; k < K; ++k) {
      V bv[NV];
      MWSTRAT_CONV_UNROLL for (int v = 0; v < NV; ++v) {
        detail::vload(bv[v], b + k * width + static_cast<std::size_t>(v * lanes));
        detail::in_register(bv[v]);
      }
      MWSTRAT_CONV_UNROLL for (int i = 0; i < MR; ++i) {
        const float s = a[i * in_px + static_cast<std::ptrdiff_t>(k)];
        MWSTRAT_CONV_UNROLL for (int v = 0; v < NV; ++v) detail::vfma(acc[i][v], s, bv[v]);
      }
    }
  }
  MWSTRAT_CONV_UNROLL for (int i = 0; i < MR; ++i)
    MWSTRAT_CONV_UNROLL for (int v = 0; v < NV; ++v) detail::vstore(out + i * out_px + v * lanes, acc[i][v]);
}

// Table of the instantiations a plan may pick: [NV - 1][MR - 1], null where MR * NV exceeds the budget.
using tile_fn = void (*)(std::size_t, const std::ptrdiff_t*, std::size_t, const float*, std::ptrdiff_t, const float*,
                         float*, std::ptrdiff_t, const float*, bool) noexcept;

template <int NV, int MR>
constexpr tile_fn tile_entry() {
  if constexpr (MR * NV <= accumulator_budget) return &tile<MR, NV>;
  else return nullptr;
}

template <int NV, std::size_t... M>
constexpr std::array<tile_fn, max_mr> tile_row(std::index_sequence<M...>) {
  return {tile_entry<NV, static_cast<int>(M) + 1>()...};
}

template <std::size_t... N>
constexpr std::array<std::array<tile_fn, max_mr>, max_nv> tile_table(std::index_sequence<N...>) {
  return {tile_row<static_cast<int>(N) + 1>(std::make_index_sequence<max_mr>{})...};
}

inline constexpr auto tiles = tile_table(std::make_index_sequence<max_nv>{});

// ---------------------------------------------------------------------------------------------- planning

struct blocking {
  int nv = 1;  // vectors of output channels per tile
  int mr = 1;  // pixels (or, for the filter gradient, patch values) per tile
};

// Cycles per step of k of a forward / data-gradient tile of m pixels by n vectors: its FMAs (at least 8: the FMA
// latency hidden by independent sums), or, when a pass's weights do not stay in L1 (`weights_in_l2`), the time
// to bring its n weight vectors from L2 (measured: about 8 bytes a cycle sustained on the EPYC this was tuned
// on), whichever is longer.
inline double tile_cycles(std::size_t m, std::size_t n, bool weights_in_l2) {
  const double fma = static_cast<double>(std::max<std::size_t>(m * n, 8));
  const double fetch = weights_in_l2 ? static_cast<double>(n * sizeof(V)) / 8.0 : 0.0;
  return std::max(fma, fetch) + 0.01 * fetch;  // ties go to the tile that moves fewer bytes
}

// Cycles per step of k to cover `extent` pixels by n vectors with tiles of m pixels and one tile for the rest (a
// tile that leaves a remainder loses ties: equal tiles keep the same code path hot).
inline double run_cycles(std::size_t extent, std::size_t m, std::size_t n, bool weights_in_l2) {
  return static_cast<double>(extent / m) * tile_cycles(m, n, weights_in_l2) +
         (extent % m != 0 ? tile_cycles(extent % m, n, weights_in_l2) + 0.5 : 0.0);
}

// Bytes of weights one pass of tiles over a row may use and still find them in L1: the taps of a block are split
// into passes of this size (the input rows and the output tile take the rest of the 32-48 KiB).
inline constexpr std::size_t l1_weight_bytes = std::size_t{16} << 10;

// Bytes of weights a single tap may hold and still stay in L1 while its pass streams one input row and one output
// row past them (a few KiB each). Measured on the Cascade Lake Xeon (32 KiB L1): the 16x16 32->64 stride-2 layer
// ran about 1.2x faster with 24 KiB per tap (4 vectors) than with 12 KiB (2 vectors).
inline constexpr std::size_t l1_tap_bytes = std::size_t{24} << 10;

// A plan with more blocks (fewer vectors per tile) must be cheaper than this share of the best plan with fewer
// blocks to be taken: every block streams the whole input again, which the cycle count leaves out (measured on the
// layer above, 2 vectors at 2% fewer counted cycles than 4 ran about 1.2x slower).
inline constexpr double more_blocks_margin = 0.95;

// Taps per pass for a block whose tap holds `tap_bytes` of weights (at least one).
inline std::size_t taps_per_pass(std::size_t tap_bytes) {
  return std::max<std::size_t>(1, l1_weight_bytes / std::max<std::size_t>(tap_bytes, 1));
}

// The (NV, MR) that covers `extent` pixels by `vectors` vectors of output channels in the fewest cycles, for a
// kernel whose weights are `tap_bytes` per tap (kernel row) over all output channels; a smaller NV (more blocks)
// only when it is clearly cheaper (more_blocks_margin).
inline blocking plan(std::size_t extent, std::size_t vectors, std::size_t tap_bytes) {
  blocking best;
  double best_cost = 1e300;
  for (int nv = max_nv; nv >= 1; --nv) {
    const auto n = static_cast<std::size_t>(nv);
    if (vectors % n != 0) continue;
    const bool in_l2 = tap_bytes / (vectors / n) > l1_tap_bytes;
    const int mr_top = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(std::min(max_mr, accumulator_budget / nv)), extent));
    for (int mr = mr_top; mr >= 1; --mr) {
      const auto m = static_cast<std::size_t>(mr);
      const double cost = run_cycles(extent, m, n, in_l2) * static_cast<double>(vectors / n);
      const double bar = best.nv > nv ? best_cost * more_blocks_margin : best_cost;  // best has fewer blocks
      if (cost < bar - 1e-9) {
        best_cost = cost;
        best = {nv, mr};
      }
    }
  }
  return best;
}

// Whether the fast path handles a layer whose tiles cover `channels` output channels.
inline bool applies(std::size_t channels) { return channels % static_cast<std::size_t>(lanes) == 0; }

// The data gradient's phases (stride_h * stride_w) are planned on the stack, up to this many.
inline constexpr std::size_t max_phases = 16;
inline bool backward_data_applies(const conv2d_geometry& g) {
  return applies(g.in_c) && g.stride_h * g.stride_w <= max_phases;
}

// ---------------------------------------------------------------------------------------------- padding

// dst[r][c][ch] (rows x cols) = src[r - top][c - left][ch] inside the source image, zero outside; with a transform,
// max(0, x * scale[ch] + shift[ch]) (relu) or x * scale[ch] + shift[ch] inside (padding stays zero).
inline void pad_image(const float* src, std::size_t h, std::size_t w, std::size_t ch, float* dst, std::size_t rows,
                      std::size_t cols, std::size_t top, std::size_t left,
                      const conv2d_input_transform* transform) noexcept {
  for (std::size_t r = 0; r < rows; ++r) {
    float* dr = dst + r * cols * ch;
    if (r < top || r >= top + h) {
      std::fill(dr, dr + cols * ch, 0.0f);
      continue;
    }
    const std::size_t copy = std::min(w, cols - std::min(cols, left));
    std::fill(dr, dr + left * ch, 0.0f);
    const float* sr = src + (r - top) * w * ch;
    float* dc = dr + left * ch;
    if (transform == nullptr) {
      std::memcpy(dc, sr, copy * ch * sizeof(float));
    } else {
      for (std::size_t x = 0; x < copy; ++x)
        for (std::size_t c = 0; c < ch; ++c) {
          float v = detail::fmadd(sr[x * ch + c], transform->scale[c], transform->shift[c]);
          if (transform->relu) v = v > 0.0f ? v : 0.0f;
          dc[x * ch + c] = v;
        }
    }
    std::fill(dr + (left + copy) * ch, dr + cols * ch, 0.0f);
  }
}

// Zero-padded copies of images, made where they are used: a task asks for images [n0, n1) and gets them in the
// running thread's own slot of the workspace, still in that core's cache when the task reads them (a copy of the
// whole batch made up front would go out to memory and come back). Only a copy: any thread count gives the same
// bits. Tasks must not nest (a slot is the thread's until its task ends).
struct staged_images {
  const float* src;
  std::size_t h, w, ch, rows, cols, top, left;
  const conv2d_input_transform* transform;
  std::size_t per_slot;  // images a slot holds
  bool in_place;         // no padding and no transform: the tasks read the source itself
  float* slots = nullptr;

  [[nodiscard]] std::size_t image_size() const noexcept { return rows * cols * ch; }

  staged_images(const float* source, std::size_t height, std::size_t width, std::size_t channels,
                std::size_t padded_rows, std::size_t padded_cols, std::size_t pad_top, std::size_t pad_left,
                const conv2d_input_transform* t, std::size_t images_per_task, detail::aligned_vector<float>& buffer)
      : src(source), h(height), w(width), ch(channels), rows(padded_rows), cols(padded_cols), top(pad_top),
        left(pad_left), transform(t), per_slot(images_per_task),
        in_place(t == nullptr && pad_top == 0 && pad_left == 0 && padded_rows == height && padded_cols == width) {
    if (in_place) return;
    const auto threads = static_cast<std::size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
    slots = conv2d_workspace::ensure(buffer, threads * per_slot * image_size());
  }

  // Pads images [n0, n0 + count) (count <= per_slot) into the calling thread's slot and returns it.
  const float* stage(std::size_t n0, std::size_t count) const noexcept {
    if (in_place) return src + n0 * h * w * ch;
    const auto slot = static_cast<std::size_t>(std::max(0, tbb::this_task_arena::current_thread_index()));
    float* dst = slots + slot * per_slot * image_size();
    for (std::size_t i = 0; i < count; ++i)
      pad_image(src + (n0 + i) * h * w * ch, h, w, ch, dst + i * image_size(), rows, cols, top, left, transform);
    return dst;
  }
};

// ---------------------------------------------------------------------------------------------- forward

// Rows (or columns) of the padded input: the input after `pad` zeros, extended with zeros to what the last window
// reads (and never shorter than the input, so a window-free input, such as a 1x1 convolution's, is read in place).
inline std::size_t padded_extent(std::size_t in, std::size_t pad, std::size_t out, std::size_t stride,
                                 std::size_t kernel) {
  return std::max(in + pad, (out - 1) * stride + kernel);
}

// How many windows lie wholly inside the input along one axis with no padding before it: the first ones; later
// windows overhang the end, where the padding is zero.
inline std::size_t windows_inside(std::size_t in, std::size_t out, std::size_t stride, std::size_t kernel) {
  return in < kernel ? 0 : std::min(out, (in - kernel) / stride + 1);
}

// The forward pass reads the input in place (no padded copy) when nothing pads it before its start and no
// transform applies: a strided `same` convolution pads only after the end (TensorFlow puts the odd pad there), so
// only its last rows and columns have windows that overhang the end, where the padding would add zero products.
// An overhanging row takes only its kernel rows that lie inside; an overhanging column is run down the image as
// tiles of pixels one row apart, on a copy of the weights that keeps only the kernel columns inside. The copy of a
// whole padded image cost about a sixth of a stride-2 3x3 layer's time on the Intel Xeon.
inline bool forward_reads_in_place(const conv2d_geometry& g, const conv2d_input_transform* transform) {
  return transform == nullptr && g.pad_top == 0 && g.pad_left == 0 && (g.out_h - 1) * g.stride_h < g.in_h &&
         (g.out_w - 1) * g.stride_w < g.in_w && windows_inside(g.in_w, g.out_w, g.stride_w, g.kernel_w) > 0;
}

// The pixels per tile for `extent` pixels with `nv` vectors of output channels (weights in L1).
inline std::size_t pixels_per_tile(std::size_t extent, int nv) {
  std::size_t best = 1;
  double best_cost = 1e300;
  const std::size_t top =
      std::min<std::size_t>(static_cast<std::size_t>(std::min(max_mr, accumulator_budget / nv)), extent);
  for (std::size_t m = top; m >= 1; --m) {
    const double cost = run_cycles(extent, m, static_cast<std::size_t>(nv), false);
    if (cost < best_cost - 1e-9) {
      best_cost = cost;
      best = m;
    }
  }
  return best;
}

inline void forward(const conv2d_geometry& g, const float* input, const conv2d_input_transform* transform,
                    const float* kernel, const float* bias, float* output, conv2d_workspace& ws,
                    const conv2d_image_hook* hook = nullptr) {
  const bool in_place = forward_reads_in_place(g, transform);
  const std::size_t hp = in_place ? g.in_h : padded_extent(g.in_h, g.pad_top, g.out_h, g.stride_h, g.kernel_h);
  const std::size_t wp = in_place ? g.in_w : padded_extent(g.in_w, g.pad_left, g.out_w, g.stride_w, g.kernel_w);
  const std::size_t C = g.in_c;
  const std::size_t K = g.kernel_w * C;  // a kernel row's contiguous run
  // In place, columns [cols_inside, out_w) overhang the input's right end, and rows [rows_inside, out_h) its bottom.
  const std::size_t cols_inside = in_place ? windows_inside(g.in_w, g.out_w, g.stride_w, g.kernel_w) : g.out_w;
  const std::size_t rows_inside = in_place ? windows_inside(g.in_h, g.out_h, g.stride_h, g.kernel_h) : g.out_h;
  const staged_images staged(input, g.in_h, g.in_w, C, hp, wp, g.pad_top, g.pad_left, transform, 1, ws.buffer_a);

  const std::size_t vectors = g.out_c / lanes;
  const blocking b = plan(cols_inside, vectors, K * g.out_c * sizeof(float));
  const std::size_t width = static_cast<std::size_t>(b.nv * lanes);
  const std::size_t blocks = vectors / static_cast<std::size_t>(b.nv);
  const std::size_t block_size = g.kernel_h * K * width;  // one block's packed weights
  const std::size_t edges = g.out_w - cols_inside;
  float* packed = conv2d_workspace::ensure(ws.buffer_b, (1 + edges) * blocks * block_size);
  // packed[block][ky][kx*C + c][width] = kernel[ky][kx][c][block * width + ...]; then, for each overhanging column
  // e, the same with only its first K_e = (in_w - x0) * C values of each kernel row.
  const auto edge_run = [&](std::size_t e) { return (g.in_w - (cols_inside + e) * g.stride_w) * C; };
  const auto edge_weights = [&](std::size_t e) { return packed + (1 + e) * blocks * block_size; };
  detail::parallel_tasks(blocks, [&](std::size_t blk) {
    for (std::size_t t = 0; t < g.kernel_h * K; ++t)
      std::memcpy(packed + blk * block_size + t * width, kernel + t * g.out_c + blk * width, width * sizeof(float));
    for (std::size_t e = 0; e < edges; ++e) {
      const std::size_t run = edge_run(e);
      for (std::size_t ky = 0; ky < g.kernel_h; ++ky)
        for (std::size_t k = 0; k < run; ++k)
          std::memcpy(edge_weights(e) + blk * g.kernel_h * run * width + (ky * run + k) * width,
                      kernel + (ky * K + k) * g.out_c + blk * width, width * sizeof(float));
    }
  });
  if (ws.taps.size() < g.kernel_h) ws.taps.resize(g.kernel_h);
  std::ptrdiff_t* tap_off = ws.taps.data();
  for (std::size_t ky = 0; ky < g.kernel_h; ++ky) tap_off[ky] = static_cast<std::ptrdiff_t>(ky * wp * C);

  const auto nv = static_cast<std::size_t>(b.nv - 1);
  const tile_fn full = tiles[nv][static_cast<std::size_t>(b.mr - 1)];
  const std::size_t mr = static_cast<std::size_t>(b.mr);
  const std::size_t rem = cols_inside % mr;
  const tile_fn tail = rem != 0 ? tiles[nv][rem - 1] : nullptr;
  // An overhanging column's tiles: pixels one row apart.
  const std::size_t mr_down = rows_inside > 0 ? pixels_per_tile(rows_inside, b.nv) : 1;
  const auto in_px = static_cast<std::ptrdiff_t>(g.stride_w * C);
  const auto out_px = static_cast<std::ptrdiff_t>(g.out_c);
  const auto in_px_down = static_cast<std::ptrdiff_t>(g.stride_h * wp * C);
  const auto out_px_down = static_cast<std::ptrdiff_t>(g.out_w * g.out_c);
  const std::size_t pass = taps_per_pass(K * width * sizeof(float));
  // One task per image (per group of the hook's images): its padded copy (if any) is made by the task, in cache.
  for_each_image(g.batch, hook, [&](std::size_t n) {
    const float* image = staged.stage(n, 1);
    float* out_image = output + n * g.out_h * g.out_w * g.out_c;
    // Per block and output row, the taps in passes of L1-sized weights, each pass continuing the row's sums while
    // the row and its input rows are still in L1. (Each pass over the whole image before the next, the order
    // before, read every output row back from L2: the strided 3x3 forward passes were slower by 1.06-1.33x in
    // the medians of 6 of 7 interleaved sweeps on the Cascade Lake VM, and faster in one.)
    for (std::size_t blk = 0; blk < blocks; ++blk) {
      const float* bb = bias != nullptr ? bias + blk * width : nullptr;
      for (std::size_t oy = 0; oy < g.out_h; ++oy) {
        const std::size_t rows_in = std::min(g.kernel_h, hp - oy * g.stride_h);  // kernel rows inside the input
        for (std::size_t t0 = 0; t0 < rows_in; t0 += pass) {
          const bool accumulate = t0 > 0;
          const float* w = packed + blk * block_size + t0 * K * width;
          const std::size_t taps = std::min(pass, rows_in - t0);
          const float* in_row = image + oy * g.stride_h * wp * C;
          float* out_row = out_image + oy * g.out_w * g.out_c + blk * width;
          std::size_t ox = 0;
          for (; ox + mr <= cols_inside; ox += mr)
            full(taps, tap_off + t0, K, in_row + ox * g.stride_w * C, in_px, w, out_row + ox * g.out_c, out_px, bb,
                 accumulate);
          if (tail != nullptr)
            tail(taps, tap_off + t0, K, in_row + ox * g.stride_w * C, in_px, w, out_row + ox * g.out_c, out_px, bb,
                 accumulate);
        }
      }
      // Overhanging columns (in place only), all taps in one call: the same sums in the same order as above.
      for (std::size_t e = 0; e < edges; ++e) {
        const std::size_t ox = cols_inside + e, run = edge_run(e);
        const float* w = edge_weights(e) + blk * g.kernel_h * run * width;
        const float* in_col = image + ox * g.stride_w * C;
        float* out_col = out_image + ox * g.out_c + blk * width;
        std::size_t oy = 0;
        for (std::size_t m = 0; oy < rows_inside; oy += m) {  // the last tile may be short: oy stops at rows_inside
          m = std::min(mr_down, rows_inside - oy);
          tiles[nv][m - 1](g.kernel_h, tap_off, run, in_col + oy * g.stride_h * wp * C, in_px_down, w,
                           out_col + oy * g.out_w * g.out_c, out_px_down, bb, false);
        }
        for (; oy < g.out_h; ++oy)  // the corner: its rows inside only
          tiles[nv][0](std::min(g.kernel_h, hp - oy * g.stride_h), tap_off, run, in_col + oy * g.stride_h * wp * C, 0,
                       w, out_col + oy * g.out_w * g.out_c, 0, bb, false);
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------- data gradient

// One phase of the data gradient along one axis: the kernel offsets k that reach input positions
// i = phase + stride * j, from output position j + (phase + pad - k) / stride.
struct axis_phase {
  std::size_t first_k = 0;   // the largest such k (its output offset is the smallest)
  std::size_t count = 0;     // how many (k = first_k, first_k - stride, ...)
  std::ptrdiff_t offset = 0; // output offset of first_k: (phase + pad - first_k) / stride
  std::size_t positions = 0; // input positions of this phase: j in [0, positions)
};

inline axis_phase phase_of(std::size_t phase, std::size_t pad, std::size_t kernel, std::size_t stride,
                           std::size_t extent) {
  axis_phase p;
  p.positions = phase < extent ? (extent - 1 - phase) / stride + 1 : 0;
  for (std::size_t k = kernel; k-- > 0;) {
    const auto diff = static_cast<std::ptrdiff_t>(phase + pad) - static_cast<std::ptrdiff_t>(k);
    const auto s = static_cast<std::ptrdiff_t>(stride);
    if (((diff % s) + s) % s != 0) continue;
    if (p.count == 0) {
      p.first_k = k;
      p.offset = diff >= 0 ? diff / s : -((-diff) / s);
    }
    ++p.count;
  }
  return p;
}

inline void backward_data(const conv2d_geometry& g, const float* grad_output, const float* kernel, float* grad_input,
                          conv2d_workspace& ws, const conv2d_image_hook* hook = nullptr) {
  const std::size_t sh = g.stride_h, sw = g.stride_w;
  const std::size_t OC = g.out_c, IC = g.in_c;
  // The padded output gradient: every phase's reads (offset + j over its positions, count taps) stay inside it.
  std::ptrdiff_t lo_r = 0, hi_r = static_cast<std::ptrdiff_t>(g.out_h), lo_c = 0, hi_c = static_cast<std::ptrdiff_t>(g.out_w);
  for (std::size_t p = 0; p < sh; ++p) {
    const axis_phase a = phase_of(p, g.pad_top, g.kernel_h, sh, g.in_h);
    if (a.count == 0 || a.positions == 0) continue;
    lo_r = std::min(lo_r, a.offset);
    hi_r = std::max(hi_r, a.offset + static_cast<std::ptrdiff_t>(a.positions - 1 + a.count));
  }
  for (std::size_t p = 0; p < sw; ++p) {
    const axis_phase a = phase_of(p, g.pad_left, g.kernel_w, sw, g.in_w);
    if (a.count == 0 || a.positions == 0) continue;
    lo_c = std::min(lo_c, a.offset);
    hi_c = std::max(hi_c, a.offset + static_cast<std::ptrdiff_t>(a.positions - 1 + a.count));
  }
  const auto top = static_cast<std::size_t>(-lo_r), left = static_cast<std::size_t>(-lo_c);
  const auto hp = static_cast<std::size_t>(hi_r - lo_r), wp = static_cast<std::size_t>(hi_c - lo_c);
  const staged_images staged(grad_output, g.out_h, g.out_w, OC, hp, wp, top, left, nullptr, 1, ws.buffer_a);

  const std::size_t vectors = IC / lanes;
  const std::size_t phases = sh * sw;  // at most max_phases (backward_data_applies)
  // Packed weights of each phase: [block][ky tap][kx tap * OC + oc][width] = kernel[ky][kx][block*width + .][oc],
  // ky = first_ky - stride * tap, kx = first_kx - stride * tap (ascending output offset).
  std::size_t total = 0;
  for (std::size_t p = 0; p < phases; ++p) {
    const axis_phase r = phase_of(p / sw, g.pad_top, g.kernel_h, sh, g.in_h);
    const axis_phase c = phase_of(p % sw, g.pad_left, g.kernel_w, sw, g.in_w);
    total += r.count * c.count * OC * IC;
  }
  float* packed = conv2d_workspace::ensure(ws.buffer_b, std::max<std::size_t>(total, 1));
  if (ws.taps.size() < phases * g.kernel_h) ws.taps.resize(phases * g.kernel_h);
  struct phase_plan {
    std::size_t py, px;
    axis_phase r, c;
    tile_fn full, tail;
    std::size_t mr, width, blocks, K, block_size;
    const float* weights;
    const std::ptrdiff_t* taps;
  };
  std::array<phase_plan, max_phases> plans{};
  float* phase_weights = packed;
  for (std::size_t p = 0; p < phases; ++p) {
    phase_plan& pl = plans[p];
    pl.py = p / sw;
    pl.px = p % sw;
    pl.r = phase_of(pl.py, g.pad_top, g.kernel_h, sh, g.in_h);
    pl.c = phase_of(pl.px, g.pad_left, g.kernel_w, sw, g.in_w);
    const axis_phase& r = pl.r;
    const axis_phase& c = pl.c;
    if (r.positions == 0 || c.positions == 0 || r.count == 0 || c.count == 0) continue;
    const blocking b = plan(c.positions, vectors, c.count * OC * IC * sizeof(float));
    pl.width = static_cast<std::size_t>(b.nv * lanes);
    pl.blocks = vectors / static_cast<std::size_t>(b.nv);
    pl.K = c.count * OC;
    pl.block_size = r.count * pl.K * pl.width;
    pl.mr = static_cast<std::size_t>(b.mr);
    pl.full = tiles[static_cast<std::size_t>(b.nv - 1)][pl.mr - 1];
    const std::size_t rem = c.positions % pl.mr;
    pl.tail = rem != 0 ? tiles[static_cast<std::size_t>(b.nv - 1)][rem - 1] : nullptr;
    pl.weights = phase_weights;
    const std::size_t width = pl.width, K = pl.K, block_size = pl.block_size;
    detail::parallel_tasks(pl.blocks, [&](std::size_t blk) {
      float* wb = phase_weights + blk * block_size;
      for (std::size_t ty = 0; ty < r.count; ++ty)
        for (std::size_t tx = 0; tx < c.count; ++tx) {
          const std::size_t ky = r.first_k - sh * ty, kx = c.first_k - sw * tx;
          const float* src = kernel + (ky * g.kernel_w + kx) * IC * OC + blk * width * OC;  // [ic][oc]
          float* dst = wb + (ty * K + tx * OC) * width;                                   // [oc][ic]
          for (std::size_t i = 0; i < width; ++i)
            for (std::size_t o = 0; o < OC; ++o) dst[o * width + i] = src[i * OC + o];
        }
    });
    std::ptrdiff_t* tap_off = ws.taps.data() + p * g.kernel_h;
    for (std::size_t ty = 0; ty < r.count; ++ty)
      tap_off[ty] = (r.offset + static_cast<std::ptrdiff_t>(ty)) * static_cast<std::ptrdiff_t>(wp * OC) +
                    c.offset * static_cast<std::ptrdiff_t>(OC);
    pl.taps = tap_off;
    phase_weights += pl.blocks * block_size;
  }
  // Positions no kernel offset reaches (a stride larger than the kernel, as in a strided 1x1 convolution) have a
  // zero gradient. They are zeroed a group of `sh` input rows at a time, just before the first phase with taps
  // computes its row of that group, so the zero stores drain while the tiles compute (zeroing the whole image
  // first took 45% of a strided 1x1 layer's data gradient on the Intel Xeon, the core waiting on the stores).
  std::array<bool, max_phases> dead{};
  bool unreached = false;
  std::size_t first_live = phases;
  for (std::size_t p = 0; p < phases; ++p) {
    dead[p] = plans[p].r.count == 0 || plans[p].c.count == 0;
    unreached = unreached || (dead[p] && plans[p].r.positions > 0 && plans[p].c.positions > 0);
    if (!dead[p] && plans[p].r.positions > 0 && plans[p].c.positions > 0 && first_live == phases) first_live = p;
  }
  const std::size_t groups = (g.in_h + sh - 1) / sh;
  const auto zero_group = [&](float* image, std::size_t j) {
    for (std::size_t iy = sh * j; iy < std::min(g.in_h, sh * j + sh); ++iy) {
      float* row = image + iy * g.in_w * IC;
      const std::size_t py = iy % sh;
      bool all_dead = true;
      for (std::size_t px = 0; px < sw; ++px) all_dead = all_dead && dead[py * sw + px];
      if (all_dead) {
        std::fill_n(row, g.in_w * IC, 0.0f);
        continue;
      }
      for (std::size_t px = 0; px < sw; ++px)
        if (dead[py * sw + px])
          for (std::size_t ix = px; ix < g.in_w; ix += sw) std::fill_n(row + ix * IC, IC, 0.0f);
    }
  };
  const auto in_px = static_cast<std::ptrdiff_t>(OC);
  const auto out_px = static_cast<std::ptrdiff_t>(sw * IC);
  // One task per image (per group of the hook's images): its padded output gradient is made by the task, in cache,
  // and read by every phase.
  for_each_image(g.batch, hook, [&](std::size_t n) {
    const float* image = staged.stage(n, 1);
    float* dx_image = grad_input + n * g.in_h * g.in_w * IC;
    if (unreached && first_live == phases)
      for (std::size_t j = 0; j < groups; ++j) zero_group(dx_image, j);
    for (std::size_t p = 0; p < phases; ++p) {
      const phase_plan& pl = plans[p];
      if (pl.r.positions == 0 || pl.c.positions == 0 || pl.r.count == 0 || pl.c.count == 0) continue;
      const std::size_t pass = taps_per_pass(pl.K * pl.width * sizeof(float));
      // Per block and row, the taps in passes (the row stays in L1 between them, as in the forward pass).
      for (std::size_t blk = 0; blk < pl.blocks; ++blk) {
        const bool zeroes = unreached && p == first_live && blk == 0;
        for (std::size_t j = 0; j < pl.r.positions; ++j) {
          if (zeroes) zero_group(dx_image, j);
          const float* in_row = image + ((j + top) * wp + left) * OC;
          float* o = grad_input + ((n * g.in_h + pl.py + sh * j) * g.in_w + pl.px) * IC + blk * pl.width;
          for (std::size_t t0 = 0; t0 < pl.r.count; t0 += pass) {
            const std::size_t taps = std::min(pass, pl.r.count - t0);
            const float* w = pl.weights + blk * pl.block_size + t0 * pl.K * pl.width;
            const bool accumulate = t0 > 0;
            std::size_t q = 0;
            for (; q + pl.mr <= pl.c.positions; q += pl.mr)
              pl.full(taps, pl.taps + t0, pl.K, in_row + q * OC, in_px, w, o + q * sw * IC, out_px, nullptr, accumulate);
            if (pl.tail != nullptr)
              pl.tail(taps, pl.taps + t0, pl.K, in_row + q * OC, in_px, w, o + q * sw * IC, out_px, nullptr,
                      accumulate);
          }
        }
        if (zeroes)
          for (std::size_t j = pl.r.positions; j < groups; ++j) zero_group(dx_image, j);
      }
    }
  });
}

}  // namespace nn::kernels::direct

#undef MWSTRAT_CONV_UNROLL

#endif  // MWSTRAT_ISA_NS
