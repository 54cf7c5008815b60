// The CPU cost of sealed frames between hosts (collective/ring/detail/frame_seal.hpp): one core's seconds to seal and
// to open one GiB of payload in 512 KiB frames (the ring's default chunk), with the ring's own frame_cipher, for
// authenticate (AES-256-GCM tag over the payload as additional data: GHASH only) and encrypt (AES-256-GCM); beside
// them, what the alternatives would cost on the same core: HMAC-SHA256 over the payload, and ChaCha20-Poly1305.
// In a ring all-reduce every byte a rank sends it seals once and every byte it receives it opens once, so a rank's
// extra CPU per GiB sent is seal + open. Prints one line per row; --json FILE writes them too.
//
//   mwstrat_bench_seal [--seconds 1] [--frame 524288] [--json FILE]

#include <mwstrat/collective/ring/detail/frame_seal.hpp>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <time.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace mwstrat::detail;

double cpu_now() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// CPU seconds per GiB of `frame`-byte payloads for `step` (one frame), run for about `seconds` of CPU.
double cpu_per_gib(std::size_t frame, double seconds, const std::function<void()>& step) {
  for (int i = 0; i < 8; ++i) step();  // warm
  std::size_t frames = 0;
  const double start = cpu_now();
  double now = start;
  while (now - start < seconds) {
    for (int i = 0; i < 16; ++i) step();
    frames += 16;
    now = cpu_now();
  }
  return (now - start) / (static_cast<double>(frames * frame) / static_cast<double>(1u << 30));
}

struct row {
  std::string name;
  double seal, open;  // CPU s per GiB
};

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  std::size_t frame = 512 << 10;
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--seconds") seconds = std::stod(v);
    else if (k == "--frame") frame = std::stoul(v);
    else if (k == "--json") json = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::vector<std::uint8_t> payload(frame), sealed(frame);
  for (std::size_t i = 0; i < frame; ++i) payload[i] = static_cast<std::uint8_t>(i * 131 + 7);
  std::array<std::uint8_t, frame_header_size> header{};
  digest n1{}, n2{};
  n1.fill(1);
  n2.fill(2);
  std::vector<row> rows;
  for (const auto mode : {seal_mode::authenticate, seal_mode::encrypt}) {
    auto tx = link_seal::keyed("bench-token", mode, true, n1, n2, sha256("bench"), 0, 1);
    auto rx = link_seal::keyed("bench-token", mode, false, n1, n2, sha256("bench"), 0, 1);
    seal_tag tag{};
    bool ok = true;
    // Seal and open in lockstep (the counters must agree), timed apart.
    double seal_cpu = 0, open_cpu = 0;
    std::size_t frames = 0;
    const double until = cpu_now() + 2 * seconds;
    while (cpu_now() < until) {
      double t0 = cpu_now();
      ok = tx.send.seal(header, payload.data(), mode == seal_mode::encrypt ? sealed.data() : nullptr, frame, tag) && ok;
      double t1 = cpu_now();
      ok = rx.recv.open(header, mode == seal_mode::encrypt ? sealed.data() : payload.data(), frame, tag) && ok;
      double t2 = cpu_now();
      if (frames >= 8) {  // warm
        seal_cpu += t1 - t0;
        open_cpu += t2 - t1;
      }
      ++frames;
    }
    if (!ok) {
      std::fprintf(stderr, "a frame did not open\n");
      return 3;
    }
    const double gib = static_cast<double>((frames - 8) * frame) / static_cast<double>(1u << 30);
    rows.push_back({mode == seal_mode::encrypt ? "aes-256-gcm encrypt (mwstrat encrypt)"
                                               : "aes-256-gcm tag only (mwstrat authenticate)",
                    seal_cpu / gib, open_cpu / gib});
  }
  // Alternatives, same payloads: HMAC-SHA256 (the MAC of the handshake's proofs) and ChaCha20-Poly1305.
  {
    std::array<std::uint8_t, 32> key{}, mac{};
    unsigned len = 0;
    const double s = cpu_per_gib(frame, seconds, [&] {
      HMAC(EVP_sha256(), key.data(), 32, payload.data(), frame, mac.data(), &len);
    });
    rows.push_back({"hmac-sha256 (alternative)", s, s});
  }
  {
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    std::array<std::uint8_t, 32> key{};
    std::array<std::uint8_t, 12> iv{};
    EVP_EncryptInit_ex(ctx, EVP_chacha20_poly1305(), nullptr, key.data(), nullptr);
    const double s = cpu_per_gib(frame, seconds, [&] {
      int out = 0;
      EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data());
      EVP_EncryptUpdate(ctx, sealed.data(), &out, payload.data(), static_cast<int>(frame));
      EVP_EncryptFinal_ex(ctx, sealed.data(), &out);
    });
    EVP_CIPHER_CTX_free(ctx);
    rows.push_back({"chacha20-poly1305 encrypt (alternative)", s, s});
  }
  std::string out = "[";
  for (const auto& r : rows) {
    std::printf("%-44s seal %.3f CPU s/GiB (%.2f GiB/s)  open %.3f CPU s/GiB (%.2f GiB/s)\n", r.name.c_str(), r.seal,
                1 / r.seal, r.open, 1 / r.open);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"name\": \"%s\", \"seal_cpu_s_per_gib\": %.4f, \"open_cpu_s_per_gib\": %.4f}",
                  out.size() > 1 ? ", " : "", r.name.c_str(), r.seal, r.open);
    out += buf;
  }
  out += "]";
  if (!json.empty()) {
    if (FILE* f = std::fopen(json.c_str(), "w")) {
      std::fprintf(f, "{\"frame_bytes\": %zu, \"rows\": %s}\n", frame, out.c_str());
      std::fclose(f);
    }
  }
  return 0;
}
