// The MPI implementation of Communicator, and the process-wide MPI owner (init on first use, finalize at exit).
// Every communicator uses MPI_ERRORS_RETURN, so an MPI failure becomes an agoq::Error naming the operation instead
// of MPI's default abort. Messages above MPI's int counts are split into pieces. Every blocking call is marked for
// the watchdog (comm_watchdog.h), which bounds how long a rank waits on peers that are gone.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/comm_watchdog.h"
#include "comm/communicator.h"
#include "comm/communicator_solo.h"
#include "core/error.h"

namespace agoq {
namespace {

constexpr size_t kMaxPiece = size_t(1) << 30;  // bytes per MPI call when a message exceeds INT_MAX
// Tags stay below 32768 (the least MPI_TAG_UB an MPI guarantees): a user message of tag t uses t*64 + piece, the
// point-to-point fallback of the big collectives uses kCollectiveTag + piece.
constexpr int kMaxUserTag = 256, kCollectiveTag = kMaxUserTag * 64;

std::string mpi_error_text(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, size_t(len));
}

MPI_Datatype mpi_type(CommDtype t) {
  switch (t) {
    case CommDtype::f32: return MPI_FLOAT;
    case CommDtype::f64: return MPI_DOUBLE;
    case CommDtype::i32: return MPI_INT32_T;
    case CommDtype::i64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(CommOp op) { return op == CommOp::sum ? MPI_SUM : op == CommOp::max ? MPI_MAX : MPI_MIN; }

bool fits_int(const size_t* v, int n) {
  return std::all_of(v, v + n, [](size_t x) { return x <= size_t(INT_MAX); });
}
std::vector<int> to_int(const size_t* v, int n) { return std::vector<int>(v, v + n); }

// Async-signal-safe note for the ranks mpirun terminates after another rank died: they cannot know which one,
// but mpirun's own report (printed next) names it.
char g_term_note[160];
size_t g_term_note_len = 0;
void on_sigterm(int sig) {
  if (g_term_note_len) (void)!write(2, g_term_note, g_term_note_len);
  signal(sig, SIG_DFL);
  raise(sig);
}

CommWatchdog* g_watchdog = nullptr;  // the world's, when it has several ranks and a timeout

class MpiRequest final : public CommRequest::Impl {
 public:
  explicit MpiRequest(const char* w) : what(w) {}
  std::vector<MPI_Request> reqs;
  std::vector<int> counts;  // a non-blocking collective's count and displacement arrays, alive until it completes
  const char* what;
  void wait() override {
    const CommWatchdog::Pending pending(g_watchdog, what);
    const int rc = MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) fail("MPI ", what, " (wait) failed: ", mpi_error_text(rc));
  }
  bool test() override {
    int done = 0;
    const int rc = MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) fail("MPI ", what, " (test) failed: ", mpi_error_text(rc));
    return done != 0;
  }
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // The ranks that share this one's memory (for Open MPI, its node): all of them on every rank, or on none.
    MPI_Comm local = MPI_COMM_NULL;
    int local_size = 1;
    check("split", MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
    MPI_Comm_size(local, &local_size);
    MPI_Comm_free(&local);
    one_host_ = local_size == size_;
  }
  ~MpiCommunicator() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (owned_ && !fin) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool one_host() const override { return one_host_; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    const CommWatchdog::Pending pending(g_watchdog, "split");
    MPI_Comm out = MPI_COMM_NULL;
    check("split", MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out));
    if (out == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(out, true);
  }

  void allreduce(const void* send, void* recv, size_t count, CommDtype t, CommOp op) override {
    const CommWatchdog::Pending pending(g_watchdog, "all-reduce");
    const size_t es = comm_dtype_size(t), piece = kMaxPiece / es;
    for (size_t i = 0; i < count; i += piece) {  // count 0: no call, nothing to do on any rank
      const int m = int(std::min(piece, count - i));
      char* r = static_cast<char*>(recv) + i * es;
      const void* s = send == recv ? MPI_IN_PLACE : static_cast<const char*>(send) + i * es;
      check("all-reduce", MPI_Allreduce(s, r, m, mpi_type(t), mpi_op(op), comm_));
    }
  }

  void alltoall(const void* send, void* recv, size_t bytes) override {
    const CommWatchdog::Pending pending(g_watchdog, "all-to-all");
    if (bytes <= size_t(INT_MAX) && bytes * size_t(size_) <= size_t(INT_MAX)) {
      check("all-to-all", MPI_Alltoall(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, comm_));
      return;
    }
    std::vector<size_t> counts(size_, bytes), displs(size_);
    for (int i = 0; i < size_; ++i) displs[i] = size_t(i) * bytes;
    alltoallv(send, counts.data(), displs.data(), recv, counts.data(), displs.data());
  }

  void alltoallv(const void* send, const size_t* sb, const size_t* sd, void* recv, const size_t* rb,
                 const size_t* rd) override {
    const CommWatchdog::Pending pending(g_watchdog, "all-to-allv");
    if (fits_int(sb, size_) && fits_int(sd, size_) && fits_int(rb, size_) && fits_int(rd, size_)) {
      const auto isb = to_int(sb, size_), isd = to_int(sd, size_), irb = to_int(rb, size_), ird = to_int(rd, size_);
      check("all-to-allv",
            MPI_Alltoallv(send, isb.data(), isd.data(), MPI_BYTE, recv, irb.data(), ird.data(), MPI_BYTE, comm_));
      return;
    }
    std::vector<MPI_Request> reqs;
    post_alltoallv_pieces(reqs, send, sb, sd, recv, rb, rd);
    check("all-to-allv", MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
  }

  CommRequest ialltoallv(const void* send, const size_t* sb, const size_t* sd, void* recv, const size_t* rb,
                         const size_t* rd) override {
    auto req = std::make_unique<MpiRequest>("all-to-allv");
    if (fits_int(sb, size_) && fits_int(sd, size_) && fits_int(rb, size_) && fits_int(rd, size_)) {
      std::vector<int>& c = req->counts;
      for (const size_t* v : {sb, sd, rb, rd}) c.insert(c.end(), v, v + size_);
      const int n = size_;
      MPI_Request r;
      check("all-to-allv",
            MPI_Ialltoallv(send, &c[0], &c[n], MPI_BYTE, recv, &c[2 * n], &c[3 * n], MPI_BYTE, comm_, &r));
      req->reqs.push_back(r);
    } else {
      post_alltoallv_pieces(req->reqs, send, sb, sd, recv, rb, rd);
    }
    return CommRequest(std::move(req));
  }

  void allgather(const void* send, void* recv, size_t bytes) override {
    const CommWatchdog::Pending pending(g_watchdog, "all-gather");
    std::vector<size_t> counts(size_, bytes), displs(size_);
    for (int i = 0; i < size_; ++i) displs[i] = size_t(i) * bytes;
    if (send == static_cast<char*>(recv) + displs[rank_]) send = recv;  // in place
    if (bytes * size_t(size_) <= size_t(INT_MAX)) {
      check("all-gather",
            MPI_Allgather(send == recv ? MPI_IN_PLACE : send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, comm_));
      return;
    }
    allgatherv(send == recv ? static_cast<char*>(recv) + displs[rank_] : send, bytes, recv, counts.data(),
               displs.data());
  }

  void allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* rb, const size_t* rd) override {
    const CommWatchdog::Pending pending(g_watchdog, "all-gatherv");
    AGOQ_CHECK(send_bytes == rb[rank_], "all-gatherv: rank ", rank_, " sends ", send_bytes, " bytes but ", rb[rank_],
               " are expected from it");
    char* own = static_cast<char*>(recv) + rd[rank_];
    const bool in_place = send == own;
    if (fits_int(rb, size_) && fits_int(rd, size_)) {
      const auto irb = to_int(rb, size_), ird = to_int(rd, size_);
      check("all-gatherv", MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, int(send_bytes), MPI_BYTE, recv, irb.data(),
                                          ird.data(), MPI_BYTE, comm_));
      return;
    }
    std::vector<MPI_Request> reqs;
    post_allgatherv_pieces(reqs, send, send_bytes, recv, rb, rd);
    check("all-gatherv", MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
  }

  CommRequest iallgatherv(const void* send, size_t send_bytes, void* recv, const size_t* rb,
                          const size_t* rd) override {
    AGOQ_CHECK(send_bytes == rb[rank_], "all-gatherv: rank ", rank_, " sends ", send_bytes, " bytes but ", rb[rank_],
               " are expected from it");
    auto req = std::make_unique<MpiRequest>("all-gatherv");
    if (fits_int(rb, size_) && fits_int(rd, size_)) {
      std::vector<int>& c = req->counts;
      for (const size_t* v : {rb, rd}) c.insert(c.end(), v, v + size_);
      const bool in_place = send == static_cast<char*>(recv) + rd[rank_];
      MPI_Request r;
      check("all-gatherv", MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, int(send_bytes), MPI_BYTE, recv, &c[0],
                                           &c[size_], MPI_BYTE, comm_, &r));
      req->reqs.push_back(r);
    } else {
      post_allgatherv_pieces(req->reqs, send, send_bytes, recv, rb, rd);
    }
    return CommRequest(std::move(req));
  }

  void reduce_scatter(const void* send, void* recv, const size_t* recv_counts, CommDtype t, CommOp op) override {
    const CommWatchdog::Pending pending(g_watchdog, "reduce-scatter");
    AGOQ_CHECK(fits_int(recv_counts, size_), "reduce-scatter: a rank's count exceeds ", INT_MAX, " elements");
    const auto counts = to_int(recv_counts, size_);
    check("reduce-scatter", MPI_Reduce_scatter(send, recv, counts.data(), mpi_type(t), mpi_op(op), comm_));
  }

  void broadcast(void* buf, size_t bytes, int root) override {
    const CommWatchdog::Pending pending(g_watchdog, "broadcast");
    for (size_t i = 0; i < bytes; i += kMaxPiece)
      check("broadcast",
            MPI_Bcast(static_cast<char*>(buf) + i, int(std::min(kMaxPiece, bytes - i)), MPI_BYTE, root, comm_));
  }

  void send(const void* buf, size_t bytes, int dst, int tag) override { isend(buf, bytes, dst, tag).wait(); }
  void recv(void* buf, size_t bytes, int src, int tag) override { irecv(buf, bytes, src, tag).wait(); }
  CommRequest isend(const void* buf, size_t bytes, int dst, int tag) override {
    return post_request(const_cast<void*>(buf), bytes, dst, tag, true);
  }
  CommRequest irecv(void* buf, size_t bytes, int src, int tag) override {
    return post_request(buf, bytes, src, tag, false);
  }

  void barrier() override {
    const CommWatchdog::Pending pending(g_watchdog, "barrier");
    check("barrier", MPI_Barrier(comm_));
  }

  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "agoq: error: rank %d/%d: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(comm_, code);
    std::_Exit(code);  // not reached with Open MPI
  }

 private:
  void check(const char* what, int rc) const {
    if (rc != MPI_SUCCESS) fail("MPI ", what, " failed on rank ", rank_, "/", size_, ": ", mpi_error_text(rc));
  }
  // A message as pieces of at most kMaxPiece bytes, piece k tagged tag0 + k so that pieces never mix. A zero-length
  // message posts nothing (both sides skip it alike).
  void post_pieces(std::vector<MPI_Request>& reqs, char* buf, size_t bytes, int peer, bool is_send,
                   int tag0 = kCollectiveTag) {
    for (size_t i = 0, k = 0; i < bytes; i += kMaxPiece, ++k) {
      const int m = int(std::min(kMaxPiece, bytes - i)), tag = tag0 + int(k);
      MPI_Request r;
      check(is_send ? "send" : "receive", is_send ? MPI_Isend(buf + i, m, MPI_BYTE, peer, tag, comm_, &r)
                                                  : MPI_Irecv(buf + i, m, MPI_BYTE, peer, tag, comm_, &r));
      reqs.push_back(r);
    }
  }
  // Beyond int counts or displacements: every piece as a point-to-point message (same result, fewer
  // optimisations). Ranks post the pieces of their collectives in the same order, so pieces never mix.
  void post_alltoallv_pieces(std::vector<MPI_Request>& reqs, const void* send, const size_t* sb, const size_t* sd,
                             void* recv, const size_t* rb, const size_t* rd) {
    for (int p = 0; p < size_; ++p) {
      post_pieces(reqs, static_cast<char*>(recv) + rd[p], rb[p], p, /*is_send=*/false);
      post_pieces(reqs, const_cast<char*>(static_cast<const char*>(send)) + sd[p], sb[p], p, true);
    }
  }
  void post_allgatherv_pieces(std::vector<MPI_Request>& reqs, const void* send, size_t send_bytes, void* recv,
                              const size_t* rb, const size_t* rd) {
    char* own = static_cast<char*>(recv) + rd[rank_];
    if (send != own && send_bytes) std::memcpy(own, send, send_bytes);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      post_pieces(reqs, static_cast<char*>(recv) + rd[p], rb[p], p, false);
      post_pieces(reqs, own, send_bytes, p, true);
    }
  }
  CommRequest post_request(void* buf, size_t bytes, int peer, int tag, bool is_send) {
    AGOQ_CHECK(peer >= 0 && peer < size_, is_send ? "send" : "receive", ": peer ", peer, " is not a rank of 0..",
               size_ - 1);
    AGOQ_CHECK(tag >= 0 && tag < kMaxUserTag, "send/receive: tag must be in [0, ", kMaxUserTag, "), got ", tag);
    auto impl = std::make_unique<MpiRequest>(is_send ? "send" : "receive");
    // Pieces are tagged tag*64 + k (at most 64 pieces of 1 GiB); a zero-length message is still one real message.
    if (bytes == 0) {
      MPI_Request r;
      check(impl->what, is_send ? MPI_Isend(buf, 0, MPI_BYTE, peer, tag * 64, comm_, &r)
                                : MPI_Irecv(buf, 0, MPI_BYTE, peer, tag * 64, comm_, &r));
      impl->reqs.push_back(r);
    } else {
      AGOQ_CHECK(bytes <= 64 * kMaxPiece, "send/receive: ", bytes, " bytes is more than one message may carry");
      post_pieces(impl->reqs, static_cast<char*>(buf), bytes, peer, is_send, tag * 64);
    }
    return CommRequest(std::move(impl));
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  bool one_host_ = true;
};

// Owns MPI for the process: initialised by the first comm_world(), finalised when the program exits. A process
// started alone gets the one-rank world of communicator_solo.cpp instead, and MPI is never started.
struct MpiWorld {
  CommThreads provided = CommThreads::single;
  std::unique_ptr<Communicator> world;
  std::unique_ptr<CommWatchdog> watchdog;
  bool mpi = false;  // whether this process uses (and so finalises) MPI
  explicit MpiWorld(CommThreads level) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && !comm_started_by_launcher()) {
      world = comm_solo_make();
      provided = CommThreads::multiple;  // one rank: no MPI call is ever made, from any thread
      return;
    }
    mpi = true;
    const int want = level == CommThreads::multiple     ? MPI_THREAD_MULTIPLE
                     : level == CommThreads::serialized ? MPI_THREAD_SERIALIZED
                                                        : MPI_THREAD_SINGLE;
    int got = MPI_THREAD_SINGLE;
    if (!inited) {
      if (MPI_Init_thread(nullptr, nullptr, want, &got) != MPI_SUCCESS) fail("MPI initialisation failed");
    } else {
      MPI_Query_thread(&got);
    }
    provided = got >= MPI_THREAD_MULTIPLE     ? CommThreads::multiple
               : got >= MPI_THREAD_SERIALIZED ? CommThreads::serialized
                                              : CommThreads::single;
    world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
    if (world->size() > 1) {
      g_term_note_len = size_t(std::snprintf(g_term_note, sizeof g_term_note,
                                             "agoq: rank %d/%d terminated by mpirun: another rank of the job failed "
                                             "(mpirun's report names it)\n",
                                             world->rank(), world->size()));
      signal(SIGTERM, on_sigterm);
      if (const double timeout_s = comm_timeout_from_env(); timeout_s > 0) {
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        watchdog = std::make_unique<CommWatchdog>(
            "rank " + std::to_string(world->rank()) + "/" + std::to_string(world->size()) + " on " + host, timeout_s);
        g_watchdog = watchdog.get();
      }
    }
  }
  ~MpiWorld() {
    g_watchdog = nullptr;
    watchdog.reset();
    world.reset();
    int fin = 0;
    MPI_Finalized(&fin);
    if (mpi && !fin) MPI_Finalize();
  }
};

MpiWorld& mpi_world(CommThreads level) {
  static MpiWorld w(level);
  return w;
}

}  // namespace

size_t comm_dtype_size(CommDtype t) { return t == CommDtype::f32 || t == CommDtype::i32 ? 4 : 8; }

Communicator& comm_world(CommThreads level) { return *mpi_world(level).world; }
CommThreads comm_thread_level() { return mpi_world(CommThreads::multiple).provided; }

void comm_fail(Communicator& comm, std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const CommAgreedError&) {
    if (comm.size() == 1 || comm.rank() == 0) throw;
    std::fflush(stdout);
    std::exit(1);  // rank 0 reports; MPI finalises in the static owner's destructor
  } catch (const std::exception& e) {
    if (comm.size() == 1) throw;
    comm.abort(e.what());
  }
  std::abort();  // not reached: each path above throws or ends the process
}

}  // namespace agoq
