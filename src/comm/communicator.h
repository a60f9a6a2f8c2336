// Communicator: the few collectives agoq needs, behind an abstract class so that an NCCL implementation can sit
// beside the MPI one (communicator_mpi.cpp). Counts are in elements for typed calls and in bytes for the byte calls
// (all-to-all(v), all-gather(v), broadcast, send/recv); every call accepts length 0. Errors throw agoq::Error naming
// the operation. All ranks of a communicator must call its collectives in the same order (MPI's rule).
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "core/error.h"

namespace agoq {

enum class CommDtype : uint8_t { f32, f64, i32, i64 };
enum class CommOp : uint8_t { sum, max, min };
size_t comm_dtype_size(CommDtype t);

template <class T>
constexpr CommDtype comm_dtype_of();
template <>
constexpr CommDtype comm_dtype_of<float>() {
  return CommDtype::f32;
}
template <>
constexpr CommDtype comm_dtype_of<double>() {
  return CommDtype::f64;
}
template <>
constexpr CommDtype comm_dtype_of<int32_t>() {
  return CommDtype::i32;
}
template <>
constexpr CommDtype comm_dtype_of<int64_t>() {
  return CommDtype::i64;
}

// A pending non-blocking operation (send/recv, all-to-allv, all-gatherv). Move-only; wait() is idempotent.
// Destroying a request that was never waited for waits for it (the buffer must outlive the transfer either way).
class CommRequest {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;  // true once complete
  };
  CommRequest() = default;
  explicit CommRequest(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  CommRequest(CommRequest&&) noexcept = default;
  CommRequest& operator=(CommRequest&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      impl_ = std::move(o.impl_);
    }
    return *this;
  }
  ~CommRequest() { finish_quietly(); }
  void wait() {
    if (impl_) impl_->wait(), impl_.reset();
  }
  bool test() {
    if (impl_ && impl_->test()) impl_.reset();
    return !impl_;
  }

 private:
  void finish_quietly() noexcept {
    try {
      wait();
    } catch (...) {}
  }
  std::unique_ptr<Impl> impl_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // True when every rank runs on one host, where the exchanges are memory copies by the ranks' own cores (nothing
  // to overlap them with), false when some go over a network.
  virtual bool one_host() const = 0;
  // Ranks with the same color form a sub-communicator, ordered by (key, old rank). color < 0: this rank joins none
  // (returns nullptr). Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // recv = op over ranks of send (count elements). send == recv is in place.
  virtual void allreduce(const void* send, void* recv, size_t count, CommDtype t, CommOp op) = 0;
  // Each rank sends `bytes` to every rank: block j of send goes to rank j, block i of recv came from rank i.
  virtual void alltoall(const void* send, void* recv, size_t bytes) = 0;
  // Byte counts and displacements, one per rank (arrays of size()).
  virtual void alltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                         const size_t* recv_bytes, const size_t* recv_displs) = 0;
  // recv[i*bytes .. (i+1)*bytes) = rank i's send. send == recv + rank()*bytes is in place.
  virtual void allgather(const void* send, void* recv, size_t bytes) = 0;
  // Rank i's send_bytes land at recv + recv_displs[i] (recv_bytes[i] == rank i's send_bytes).
  // send == recv + recv_displs[rank()] is in place.
  virtual void allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                          const size_t* recv_displs) = 0;
  // The same two exchanges, non-blocking: they run while the caller computes and complete by the request's wait()
  // (or a test() that returns true). The buffers must stay untouched until then; the count and displacement arrays
  // are copied by the call. Open MPI's TCP transport moves data only inside MPI calls, so a caller that computes
  // meanwhile test()s now and then (allreduce_q8's pipeline). Every rank must start its non-blocking collectives in
  // the same order, as for blocking ones.
  virtual CommRequest ialltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                                 const size_t* recv_bytes, const size_t* recv_displs) = 0;
  virtual CommRequest iallgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                                  const size_t* recv_displs) = 0;
  // send holds sum(recv_counts) elements; rank i receives op-reduced elements [displ_i, displ_i + recv_counts[i]).
  virtual void reduce_scatter(const void* send, void* recv, const size_t* recv_counts, CommDtype t, CommOp op) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // Point-to-point, tag in [0, 256). Messages larger than 2 GiB are split internally.
  virtual void send(const void* buf, size_t bytes, int dst, int tag = 0) = 0;
  virtual void recv(void* buf, size_t bytes, int src, int tag = 0) = 0;
  virtual CommRequest isend(const void* buf, size_t bytes, int dst, int tag = 0) = 0;
  virtual CommRequest irecv(void* buf, size_t bytes, int src, int tag = 0) = 0;
  virtual void barrier() = 0;
  // Prints "agoq: error: rank r/N: message" to stderr and ends every rank of the job with `code`.
  [[noreturn]] virtual void abort(const std::string& message, int code = 1) = 0;

  // Typed conveniences.
  template <class T>
  void allreduce_sum(T* data, size_t count) {
    allreduce(data, data, count, comm_dtype_of<T>(), CommOp::sum);
  }
  template <class T>
  T allreduce_value(T v, CommOp op = CommOp::sum) {
    allreduce(&v, &v, 1, comm_dtype_of<T>(), op);
    return v;
  }
};

// ---- the MPI world ----

// Thread level asked of MPI. `multiple` (the default) lets GradBuckets run its communication thread; the
// serialized contract is what agoq relies on: one thread at a time calls MPI, hand-offs ordered by a mutex.
enum class CommThreads : uint8_t { single, serialized, multiple };

// MPI_COMM_WORLD. The first call initialises MPI and the process-wide owner finalises it at exit. Call it from the
// main thread before any other thread uses MPI. A process started without an MPI launcher gets a one-rank world
// that never starts MPI (communicator_solo.h).
Communicator& comm_world(CommThreads level = CommThreads::multiple);
// The thread level MPI actually provided (valid after comm_world()).
CommThreads comm_thread_level();

// An error that every rank detects identically in the same collective step (e.g. comm_check_config's mismatch):
// the ranks can stop together and only one of them needs to say why.
class CommAgreedError : public Error {
 public:
  using Error::Error;
};

// Runs `fn`, whose failure can only be the same on every rank (it depends on nothing but what all ranks share, such
// as the flags after the start-up check): an agoq::Error becomes a CommAgreedError, so rank 0 alone reports it.
template <class Fn>
auto comm_agreed(const Communicator& comm, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const CommAgreedError&) {
    throw;
  } catch (const Error& e) {
    if (comm.size() > 1) throw CommAgreedError(e.what());
    throw;
  }
}

// Runs `fn` on rank 0 alone (a check of what only rank 0 sees, such as the folder it writes) and makes its failure
// everyone's: collective; every rank then throws the same CommAgreedError (printed once, by rank 0), or none does.
template <class Fn>
void comm_lead_agreed(Communicator& comm, Fn&& fn) {
  std::string error;
  if (comm.rank() == 0) {
    try {
      fn();
    } catch (const Error& e) {
      error = e.what();
    }
  }
  if (comm.size() == 1) {
    if (!error.empty()) throw Error(error);
    return;
  }
  uint64_t n = error.size();
  comm.broadcast(&n, sizeof n, 0);
  error.resize(size_t(n));
  comm.broadcast(error.data(), size_t(n), 0);
  if (n > 0) throw CommAgreedError(error);
}

// A job's failure on this rank, from the catch block around its body, ended so that peers are not left blocked in
// a collective: with one rank the exception is rethrown unchanged; with several, a CommAgreedError (thrown
// identically on every rank, e.g. a config mismatch) is rethrown on rank 0 only while the other ranks exit(1)
// quietly after MPI finalises, and any other failure aborts the job with "agoq: error: rank r/N: message"
// (comm.abort).
[[noreturn]] void comm_fail(Communicator& comm, std::exception_ptr failure);

}  // namespace agoq
