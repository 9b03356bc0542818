// Communicator: the collectives of one process group — the ranks that share a
// shard of the model state (the shard group) or that hold replicas of it (the
// replica group). Two implementations: NCCL through its C API on a dedicated
// CUDA stream per communicator (GPU), and Gloo through LibTorch's c10d (CPU).
//
// Asynchrony: every collective is issued, not waited for. It returns a
// CollectiveWork; Wait() makes the *caller's current CUDA stream* wait on the
// collective's completion event (no host blocking on the hot path), or, on the
// CPU, blocks until the collective has finished. Inputs are ordered after the
// work already queued on the caller's current stream. The caller keeps every
// tensor it passes alive until Wait() has returned: freed after that, on the
// stream that waited, their memory is reused in that stream's order (the
// caching allocator is not told of the communicator's stream).
//
// Every call names what it moves ("all-gather block 3 mb 0") so a collective
// that does not finish within the timeout can be reported with the operation,
// the unit and the rank (see CollectiveWatchdog).
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include <ATen/core/Tensor.h>

namespace llmplan::executor {

// The start of a step's measurement, to place collectives on its timeline.
struct StepClock {
  std::chrono::steady_clock::time_point host_start;  // the host clock at the step's start
  // CUDA builds: a timing cudaEvent_t recorded on the compute stream at that
  // moment (the host waited for it, so both clocks start together); null on CPU.
  void* device_start_event = nullptr;
};

// Where a collective ran, in seconds since a StepClock's start.
struct CollectiveSpan {
  double start_s = 0;
  double end_s = 0;
};

class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  // GPU: the caller's current stream waits for the collective (host does not
  // block); work queued on that stream afterwards sees the result. CPU: blocks
  // until done; the result is in the caller's tensors when it returns.
  // Throws CollectiveError (naming op, group, rank) on failure/timeout.
  // REQUIRES: the Communicator that issued this work is still alive.
  virtual void Wait() = 0;
  // True once the collective has finished on the device / network (never
  // blocks; safe from another thread, e.g. the watchdog's). Results are only
  // guaranteed in the caller's tensors after Wait() (the Gloo emulations copy
  // them there in Wait()).
  virtual bool Done() = 0;
  // When the collective ran: on a GPU, timing events recorded on the
  // communicator's own stream just before and after its kernel (so queueing
  // behind other collectives is not counted as its time); on the CPU, the
  // host clock at issue and when completion was first seen (Wait, or Done
  // returning true).
  // REQUIRES: the collective finished (Wait returned, or Done() is true);
  // `clock` was taken before it was issued, on the same device.
  virtual CollectiveSpan Span(const StepClock& clock) = 0;
};

// A collective failed or timed out. what() names the operation, the rank and
// the group.
class CollectiveError : public std::runtime_error {
 public:
  explicit CollectiveError(const std::string& message) : std::runtime_error(message) {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;  // within this group
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // e.g. "shard group 0 (nccl)"

  // full[size * n] <- concatenation of every rank's shard[n].
  // REQUIRES: shard and full contiguous, same dtype and device,
  // full.numel() == size() * shard.numel().
  virtual std::unique_ptr<CollectiveWork> AllGather(const at::Tensor& shard, const at::Tensor& full,
                                                    const std::string& what) = 0;
  // shard[n] <- sum over ranks of full[rank * n : (rank + 1) * n].
  // REQUIRES: as AllGather.
  virtual std::unique_ptr<CollectiveWork> ReduceScatter(const at::Tensor& full, const at::Tensor& shard,
                                                        const std::string& what) = 0;
  // tensor <- sum over ranks, in place.
  virtual std::unique_ptr<CollectiveWork> AllReduce(const at::Tensor& tensor, const std::string& what) = 0;
  // tensor <- root's tensor, in place.
  virtual std::unique_ptr<CollectiveWork> Broadcast(const at::Tensor& tensor, int root, const std::string& what) = 0;

  // Tears the communicator down without waiting for outstanding collectives
  // (NCCL: ncclCommAbort), so a hung peer cannot hang this process at exit.
  virtual void Abort() = 0;
};

}  // namespace llmplan::executor
