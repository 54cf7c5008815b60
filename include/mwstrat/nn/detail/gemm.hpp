// Cache-blocked, vectorised GEMM for the nn kernels, in two forms that between them avoid every transpose the
// reference CNN would otherwise need:
//
//   gemm_nn: C[M x N] = bias + sum_k A(i, k) * B[k][j]    (outer products; A by any strides, B rows contiguous)
//   gemm_nt: C[M x N] = bias + sum_k A[i][k] * B[j][k]    (dot products; both operands contiguous along k)
//
// Determinism: every output element's sum is formed by one task in an order fixed by the shapes alone; a long
// reduction is split into chunks of a fixed length whose partial results are added afterwards in chunk order.
// So results are bitwise identical for any number of threads.

#include <mwstrat/nn/detail/parallel.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#define MWSTRAT_NN_UNROLL _Pragma("GCC unroll 32")

#ifndef MWSTRAT_ISA_NS
#include <mwstrat/nn/detail/kernel_isas.hpp>  // this file's code, for every ISA
#else

namespace MWSTRAT_ISA_NS(detail) {

// ---------------------------------------------------------------------------------------------- gemm_nn
// A(i, k) = a[i * ars + k * aks]; B[k][j] = b[k * ldb + j]; C[i][j] = c[i * ldc + j].

// Vectors of columns in the widest micro-kernel: 6 rows x W accumulators, plus W of B and one broadcast, must fit
// the register file (32 registers: W = 4; 16: W = 2).
inline constexpr int nn_wide_vectors = vector_registers >= 32 ? 4 : 2;

// stream: store C with non-temporal stores (C 64-byte aligned, ldc a whole number of lines; see vstream).
template <class T, int MR, int NV>
inline void kernel_nn(std::size_t K, const T* a, std::ptrdiff_t ars, std::ptrdiff_t aks, const T* b,
                      std::size_t ldb, T* c, std::size_t ldc, const T* bias, bool accumulate,
                      bool stream = false) noexcept {
  using V = vec_t<T>;
  constexpr int L = lanes_v<T>;
  V acc[MR][NV];
  MWSTRAT_NN_UNROLL
  for (int v = 0; v < NV; ++v) {
    V init = {};
    if (bias != nullptr) vload(init, bias + v * L);
    MWSTRAT_NN_UNROLL
    for (int i = 0; i < MR; ++i) {
      if (accumulate) {
        vload(acc[i][v], c + i * ldc + v * L);
      } else {
        acc[i][v] = init;
      }
    }
  }
  const T* arow[MR];
  MWSTRAT_NN_UNROLL
  for (int i = 0; i < MR; ++i) arow[i] = a + i * ars;
  for (std::size_t k = 0; k < K; ++k) {
    V bv[NV];
    const T* bk = b + k * ldb;
    MWSTRAT_NN_UNROLL
    for (int v = 0; v < NV; ++v) {
      vload(bv[v], bk + v * L);
      in_register(bv[v]);
    }
    const std::ptrdiff_t ko = static_cast<std::ptrdiff_t>(k) * aks;
    MWSTRAT_NN_UNROLL
    for (int i = 0; i < MR; ++i) {
      const T s = arow[i][ko];
      MWSTRAT_NN_UNROLL
      for (int v = 0; v < NV; ++v) vfma(acc[i][v], s, bv[v]);
    }
  }
  if (stream) {
    MWSTRAT_NN_UNROLL
    for (int i = 0; i < MR; ++i)
      MWSTRAT_NN_UNROLL
      for (int v = 0; v < NV; ++v) vstream(c + i * ldc + v * L, acc[i][v]);
    return;
  }
  MWSTRAT_NN_UNROLL
  for (int i = 0; i < MR; ++i)
    MWSTRAT_NN_UNROLL
    for (int v = 0; v < NV; ++v) vstore(c + i * ldc + v * L, acc[i][v]);
}

template <class T, int NV, int MR, int R = 1>
inline void kernel_nn_rows(int rows, std::size_t K, const T* a, std::ptrdiff_t ars, std::ptrdiff_t aks,
                           const T* b, std::size_t ldb, T* c, std::size_t ldc, const T* bias, bool accumulate,
                           bool stream = false) noexcept {
  if constexpr (R <= MR) {
    if (rows == R) {
      kernel_nn<T, R, NV>(K, a, ars, aks, b, ldb, c, ldc, bias, accumulate, stream);
    } else {
      kernel_nn_rows<T, NV, MR, R + 1>(rows, K, a, ars, aks, b, ldb, c, ldc, bias, accumulate, stream);
    }
  }
}

template <class T>
inline void scalar_nn(std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1, std::size_t K, const T* a,
                      std::ptrdiff_t ars, std::ptrdiff_t aks, const T* b, std::size_t ldb, T* c, std::size_t ldc,
                      const T* bias, bool accumulate = false) noexcept {
  for (std::size_t i = m0; i < m1; ++i) {
    for (std::size_t j = n0; j < n1; ++j) {
      T s = accumulate ? c[i * ldc + j] : bias != nullptr ? bias[j] : T{};
      const T* ai = a + static_cast<std::ptrdiff_t>(i) * ars;
      for (std::size_t k = 0; k < K; ++k) s += ai[static_cast<std::ptrdiff_t>(k) * aks] * b[k * ldb + j];
      c[i * ldc + j] = s;
    }
  }
}

// One strip of NV vectors of columns [j, j + NV*L) for rows [m0, m1). A strip of B whose rows lie far apart
// (a wide matrix) is first copied, kb rows at a time, into a contiguous buffer on the stack: that keeps it in L1
// and in a few TLB entries while every row tile reuses it. Blocking k does not change any sum: a partial sum is
// stored in C and reloaded exactly, so the additions happen in the same order. `accumulate`: C already holds the
// partial sums of earlier k (a caller's own k blocking), which continue in order.
template <class T, int NV, int MR>
inline void gemm_nn_strip(std::size_t m0, std::size_t m1, std::size_t j, std::size_t K, const T* a,
                          std::ptrdiff_t ars, std::ptrdiff_t aks, const T* b, std::size_t ldb, T* c, std::size_t ldc,
                          const T* bias, bool accumulate_in = false) noexcept {
  constexpr std::size_t L = lanes_v<T>;
  constexpr std::size_t width = NV * L;
  constexpr std::size_t kb = 128;
  const T* bias_j = bias != nullptr ? bias + j : nullptr;
  auto run = [&](std::size_t k0, std::size_t kk, const T* bp, std::size_t ldbp) {
    const T* ak = a + static_cast<std::ptrdiff_t>(k0) * aks;
    const bool accumulate = accumulate_in || k0 > 0;
    std::size_t i = m0;
    for (; i + MR <= m1; i += MR)
      kernel_nn<T, MR, NV>(kk, ak + static_cast<std::ptrdiff_t>(i) * ars, ars, aks, bp, ldbp, c + i * ldc + j, ldc,
                           bias_j, accumulate);
    if (i < m1)
      kernel_nn_rows<T, NV, MR>(static_cast<int>(m1 - i), kk, ak + static_cast<std::ptrdiff_t>(i) * ars, ars, aks, bp,
                                ldbp, c + i * ldc + j, ldc, bias_j, accumulate);
  };
  if (ldb == width || m1 - m0 <= static_cast<std::size_t>(MR)) {
    run(0, K, b + j, ldb);
    return;
  }
  alignas(64) T pack[kb * width];
  for (std::size_t k0 = 0; k0 < K || k0 == 0; k0 += kb) {
    const std::size_t kk = std::min(kb, K - k0);
    for (std::size_t k = 0; k < kk; ++k) std::memcpy(pack + k * width, b + (k0 + k) * ldb + j, width * sizeof(T));
    run(k0, kk, pack, width);
    if (K == 0) break;
  }
}

/// One task's block [m0, m1) x [n0, n1) of gemm_nn, serially. With `accumulate`, C holds the sums over earlier
/// k and they continue in order: blocking k this way gives the same bits as one call over all of k.
template <class T>
void gemm_nn_block(std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1, std::size_t K, const T* a,
                   std::ptrdiff_t ars, std::ptrdiff_t aks, const T* b, std::size_t ldb, T* c, std::size_t ldc,
                   const T* bias, bool accumulate = false) noexcept {
  constexpr std::size_t L = lanes_v<T>;
  constexpr int W = nn_wide_vectors;  // accumulators: 6 x W, then 12 x W/2, then 12 x 1 (all in registers)
  std::size_t j = n0;
  for (; j + W * L <= n1; j += W * L)
    gemm_nn_strip<T, W, 6>(m0, m1, j, K, a, ars, aks, b, ldb, c, ldc, bias, accumulate);
  for (; j + (W / 2) * L <= n1; j += (W / 2) * L)
    gemm_nn_strip<T, W / 2, 12>(m0, m1, j, K, a, ars, aks, b, ldb, c, ldc, bias, accumulate);
  for (; j + L <= n1; j += L) gemm_nn_strip<T, 1, 12>(m0, m1, j, K, a, ars, aks, b, ldb, c, ldc, bias, accumulate);
  if (j < n1) scalar_nn(m0, m1, j, n1, K, a, ars, aks, b, ldb, c, ldc, bias, accumulate);
}

// Wide products (the dense layer's dK and dX: N in the tens of thousands, rows of B 86 KB apart) in Goto's
// order: a panel of B, kc rows by nc columns, is packed once into contiguous slivers of NR columns that stay in
// L2; then for each group of MR rows of C the micro-kernel streams the slivers left to right, so C is written
// along its rows (a few write streams, not one per row) and, when C is too large to stay in cache, with
// non-temporal stores (no read of the line before it is overwritten). Only whole slivers are packed; the last
// < NR columns of a panel take gemm_nn_block. Sums are the same as gemm_nn_block's: bias, then k in order, a
// partial sum stored in C between k blocks and reloaded exactly.
template <class T>
struct nn_panel_shape {
  static constexpr int mr = 6;
  static constexpr int nv = nn_wide_vectors;
  static constexpr std::size_t nr = static_cast<std::size_t>(nv * lanes_v<T>);
  static constexpr std::size_t kc = 256;
  static constexpr std::size_t pack_bytes = std::size_t{128} << 10;  // a panel: L2-resident, on the task's stack
  static constexpr std::size_t stream_bytes = std::size_t{4} << 20;  // C larger than this is streamed
};

/// Columns per panel for a reduction of K: a multiple of NR with kc x nc elements in pack_bytes.
template <class T>
constexpr std::size_t nn_panel_width(std::size_t K) noexcept {
  using S = nn_panel_shape<T>;
  const std::size_t kk = std::clamp<std::size_t>(K, 1, S::kc);
  return std::max(S::nr, S::pack_bytes / sizeof(T) / kk / S::nr * S::nr);
}

/// Block [m0, m1) x [n0, n1) of gemm_nn via packed panels; at most nn_panel_width(K) columns are packed.
template <class T>
void gemm_nn_panel(std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1, std::size_t K, const T* a,
                   std::ptrdiff_t ars, std::ptrdiff_t aks, const T* b, std::size_t ldb, T* c, std::size_t ldc,
                   const T* bias, bool stream) noexcept {
  using S = nn_panel_shape<T>;
  constexpr int MR = S::mr;
  constexpr int NV = S::nv;
  constexpr std::size_t NR = S::nr;
  alignas(64) T pack[S::pack_bytes / sizeof(T)];  // the stack, so a warm step allocates nothing
  const std::size_t slivers = std::min((n1 - n0) / NR, nn_panel_width<T>(K) / NR);
  const std::size_t packed_end = n0 + slivers * NR;
  stream = stream && line_aligned(c + m0 * ldc + n0) && (ldc * sizeof(T)) % 64 == 0;
  for (std::size_t k0 = 0; k0 < K || k0 == 0; k0 += S::kc) {
    const std::size_t kk = std::min(S::kc, K - k0);
    const bool accumulate = k0 > 0;
    const bool last = k0 + kk >= K;
    // pack[s][k][0, NR) = B[k0 + k][n0 + s * NR + (0, NR)], read along B's rows.
    for (std::size_t k = 0; k < kk; ++k) {
      const T* row = b + (k0 + k) * ldb + n0;
      for (std::size_t sl = 0; sl < slivers; ++sl)
        std::memcpy(pack + (sl * kk + k) * NR, row + sl * NR, NR * sizeof(T));
    }
    const T* ak = a + static_cast<std::ptrdiff_t>(k0) * aks;
    auto row_group = [&](std::size_t i, auto rows) {
      const T* ai = ak + static_cast<std::ptrdiff_t>(i) * ars;
      for (std::size_t sl = 0; sl < slivers; ++sl) {
        const std::size_t j = n0 + sl * NR;
        const T* bias_j = bias != nullptr ? bias + j : nullptr;
        if constexpr (decltype(rows)::value == MR) {
          kernel_nn<T, MR, NV>(kk, ai, ars, aks, pack + sl * kk * NR, NR, c + i * ldc + j, ldc, bias_j, accumulate,
                               stream && last);
        } else {
          kernel_nn_rows<T, NV, MR>(static_cast<int>(m1 - i), kk, ai, ars, aks, pack + sl * kk * NR, NR,
                                    c + i * ldc + j, ldc, bias_j, accumulate, stream && last);
        }
      }
    };
    std::size_t i = m0;
    for (; i + MR <= m1; i += MR) row_group(i, std::integral_constant<int, MR>{});
    if (i < m1) row_group(i, std::integral_constant<int, 0>{});
    if (K == 0) break;
  }
  if (packed_end < n1) gemm_nn_block(m0, m1, packed_end, n1, K, a, ars, aks, b, ldb, c, ldc, bias);
  if (stream) stream_fence();
}

/// Whether gemm_nn takes the packed-panel path: wide enough for whole panels of slivers.
template <class T>
constexpr bool gemm_nn_uses_panels(std::size_t N, std::size_t K) noexcept {
  return N >= 4 * nn_panel_shape<T>::nr && K > 0;
}

/// Tiles of gemm_nn, chosen from the shape only.
struct nn_tiling {
  std::size_t mt, nt, tiles_m, tiles_n;
};

template <class T>
inline nn_tiling gemm_nn_panel_tiling(std::size_t M, std::size_t N, std::size_t K) noexcept {
  nn_tiling t{};
  t.mt = 384;
  t.nt = nn_panel_width<T>(K);
  t.tiles_m = ceil_div(M, t.mt);
  t.tiles_n = ceil_div(N, t.nt);
  return t;
}

inline nn_tiling gemm_nn_tiling(std::size_t M, std::size_t N, std::size_t K) noexcept {
  nn_tiling t{};
  t.nt = 256;
  const std::size_t row_flops = 2 * std::max<std::size_t>(K, 1) * std::min(N, t.nt);
  t.mt = std::max<std::size_t>(96, round_up((std::size_t{1} << 20) / std::max<std::size_t>(row_flops, 1), 12));
  t.tiles_m = ceil_div(M, t.mt);
  t.tiles_n = ceil_div(N, t.nt);
  return t;
}

/// C = bias + A * B (then max(0, .) if relu), parallel over output tiles.
template <class T>
void gemm_nn(std::size_t M, std::size_t N, std::size_t K, const T* a, std::ptrdiff_t ars, std::ptrdiff_t aks,
             const T* b, std::size_t ldb, T* c, std::size_t ldc, const T* bias = nullptr, bool relu = false) {
#if MWSTRAT_ISA_IS_BUILD
  if (on_dispatched_isa<kernel_entry::gemm_nn>(M, N, K, a, ars, aks, b, ldb, c, ldc, bias, relu)) return;
#endif
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // No products: C is the bias (or zero). A and B may then be empty (null), so no pointer into them is formed.
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        const T v = bias != nullptr ? bias[j] : T{};
        c[i * ldc + j] = relu && !(v > T{}) ? T{} : v;
      }
    return;
  }
  auto apply_relu = [&](std::size_t m0, std::size_t m1, std::size_t n0, std::size_t n1) {
    if (relu)
      for (std::size_t i = m0; i < m1; ++i)
        for (std::size_t j = n0; j < n1; ++j) c[i * ldc + j] = c[i * ldc + j] > T{} ? c[i * ldc + j] : T{};
  };
  // Wide products take the packed-panel path; either way each task owns one output tile.
  const bool panels = gemm_nn_uses_panels<T>(N, K);
  const nn_tiling t = panels ? gemm_nn_panel_tiling<T>(M, N, K) : gemm_nn_tiling(M, N, K);
  const bool stream = panels && !relu && M * N * sizeof(T) > nn_panel_shape<T>::stream_bytes;
  parallel_tasks(t.tiles_m * t.tiles_n, [&](std::size_t task) {
    const std::size_t tm = task / t.tiles_n;
    const std::size_t tn = task % t.tiles_n;
    const std::size_t m0 = tm * t.mt;
    const std::size_t n0 = tn * t.nt;
    const std::size_t m1 = std::min(M, m0 + t.mt);
    const std::size_t n1 = std::min(N, n0 + t.nt);
    if (panels) {
      gemm_nn_panel(m0, m1, n0, n1, K, a, ars, aks, b, ldb, c, ldc, bias, stream);
    } else {
      gemm_nn_block(m0, m1, n0, n1, K, a, ars, aks, b, ldb, c, ldc, bias);
    }
    apply_relu(m0, m1, n0, n1);
  });
}

// ---------------------------------------------------------------------------------------------- gemm_nt
// A[i][k] = a[i * lda + k]; B[j][k] = b[j * ldb + k]; vectors run along k and are summed horizontally by a
// fixed shuffle tree.

template <int L, int H>
constexpr int nt_lo_index(int lane) {
  const int block = lane / (2 * H);
  const int pos = lane % (2 * H);
  return pos < H ? block * 2 * H + pos : L + block * 2 * H + (pos - H);
}

// out = x's and y's neighbouring halves added: within each block of 2H lanes, x's H partial sums then y's.
template <class V, int L, int H, std::size_t... I>
inline void nt_combine(const V& x, const V& y, V& out, std::index_sequence<I...>) noexcept {
  out = __builtin_shufflevector(x, y, nt_lo_index<L, H>(static_cast<int>(I))...) +
        __builtin_shufflevector(x, y, (nt_lo_index<L, H>(static_cast<int>(I)) + H)...);
}

constexpr int bit_reverse(int value, int bits) {
  int r = 0;
  for (int b = 0; b < bits; ++b) r |= ((value >> b) & 1) << (bits - 1 - b);
  return r;
}

constexpr int log2_int(int v) { return v <= 1 ? 0 : 1 + log2_int(v / 2); }

// Sums each of the L vectors acc[0..L) horizontally; out[a] = sum of the lanes of acc[a].
template <class T>
inline void horizontal_sums(vec_t<T> (&acc)[lanes_v<T>], T* out) noexcept {
  using V = vec_t<T>;
  constexpr int L = lanes_v<T>;
  constexpr int B = log2_int(L);
  V level[L];
  MWSTRAT_NN_UNROLL
  for (int q = 0; q < L; ++q) level[q] = acc[q];
  int count = L;
  [&]<int... S>(std::integer_sequence<int, S...>) {
    (
        [&] {
          constexpr int H = L >> (S + 1);
          for (int p = 0; p < count / 2; ++p)
            nt_combine<V, L, H>(level[2 * p], level[2 * p + 1], level[p], std::make_index_sequence<L>{});
          count /= 2;
        }(),
        ...);
  }(std::make_integer_sequence<int, B>{});
  MWSTRAT_NN_UNROLL
  for (int lane = 0; lane < L; ++lane) out[bit_reverse(lane, B)] = level[0][lane];
}

// 2 rows of A (streamed from L2) against L/2 rows of B kept in L1: L accumulators, one per output (with the
// 2 + L/2 operand vectors, within 16 registers at every width).
template <class T>
struct nt_shape {
  static constexpr int mr = 2;
  static constexpr int nr = lanes_v<T> / 2;
};

// The (mr x nr) outputs at (i, j) over k in [k0, k1): c[...] = init + dot.
template <class T>
inline void kernel_nt(std::size_t k0, std::size_t k1, const T* a, std::size_t lda, const T* b, std::size_t ldb,
                      T (&result)[lanes_v<T>]) noexcept {
  using V = vec_t<T>;
  constexpr int L = lanes_v<T>;
  constexpr int MR = nt_shape<T>::mr;
  constexpr int NR = nt_shape<T>::nr;
  V acc[L];
  MWSTRAT_NN_UNROLL
  for (int q = 0; q < L; ++q) acc[q] = V{};
  std::size_t k = k0;
  for (; k + L <= k1; k += L) {
    V av[MR];
    V bv[NR];
    MWSTRAT_NN_UNROLL
    for (int i = 0; i < MR; ++i) vload(av[i], a + i * lda + k);
    MWSTRAT_NN_UNROLL
    for (int j = 0; j < NR; ++j) vload(bv[j], b + j * ldb + k);
    MWSTRAT_NN_UNROLL
    for (int i = 0; i < MR; ++i)
      MWSTRAT_NN_UNROLL
      for (int j = 0; j < NR; ++j) acc[i * NR + j] += av[i] * bv[j];
  }
  horizontal_sums<T>(acc, result);
  for (; k < k1; ++k)
    MWSTRAT_NN_UNROLL
    for (int i = 0; i < MR; ++i)
      MWSTRAT_NN_UNROLL
      for (int j = 0; j < NR; ++j) result[i * NR + j] += a[i * lda + k] * b[j * ldb + k];
}

template <class T>
inline T dot_nt(std::size_t k0, std::size_t k1, const T* a, const T* b) noexcept {
  using V = vec_t<T>;
  constexpr int L = lanes_v<T>;
  V acc = {};
  std::size_t k = k0;
  for (; k + L <= k1; k += L) {
    V x;
    V y;
    vload(x, a + k);
    vload(y, b + k);
    acc += x * y;
  }
  T s{};
  MWSTRAT_NN_UNROLL
  for (int lane = 0; lane < L; ++lane) s += acc[lane];
  for (; k < k1; ++k) s += a[k] * b[k];
  return s;
}

// out[i][j] (ldo) = sum over k in [k0, k1) for rows [m0, m1) and all N columns.
template <class T>
void gemm_nt_block(std::size_t m0, std::size_t m1, std::size_t N, std::size_t k0, std::size_t k1, const T* a,
                   std::size_t lda, const T* b, std::size_t ldb, T* out, std::size_t ldo) noexcept {
  constexpr int MR = nt_shape<T>::mr;
  constexpr int NR = nt_shape<T>::nr;
  std::size_t j = 0;
  for (; j + NR <= N; j += NR) {
    std::size_t i = m0;
    for (; i + MR <= m1; i += MR) {
      T r[lanes_v<T>];
      kernel_nt<T>(k0, k1, a + i * lda, lda, b + j * ldb, ldb, r);
      MWSTRAT_NN_UNROLL
      for (int ii = 0; ii < MR; ++ii)
        MWSTRAT_NN_UNROLL
        for (int jj = 0; jj < NR; ++jj) out[(i + ii) * ldo + j + jj] = r[ii * NR + jj];
    }
    for (; i < m1; ++i)
      for (std::size_t jj = j; jj < j + NR; ++jj) out[i * ldo + jj] = dot_nt(k0, k1, a + i * lda, b + jj * ldb);
  }
  for (; j < N; ++j)
    for (std::size_t i = m0; i < m1; ++i) out[i * ldo + j] = dot_nt(k0, k1, a + i * lda, b + j * ldb);
}

/// The split of gemm_nt's reduction: chunks of `kc` along k and tiles of `mt` rows.
struct nt_tiling {
  std::size_t kc, chunks, mt, tiles_m;
};

inline nt_tiling gemm_nt_tiling(std::size_t M, std::size_t K) noexcept {
  nt_tiling t{};
  t.kc = 1024;
  t.chunks = std::max<std::size_t>(1, ceil_div(K, t.kc));
  t.mt = 64;
  t.tiles_m = ceil_div(M, t.mt);
  return t;
}

/// Scratch gemm_nt needs for an M x N result over K.
inline std::size_t gemm_nt_workspace(std::size_t M, std::size_t N, std::size_t K) noexcept {
  const nt_tiling t = gemm_nt_tiling(M, K);
  return t.chunks > 1 ? t.chunks * M * N : 0;
}

/// C = bias + A * B^T (then max(0, .) if relu), parallel over (k chunk, row tile).
template <class T>
void gemm_nt(std::size_t M, std::size_t N, std::size_t K, const T* a, std::size_t lda, const T* b,
             std::size_t ldb, T* c, std::size_t ldc, const T* bias, bool relu, std::span<T> workspace) {
#if MWSTRAT_ISA_IS_BUILD
  if (on_dispatched_isa<kernel_entry::gemm_nt>(M, N, K, a, lda, b, ldb, c, ldc, bias, relu, workspace)) return;
#endif
  if (M == 0 || N == 0) return;
  const nt_tiling t = gemm_nt_tiling(M, K);
  auto finish = [&](std::size_t i, std::size_t j, T sum) {
    if (bias != nullptr) sum = bias[j] + sum;
    if (relu && !(sum > T{})) sum = T{};
    c[i * ldc + j] = sum;
  };
  if (t.chunks == 1) {
    parallel_tasks(t.tiles_m, [&](std::size_t tm) {
      const std::size_t m0 = tm * t.mt;
      const std::size_t m1 = std::min(M, m0 + t.mt);
      gemm_nt_block(m0, m1, N, 0, K, a, lda, b, ldb, c, ldc);
      for (std::size_t i = m0; i < m1; ++i)
        for (std::size_t j = 0; j < N; ++j) finish(i, j, c[i * ldc + j]);
    });
    return;
  }
  T* part = workspace.data();
  parallel_tasks(t.chunks * t.tiles_m, [&](std::size_t task) {
    const std::size_t chunk = task / t.tiles_m;
    const std::size_t tm = task % t.tiles_m;
    const std::size_t m0 = tm * t.mt;
    const std::size_t k0 = chunk * t.kc;
    gemm_nt_block(m0, std::min(M, m0 + t.mt), N, k0, std::min(K, k0 + t.kc), a, lda, b, ldb,
                  part + chunk * M * N, N);
  });
  parallel_chunks(M, 16, [&](std::size_t m0, std::size_t m1) {
    for (std::size_t i = m0; i < m1; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        T sum = part[i * N + j];
        for (std::size_t chunk = 1; chunk < t.chunks; ++chunk) sum += part[chunk * M * N + i * N + j];
        finish(i, j, sum);
      }
  });
}

}  // namespace mwstrat::detail

#undef MWSTRAT_NN_UNROLL

#endif  // MWSTRAT_ISA_NS
