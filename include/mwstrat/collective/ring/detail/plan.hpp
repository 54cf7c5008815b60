#pragma once
// One operation as the ring's data path sees it: its schedule (schedule.hpp) and the buffers and values its frames
// carry, and the schedule's chunks resolved to bytes of those buffers and to the frame headers that announce them.

#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/ring/detail/schedule.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/collective/ring/options.hpp>
#include <mwstrat/collective/types.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mwstrat::detail {

// One operation: its schedule (which chunk each item moves) and the buffers and values its frames carry.
struct ring_plan {
  ring_schedule sched;
  wire_dtype type{};
  reduce_op op = reduce_op::sum;
  std::uint8_t reduction = 0;
  std::uint64_t seq = 0;
  std::size_t esize = 0;
  wire_compression wire = wire_compression::none;  // float32 payloads narrowed to 16 bits on the wire
  std::size_t wire_esize = 0;                       // bytes of an element on the wire
  std::uint8_t* base = nullptr;
  std::uint8_t* gather_base = nullptr;  // all_reduce_update: the buffer the all-gather steps carry
  void (*on_reduced)(void*, std::size_t, std::size_t) = nullptr;  // all_reduce_update: a part is final
  void* on_reduced_context = nullptr;
  // all_reduce_streamed: a part of the result is final here and the ring will not read it again (after this rank's
  // last send of it, or on its last receive), so the caller may use and change it while the rest still travels.
  void (*on_final)(void*, std::size_t, std::size_t) = nullptr;
  void* on_final_context = nullptr;
};

// A schedule's chunk, resolved to bytes of this operation's buffers.
struct ring_item {
  std::uint8_t* ptr = nullptr;
  std::size_t bytes = 0;       // in the buffer
  std::size_t wire_bytes = 0;  // on the wire (fewer when compressed)
  std::uint32_t step = 0;
  std::uint32_t chunk = 0;
  std::size_t first = 0;  // element offset of the chunk in the operation's buffer
  bool reduce = false;    // received bytes are combined with the buffer (reduce-scatter)
  bool finish = false;    // the last reduce-scatter step: apply mean
  bool narrowed = false;  // float32 elements travel as 16 bits (the plan compresses, and this is not parameters)
};

inline bool resolve_chunk(const ring_plan& p, bool found, const chunk_move& m, ring_item& it) {
  it.ptr = (m.gather ? p.gather_base : p.base) + m.first * p.esize;
  it.bytes = m.count * p.esize;
  it.narrowed = p.wire != wire_compression::none && !m.gather;  // all_reduce_update's parameters travel exact
  it.wire_bytes = m.count * (it.narrowed ? p.wire_esize : p.esize);
  it.first = m.first;
  it.step = m.step;
  it.chunk = m.chunk;
  it.reduce = m.reduce;
  it.finish = m.finish;
  return found;
}

// all_reduce_streamed: this rank is done with the part item `it` carries once it has sent it in the all-gather half
// (it sends a part there at most once: its own when final, or one it received and forwards) or received it at the
// last step (that one it does not forward); then the plan's `on_final` hears of it, once per part.
inline bool final_after_send(const ring_plan& p, const ring_item& it) {
  return p.on_final != nullptr && static_cast<int>(it.step) >= p.sched.world - 1;
}
inline bool final_after_receive(const ring_plan& p, const ring_item& it) {
  return p.on_final != nullptr && static_cast<int>(it.step) == 2 * (p.sched.world - 1) - 1;
}
inline void tell_final(const ring_plan& p, const ring_item& it) {
  p.on_final(p.on_final_context, it.first, it.bytes / p.esize);
}

// What this rank sends / receives at item t, as bytes of the operation's buffers; false when nothing then.
inline bool send_item(const ring_plan& p, std::size_t t, ring_item& it) {
  chunk_move m;
  return resolve_chunk(p, send_chunk(p.sched, t, m), m, it);
}
inline bool recv_item(const ring_plan& p, std::size_t t, ring_item& it) {
  chunk_move m;
  return resolve_chunk(p, recv_chunk(p.sched, t, m), m, it);
}

// The header announcing item `it` (a data frame, or a slot frame when the payload is in a shared-memory slot).
inline frame_header header_for(const ring_plan& p, const ring_item& it, frame_type type) {
  frame_header h;
  h.type = type;
  h.op = p.sched.kind;
  h.type_of_elements = p.type;
  h.reduction = p.reduction;
  h.seq = p.seq;
  h.count = p.sched.count;
  h.step = it.step;
  h.chunk = it.chunk;
  h.payload = it.wire_bytes;
  return h;
}

// The fields of a frame header that name the operation (kind, element type, sequence number).
inline frame_header op_header(const ring_plan& p) {
  frame_header h;
  h.op = p.sched.kind;
  h.type_of_elements = p.type;
  h.seq = p.seq;
  return h;
}

// "all_reduce #42": the operation, as errors name it (only on failure paths: building the text allocates).
inline std::string where_of(const ring_plan& p) { return std::string(op_name(p.sched.kind)) + " #" + std::to_string(p.seq); }

}  // namespace mwstrat::detail
