// Ring all-reduce on loopback: n worker processes (fork) on 127.0.0.1, float buffers of 4 KiB ... 64 MiB,
// reporting time per all-reduce and bus bandwidth (bytes * 2(n-1)/n / time), plus the raw loopback TCP duplex
// bandwidth (every process sends to the next and receives from the previous at once, as the ring does). Each
// size runs with payloads over TCP ("tcp" rows) and through shared memory ("shm" rows, the default between
// processes of one host); the CPU columns show what the all-reduce takes away from training on the busiest rank.
//
//   mwstrat_bench_collective [--ranks 2,4] [--min 4096] [--max 67108864] [--chunk BYTES] [--sockbuf BYTES]
//                            [--transport tcp,shm] [--duplex-only]

#include <mwstrat/collective.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

struct result {
  std::size_t bytes;
  double seconds;  // per all-reduce, wall
  double cpu;      // per all-reduce, CPU time (user + system) of the busiest rank
};

// CPU seconds (user + system) this process has used: a figure the other load on a shared machine inflates far
// less than wall time.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// One rank: every size, timed on rank 0 after warm-up; results written to `out` (a pipe).
int socket_buffer = -1;  // --sockbuf: ring_options::socket_buffer_bytes (-1: the default)

void run_rank(int n, int rank, const std::vector<std::string>& addrs, const std::vector<std::size_t>& sizes,
              std::size_t chunk, bool shm, int out) {
  mwstrat::ring_options o;
  o.transport = shm ? mwstrat::ring_transport::automatic : mwstrat::ring_transport::tcp;
  o.addresses = addrs;
  o.rank = rank;
  o.connect_timeout = std::chrono::seconds(30);
  o.job_token = "";
  o.log = [](std::string_view) {};
  if (chunk) o.chunk_bytes = chunk;
  if (socket_buffer >= 0) o.socket_buffer_bytes = socket_buffer;
  mwstrat::ring_collective ring(o);
  if (ring.uses_shared_memory() != shm) {
    std::fprintf(stderr, "rank %d: wanted %s payloads, got the other transport (see the ring's log)\n", rank,
                 shm ? "shared-memory" : "TCP");
    std::_Exit(2);
  }
  std::vector<float> data(sizes.back() / sizeof(float), 1.0f);
  for (auto bytes : sizes) {
    std::span<float> s(data.data(), bytes / sizeof(float));
    for (int i = 0; i < 3; ++i) ring.all_reduce(s, mwstrat::reduce_op::sum);
    // Enough iterations for ~0.5 s, agreed by all ranks (rank 0's estimate, broadcast).
    ring.barrier();
    auto t0 = clock_type::now();
    ring.all_reduce(s, mwstrat::reduce_op::sum);
    double one = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::int64_t iters = std::clamp<std::int64_t>(static_cast<std::int64_t>(0.5 / std::max(one, 1e-6)), 5, 20000);
    ring.broadcast(std::span<std::int64_t>(&iters, 1), 0);
    ring.barrier();
    t0 = clock_type::now();
    const double c0 = cpu_seconds();
    for (std::int64_t i = 0; i < iters; ++i) ring.all_reduce(s, mwstrat::reduce_op::sum);
    const double per = std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(iters);
    double worst[2] = {per, (cpu_seconds() - c0) / static_cast<double>(iters)};
    ring.all_reduce(std::span<double>(worst, 2), mwstrat::reduce_op::max);
    if (rank == 0) {
      const result r{bytes, worst[0], worst[1]};
      if (::write(out, &r, sizeof r) != sizeof r) std::_Exit(3);
    }
    (void)n;
  }
}

std::vector<result> bench_ring(int n, const std::vector<std::size_t>& sizes, std::size_t chunk, bool shm) {
  const auto ports = free_ports(n);
  std::vector<std::string> addrs;
  for (int p : ports) addrs.push_back("127.0.0.1:" + std::to_string(p));
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      try {
        run_rank(n, r, addrs, sizes, chunk, shm, fds[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        std::_Exit(2);
      }
      std::_Exit(0);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  std::vector<result> results;
  result r{};
  while (::read(fds[0], &r, sizeof r) == sizeof r) results.push_back(r);
  ::close(fds[0]);
  for (auto pid : pids) ::waitpid(pid, nullptr, 0);
  return results;
}

// Raw duplex: n processes in a ring of plain TCP connections; each sends `bytes` to the next while receiving
// as much from the previous (two threads, blocking calls, 4 MiB socket buffers). Returns bytes/s per direction,
// by wall time and by the busiest process's CPU time.
struct duplex_result {
  double wall_bps;
  double cpu_bps;
};

duplex_result bench_duplex(int n, std::size_t bytes) {
  const auto ports = free_ports(n);
  int fds[2];
  if (::pipe(fds) != 0) std::exit(1);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const int buf = 4 << 20, one = 1;
      const int lst = ::socket(AF_INET, SOCK_STREAM, 0);
      ::setsockopt(lst, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      ::setsockopt(lst, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
      ::setsockopt(lst, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(static_cast<std::uint16_t>(ports[static_cast<std::size_t>(r)]));
      if (::bind(lst, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lst, 4) != 0) std::_Exit(2);
      const int out = ::socket(AF_INET, SOCK_STREAM, 0);
      ::setsockopt(out, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
      ::setsockopt(out, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
      ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      a.sin_port = htons(static_cast<std::uint16_t>(ports[static_cast<std::size_t>((r + 1) % n)]));
      while (::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const int in = ::accept(lst, nullptr, nullptr);
      std::vector<char> sbuf(bytes, 1), rbuf(bytes);
      // A short exchange so every rank starts timing with the ring up.
      char token = 0;
      if (::send(out, &token, 1, 0) != 1 || ::recv(in, &token, 1, MSG_WAITALL) != 1) std::_Exit(2);
      const auto t0 = clock_type::now();
      const double c0 = cpu_seconds();
      std::thread sender([&] {
        std::size_t at = 0;
        while (at < bytes) {
          const auto k = ::send(out, sbuf.data() + at, bytes - at, 0);
          if (k <= 0) std::_Exit(2);
          at += static_cast<std::size_t>(k);
        }
      });
      std::size_t got = 0;
      while (got < bytes) {
        const auto k = ::recv(in, rbuf.data() + got, bytes - got, 0);
        if (k <= 0) std::_Exit(2);
        got += static_cast<std::size_t>(k);
      }
      sender.join();
      const double secs[2] = {std::chrono::duration<double>(clock_type::now() - t0).count(), cpu_seconds() - c0};
      if (::write(fds[1], secs, sizeof secs) != sizeof secs) std::_Exit(3);
      std::_Exit(0);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  double worst = 0, worst_cpu = 0, s[2] = {};
  while (::read(fds[0], s, sizeof s) == sizeof s) {
    worst = std::max(worst, s[0]);
    worst_cpu = std::max(worst_cpu, s[1]);
  }
  ::close(fds[0]);
  for (auto pid : pids) ::waitpid(pid, nullptr, 0);
  return {static_cast<double>(bytes) / worst, static_cast<double>(bytes) / worst_cpu};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4};
  std::size_t min_bytes = 4096, max_bytes = std::size_t{64} << 20, chunk = 0;
  bool duplex_only = false;
  std::vector<std::string> transports = {"tcp", "shm"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ranks" && i + 1 < argc) {
      ranks.clear();
      std::string v = argv[++i];
      for (std::size_t at = 0; at <= v.size();) {
        const auto c = std::min(v.find(',', at), v.size());
        ranks.push_back(std::stoi(v.substr(at, c - at)));
        at = c + 1;
      }
    } else if (a == "--min" && i + 1 < argc) {
      min_bytes = std::stoul(argv[++i]);
    } else if (a == "--max" && i + 1 < argc) {
      max_bytes = std::stoul(argv[++i]);
    } else if (a == "--chunk" && i + 1 < argc) {
      chunk = std::stoul(argv[++i]);
    } else if (a == "--sockbuf" && i + 1 < argc) {
      socket_buffer = std::stoi(argv[++i]);
    } else if (a == "--transport" && i + 1 < argc) {
      transports.clear();
      std::string v = argv[++i];
      for (std::size_t at = 0; at <= v.size();) {
        const auto c = std::min(v.find(',', at), v.size());
        transports.push_back(v.substr(at, c - at));
        if (transports.back() != "tcp" && transports.back() != "shm") {
          std::fprintf(stderr, "--transport takes tcp, shm or tcp,shm\n");
          return 2;
        }
        at = c + 1;
      }
    } else if (a == "--duplex-only") {
      duplex_only = true;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--ranks 2,4] [--min B] [--max B] [--chunk B] [--sockbuf B] [--transport tcp,shm] "
                   "[--duplex-only]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<std::size_t> sizes;
  for (std::size_t b = min_bytes; b <= max_bytes; b *= 4) sizes.push_back(b);
  if (std::find(sizes.begin(), sizes.end(), std::size_t{11} << 20) == sizes.end() && max_bytes >= (std::size_t{11} << 20)) {
    sizes.push_back(std::size_t{11} << 20);  // the reference CNN's gradient
    std::sort(sizes.begin(), sizes.end());
  }
  for (int n : ranks) {
    const auto duplex = bench_duplex(n, std::size_t{256} << 20);
    std::printf("loopback TCP duplex, %d processes in a ring: %.2f GB/s per direction (wall), %.2f GB/s per CPU-second\n",
                n, duplex.wall_bps / 1e9, duplex.cpu_bps / 1e9);
    if (duplex_only) continue;
    // busbw = bytes * 2(n-1)/n / time; "cpu" columns use the busiest rank's CPU time instead of wall time.
    // of_duplex: relative to the raw TCP duplex above (shm rows can exceed 100%).
    std::printf("%-6s %-9s %10s %10s %10s %10s %9s %11s %9s\n", "ranks", "transport", "bytes", "time_us", "busbw",
                "of_duplex", "cpu_us", "cpu_busbw", "of_duplex");
    for (const auto& t : transports) {
      for (const auto& r : bench_ring(n, sizes, chunk, t == "shm")) {
        const double moved = static_cast<double>(r.bytes) * 2.0 * (n - 1) / n;
        const double bus = moved / r.seconds, cbus = moved / r.cpu;
        std::printf("%-6d %-9s %10zu %10.1f %10.2f %9.0f%% %9.1f %11.2f %8.0f%%\n", n, t.c_str(), r.bytes,
                    r.seconds * 1e6, bus / 1e9, 100.0 * bus / duplex.wall_bps, r.cpu * 1e6, cbus / 1e9,
                    100.0 * cbus / duplex.cpu_bps);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}
