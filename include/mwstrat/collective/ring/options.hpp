#pragma once
/// \file
/// `ring_options`: everything a `ring_collective` needs, as plain values. The ring reads no environment: the
/// configuration layer fills these from a cluster spec and from the environment (`MWSTRAT_JOB_TOKEN`,
/// `MWSTRAT_RING_TRANSPORT`, `MWSTRAT_RING_SPIN_US`, `MWSTRAT_RING_LIVENESS_MS`, `MWSTRAT_RING_STREAMS`,
/// `MWSTRAT_RING_ENCRYPT`), never
/// overriding a value set in code.

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <memory>
#include <string_view>
#include <vector>

namespace mwstrat {

namespace detail {
class join_desk;
}

/// How a ring link carries payloads. Frame headers, aborts and liveness always travel over the TCP connection.
enum class ring_transport {
  /// Shared memory when both ends of a link are on the same host (same kernel, user and namespaces), else TCP;
  /// a link whose shared memory cannot be set up (no /dev/shm, out of space, mmap failure) logs why and uses TCP.
  automatic,
  /// Payloads on the TCP connection, always.
  tcp,
};

/// How the ranks of a ring that spans several hosts are arranged for all-reduce.
enum class ring_topology {
  /// One flat ring through every rank in rank order, whatever the hosts (its bits are those of the same job on one
  /// host).
  flat,
  /// Hierarchical when every host runs the same number (at least two) of ranks: a ring of each host's ranks
  /// (shared memory) reduces, a TCP ring between hosts carries each host rank's part, the host ring gathers;
  /// otherwise one flat ring. Only all-reduces of at least `ring_options::hierarchical_min_bytes` are hierarchical;
  /// the other operations use the flat ring. Its results differ from the flat ring's by float32 rounding (a
  /// different order of summation), not run to run. The default: on 2 simulated hosts x 2 ranks it measured 1.3x
  /// (10 Gbit/s) and 1.4x (1 Gbit/s) faster than the flat ring at 11 MiB (docs/collectives.md).
  hierarchical,
};

/// What the all-reduce's payloads between hosts are narrowed to on the wire (float32 sum and mean only; sums stay in
/// float32, in the same fixed order). The error it adds is bounded in docs/collectives.md ("Compression").
enum class wire_compression {
  none,  ///< float32 on the wire
  bf16,  ///< bfloat16: half the bytes, 8 significant bits, float32's range
  fp16,  ///< IEEE binary16: half the bytes, 11 significant bits, magnitudes up to 65504 (beyond: infinity)
};

/// The most TCP data connections per link between hosts (`ring_options::streams_per_peer`): the handshake
/// carries the count in four bits.
inline constexpr int ring_max_streams_per_peer = 16;

/// Options of the TCP ring backend.
struct ring_options {
  /// Every rank's listening address, "host:port" or "[v6]:port"; the index is the rank.
  std::vector<std::string> addresses;
  /// This process's rank, an index into `addresses`.
  int rank = 0;
  /// How long start-up may take: listening, connecting to the next rank (with retry and backoff) and
  /// accepting the previous one.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  /// Default deadline of an operation (see `op_options`).
  std::chrono::milliseconds op_timeout{std::chrono::seconds(60)};
  /// How long a neighbour may stay silent on its liveness connection before it is declared lost (a
  /// `peer_lost_error` naming it, "silent for N s", on every surviving rank). Heartbeats come from the ring's own
  /// thread, so a slow step, an evaluation or a checkpoint write never count as silence; a stopped, frozen or
  /// cut-off process does. Give every rank the same value. 0: silence is never judged (a closed connection still
  /// is; the operation timeout remains the bound). Negative values are refused (`config_error`).
  std::chrono::milliseconds liveness_timeout{std::chrono::seconds(5)};
  /// How long one incoming connection may take to complete its handshake before it is dropped.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(5)};
  /// Identifies the cluster (e.g. a digest of the cluster spec); ranks with different fingerprints refuse
  /// each other.
  std::string cluster_fingerprint;
  /// Identifies the model (e.g. its layer shapes); checked like the cluster fingerprint.
  std::string model_fingerprint;
  /// Which ring of the job this is: 0 at the start, one more each time the surviving ranks rebuild the ring for a
  /// replacement of a lost rank (in-memory recovery, train/detail/in_memory_recovery.hpp). Folded into the
  /// handshake's cluster digest, so a rank of one generation refuses a connection from another (nothing stale mixes
  /// into a new ring). Give every rank of a ring the same value.
  std::uint64_t generation = 0;
  /// The shared secret both sides of a connection prove they know (HMAC-SHA256) before any data flows. With a token,
  /// every frame on a data connection between hosts (different host identities) also carries an AES-256-GCM tag
  /// keyed from the token and the handshake, so an altered, forged or replayed frame ends the job naming the link
  /// (docs/security.md). nullopt or an empty string: no token, frames carry no tag.
  std::optional<std::string> job_token;
  /// Encrypt the frames between hosts too (AES-256-GCM, the same tag): payloads no longer travel in the clear.
  /// Needs a job token (else `config_error`); give every rank the same value (a link whose ends differ is refused at
  /// start-up). Shared memory within a host is never encrypted. Cost: docs/security.md.
  bool encrypt = false;
  /// Largest payload of one frame; buffers are split into chunks of at most this size and pipelined.
  std::size_t chunk_bytes = std::size_t{512} << 10;
  /// SO_SNDBUF / SO_RCVBUF of the ring's sockets; 0 leaves the kernel's autotuning alone.
  int socket_buffer_bytes = 4 << 20;
  /// Payload transport of each link.
  ring_transport transport = ring_transport::automatic;
  /// Which host this rank is on, as far as shared memory and the hierarchical all-reduce are concerned: ranks with
  /// equal identities try shared memory with each other (and use it only once a handshake proves that both reach
  /// the same region); ranks with different ones talk TCP. nullopt: derived from the kernel's boot id, the user and
  /// the IPC and mount namespaces. Set it where that guess is wrong (simulated hosts, containers). An empty string
  /// is refused (`config_error`).
  std::optional<std::string> host_identity;
  /// Flat or hierarchical all-reduce across hosts (see `ring_topology`).
  ring_topology topology = ring_topology::hierarchical;
  /// All-reduces smaller than this use the flat ring even when the topology is hierarchical: latency bounds them, and
  /// the flat ring has one phase where the hierarchical all-reduce has three (4 KiB on 2 hosts x 2 ranks: the flat
  /// ring took 0.6x the hierarchical one's time). 0: every all-reduce is hierarchical.
  std::size_t hierarchical_min_bytes = std::size_t{32} << 10;
  /// The inter-host leg of float sum/mean all-reduces: the ring between hosts of a hierarchical all-reduce, or the
  /// whole ring when it is flat and spans several hosts. Never used within one host.
  wire_compression compression = wire_compression::none;
  /// TCP data connections on each link between ranks on different hosts (1..16; links within a host have one).
  /// Each chunk of an operation travels on connection (chunk index mod streams), so the results are the same bits
  /// whatever the value; several streams can carry more than one on a link whose limit is per flow, or where one
  /// flow's window or one core's copying is the bottleneck. Give every rank the same value (a link whose ends
  /// differ is refused at start-up). Other values are refused (`config_error`).
  int streams_per_peer = 1;
  /// How long a rank with nothing to do keeps polling its sockets before it sleeps in poll(): a wake-up from sleep
  /// costs tens to hundreds of microseconds (more in a virtual machine) on every hop of an operation, polling costs
  /// the waiting rank's CPU (it yields between polls, so other runnable threads still get it). 0: sleep at once.
  /// Counted from the last frame finished: the bytes of a frame trickling in over a slow link do not extend it.
  /// Negative values are refused (`config_error`).
  std::chrono::microseconds spin{200};
  /// Elastic training, growing (docs/fault-tolerance.md): where this rank listens for workers that ask to join the
  /// job, while it is the chief (rank 0) of a ring; every rank may be given its own, since the chief can change.
  /// Empty: no joins are heard.
  std::string join_listen;
  /// A worker started after the job: the join addresses to try (the chiefs' `join_listen`s), in turn, until the
  /// chief of the moment admits it at a step boundary; `addresses[rank]` is where this worker's ring listens and
  /// `rank` its worker index in the job, and the ring it is admitted into replaces them. `connect_timeout` bounds
  /// the wait. Empty: the ring is the job's as `addresses` says.
  std::vector<std::string> join_via;
  /// The chief's open join desk, handed from a ring to the next of the same job (set by the ring; leave it empty).
  std::shared_ptr<detail::join_desk> join_desk;
  /// Where the ring logs (start-up, refused connections, failures); empty: standard error. A lost peer's verdict is
  /// logged from the ring's liveness thread, the moment it is formed.
  std::function<void(std::string_view)> log;
};

}  // namespace mwstrat
