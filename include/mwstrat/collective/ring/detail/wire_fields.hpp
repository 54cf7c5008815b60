#pragma once
// Field lists for the ring's fixed-layout messages: each message lists its fields once (wire_fields<Msg>), and its
// size, encoder and decoder all come from that list, so they cannot disagree. Integers are little-endian; an enum
// travels as its underlying integer and is range-checked on decode against its own first and last enumerators
// (enum_range<E>); padding is written as zeros and must read back as zeros.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

namespace mwstrat::detail {

// ---- little-endian bytes ----

class byte_writer {
 public:
  explicit byte_writer(std::span<std::uint8_t> out) : out_(out) {}
  void u8(std::uint8_t v) { out_[at_++] = v; }
  void u16(std::uint16_t v) { put(v, 2); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void bytes(std::span<const std::uint8_t> b) {
    std::memcpy(out_.data() + at_, b.data(), b.size());
    at_ += b.size();
  }
  template <class U>
  void integer(U v) {
    put(static_cast<std::uint64_t>(v), sizeof(U));
  }
  [[nodiscard]] std::size_t size() const { return at_; }

 private:
  void put(std::uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out_[at_++] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  std::span<std::uint8_t> out_;
  std::size_t at_ = 0;
};

class byte_reader {
 public:
  explicit byte_reader(std::span<const std::uint8_t> in) : in_(in) {}
  std::uint8_t u8() { return in_[at_++]; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(get(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  void bytes(std::span<std::uint8_t> out) {
    std::memcpy(out.data(), in_.data() + at_, out.size());
    at_ += out.size();
  }
  template <class U>
  U integer() {
    return static_cast<U>(get(sizeof(U)));
  }

 private:
  std::uint64_t get(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in_[at_++]) << (8 * i);
    return v;
  }
  std::span<const std::uint8_t> in_;
  std::size_t at_ = 0;
};

// ---- enums on the wire ----

// Specialised for each enum that travels: its first and last enumerators, and why a value outside is refused.
template <class E>
struct enum_range;

template <class E>
constexpr bool in_range(std::underlying_type_t<E> v) {
  using U = std::underlying_type_t<E>;
  return v >= static_cast<U>(enum_range<E>::first) && v <= static_cast<U>(enum_range<E>::last);
}

// ---- field kinds ----

// A data member, encoded by its type: an unsigned integer, a checked enum, or a byte array (a digest).
template <auto Member>
struct field {};
// A member holding a signed integer, sent as its two's complement in the same number of bytes.
template <auto Member>
struct signed_field {};
// N bytes of zeros.
template <std::size_t N>
struct pad {};
// N bytes written as zeros and not looked at on decode (the abort notice's: a failing peer's abort is never refused
// for them).
template <std::size_t N>
struct ignored {};
// A string member in a fixed, NUL-padded slot of N bytes (at most N - 1 characters).
template <auto Member, std::size_t N>
struct fixed_string {};

template <class... F>
struct field_list {};

// Specialised for each message: `using type = field_list<...>;` in wire order.
template <class Msg>
struct wire_fields;

template <class M>
struct member_traits;
template <class C, class V>
struct member_traits<V C::*> {
  using value = V;
};

template <class V>
struct is_byte_array : std::false_type {};
template <std::size_t N>
struct is_byte_array<std::array<std::uint8_t, N>> : std::true_type {};

template <class V>
constexpr std::size_t value_size() {
  if constexpr (is_byte_array<V>::value) return std::tuple_size_v<V>;
  else return sizeof(V);
}

template <class F>
struct field_size;
template <auto M>
struct field_size<field<M>> : std::integral_constant<std::size_t, value_size<typename member_traits<decltype(M)>::value>()> {};
template <auto M>
struct field_size<signed_field<M>> : std::integral_constant<std::size_t, sizeof(typename member_traits<decltype(M)>::value)> {};
template <std::size_t N>
struct field_size<pad<N>> : std::integral_constant<std::size_t, N> {};
template <std::size_t N>
struct field_size<ignored<N>> : std::integral_constant<std::size_t, N> {};
template <auto M, std::size_t N>
struct field_size<fixed_string<M, N>> : std::integral_constant<std::size_t, N> {};

template <class L>
struct list_size;
template <class... F>
struct list_size<field_list<F...>> : std::integral_constant<std::size_t, (std::size_t{0} + ... + field_size<F>::value)> {};

// Bytes of Msg's fields on the wire.
template <class Msg>
inline constexpr std::size_t fields_size = list_size<typename wire_fields<Msg>::type>::value;

// ---- encode / decode one field ----

template <class Msg, auto M>
void put_field(const Msg& m, byte_writer& w, field<M>) {
  using V = typename member_traits<decltype(M)>::value;
  if constexpr (is_byte_array<V>::value) w.bytes(m.*M);
  else if constexpr (std::is_enum_v<V>) w.integer(static_cast<std::underlying_type_t<V>>(m.*M));
  else w.integer(m.*M);
}
template <class Msg, auto M>
void put_field(const Msg& m, byte_writer& w, signed_field<M>) {
  using V = typename member_traits<decltype(M)>::value;
  w.integer(static_cast<std::make_unsigned_t<V>>(m.*M));
}
template <class Msg, std::size_t N>
void put_field(const Msg&, byte_writer& w, pad<N>) {
  for (std::size_t i = 0; i < N; ++i) w.u8(0);
}
template <class Msg, std::size_t N>
void put_field(const Msg&, byte_writer& w, ignored<N>) {
  for (std::size_t i = 0; i < N; ++i) w.u8(0);
}
template <class Msg, auto M, std::size_t N>
void put_field(const Msg& m, byte_writer& w, fixed_string<M, N>) {
  std::array<std::uint8_t, N> slot{};
  const std::string& s = m.*M;
  std::memcpy(slot.data(), s.data(), std::min(s.size(), N - 1));
  w.bytes(slot);
}

// False when the bytes cannot be this field (an enum out of its range, non-zero padding, an unterminated string);
// `why` then names the enum's reason.
template <class Msg, auto M>
bool get_field(Msg& m, byte_reader& r, field<M>, const char*& why) {
  using V = typename member_traits<decltype(M)>::value;
  if constexpr (is_byte_array<V>::value) {
    r.bytes(m.*M);
  } else if constexpr (std::is_enum_v<V>) {
    const auto v = r.integer<std::underlying_type_t<V>>();
    if (!in_range<V>(v)) {
      why = enum_range<V>::unknown;
      return false;
    }
    m.*M = static_cast<V>(v);
  } else {
    m.*M = r.integer<V>();
  }
  return true;
}
template <class Msg, auto M>
bool get_field(Msg& m, byte_reader& r, signed_field<M>, const char*&) {
  using V = typename member_traits<decltype(M)>::value;
  m.*M = static_cast<V>(r.integer<std::make_unsigned_t<V>>());
  return true;
}
template <class Msg, std::size_t N>
bool get_field(Msg&, byte_reader& r, pad<N>, const char*& why) {
  bool zero = true;
  for (std::size_t i = 0; i < N; ++i) zero = r.u8() == 0 && zero;
  if (!zero) why = "non-zero padding";
  return zero;
}
template <class Msg, std::size_t N>
bool get_field(Msg&, byte_reader& r, ignored<N>, const char*&) {
  for (std::size_t i = 0; i < N; ++i) (void)r.u8();
  return true;
}
template <class Msg, auto M, std::size_t N>
bool get_field(Msg& m, byte_reader& r, fixed_string<M, N>, const char*& why) {
  std::array<std::uint8_t, N> slot{};
  r.bytes(slot);
  const auto end = std::find(slot.begin(), slot.end(), std::uint8_t{0});
  if (end == slot.end() || std::any_of(end, slot.end(), [](std::uint8_t b) { return b != 0; })) {
    why = "malformed string";
    return false;
  }
  // By pointer and length, not by iterators: GCC 12 takes the byte-by-byte copy of a freshly read array for a
  // read of uninitialised memory (-Wmaybe-uninitialized) in optimised builds.
  (m.*M).assign(reinterpret_cast<const char*>(slot.data()), static_cast<std::size_t>(end - slot.begin()));
  return true;
}

template <class Msg, class... F>
void put_fields(const Msg& m, byte_writer& w, field_list<F...>) {
  (put_field(m, w, F{}), ...);
}
template <class Msg, class... F>
bool get_fields(Msg& m, byte_reader& r, field_list<F...>, const char*& why) {
  return (get_field(m, r, F{}, why) && ...);  // stops at the first field that cannot be
}

// Writes Msg's fields (nothing else: a message's magic is its caller's).
template <class Msg>
void encode_fields(const Msg& m, byte_writer& w) {
  put_fields(m, w, typename wire_fields<Msg>::type{});
}
// Reads Msg's fields; false with `why` set when one cannot be.
template <class Msg>
bool decode_fields(Msg& m, byte_reader& r, const char*& why) {
  return get_fields(m, r, typename wire_fields<Msg>::type{}, why);
}

}  // namespace mwstrat::detail
