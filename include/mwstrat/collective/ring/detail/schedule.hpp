#pragma once
// The ring's schedule: which chunk each rank sends to the next rank and receives from the previous one at item t
// of an operation, as pure functions of the operation's shape, so it is tested without sockets.
//
// Every operation is two streams per rank (send to next, receive from previous) of `items` items each; item t is
// step t / chunks, chunk t % chunks. All-reduce (and barrier, all_reduce_update) is a reduce-scatter of n - 1 steps
// then an all-gather of n - 1 steps over n segments: at step s rank r sends segment (r - s) mod n and receives
// segment (r - s - 1) mod n, combining it into its own during the reduce-scatter. So segment k is summed as
// x_{k+n-1} + (... + (x_{k+1} + x_k)) (the same value as (((x_k + x_{k+1}) + x_{k+2}) + ...)) and is final on
// rank k - 1 (mod n), its owner, which then starts it round the ring. Broadcast pipelines the whole buffer from
// the root; all-gather is the all-gather half over segments of one rank's size.

#include <mwstrat/collective/detail/reduce.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mwstrat::detail {

// The shape of one operation as one rank sees it.
struct ring_schedule {
  op_kind kind = op_kind::all_reduce;
  int rank = 0;
  int world = 1;
  int root = 0;                  // broadcast
  std::size_t count = 0;         // elements of the whole operation
  std::size_t segment = 0;       // all_gather: elements per rank
  std::size_t chunks = 1;        // chunks per segment (per buffer for broadcast)
  std::size_t begin = 0;         // the first item of both streams (the all-gather half alone starts past the first)
  std::size_t items = 0;         // items in each of the two streams (one past the last)
  bool separate_gather = false;  // all_reduce_update: the all-gather steps carry the other buffer (parameters)
};

// One chunk moved by one item: elements [first, first + count) of the buffer it names.
struct chunk_move {
  std::size_t first = 0;
  std::size_t count = 0;
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  bool reduce = false;  // received elements are combined with the buffer's (reduce-scatter)
  bool finish = false;  // the last reduce-scatter step: the chunk is final here (apply mean, the update)
  bool gather = false;  // separate_gather and an all-gather step: the chunk is of the other buffer
};

// Chunks of at most `chunk_bytes` for a segment of `bytes`; at least one, so empty operations still step.
inline std::size_t chunks_for(std::size_t bytes, std::size_t chunk_bytes) {
  return std::max<std::size_t>(1, (bytes + chunk_bytes - 1) / chunk_bytes);
}

// all_reduce, barrier (one element) and all_reduce_update (`separate_gather`) over `count` elements.
inline ring_schedule all_reduce_schedule(op_kind kind, int rank, int world, std::size_t count,
                                         std::size_t element_bytes, std::size_t chunk_bytes) {
  ring_schedule s;
  s.kind = kind;
  s.rank = rank;
  s.world = world;
  s.count = count;
  const auto n = static_cast<std::size_t>(world);
  s.chunks = chunks_for((count + n - 1) / n * element_bytes, chunk_bytes);
  s.items = 2 * (n - 1) * s.chunks;
  s.separate_gather = kind == op_kind::all_reduce_update;
  return s;
}

// The reduce-scatter half of an all-reduce alone (each rank ends with its segment reduced: segment k on rank k - 1),
// or its all-gather half alone (each rank starts with its segment final and ends with all of them). The hierarchical
// all-reduce runs the halves on a host's ranks around the ring between hosts.
enum class ring_half { reduce_scatter, all_gather };
inline ring_schedule all_reduce_half_schedule(ring_half half, int rank, int world, std::size_t count,
                                              std::size_t element_bytes, std::size_t chunk_bytes) {
  ring_schedule s = all_reduce_schedule(op_kind::all_reduce, rank, world, count, element_bytes, chunk_bytes);
  const std::size_t middle = s.items / 2;
  if (half == ring_half::reduce_scatter) s.items = middle;
  else s.begin = middle;
  return s;
}

// The segment of an all-reduce over `count` elements that the reduce-scatter half leaves final on `rank`.
inline void owned_segment(int rank, int world, std::size_t count, std::size_t& first, std::size_t& last) {
  const auto n = static_cast<std::size_t>(world), k = (static_cast<std::size_t>(rank) + 1) % n;
  first = count * k / n;
  last = count * (k + 1) / n;
}

inline ring_schedule broadcast_schedule(int rank, int world, int root, std::size_t count, std::size_t element_bytes,
                                        std::size_t chunk_bytes) {
  ring_schedule s;
  s.kind = op_kind::broadcast;
  s.rank = rank;
  s.world = world;
  s.root = root;
  s.count = count;
  s.chunks = chunks_for(count * element_bytes, chunk_bytes);
  s.items = s.chunks;
  return s;
}

// Each rank contributes `per_rank` elements; the whole operation is world * per_rank.
inline ring_schedule all_gather_schedule(int rank, int world, std::size_t per_rank, std::size_t element_bytes,
                                         std::size_t chunk_bytes) {
  ring_schedule s;
  s.kind = op_kind::all_gather;
  s.rank = rank;
  s.world = world;
  s.segment = per_rank;
  s.count = per_rank * static_cast<std::size_t>(world);
  s.chunks = chunks_for(per_rank * element_bytes, chunk_bytes);
  s.items = static_cast<std::size_t>(world - 1) * s.chunks;
  return s;
}

inline int ring_mod(long long v, int n) { return static_cast<int>(((v % n) + n) % n); }
inline int ring_next(const ring_schedule& s) { return (s.rank + 1) % s.world; }

inline std::size_t segment_begin(const ring_schedule& s, int seg) {
  if (s.kind == op_kind::all_gather) return static_cast<std::size_t>(seg) * s.segment;
  return s.count * static_cast<std::size_t>(seg) / static_cast<std::size_t>(s.world);
}

// The chunk of segment `seg` (or of the whole buffer for broadcast) that item t moves; false when it is empty.
inline bool chunk_of(const ring_schedule& s, std::size_t t, int seg, chunk_move& m) {
  const std::size_t step = t / s.chunks, j = t % s.chunks;
  std::size_t begin = 0, len = s.count;
  if (s.kind != op_kind::broadcast) {
    begin = segment_begin(s, seg);
    len = segment_begin(s, seg + 1) - begin;
  }
  const std::size_t lo = begin + len * j / s.chunks, hi = begin + len * (j + 1) / s.chunks;
  m.first = lo;
  m.count = hi - lo;
  m.step = static_cast<std::uint32_t>(step);
  m.chunk = static_cast<std::uint32_t>(j);
  m.reduce = false;
  m.finish = false;
  m.gather = s.separate_gather && step >= static_cast<std::size_t>(s.world - 1);
  return hi > lo;
}

// What this rank sends at item t; false when it sends nothing then.
inline bool send_chunk(const ring_schedule& s, std::size_t t, chunk_move& m) {
  if (s.kind == op_kind::broadcast) {
    if (ring_next(s) == s.root) return false;
    return chunk_of(s, t, 0, m);
  }
  const auto step = static_cast<long long>(t / s.chunks);
  return chunk_of(s, t, ring_mod(s.rank - step, s.world), m);
}

// What this rank receives at item t; false when it receives nothing then.
inline bool recv_chunk(const ring_schedule& s, std::size_t t, chunk_move& m) {
  if (s.kind == op_kind::broadcast) {
    if (s.rank == s.root) return false;
    return chunk_of(s, t, 0, m);
  }
  const auto step = static_cast<long long>(t / s.chunks);
  if (!chunk_of(s, t, ring_mod(s.rank - step - 1, s.world), m)) return false;
  const bool reducing = s.kind == op_kind::all_reduce || s.kind == op_kind::all_reduce_update ||
                        s.kind == op_kind::barrier || s.kind == op_kind::broadcast_check;
  m.reduce = reducing && step < s.world - 1;
  m.finish = reducing && step == s.world - 2;
  return true;
}

// How many receive items must be complete before send item t may go: a rank forwards what it received.
inline std::size_t send_dependency(const ring_schedule& s, std::size_t t) {
  if (s.kind == op_kind::broadcast) return s.rank == s.root ? 0 : t + 1;
  return t < s.chunks ? 0 : t - s.chunks + 1;
}

}  // namespace mwstrat::detail
