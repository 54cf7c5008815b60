// The convolution kernels (nn/kernels/conv2d.hpp) against a plain double-precision loop over many geometries,
// every implementation (Winograd, direct and the im2col reference), and their bits under 1 and 2 TBB threads.
#include <mwstrat/nn/detail/counter_random.hpp>
#include <mwstrat/nn/detail/simd.hpp>
#include <mwstrat/nn/kernels/conv2d.hpp>

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace conv2d_kernels_test {

using mwstrat::nn::kernels::conv2d_geometry;
using mwstrat::nn::kernels::conv2d_path;
using mwstrat::nn::kernels::conv2d_workspace;

std::vector<float> filled(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(mwstrat::detail::random_unit(seed, 0, i) * 2.0 - 1.0);
  return v;
}

// a * b + c rounded as the running pass's kernels round it (once where its ISA has FMA).
float running_fmadd(float a, float b, float c) {
  return mwstrat::detail::with_running_pass([&]<class Pass>(Pass) { return Pass::fmadd(a, b, c); });
}

// Keras's geometry for `same` (pads split with the larger half at the bottom/right) or `valid`.
conv2d_geometry make(std::size_t batch, std::size_t h, std::size_t w, std::size_t c, std::size_t f, std::size_t k,
                     std::size_t s, bool same) {
  conv2d_geometry g{batch, h, w, c, f, k, k, s, s, 0, 0, 0, 0};
  if (same) {
    g.out_h = (h + s - 1) / s;
    g.out_w = (w + s - 1) / s;
    const std::size_t need_h = (g.out_h - 1) * s + k;
    const std::size_t need_w = (g.out_w - 1) * s + k;
    g.pad_top = need_h > h ? (need_h - h) / 2 : 0;
    g.pad_left = need_w > w ? (need_w - w) / 2 : 0;
  } else {
    g.out_h = (h - k) / s + 1;
    g.out_w = (w - k) / s + 1;
  }
  return g;
}

std::string describe(const conv2d_geometry& g) {
  return "batch " + std::to_string(g.batch) + " in " + std::to_string(g.in_h) + "x" + std::to_string(g.in_w) + "x" +
         std::to_string(g.in_c) + " out_c " + std::to_string(g.out_c) + " kernel " + std::to_string(g.kernel_h) +
         "x" + std::to_string(g.kernel_w) + " stride " + std::to_string(g.stride_h) + " pad " +
         std::to_string(g.pad_top) + "," + std::to_string(g.pad_left) + " out " + std::to_string(g.out_h) + "x" +
         std::to_string(g.out_w);
}

struct naive_result {
  std::vector<double> y, dx, dw, db;
};

// The definition, in double: y[n][oy][ox][f] = b[f] + sum x[n][iy][ix][c] w[ky][kx][c][f]; dx and dw/db are the
// transposed sums for the upstream gradient dy.
naive_result naive(const conv2d_geometry& g, const std::vector<float>& x, const std::vector<float>& w,
                   const std::vector<float>& b, const std::vector<float>& dy) {
  naive_result r;
  r.y.assign(g.batch * g.out_h * g.out_w * g.out_c, 0.0);
  r.dx.assign(g.batch * g.in_h * g.in_w * g.in_c, 0.0);
  r.dw.assign(g.kernel_h * g.kernel_w * g.in_c * g.out_c, 0.0);
  r.db.assign(g.out_c, 0.0);
  for (std::size_t n = 0; n < g.batch; ++n)
    for (std::size_t oy = 0; oy < g.out_h; ++oy)
      for (std::size_t ox = 0; ox < g.out_w; ++ox)
        for (std::size_t f = 0; f < g.out_c; ++f) {
          const std::size_t yi = ((n * g.out_h + oy) * g.out_w + ox) * g.out_c + f;
          double s = b[f];
          r.db[f] += dy[yi];
          for (std::size_t ky = 0; ky < g.kernel_h; ++ky)
            for (std::size_t kx = 0; kx < g.kernel_w; ++kx) {
              const auto iy = static_cast<std::ptrdiff_t>(oy * g.stride_h + ky) - static_cast<std::ptrdiff_t>(g.pad_top);
              const auto ix = static_cast<std::ptrdiff_t>(ox * g.stride_w + kx) - static_cast<std::ptrdiff_t>(g.pad_left);
              if (iy < 0 || ix < 0 || iy >= static_cast<std::ptrdiff_t>(g.in_h) ||
                  ix >= static_cast<std::ptrdiff_t>(g.in_w))
                continue;
              for (std::size_t c = 0; c < g.in_c; ++c) {
                const std::size_t xi =
                    ((n * g.in_h + static_cast<std::size_t>(iy)) * g.in_w + static_cast<std::size_t>(ix)) * g.in_c + c;
                const std::size_t wi = ((ky * g.kernel_w + kx) * g.in_c + c) * g.out_c + f;
                s += static_cast<double>(x[xi]) * w[wi];
                r.dx[xi] += static_cast<double>(dy[yi]) * w[wi];
                r.dw[wi] += static_cast<double>(dy[yi]) * x[xi];
              }
            }
          r.y[yi] = s;
        }
  return r;
}

struct run_result {
  std::vector<float> y, dx, dw, db;
};

run_result run(const conv2d_geometry& g, conv2d_path path, const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, const std::vector<float>& dy, int threads) {
  run_result r;
  // Poisoned outputs: every element must be overwritten.
  r.y.assign(g.batch * g.out_h * g.out_w * g.out_c, std::nanf(""));
  r.dx.assign(g.batch * g.in_h * g.in_w * g.in_c, std::nanf(""));
  r.dw.assign(w.size(), std::nanf(""));
  r.db.assign(g.out_c, std::nanf(""));
  conv2d_workspace ws;
  ws.path = path;
  tbb::task_arena arena(threads);
  arena.execute([&] {
    mwstrat::nn::kernels::conv2d_forward(g, x.data(), w.data(), b.data(), r.y.data(), ws);
    mwstrat::nn::kernels::conv2d_backward_data(g, dy.data(), w.data(), r.dx.data(), ws);
    mwstrat::nn::kernels::conv2d_backward_filter(g, x.data(), dy.data(), r.dw.data(), r.db.data(), ws);
  });
  return r;
}

// |got - want| within a tolerance scaled by the sum's length (float rounding of a dot product of `terms` terms).
void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double terms,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tol = 2e-6 * std::sqrt(terms) * 4 + 1e-6;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= tol * (1.0 + std::abs(want[i])))) {
      if (bad++ < 3) ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0U) << what;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<conv2d_geometry> geometries() {
  return {
      make(1, 5, 5, 3, 16, 3, 1, true),    make(2, 7, 6, 3, 16, 3, 1, false),  make(2, 8, 8, 16, 16, 3, 1, true),
      make(3, 9, 9, 16, 32, 3, 2, true),   make(2, 8, 8, 16, 32, 3, 2, true),  make(2, 8, 8, 16, 32, 1, 2, true),
      make(2, 8, 8, 32, 64, 1, 2, false),  make(2, 6, 6, 32, 32, 3, 1, true),  make(1, 4, 4, 64, 64, 3, 1, true),
      make(2, 10, 10, 64, 64, 1, 1, true), make(1, 7, 5, 16, 16, 3, 2, false), make(2, 6, 7, 5, 7, 3, 1, true),
      make(2, 6, 6, 16, 16, 2, 2, true),   make(1, 12, 12, 3, 16, 3, 1, true), make(1, 34, 34, 3, 16, 3, 1, false),
      make(1, 6, 6, 16, 16, 4, 1, true),   make(2, 11, 9, 32, 16, 3, 2, true),  make(2, 7, 5, 16, 16, 3, 1, true),
      make(2, 9, 7, 16, 32, 3, 1, false),  make(1, 3, 3, 32, 16, 3, 1, true),   make(1, 40, 3, 16, 16, 3, 1, true),
      make(2, 13, 10, 16, 16, 3, 1, true), make(1, 6, 6, 16, 16, 3, 1, false),
      // Winograd layers with as many input as output channels: whole blocks of fixed_products and tiles left
      // over for the planned micro-kernels (25, 9 and 9 tiles an image)
      make(1, 17, 17, 16, 16, 3, 1, true), make(2, 10, 9, 32, 32, 3, 1, true), make(1, 9, 10, 64, 64, 3, 1, true),
      // padded only after the end, so read in place with overhanging last rows and columns (one kernel column
      // inside at the edge, two, and a stride of 3)
      make(2, 6, 5, 16, 16, 2, 1, true),   make(3, 8, 8, 16, 32, 3, 3, true),  make(2, 10, 12, 32, 48, 3, 2, true),
      // stride-2 3x3 data gradients scattered where the input is one vector of channels (16, 8 or 4 by ISA): a
      // `valid` one that leaves the last row and column without a window, and odd sizes padded before and after
      make(1, 8, 6, 16, 16, 3, 2, false),  make(2, 9, 8, 8, 16, 3, 2, true),   make(2, 7, 7, 4, 16, 3, 2, true),
      make(1, 30, 29, 16, 8, 3, 2, true),  make(1, 6, 23, 8, 16, 3, 2, true),  make(1, 5, 21, 4, 8, 3, 2, true),
      // 1x1 stride-1 layers, read in place, with rows of 5 and 23 pixels
      make(2, 7, 5, 16, 32, 1, 1, false),  make(3, 1, 23, 32, 16, 1, 1, true),
  };
}

void check_path(conv2d_path path) {
  std::uint64_t seed = 17;
  for (const conv2d_geometry& g : geometries()) {
    SCOPED_TRACE(describe(g));
    const auto x = filled(g.batch * g.in_h * g.in_w * g.in_c, seed++);
    const auto w = filled(g.kernel_h * g.kernel_w * g.in_c * g.out_c, seed++);
    const auto b = filled(g.out_c, seed++);
    const auto dy = filled(g.batch * g.out_h * g.out_w * g.out_c, seed++);
    const naive_result want = naive(g, x, w, b, dy);
    const run_result one = run(g, path, x, w, b, dy, 1);
    const double patch = static_cast<double>(g.kernel_h * g.kernel_w * g.in_c);
    expect_near_all(one.y, want.y, patch, "forward");
    expect_near_all(one.dx, want.dx, static_cast<double>(g.kernel_h * g.kernel_w * g.out_c), "backward data");
    expect_near_all(one.dw, want.dw, static_cast<double>(g.batch * g.out_h * g.out_w), "backward filter");
    expect_near_all(one.db, want.db, static_cast<double>(g.batch * g.out_h * g.out_w), "bias gradient");
    const run_result two = run(g, path, x, w, b, dy, 2);
    EXPECT_TRUE(same_bits(one.y, two.y)) << "forward differs between 1 and 2 threads";
    EXPECT_TRUE(same_bits(one.dx, two.dx)) << "backward data differs between 1 and 2 threads";
    EXPECT_TRUE(same_bits(one.dw, two.dw)) << "backward filter differs between 1 and 2 threads";
    EXPECT_TRUE(same_bits(one.db, two.db)) << "bias gradient differs between 1 and 2 threads";
  }
}

TEST(Conv2dKernels, ReferenceMatchesDefinitionAndIsThreadInvariant) { check_path(conv2d_path::reference); }

TEST(Conv2dKernels, AutomaticMatchesDefinitionAndIsThreadInvariant) { check_path(conv2d_path::automatic); }

TEST(Conv2dKernels, DirectMatchesDefinitionAndIsThreadInvariant) { check_path(conv2d_path::direct); }

// A larger batch than one filter-gradient chunk, so the chunked batch sum and its ordered reduction are exercised.
TEST(Conv2dKernels, FilterGradientOverManyChunksIsThreadInvariant) {
  const conv2d_geometry g = make(37, 8, 8, 16, 16, 3, 1, true);
  const auto x = filled(g.batch * g.in_h * g.in_w * g.in_c, 5);
  const auto w = filled(g.kernel_h * g.kernel_w * g.in_c * g.out_c, 6);
  const auto b = filled(g.out_c, 7);
  const auto dy = filled(g.batch * g.out_h * g.out_w * g.out_c, 8);
  const naive_result want = naive(g, x, w, b, dy);
  for (conv2d_path path : {conv2d_path::reference, conv2d_path::automatic}) {
    const run_result one = run(g, path, x, w, b, dy, 1);
    const run_result two = run(g, path, x, w, b, dy, 2);
    expect_near_all(one.dw, want.dw, static_cast<double>(g.batch * g.out_h * g.out_w), "backward filter");
    expect_near_all(one.db, want.db, static_cast<double>(g.batch * g.out_h * g.out_w), "bias gradient");
    EXPECT_TRUE(same_bits(one.dw, two.dw));
    EXPECT_TRUE(same_bits(one.db, two.db));
  }
}

// The reference path and the fast path on the same random operands, drawn with the next four seeds.
std::pair<run_result, run_result> reference_and_fast(const conv2d_geometry& g, std::uint64_t& seed, int threads) {
  const auto x = filled(g.batch * g.in_h * g.in_w * g.in_c, seed++);
  const auto w = filled(g.kernel_h * g.kernel_w * g.in_c * g.out_c, seed++);
  const auto b = filled(g.out_c, seed++);
  const auto dy = filled(g.batch * g.out_h * g.out_w * g.out_c, seed++);
  return {run(g, conv2d_path::reference, x, w, b, dy, threads), run(g, conv2d_path::automatic, x, w, b, dy, threads)};
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// The fast path against the reference on ResNet-CIFAR's layer shapes (batch 2), within float tolerance.
TEST(Conv2dKernels, FastPathAgreesWithReferenceOnResNetShapes) {
  const conv2d_geometry shapes[] = {
      make(2, 34, 34, 3, 16, 3, 1, false), make(2, 32, 32, 16, 16, 3, 1, true), make(2, 32, 32, 16, 32, 3, 2, true),
      make(2, 32, 32, 16, 32, 1, 2, true), make(2, 16, 16, 32, 32, 3, 1, true), make(2, 16, 16, 32, 64, 3, 2, true),
      make(2, 16, 16, 32, 64, 1, 2, true), make(2, 8, 8, 64, 64, 3, 1, true),  make(2, 32, 32, 16, 16, 1, 1, true),
  };
  std::uint64_t seed = 99;
  for (const conv2d_geometry& g : shapes) {
    SCOPED_TRACE(describe(g));
    const auto [ref, fast] = reference_and_fast(g, seed, 2);
    expect_near_all(fast.y, widen(ref.y), static_cast<double>(g.kernel_h * g.kernel_w * g.in_c), "forward");
    expect_near_all(fast.dx, widen(ref.dx), static_cast<double>(g.kernel_h * g.kernel_w * g.out_c), "backward data");
    expect_near_all(fast.dw, widen(ref.dw), static_cast<double>(g.batch * g.out_h * g.out_w), "backward filter");
    expect_near_all(fast.db, widen(ref.db), static_cast<double>(g.batch * g.out_h * g.out_w), "bias gradient");
  }
}

// A strided `same` convolution reads its input in place and runs the overhanging last column down the image in
// tiles of a few rows. On tall images those rows are more than one tile holds, and the last tile is often short:
// every output row down to the corner must still be written (a short last tile once stepped past the corner).
TEST(Conv2dKernels, OverhangingColumnOfATallImageIsWrittenDownToTheCorner) {
  const std::size_t L = mwstrat::detail::lanes_v<float>;
  std::uint64_t seed = 7;
  for (std::size_t h = 16; h <= 40; h += 2)
    for (const std::size_t f : {L, 2 * L, 4 * L}) {
      const conv2d_geometry g = make(1, h, 8, 8, f, 3, 2, true);
      ASSERT_EQ(g.pad_top + g.pad_left, 0u);  // the in-place forward pass
      SCOPED_TRACE(describe(g));
      const auto [ref, fast] = reference_and_fast(g, seed, 1);
      expect_near_all(fast.y, widen(ref.y), static_cast<double>(g.kernel_h * g.kernel_w * g.in_c), "forward");
    }
}

// The filter gradient's transposed tile (vectors along the patch values) does, for each sum, what a register tile
// does: one fused multiply-add (or, without FMA, a multiply then an add) per pixel, in pixel order, continued across
// calls from its state. So its bits equal that sequence done one value at a time, whichever block of rows a call has.
TEST(Conv2dKernels, TransposedFilterTileSumsEachPixelInOrderAcrossCalls) {
  namespace direct = mwstrat::nn::kernels::direct;
  constexpr std::size_t L = direct::lanes, MRC = direct::transposed_mrc;
  for (const std::size_t nvk : {std::size_t{2}, std::size_t{3}}) {
    SCOPED_TRACE("vectors of patch values: " + std::to_string(nvk));
    const std::size_t K = nvk * L, rows = 5, cols = 7, a_px = K + L, a_row = cols * a_px + 3, g_px = MRC + 5;
    const auto a = filled(rows * a_row, 61);
    const auto g = filled(rows * cols * g_px, 62);
    std::vector<float> state(MRC * K, 0.0f);
    const auto tile = nvk == 3 ? &direct::filter_tile_transposed<3, MRC> : &direct::filter_tile_transposed<2, MRC>;
    const auto ap = static_cast<std::ptrdiff_t>(a_px), ar = static_cast<std::ptrdiff_t>(a_row);
    const auto gp = static_cast<std::ptrdiff_t>(g_px);
    tile(2, cols, a.data(), ar, ap, g.data(), gp, state.data());  // rows 0-1, then 2-4 from the state
    tile(3, cols, a.data() + 2 * a_row, ar, ap, g.data() + 2 * cols * g_px, gp, state.data());
    std::size_t differ = 0;
    for (std::size_t j = 0; j < MRC; ++j)
      for (std::size_t k = 0; k < K; ++k) {
        float want = 0.0f;
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < cols; ++c) {
            const float x = a[r * a_row + c * a_px + k], y = g[(r * cols + c) * g_px + j];
#if defined(__FMA__)
            want = std::fma(x, y, want);
#else
            const volatile float product = x * y;  // rounded apart, as the kernel does without FMA
            want = want + product;
#endif
          }
        const float got = state[j * K + k];
        if (std::memcmp(&got, &want, sizeof got) != 0 && differ++ < 3)
          ADD_FAILURE() << "patch value " << k << ", output channel " << j << ": got " << got << ", want " << want;
      }
    EXPECT_EQ(differ, 0U);
  }
}

// The data gradient of a stride-2 3x3 convolution whose input is one vector of channels is scattered
// (conv2d_scatter.hpp) on both the automatic and the direct path: the same bits as the scatter kernel called alone.
// Other shapes (another stride, kernel or channel count) never take it. The entry point runs the kernels of the
// ISA this process chose (nn/kernels/isa.hpp), so "alone" is that pass's scatter kernel, at its vector width.
TEST(Conv2dKernels, StrideTwoThreeByThreeDataGradientOfOneChannelVectorIsScattered) {
  mwstrat::detail::with_running_pass([]<class Pass>(Pass) {
    const auto L = static_cast<std::size_t>(Pass::float_lanes);
    EXPECT_TRUE(Pass::scatter_applies(make(2, 32, 32, L, 32, 3, 2, true)));
    EXPECT_FALSE(Pass::scatter_applies(make(2, 32, 32, L, 32, 3, 1, true)));
    EXPECT_FALSE(Pass::scatter_applies(make(2, 32, 32, L, 32, 1, 2, true)));
    EXPECT_FALSE(Pass::scatter_applies(make(2, 32, 32, 2 * L, 32, 3, 2, true)));
    for (const conv2d_geometry& g : {make(2, 32, 32, L, 32, 3, 2, true), make(1, 9, 11, L, 16, 3, 2, true)}) {
      SCOPED_TRACE(describe(g));
      const auto w = filled(g.kernel_h * g.kernel_w * g.in_c * g.out_c, 61);
      const auto dy = filled(g.batch * g.out_h * g.out_w * g.out_c, 62);
      std::vector<float> alone(g.batch * g.in_h * g.in_w * g.in_c, 7.0f);
      conv2d_workspace ws;
      Pass::scatter_backward_data(g, dy.data(), w.data(), alone.data(), ws);
      for (conv2d_path path : {conv2d_path::automatic, conv2d_path::direct}) {
        std::vector<float> dx(alone.size(), -3.0f);  // every element overwritten, whatever was there
        conv2d_workspace pws;
        pws.path = path;
        mwstrat::nn::kernels::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), pws);
        EXPECT_TRUE(same_bits(dx, alone));
      }
    }
  });
}

// The forward pass with an input transform equals the transform applied first, then the plain forward pass; the
// padding stays zero (a shift would otherwise leak into the border). Bit for bit, though the plain pass reads the
// image in place where the transformed one reads a padded copy (Winograd's edge tiles, the direct path's
// overhanging column of a strided layer): the graph executor folds inference batch norms on that.
TEST(Conv2dKernels, InputTransformIsAppliedBeforeZeroPadding) {
  for (bool relu : {true, false})
    for (conv2d_path path : {conv2d_path::automatic, conv2d_path::reference})
      for (const conv2d_geometry& g : {make(2, 8, 8, 16, 16, 3, 1, true), make(2, 9, 9, 16, 32, 3, 2, true),
                                       make(2, 8, 8, 16, 32, 3, 2, true), make(2, 3, 3, 16, 16, 3, 1, true)}) {
        SCOPED_TRACE(describe(g));
        const auto x = filled(g.batch * g.in_h * g.in_w * g.in_c, 41);
        const auto w = filled(g.kernel_h * g.kernel_w * g.in_c * g.out_c, 42);
        const auto b = filled(g.out_c, 43);
        const auto scale = filled(g.in_c, 44);
        const auto shift = filled(g.in_c, 45);
        std::vector<float> t(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) {
          const std::size_t c = i % g.in_c;
          const float v = running_fmadd(x[i], scale[c], shift[c]);
          t[i] = relu && v < 0.0f ? 0.0f : v;
        }
        std::vector<float> want(g.batch * g.out_h * g.out_w * g.out_c), got(want.size(), std::nanf(""));
        conv2d_workspace ws;
        ws.path = path;
        mwstrat::nn::kernels::conv2d_forward(g, t.data(), w.data(), b.data(), want.data(), ws);
        const mwstrat::nn::kernels::conv2d_input_transform transform{scale.data(), shift.data(), relu};
        mwstrat::nn::kernels::conv2d_forward(g, x.data(), transform, w.data(), b.data(), got.data(), ws);
        const std::vector<double> wanted(want.begin(), want.end());
        expect_near_all(got, wanted, static_cast<double>(g.kernel_h * g.kernel_w * g.in_c), "transformed forward");
        EXPECT_TRUE(same_bits(got, want));
      }
}

// What an image hook saw: each image's turn, the sum of its output when the hook ran, and whether every image came
// after the one before it in its group.
struct hook_record {
  const float* output = nullptr;
  std::size_t image_size = 0, group = 1;
  std::mutex m;
  std::vector<std::size_t> calls;       // per image
  std::vector<double> sums;             // per image, when its hook ran
  std::vector<std::ptrdiff_t> last_of;  // per group: the last image seen
  bool in_order = true;

  static void run(void* self, std::size_t n) {
    auto& r = *static_cast<hook_record*>(self);
    double s = 0;
    for (std::size_t i = 0; i < r.image_size; ++i) s += r.output[n * r.image_size + i];
    const std::lock_guard<std::mutex> lock(r.m);
    ++r.calls[n];
    r.sums[n] = s;
    const auto expected = n % r.group == 0 ? std::ptrdiff_t{-1} : static_cast<std::ptrdiff_t>(n) - 1;
    if (r.last_of[n / r.group] != expected) r.in_order = false;
    r.last_of[n / r.group] = static_cast<std::ptrdiff_t>(n);
  }
};

// Runs `call(hook)` for groups of 1, of 3 (the last one short) and larger than the batch, on an output of `images`
// images of `image` floats that starts as NaN (or, with `add`, as ones to add to), and checks that the hook ran
// once on each image, after the image was final, in order within its group.
template <class Call>
void check_image_hook(std::size_t images, std::size_t image, float* out, bool add, Call&& call) {
  for (std::size_t group : {std::size_t{1}, std::size_t{3}, std::size_t{16}}) {
    SCOPED_TRACE("group " + std::to_string(group));
    std::fill(out, out + images * image, add ? 1.0f : std::nanf(""));
    hook_record r;
    r.output = out;
    r.image_size = image;
    r.group = group;
    r.calls.assign(images, 0);
    r.sums.assign(images, 0.0);
    r.last_of.assign(images, -1);
    call(mwstrat::nn::kernels::conv2d_image_hook{&r, &hook_record::run, group});
    EXPECT_TRUE(r.in_order);
    for (std::size_t n = 0; n < images; ++n) {
      EXPECT_EQ(r.calls[n], 1u) << "image " << n;
      double finished = 0;
      for (std::size_t i = 0; i < image; ++i) finished += out[n * image + i];
      EXPECT_EQ(r.sums[n], finished) << "image " << n;  // NaN (unfinished) compares unequal
    }
  }
}

TEST(Conv2dKernels, ImageHookRunsOnceOnEachFinishedImageInOrderWithinItsGroup) {
  // The forward pass on Winograd's path (with and without an input transform), the direct one (stride 2) and the
  // reference; the data gradient on Winograd's (overwriting and adding), the scattered or direct one (stride 2 from
  // one vector of channels), the direct one (stride 2 from two), the reference, and the reference adding.
  namespace k = mwstrat::nn::kernels;
  struct path_case {
    const char* name;
    conv2d_geometry g;
    conv2d_path path;
  };
  const std::size_t L = mwstrat::detail::lanes_v<float>;
  const path_case cases[] = {{"winograd", make(7, 8, 8, 16, 16, 3, 1, true), conv2d_path::automatic},
                             {"stride 2 from one vector", make(7, 9, 9, L, 32, 3, 2, true), conv2d_path::automatic},
                             {"direct", make(7, 9, 9, 2 * L, 32, 3, 2, true), conv2d_path::automatic},
                             {"reference", make(7, 8, 8, 3, 5, 3, 1, true), conv2d_path::reference}};
  for (const auto& c : cases) {
    const conv2d_geometry& g = c.g;
    SCOPED_TRACE(std::string(c.name) + ", " + describe(g));
    const std::vector<float> x = filled(g.batch * g.in_h * g.in_w * g.in_c, 51);
    const std::vector<float> w = filled(9 * g.in_c * g.out_c, 52);
    const std::vector<float> dy = filled(g.batch * g.out_h * g.out_w * g.out_c, 55);
    const std::vector<float> scale = filled(g.in_c, 53), shift = filled(g.in_c, 54);
    const std::size_t out_image = g.out_h * g.out_w * g.out_c, in_image = g.in_h * g.in_w * g.in_c;
    std::vector<float> y(g.batch * out_image), dx(g.batch * in_image);
    conv2d_workspace ws;
    ws.path = c.path;
    {
      SCOPED_TRACE("forward");
      check_image_hook(g.batch, out_image, y.data(), false, [&](const k::conv2d_image_hook& h) {
        k::conv2d_forward(g, x.data(), w.data(), nullptr, y.data(), ws, &h);
      });
    }
    {
      SCOPED_TRACE("forward, input transform");
      check_image_hook(g.batch, out_image, y.data(), false, [&](const k::conv2d_image_hook& h) {
        k::conv2d_forward(g, x.data(), {scale.data(), shift.data(), true}, w.data(), nullptr, y.data(), ws, &h);
      });
    }
    for (bool add : {false, true}) {
      SCOPED_TRACE(add ? "data gradient, added" : "data gradient");
      check_image_hook(g.batch, in_image, dx.data(), add, [&](const k::conv2d_image_hook& h) {
        k::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), ws, add, &h);
      });
    }
  }
}

TEST(Conv2dKernels, RefusesBadGeometryNamingTheCall) {
  conv2d_workspace ws;
  conv2d_geometry g = make(1, 4, 4, 3, 4, 3, 1, true);
  g.stride_h = 0;
  std::vector<float> buf(1024, 0.0f);
  try {
    mwstrat::nn::kernels::conv2d_forward(g, buf.data(), buf.data(), nullptr, buf.data(), ws);
    ADD_FAILURE() << "a zero stride was accepted";
  } catch (const mwstrat::config_error& e) {
    EXPECT_EQ(e.component(), "nn");
    EXPECT_NE(std::string(e.what()).find("conv2d_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("stride"), std::string::npos) << e.what();
  }
}

}  // namespace conv2d_kernels_test
