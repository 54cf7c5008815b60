#pragma once
/// \file
/// `mpi_collective`: the collective concept over an MPI communicator (OpenMPI from Debian, or any MPI-3
/// library), the way to run on a cluster that already has an MPI launcher. Only available where <mpi.h> is;
/// not part of <mwstrat/collective.hpp>.
///
/// Each operation is started non-blocking (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather, MPI_Ibarrier) and
/// completed by polling MPI_Test until its deadline, so a silent peer raises `timeout_error` instead of hanging;
/// an MPI error code raises `io_error` (a lost peer usually makes the MPI launcher end the whole job at once).
/// After a failure the communicator is abandoned: later calls rethrow the first error.
///
/// Asynchronous all-reduces run on a worker thread in issue order when MPI provides MPI_THREAD_SERIALIZED or
/// better (initialise with MPI_Init_thread); otherwise `all_reduce_async` completes before it returns.
/// Results: `mean` is MPI_SUM followed by a local division; bit-identical results across ranks are what
/// OpenMPI's algorithms give for a fixed communicator size, not something the MPI standard promises.

#include <mwstrat/collective/concepts.hpp>
#include <mwstrat/collective/detail/deadline.hpp>
#include <mwstrat/collective/detail/front_end.hpp>
#include <mwstrat/collective/detail/reduce.hpp>
#include <mwstrat/collective/handle.hpp>
#include <mwstrat/collective/types.hpp>
#include <mwstrat/error.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <thread>

namespace mwstrat {

/// Options of the MPI adapter.
struct mpi_options {
  /// Default deadline of an operation (see `op_options`).
  std::chrono::milliseconds op_timeout{std::chrono::seconds(60)};
};

/// One rank of an MPI communicator. MPI must be initialised before and finalised after its lifetime.
class mpi_collective : public detail::front_end<mpi_collective> {
 public:
  /// The component named in this backend's errors.
  static constexpr const char* component = "mpi";

  /// Uses a duplicate of `comm`, so mwstrat's messages never match the application's own.
  explicit mpi_collective(MPI_Comm comm = MPI_COMM_WORLD, mpi_options options = {}) : options_(options) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) throw config_error({"mpi"}, "MPI is not initialised (call MPI_Init_thread first)");
    check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", 0);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int provided = MPI_THREAD_SINGLE;
    MPI_Query_thread(&provided);
    threaded_ = provided >= MPI_THREAD_SERIALIZED;
    check(MPI_Op_create(&nan_min, 1, &min_), "MPI_Op_create", 0);
    check(MPI_Op_create(&nan_max, 1, &max_), "MPI_Op_create", 0);
  }

  mpi_collective(const mpi_collective&) = delete;
  mpi_collective& operator=(const mpi_collective&) = delete;

  ~mpi_collective() {
    queue_.stop();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !broken_) MPI_Comm_free(&comm_);
    if (!finalized) {
      MPI_Op_free(&min_);
      MPI_Op_free(&max_);
    }
  }

  /// This rank, in [0, size()).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// The number of ranks in the communicator.
  [[nodiscard]] int size() const noexcept { return size_; }

  // all_reduce, all_reduce_async, broadcast, all_gather, barrier: see detail::front_end. all_reduce_async runs on
  // the worker thread when MPI provides MPI_THREAD_SERIALIZED or better, else completes before it returns.

 private:
  friend class detail::front_end<mpi_collective>;

  bool async_on_worker() const { return threaded_; }

  template <class T>
  void broadcast_now(std::span<T> data, int root, op_options options) {
    const auto seq = next_seq_++;
    const auto deadline = deadline_of(options);
    for (std::size_t at = 0; at < data.size(); at += max_count) {
      const int n = static_cast<int>(std::min(max_count, data.size() - at));
      MPI_Request req;
      check(MPI_Ibcast(data.data() + at, n, type_of<T>(), root, comm_, &req), "MPI_Ibcast", seq);
      complete(req, deadline, "broadcast", seq);
    }
  }

  template <class T>
  void all_gather_now(std::span<const T> mine, std::span<T> all, op_options options) {
    if (mine.size() > max_count)
      throw config_error({"mpi", rank_}, "all_gather: more than INT_MAX/2 elements per rank");
    const auto seq = next_seq_++;
    T* own = all.data() + static_cast<std::size_t>(rank_) * mine.size();
    if (!mine.empty() && own != mine.data()) std::memmove(own, mine.data(), mine.size_bytes());
    MPI_Request req;
    const int count = static_cast<int>(mine.size());
    check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data(), count, type_of<T>(), comm_, &req),
          "MPI_Iallgather", seq);
    complete(req, deadline_of(options), "all_gather", seq);
  }

  void barrier_now(op_options options) {
    const auto seq = next_seq_++;
    MPI_Request req;
    check(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier", seq);
    complete(req, deadline_of(options), "barrier", seq);
  }

  static constexpr std::size_t max_count = INT_MAX / 2;

  template <class T>
  static MPI_Datatype type_of() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
    else return MPI_INT64_T;
  }

  MPI_Op op_of(reduce_op op) const {
    switch (op) {
      case reduce_op::min: return min_;
      case reduce_op::max: return max_;
      default: return MPI_SUM;
    }
  }

  // MPI's own MPI_MIN and MPI_MAX keep or drop a NaN depending on the order they combine ranks in; these follow the
  // other backends (detail::reduce_into): a NaN on any rank makes the element NaN.
  template <reduce_op Op>
  static void nan_aware(void* in, void* inout, int* len, MPI_Datatype* type) {
    const auto n = static_cast<std::size_t>(*len);
    const auto as = [&]<class T>(T*) { detail::reduce_into(static_cast<T*>(inout), static_cast<const T*>(in), n, Op); };
    if (*type == MPI_FLOAT) as(static_cast<float*>(nullptr));
    else if (*type == MPI_DOUBLE) as(static_cast<double*>(nullptr));
    else if (*type == MPI_INT32_T) as(static_cast<std::int32_t*>(nullptr));
    else as(static_cast<std::int64_t*>(nullptr));
  }
  static void nan_min(void* in, void* inout, int* len, MPI_Datatype* type) {
    nan_aware<reduce_op::min>(in, inout, len, type);
  }
  static void nan_max(void* in, void* inout, int* len, MPI_Datatype* type) {
    nan_aware<reduce_op::max>(in, inout, len, type);
  }

  std::chrono::steady_clock::time_point deadline_of(op_options o) const {
    return detail::deadline_after(o.timeout.count() > 0 ? o.timeout : options_.op_timeout);
  }

  template <class T>
  void all_reduce_now(std::span<T> data, reduce_op op, op_options options) {
    const auto seq = next_seq_++;
    const auto deadline = deadline_of(options);
    for (std::size_t at = 0; at < data.size(); at += max_count) {
      const int n = static_cast<int>(std::min(max_count, data.size() - at));
      MPI_Request req;
      check(MPI_Iallreduce(MPI_IN_PLACE, data.data() + at, n, type_of<T>(), op_of(op), comm_, &req),
            "MPI_Iallreduce", seq);
      complete(req, deadline, "all_reduce", seq);
    }
    detail::finish_reduce(data.data(), data.size(), op, size_);
  }

  void check(int rc, const char* call, std::uint64_t seq) {
    if (broken_) std::rethrow_exception(broken_);
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    broken_ = std::make_exception_ptr(
        io_error({"mpi", rank_}, std::string(call) + " failed during operation #" + std::to_string(seq) + ": " + text));
    std::rethrow_exception(broken_);
  }

  void complete(MPI_Request& req, std::chrono::steady_clock::time_point deadline, const char* what,
                std::uint64_t seq) {
    for (std::uint32_t spins = 0;; ++spins) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test", seq);
      if (done) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        broken_ = std::make_exception_ptr(timeout_error(
            {"mpi", rank_}, std::string(what) + " #" + std::to_string(seq) + " missed its deadline (" +
                                std::to_string(options_.op_timeout.count()) + " ms default); the communicator is abandoned"));
        std::rethrow_exception(broken_);
      }
      if (spins > 64) std::this_thread::yield();
    }
  }

  mpi_options options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op min_ = MPI_OP_NULL, max_ = MPI_OP_NULL;  // nan_min and nan_max
  int rank_ = 0;
  int size_ = 1;
  bool threaded_ = false;
  std::uint64_t next_seq_ = 0;
  std::exception_ptr broken_;
};

static_assert(collective<mpi_collective>);

}  // namespace mwstrat
