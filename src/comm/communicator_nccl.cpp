// The NCCL communicator (communicator_nccl.h). Collectives map one to one where NCCL has them (all-reduce,
// all-gather, broadcast, reduce-scatter with equal counts); the v-variants and all-to-all are groups of NCCL
// point-to-point calls or broadcasts/reduces, which NCCL runs as one operation.
#include "comm/communicator_nccl.h"

#include "core/error.h"

#if AGOQ_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace agoq {
namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) fail("NCCL: ", call, ": ", ncclGetErrorString(r));
}
void cuda_rt_check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) cudaGetLastError(), fail("CUDA: ", call, ": ", cudaGetErrorString(e));
}
#define AGOQ_NCCL(call) nccl_check((call), #call)
#define AGOQ_CUDART(call) cuda_rt_check((call), #call)

ncclDataType_t nccl_type(CommDtype t) {
  switch (t) {
    case CommDtype::f32: return ncclFloat32;
    case CommDtype::f64: return ncclFloat64;
    case CommDtype::i32: return ncclInt32;
    case CommDtype::i64: return ncclInt64;
  }
  fail("NCCL: unknown data type");
}
size_t type_bytes(CommDtype t) { return t == CommDtype::f32 || t == CommDtype::i32 ? 4 : 8; }
ncclRedOp_t nccl_op(CommOp op) { return op == CommOp::sum ? ncclSum : op == CommOp::max ? ncclMax : ncclMin; }

// ncclGroupStart .. ncclGroupEnd, closed even when a call inside throws (a thread left inside a group would turn
// its next NCCL call into part of this one).
class NcclGroup {
 public:
  NcclGroup() { AGOQ_NCCL(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  void end() {
    open_ = false;
    AGOQ_NCCL(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

const uint8_t* at(const void* p, size_t bytes) { return static_cast<const uint8_t*>(p) + bytes; }
uint8_t* at(void* p, size_t bytes) { return static_cast<uint8_t*>(p) + bytes; }

// A request of isend/irecv: the event recorded after the transfer on the communicator's stream.
class NcclRequest : public CommRequest::Impl {
 public:
  explicit NcclRequest(cudaStream_t s) {
    AGOQ_CUDART(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming));
    AGOQ_CUDART(cudaEventRecord(ev_, s));
  }
  ~NcclRequest() override { cudaEventDestroy(ev_); }
  void wait() override { AGOQ_CUDART(cudaEventSynchronize(ev_)); }
  bool test() override { return cudaEventQuery(ev_) == cudaSuccess; }

 private:
  cudaEvent_t ev_{};
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, ncclComm_t comm, int device)
      : bootstrap_(bootstrap), comm_(comm), device_(device) {
    AGOQ_NCCL(ncclCommCount(comm_, &size_));
    AGOQ_NCCL(ncclCommUserRank(comm_, &rank_));
    // A blocking stream: it starts after the work queued on the legacy default stream, where the ops produce
    // the buffers this communicator sends (a non-blocking one could read them before they are written).
    AGOQ_CUDART(cudaStreamCreate(&stream_));
    AGOQ_CUDART(cudaMalloc(&token_, sizeof(int)));  // the barrier's one value (too small for the tracker)
  }
  ~NcclCommunicator() override {
    cudaFree(token_);
    cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // The bootstrap's answer (a sub-communicator keeps its parent's: at worst it overlaps exchanges it need not).
  bool one_host() const override { return bootstrap_.one_host(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    use();
    ncclComm_t sub = nullptr;
    AGOQ_NCCL(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr));
    if (color < 0) return nullptr;
    return std::make_unique<NcclCommunicator>(bootstrap_, sub, device_);
  }

  void allreduce(const void* send, void* recv, size_t count, CommDtype t, CommOp op) override {
    use();
    AGOQ_NCCL(ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm_, stream_));
    finish();
  }
  void alltoall(const void* send, void* recv, size_t bytes) override {
    std::vector<size_t> b(static_cast<size_t>(size_), bytes), d(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) d[r] = size_t(r) * bytes;
    alltoallv(send, b.data(), d.data(), recv, b.data(), d.data());
  }
  void alltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                 const size_t* recv_bytes, const size_t* recv_displs) override {
    enqueue_alltoallv(send, send_bytes, send_displs, recv, recv_bytes, recv_displs);
    finish();
  }
  CommRequest ialltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                         const size_t* recv_bytes, const size_t* recv_displs) override {
    enqueue_alltoallv(send, send_bytes, send_displs, recv, recv_bytes, recv_displs);
    return CommRequest(std::make_unique<NcclRequest>(stream_));
  }
  void allgather(const void* send, void* recv, size_t bytes) override {
    use();
    AGOQ_NCCL(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_));
    finish();
  }
  void allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                  const size_t* recv_displs) override {
    enqueue_allgatherv(send, send_bytes, recv, recv_bytes, recv_displs);
    finish();
  }
  CommRequest iallgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                          const size_t* recv_displs) override {
    enqueue_allgatherv(send, send_bytes, recv, recv_bytes, recv_displs);
    return CommRequest(std::make_unique<NcclRequest>(stream_));
  }
  void reduce_scatter(const void* send, void* recv, const size_t* recv_counts, CommDtype t, CommOp op) override {
    use();
    bool equal = true;
    for (int r = 1; r < size_; ++r) equal = equal && recv_counts[r] == recv_counts[0];
    if (equal) {
      AGOQ_NCCL(ncclReduceScatter(send, recv, recv_counts[0], nccl_type(t), nccl_op(op), comm_, stream_));
    } else {  // one reduce per owner, each rank's part at its displacement
      NcclGroup group;
      size_t displ = 0;
      for (int r = 0; r < size_; ++r) {
        if (recv_counts[r])
          AGOQ_NCCL(ncclReduce(at(send, displ * type_bytes(t)), recv, recv_counts[r], nccl_type(t), nccl_op(op), r,
                               comm_, stream_));  // (recv is written on the root only)
        displ += recv_counts[r];
      }
      group.end();
    }
    finish();
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    use();
    AGOQ_NCCL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_));
    finish();
  }
  void send(const void* buf, size_t bytes, int dst, int /*tag: see the header*/) override {
    use();
    AGOQ_NCCL(ncclSend(buf, bytes, ncclUint8, dst, comm_, stream_));
    finish();
  }
  void recv(void* buf, size_t bytes, int src, int /*tag*/) override {
    use();
    AGOQ_NCCL(ncclRecv(buf, bytes, ncclUint8, src, comm_, stream_));
    finish();
  }
  CommRequest isend(const void* buf, size_t bytes, int dst, int /*tag*/) override {
    use();
    AGOQ_NCCL(ncclSend(buf, bytes, ncclUint8, dst, comm_, stream_));
    return CommRequest(std::make_unique<NcclRequest>(stream_));
  }
  CommRequest irecv(void* buf, size_t bytes, int src, int /*tag*/) override {
    use();
    AGOQ_NCCL(ncclRecv(buf, bytes, ncclUint8, src, comm_, stream_));
    return CommRequest(std::make_unique<NcclRequest>(stream_));
  }
  void barrier() override { allreduce(token_, token_, 1, CommDtype::i32, CommOp::sum); }
  [[noreturn]] void abort(const std::string& message, int code) override {
    if (comm_) ncclCommAbort(comm_), comm_ = nullptr;  // no collective may wait on this rank any more
    bootstrap_.abort(message, code);
    std::abort();  // (not reached: the bootstrap's abort ends the job)
  }

 private:
  void enqueue_alltoallv(const void* send, const size_t* send_bytes, const size_t* send_displs, void* recv,
                         const size_t* recv_bytes, const size_t* recv_displs) {
    use();
    NcclGroup group;
    for (int r = 0; r < size_; ++r) {
      if (send_bytes[r]) AGOQ_NCCL(ncclSend(at(send, send_displs[r]), send_bytes[r], ncclUint8, r, comm_, stream_));
      if (recv_bytes[r]) AGOQ_NCCL(ncclRecv(at(recv, recv_displs[r]), recv_bytes[r], ncclUint8, r, comm_, stream_));
    }
    group.end();
  }
  void enqueue_allgatherv(const void* send, size_t send_bytes, void* recv, const size_t* recv_bytes,
                          const size_t* recv_displs) {
    AGOQ_CHECK(send_bytes == recv_bytes[rank_], "allgatherv: rank ", rank_, " sends ", send_bytes,
               " bytes, the others expect ", recv_bytes[rank_]);
    use();
    NcclGroup group;
    for (int r = 0; r < size_; ++r)
      if (recv_bytes[r])
        AGOQ_NCCL(ncclBroadcast(r == rank_ ? send : at(recv, recv_displs[r]), at(recv, recv_displs[r]), recv_bytes[r],
                                ncclUint8, r, comm_, stream_));  // (send is read on the root only)
    group.end();
  }
  // The calling thread's device is the communicator's (a communication thread may not have set it).
  void use() const { AGOQ_CUDART(cudaSetDevice(device_)); }

  // The blocking contract: wait for the stream, polling NCCL's asynchronous error, so that a failed peer ends the
  // wait with an error naming it instead of leaving the kernel (and this rank) spinning forever.
  void finish() {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        const std::string why = std::string(ncclGetErrorString(async)) + " (" + ncclGetLastError(comm_) + ")";
        ncclCommAbort(comm_), comm_ = nullptr;  // (the destructor must not destroy an aborted communicator)
        fail("NCCL: rank ", rank_, "/", size_, ": ", why);
      }
      if (e != cudaErrorNotReady) cuda_rt_check(e, "cudaStreamQuery");
      std::this_thread::yield();
    }
  }

  Communicator& bootstrap_;
  ncclComm_t comm_;
  int device_, rank_ = 0, size_ = 1;
  cudaStream_t stream_{};
  int* token_ = nullptr;
};

}  // namespace

bool comm_nccl_available() { return true; }

std::unique_ptr<Communicator> comm_nccl(Communicator& bootstrap, int device) {
  AGOQ_CUDART(cudaSetDevice(device));
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) AGOQ_NCCL(ncclGetUniqueId(&id));
  bootstrap.broadcast(&id, sizeof id, 0);
  ncclComm_t comm = nullptr;
  AGOQ_NCCL(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  return std::make_unique<NcclCommunicator>(bootstrap, comm, device);
}

}  // namespace agoq

#else  // no NCCL in this build

namespace agoq {
bool comm_nccl_available() { return false; }
std::unique_ptr<Communicator> comm_nccl(Communicator&, int) {
  fail("NCCL: this agoq was built without NCCL (no CUDA toolkit with NCCL at configure time)");
}
}  // namespace agoq

#endif
