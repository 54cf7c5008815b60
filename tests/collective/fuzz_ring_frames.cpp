// libFuzzer target: every parser the ring runs on bytes from the network (addresses from configuration,
// handshake messages, shared-memory offers and answers, frame headers of every type (data, slot, credit, abort,
// and the liveness connection's heartbeat and goodbye), abort notices) must reject or accept
// arbitrary input without crashing.

#include <mwstrat/cluster/address.hpp>
#include <mwstrat/collective/ring/detail/wire.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace mwstrat::detail;
  if (size == 0) return 0;
  const std::uint8_t selector = data[0];
  const std::span<const std::uint8_t> in(data + 1, size - 1);
  switch (selector % 8) {
    case 0: (void)parse_address_nothrow(std::string_view(reinterpret_cast<const char*>(in.data()), in.size())); break;
    case 1:
      if (auto h = decode_hello(in)) (void)judge_hello(*h, 4, 1, sha256("c"), sha256("m"), (selector & 8) != 0);
      break;
    case 2: (void)decode_hello_reply(in); break;
    case 3: (void)decode_hello_finish(in); break;
    case 4: {
      std::string why;
      if (in.size() >= frame_header_size) {
        if (auto h = decode_frame_header(in.first(frame_header_size), &why)) {
          (void)describe(*h);
          (void)frame_mismatch(*h, frame_header{});
          if (h->type == frame_type::abort && in.size() - frame_header_size >= h->payload)
            (void)decode_abort(in.subspan(frame_header_size, static_cast<std::size_t>(h->payload)), 7);
        }
      }
      break;
    }
    case 5: (void)decode_abort(in, 1 + (selector >> 4)); break;
    case 6:
      if (auto o = decode_shm_offer(in)) (void)valid_shm_name(o->name);
      break;
    case 7:
      (void)decode_shm_answer(in);
      (void)decode_shm_verdict(in);
      break;
  }
  return 0;
}
