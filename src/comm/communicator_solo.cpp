// The world of a process started alone (not by mpirun, srun or another MPI launcher): one rank, and no MPI.
// Starting MPI as a singleton would fork a runtime daemon, start Open MPI's progress threads and open its network
// transports only to reduce over one rank; a run on one machine without a launcher needs none of it. Every
// collective over one rank is a copy; point-to-point reaches only the process itself.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/communicator_solo.h"
#include "core/error.h"

namespace agoq {
namespace {

void copy_if_apart(const void* send, void* recv, size_t bytes) {
  if (send != recv && bytes) std::memcpy(recv, send, bytes);
}

class SoloCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool one_host() const override { return true; }
  std::unique_ptr<Communicator> split(int color, int) override {
    if (color < 0) return nullptr;
    return std::make_unique<SoloCommunicator>();
  }

  void allreduce(const void* send, void* recv, size_t count, CommDtype t, CommOp) override {
    copy_if_apart(send, recv, count * comm_dtype_size(t));
  }
  void alltoall(const void* send, void* recv, size_t bytes) override { copy_if_apart(send, recv, bytes); }
  void alltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                 const size_t* recv_bytes, const size_t* recv_displs) override {
    AGOQ_CHECK(send_bytes[0] == recv_bytes[0], "alltoallv: rank 0 sends ", send_bytes[0],
               " bytes to itself but expects ", recv_bytes[0]);
    copy_if_apart(static_cast<const char*>(send) + send_displs[0], static_cast<char*>(recv) + recv_displs[0],
                  send_bytes[0]);
  }
  void allgather(const void* send, void* recv, size_t bytes) override { copy_if_apart(send, recv, bytes); }
  void allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                  const size_t* recv_displs) override {
    AGOQ_CHECK(send_bytes == recv_bytes[0], "allgatherv: rank 0 sends ", send_bytes, " bytes but expects ",
               recv_bytes[0]);
    copy_if_apart(send, static_cast<char*>(recv) + recv_displs[0], send_bytes);
  }
  CommRequest ialltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                         const size_t* recv_bytes, const size_t* recv_displs) override {
    alltoallv(send, send_bytes, send_displs, recv, recv_bytes, recv_displs);
    return CommRequest();
  }
  CommRequest iallgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                          const size_t* recv_displs) override {
    allgatherv(send, send_bytes, recv, recv_bytes, recv_displs);
    return CommRequest();
  }
  void reduce_scatter(const void* send, void* recv, const size_t* recv_counts, CommDtype t, CommOp) override {
    copy_if_apart(send, recv, recv_counts[0] * comm_dtype_size(t));
  }
  void broadcast(void*, size_t, int root) override {
    AGOQ_CHECK(root == 0, "broadcast: root ", root, " is not a rank of a one-rank world");
  }
  // Messages to itself, as MPI delivers them: in order per tag, a send completing at once (its bytes are copied).
  void send(const void* buf, size_t bytes, int dst, int tag) override { isend(buf, bytes, dst, tag).wait(); }
  void recv(void* buf, size_t bytes, int src, int tag) override { irecv(buf, bytes, src, tag).wait(); }
  CommRequest isend(const void* buf, size_t bytes, int dst, int tag) override {
    check_peer("send to", dst, tag);
    auto& waiting = receives_[tag];
    if (!waiting.empty()) {
      auto r = waiting.front();
      waiting.pop_front();
      deliver(static_cast<const char*>(buf), bytes, *r);
    } else {
      const char* p = static_cast<const char*>(buf);
      sends_[tag].emplace_back(p, p + bytes);
    }
    return CommRequest();
  }
  CommRequest irecv(void* buf, size_t bytes, int src, int tag) override {
    check_peer("receive from", src, tag);
    auto r = std::make_shared<PendingReceive>(PendingReceive{static_cast<char*>(buf), bytes, tag, false});
    auto& sent = sends_[tag];
    if (!sent.empty()) {
      deliver(sent.front().data(), sent.front().size(), *r);
      sent.pop_front();
    } else {
      receives_[tag].push_back(r);
    }
    return CommRequest(std::make_unique<ReceiveRequest>(r));
  }
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "agoq: error: %s\n", message.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(code);
  }

 private:
  struct PendingReceive {
    char* buf;
    size_t bytes;
    int tag;
    bool done;
  };
  // A receive completes when its message has been sent; waiting for one never sent would wait forever (MPI hangs
  // there), so it is an error.
  struct ReceiveRequest final : CommRequest::Impl {
    explicit ReceiveRequest(std::shared_ptr<PendingReceive> r) : r(std::move(r)) {}
    std::shared_ptr<PendingReceive> r;
    void wait() override {
      if (!r->done) fail("receive from rank 0 (tag ", r->tag, ") waits for a message this one-rank process never sent");
    }
    bool test() override { return r->done; }
  };

  static void check_peer(const char* what, int peer, int tag) {
    AGOQ_CHECK(peer == 0, "cannot ", what, " rank ", peer,
               ": this process runs alone (one rank, started without an MPI launcher)");
    AGOQ_CHECK(tag >= 0 && tag < 256, "send/receive: tag must be in [0, 256), got ", tag);
  }
  static void deliver(const char* data, size_t bytes, PendingReceive& r) {
    AGOQ_CHECK(bytes == r.bytes, "receive from rank 0 (tag ", r.tag, "): expected ", r.bytes,
               " bytes, the message has ", bytes);
    copy_if_apart(data, r.buf, bytes);
    r.done = true;
  }

  std::map<int, std::deque<std::vector<char>>> sends_;                   // sent, not yet received, per tag
  std::map<int, std::deque<std::shared_ptr<PendingReceive>>> receives_;  // posted, not yet matched, per tag
};

}  // namespace

bool comm_started_by_launcher() {
  // Open MPI's mpirun, PMIx launchers (Open MPI 5, Slurm's --mpi=pmix) and PMI-1/2 launchers (MPICH's hydra,
  // Slurm's srun) each name the rank in one of these.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

std::unique_ptr<Communicator> comm_solo_make() { return std::make_unique<SoloCommunicator>(); }

}  // namespace agoq
