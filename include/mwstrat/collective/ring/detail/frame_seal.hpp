#pragma once
// Sealed frames on the TCP connections between hosts (docs/security.md). With a job token, every frame on a data or
// liveness connection whose ends are on different hosts carries a 16-byte AES-256-GCM tag after its payload: over
// the header and the payload (authenticate: the payload travels in the clear as additional data, so only GHASH runs
// over it), or over the header with the payload encrypted (encrypt). Each direction of each connection has its own key, derived
// with HKDF-SHA256 from the token and both handshake nonces, and the GCM nonce is (direction, frame counter): a frame
// replayed, reordered, dropped or moved to another connection fails its tag like an altered one. AEAD frames rather
// than TLS keep the ring's own framing (headers checked before the payload, payloads read straight into the
// operation's buffer, aborts at frame boundaries) and add no round trip to the handshake.
//
// Each direction keeps one cipher context, keyed once; a frame only sets the nonce, so sealing allocates nothing.

#include <mwstrat/collective/ring/detail/wire.hpp>
#include <mwstrat/error.hpp>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace mwstrat::detail {

// What the TCP links between hosts carry besides payloads and headers.
enum class seal_mode : std::uint8_t {
  none,          // no job token: nothing to key a MAC with
  authenticate,  // a tag over header and payload; the payload in the clear
  encrypt,       // a tag over the header and the encrypted payload
};

inline constexpr std::size_t seal_tag_size = 16;
using seal_tag = std::array<std::uint8_t, seal_tag_size>;
using seal_key = std::array<std::uint8_t, 32>;

// The key of one direction of one connection: HKDF-SHA256 (RFC 5869) of the token, salted with both nonces, its info
// naming the direction, the mode, the cluster and both ranks, so no two connections or directions share a key.
inline seal_key derive_seal_key(std::string_view token, const digest& client_nonce, const digest& server_nonce,
                                const digest& cluster, std::uint32_t client_rank, std::uint32_t server_rank,
                                bool client_to_server, seal_mode mode) {
  std::array<std::uint8_t, 64> salt{};
  std::memcpy(salt.data(), client_nonce.data(), 32);
  std::memcpy(salt.data() + 32, server_nonce.data(), 32);
  std::array<std::uint8_t, 16 + 2 + 32 + 8> info{};
  byte_writer w(info);
  w.bytes(std::span(reinterpret_cast<const std::uint8_t*>("mwstrat-frames.1"), 16));
  w.u8(client_to_server ? 0 : 1);
  w.u8(static_cast<std::uint8_t>(mode));
  w.bytes(cluster);
  w.u32(client_rank);
  w.u32(server_rank);
  seal_key key{};
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  EVP_KDF_CTX* ctx = kdf != nullptr ? EVP_KDF_CTX_new(kdf) : nullptr;
  EVP_KDF_free(kdf);
  std::string token_copy(token);  // OSSL_PARAM takes non-const pointers
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, token_copy.data(), token_copy.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt.data(), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  const bool ok = ctx != nullptr && EVP_KDF_derive(ctx, key.data(), key.size(), params) == 1;
  EVP_KDF_CTX_free(ctx);
  OPENSSL_cleanse(token_copy.data(), token_copy.size());
  if (!ok) throw io_error({"ring"}, "HKDF-SHA256 key derivation of the frame keys failed (OpenSSL)");
  return key;
}

// One direction of one connection: seals what this end sends, or opens what it receives, frame after frame.
class frame_cipher {
 public:
  frame_cipher() = default;
  // `sealing`: this end sends with it (else receives); `direction` goes into every nonce.
  frame_cipher(const seal_key& key, seal_mode mode, bool sealing, std::uint32_t direction)
      : ctx_(EVP_CIPHER_CTX_new()), mode_(mode), sealing_(sealing), direction_(direction) {
    const int ok = ctx_ && (sealing ? EVP_EncryptInit_ex(ctx_.get(), EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                                    : EVP_DecryptInit_ex(ctx_.get(), EVP_aes_256_gcm(), nullptr, key.data(), nullptr));
    if (ok != 1) throw io_error({"ring"}, "AES-256-GCM set-up of a connection's frame cipher failed (OpenSSL)");
  }

  [[nodiscard]] explicit operator bool() const { return static_cast<bool>(ctx_); }
  [[nodiscard]] seal_mode mode() const { return mode_; }
  [[nodiscard]] bool encrypts() const { return mode_ == seal_mode::encrypt; }
  // Frames sealed or opened so far (the next frame's counter).
  [[nodiscard]] std::uint64_t frames() const { return seq_; }

  // The tag of the next frame: `header` authenticated, `n` bytes of `in` authenticated (authenticate) or encrypted
  // into `out` (encrypt; `out` may be `in`). false only when OpenSSL fails.
  bool seal(std::span<const std::uint8_t> header, const std::uint8_t* in, std::uint8_t* out, std::size_t n,
            seal_tag& tag) {
    return begin(header) && update(in, out, n) && finish(tag);
  }

  // Checks the next frame against `tag`, decrypting its `n` payload bytes in place (encrypt). false: it was not
  // sealed by the peer as the frame of this counter (altered, forged, replayed, reordered).
  bool open(std::span<const std::uint8_t> header, std::uint8_t* payload, std::size_t n, const seal_tag& tag) {
    return begin(header) && update(payload, payload, n) && finish_open(tag);
  }

  // The same in pieces, so that a frame is sealed just ahead of the socket and opened as it arrives: begin (the next
  // counter's nonce, the header), update for each piece of the payload in order, then finish (sealing: the tag) or
  // finish_open (opening: whether the tag verifies). Pieces may be of any size.
  bool begin(std::span<const std::uint8_t> header) {
    std::array<std::uint8_t, 12> iv{};
    byte_writer w(iv);
    w.u32(direction_);
    w.u64(seq_++);
    int len = 0;
    if (sealing_)
      return EVP_EncryptInit_ex(ctx_.get(), nullptr, nullptr, nullptr, iv.data()) == 1 &&
             EVP_EncryptUpdate(ctx_.get(), nullptr, &len, header.data(), static_cast<int>(header.size())) == 1;
    return EVP_DecryptInit_ex(ctx_.get(), nullptr, nullptr, nullptr, iv.data()) == 1 &&
           EVP_DecryptUpdate(ctx_.get(), nullptr, &len, header.data(), static_cast<int>(header.size())) == 1;
  }
  // A piece of the payload: additional data (authenticate: `out` unused) or the text to encrypt or decrypt into
  // `out` (which may be `in`), in pieces an int can count.
  bool update(const std::uint8_t* in, std::uint8_t* out, std::size_t n) {
    constexpr std::size_t piece = std::size_t{1} << 30;
    for (std::size_t at = 0; at < n; at += piece) {
      const int m = static_cast<int>(std::min(piece, n - at));
      int len = 0;
      std::uint8_t* to = mode_ == seal_mode::encrypt ? out + at : nullptr;
      const int ok = sealing_ ? EVP_EncryptUpdate(ctx_.get(), to, &len, in + at, m)
                              : EVP_DecryptUpdate(ctx_.get(), to, &len, in + at, m);
      if (ok != 1) return false;
    }
    return true;
  }
  bool finish(seal_tag& tag) {
    int len = 0;
    std::array<std::uint8_t, 16> rest{};  // GCM's final step writes nothing; never hand OpenSSL a null buffer
    return EVP_EncryptFinal_ex(ctx_.get(), rest.data(), &len) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_GET_TAG, seal_tag_size, tag.data()) == 1;
  }
  bool finish_open(const seal_tag& tag) {
    int len = 0;
    std::array<std::uint8_t, 16> rest{};
    return EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_SET_TAG, seal_tag_size, const_cast<std::uint8_t*>(tag.data())) == 1 &&
           EVP_DecryptFinal_ex(ctx_.get(), rest.data(), &len) == 1;
  }

 private:
  struct ctx_free {
    void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
  };
  std::unique_ptr<EVP_CIPHER_CTX, ctx_free> ctx_;
  seal_mode mode_ = seal_mode::none;
  bool sealing_ = false;
  std::uint32_t direction_ = 0;
  std::uint64_t seq_ = 0;
};

// Both directions of one data connection, as the handshake leaves them: `send` seals what this end writes (data
// frames, or the aborts it sends back), `recv` opens what it reads. Empty on a connection within a host or without
// a token.
struct link_seal {
  frame_cipher send;
  frame_cipher recv;

  [[nodiscard]] bool on() const { return static_cast<bool>(send); }
  [[nodiscard]] std::size_t tag_bytes() const { return on() ? seal_tag_size : 0; }

  // The seal of a connection between `client_rank` (which connected) and `server_rank`, as end `as_client` sees it.
  static link_seal keyed(std::string_view token, seal_mode mode, bool as_client, const digest& client_nonce,
                         const digest& server_nonce, const digest& cluster, std::uint32_t client_rank,
                         std::uint32_t server_rank) {
    const auto up = derive_seal_key(token, client_nonce, server_nonce, cluster, client_rank, server_rank, true, mode);
    const auto down = derive_seal_key(token, client_nonce, server_nonce, cluster, client_rank, server_rank, false, mode);
    link_seal s;
    s.send = frame_cipher(as_client ? up : down, mode, true, as_client ? 0 : 1);
    s.recv = frame_cipher(as_client ? down : up, mode, false, as_client ? 1 : 0);
    return s;
  }
};

}  // namespace mwstrat::detail
