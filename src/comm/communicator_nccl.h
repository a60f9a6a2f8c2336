// The NCCL communicator: the Communicator interface (comm/communicator.h) over NCCL, for buffers in GPU memory.
// Part 2 of the CUDA backend (docs/cuda.md) wires it into data parallelism; it is built when CMake finds NCCL next
// to the CUDA toolkit (AGOQ_HAVE_NCCL).
//
// Semantics, so that code written against the MPI communicator runs unchanged: every call is blocking (it enqueues
// on the communicator's stream and waits for it), pointers are device pointers, all ranks call the collectives in
// the same order. NCCL has no tags: point-to-point messages between two ranks must be received in the order they
// were sent, whatever their tag. And a send or receive holds the stream until its peer's matching call: isend then
// recv to and from the same neighbour, which MPI allows, deadlocks here (part 2 adds a grouped exchange for the
// pipeline's schedule). The ranks and the NCCL unique id are agreed over a bootstrap communicator (MPI),
// which must outlive this one and is also what abort() uses to end the job.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace agoq {

// Whether this build has NCCL.
bool comm_nccl_available();
// A communicator of the bootstrap's ranks, rank r on CUDA device `device` (collective over bootstrap). Throws
// naming the NCCL call and its reason; without NCCL in the build, says so.
std::unique_ptr<Communicator> comm_nccl(Communicator& bootstrap, int device);

}  // namespace agoq
