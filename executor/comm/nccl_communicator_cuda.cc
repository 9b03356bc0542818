// NcclCommunicator over NCCL's C API (see nccl_communicator.h). Compiled only
// in CUDA builds (the _cuda.cc suffix).
#include "executor/torch_compat.h"

#include "executor/comm/nccl_communicator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

namespace llmplan::executor {
namespace {

std::string Seconds(std::chrono::milliseconds t) { return std::to_string(t.count() / 1000.0).substr(0, 5); }

ncclDataType_t NcclType(at::ScalarType type, const std::string& description) {
  switch (type) {
    case at::kFloat: return ncclFloat32;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kDouble: return ncclFloat64;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kByte: return ncclUint8;
    case at::kChar: return ncclInt8;
    default: throw CollectiveError(description + ": NCCL cannot move dtype " + std::string(c10::toString(type)));
  }
}

void CheckCuda(cudaError_t status, const std::string& description, const char* call) {
  if (status != cudaSuccess) {
    throw CollectiveError(description + ": " + call + " failed: " + cudaGetErrorString(status));
  }
}

// Owns one CUDA event. Events that only order streams skip timing (a timing
// event costs a timestamp write); a collective's start and done events time it.
class Event {
 public:
  explicit Event(bool timing = false) {
    CheckCuda(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming), "NCCL work",
              "cudaEventCreate");
  }
  ~Event() { cudaEventDestroy(event_); }  // deferred by CUDA until the event has completed
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclCommunicator;

class NcclWork : public CollectiveWork {
 public:
  NcclWork(NcclCommunicator* owner, std::string description, at::DeviceIndex device)
      : owner_(owner), description_(std::move(description)), device_(device) {}
  void Wait() override;
  bool Done() override {
    // cudaEventQuery never blocks the host; thread-safe (the watchdog calls it).
    return cudaEventQuery(done_.get()) == cudaSuccess;
  }
  CollectiveSpan Span(const StepClock& clock) override {
    auto since = [&](cudaEvent_t e) {
      float ms = 0;
      CheckCuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(clock.device_start_event), e), description_,
                "cudaEventElapsedTime");
      return ms / 1000.0;
    };
    if (clock.device_start_event == nullptr) return {};
    return {since(start_.get()), since(done_.get())};
  }
  cudaEvent_t start_event() const { return start_.get(); }
  cudaEvent_t done_event() const { return done_.get(); }

 private:
  NcclCommunicator* owner_;
  std::string description_;
  at::DeviceIndex device_;
  Event start_{/*timing=*/true}, done_{/*timing=*/true};
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, int size, at::Device device, std::string name,
                   std::chrono::milliseconds timeout)
      : comm_(comm), stream_(stream), rank_(rank), size_(size), device_(device), name_(std::move(name)),
        timeout_(timeout) {}

  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (comm_ != nullptr) {
      // Flush queued collectives, bounded: a hung one must not hang exit.
      c10::cuda::CUDAGuard guard(device_);
      ncclResult_t state = ncclCommFinalize(comm_);
      const auto deadline = std::chrono::steady_clock::now() + timeout_;
      while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ncclCommGetAsyncError(comm_, &state);
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
      comm_ = nullptr;
    }
    cudaStreamDestroy(stream_);  // deferred by CUDA until the stream's work is done
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_ + " (nccl)"; }

  std::unique_ptr<CollectiveWork> AllGather(const at::Tensor& shard, const at::Tensor& full,
                                            const std::string& what) override {
    const std::string description = Describe("all-gather", what);
    CheckPair(shard, full, description);
    const ncclDataType_t type = NcclType(shard.scalar_type(), description);
    const size_t count = static_cast<size_t>(shard.numel());
    return Issue(description, {shard, full}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllGather(shard.data_ptr(), full.data_ptr(), count, type, comm, stream);
    });
  }

  std::unique_ptr<CollectiveWork> ReduceScatter(const at::Tensor& full, const at::Tensor& shard,
                                                const std::string& what) override {
    const std::string description = Describe("reduce-scatter", what);
    CheckPair(shard, full, description);
    const ncclDataType_t type = NcclType(shard.scalar_type(), description);
    const size_t count = static_cast<size_t>(shard.numel());
    return Issue(description, {shard, full}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclReduceScatter(full.data_ptr(), shard.data_ptr(), count, type, ncclSum, comm, stream);
    });
  }

  std::unique_ptr<CollectiveWork> AllReduce(const at::Tensor& tensor, const std::string& what) override {
    const std::string description = Describe("all-reduce", what);
    CheckOne(tensor, description);
    const ncclDataType_t type = NcclType(tensor.scalar_type(), description);
    const size_t count = static_cast<size_t>(tensor.numel());
    return Issue(description, {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), count, type, ncclSum, comm, stream);
    });
  }

  std::unique_ptr<CollectiveWork> Broadcast(const at::Tensor& tensor, int root, const std::string& what) override {
    const std::string description = Describe("broadcast from rank " + std::to_string(root), what);
    CheckOne(tensor, description);
    if (root < 0 || root >= size_) throw CollectiveError(description + ": root outside the group");
    const ncclDataType_t type = NcclType(tensor.scalar_type(), description);
    const size_t count = static_cast<size_t>(tensor.numel());
    return Issue(description, {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), count, type, root, comm, stream);
    });
  }

  // Callable from any thread (the watchdog's): ncclCommAbort stops NCCL's
  // kernels and proxy threads so neither this process nor its GPU stays
  // wedged on a dead peer.
  void Abort() override {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (comm_ == nullptr) return;
    aborted_ = true;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // The NCCL error of this communicator, if any (empty when healthy). Errors
  // raised asynchronously (a peer vanished) show up here.
  std::string AsyncError() {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    if (comm_ == nullptr) return aborted_ ? "the communicator was aborted" : "";
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return std::string(ncclGetErrorString(state)) + ": " + ncclGetLastError(comm_);
  }

 private:
  std::string Describe(const std::string& op, const std::string& what) const {
    return "rank " + std::to_string(rank_) + ": " + op + " \"" + what + "\" in " + name();
  }
  void CheckOne(const at::Tensor& t, const std::string& description) const {
    if (!t.is_contiguous()) throw CollectiveError(description + ": needs a contiguous tensor");
    if (t.device() != device_) {
      throw CollectiveError(description + ": tensor on " + t.device().str() + ", communicator on " + device_.str());
    }
  }
  void CheckPair(const at::Tensor& shard, const at::Tensor& full, const std::string& description) const {
    CheckOne(shard, description);
    CheckOne(full, description);
    if (shard.scalar_type() != full.scalar_type()) throw CollectiveError(description + ": shard and full differ in dtype");
    if (full.numel() != shard.numel() * size_) {
      throw CollectiveError(description + ": full has " + std::to_string(full.numel()) + " elements, expected " +
                            std::to_string(size_) + " x " + std::to_string(shard.numel()));
    }
  }

  template <typename Launch>
  std::unique_ptr<CollectiveWork> Issue(const std::string& description, std::initializer_list<at::Tensor> tensors,
                                        Launch launch) {
    c10::cuda::CUDAGuard guard(device_);
    if (aborted_ || comm_ == nullptr) throw CollectiveError(description + ": the communicator was aborted");
    // Input ready: the NCCL stream waits for what the caller queued so far
    // (an event, so the host does not block).
    cudaStream_t current = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    Event ready;
    CheckCuda(cudaEventRecord(ready.get(), current), description, "cudaEventRecord");
    CheckCuda(cudaStreamWaitEvent(stream_, ready.get(), 0), description, "cudaStreamWaitEvent");

    auto work = std::make_unique<NcclWork>(this, description, device_.index());
    CheckCuda(cudaEventRecord(work->start_event(), stream_), description, "cudaEventRecord");
    ncclResult_t result = launch(comm_, stream_);
    if (result == ncclInProgress) result = AwaitNonBlocking(description);
    if (result != ncclSuccess) {
      throw CollectiveError(description + " failed: " + ncclGetErrorString(result) + ": " + ncclGetLastError(comm_));
    }
    // No recordStream: the caller keeps the tensors until its own stream has
    // waited for the collective (Communicator's contract), so a block freed
    // after that is reused in stream order. recordStream would instead keep
    // every freed block out of the pool until the NCCL stream's event is
    // seen complete at a later allocation — with the host tens of
    // milliseconds ahead of the GPU, new segments pile up meanwhile (the
    // allocator replay predicted +40 GiB reserved for Llama-3-70B on 64 GPUs).
    (void)tensors;

    CheckCuda(cudaEventRecord(work->done_event(), stream_), description, "cudaEventRecord");
    return work;
  }

  // A non-blocking communicator may return ncclInProgress from a call; NCCL
  // requires polling until it settles before the next call.
  ncclResult_t AwaitNonBlocking(const std::string& description) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclInProgress) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        Abort();
        throw CollectiveError(description + ": NCCL did not accept the collective within " + Seconds(timeout_) +
                              " s; aborted");
      }
      std::this_thread::yield();
    }
    return state;
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  const int rank_;
  const int size_;
  const at::Device device_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  std::mutex abort_mutex_;
  std::atomic<bool> aborted_{false};

  friend class NcclWork;
};

void NcclWork::Wait() {
  // An asynchronous NCCL error (a peer died) is reported here rather than as
  // a silent hang of the stream.
  const std::string error = owner_->AsyncError();
  if (!error.empty()) throw CollectiveError(description_ + " failed: " + error);
  // The caller's stream waits on the collective; the host returns at once.
  cudaStream_t current = c10::cuda::getCurrentCUDAStream(device_).stream();
  CheckCuda(cudaStreamWaitEvent(current, done_.get(), 0), description_, "cudaStreamWaitEvent");
}

// NVLink multicast (NVLS) must stay off on the lent machines; it also
// reserves GPU memory per communicator. Respect an explicit user setting.
void DisableNvlsUnlessSet() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); });
}

}  // namespace

std::unique_ptr<Communicator> MakeNcclCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   at::Device device, const std::string& name,
                                                   std::chrono::milliseconds timeout) {
  const std::string who = "rank " + std::to_string(rank) + ": creating " + name + " (nccl, " + std::to_string(size) +
                          " ranks)";
  if (!device.is_cuda()) throw CollectiveError(who + ": needs a CUDA device, got " + device.str());
  DisableNvlsUnlessSet();
  c10::cuda::CUDAGuard guard(device);

  // The unique id travels through the store: rank 0 creates it, the others
  // wait for it (up to the store's timeout).
  ncclUniqueId id;
  const std::string key = "nccl_unique_id";
  try {
    if (rank == 0) {
      const ncclResult_t result = ncclGetUniqueId(&id);
      if (result != ncclSuccess) throw CollectiveError(who + ": ncclGetUniqueId failed: " + ncclGetErrorString(result));
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    } else {
      const std::vector<uint8_t> bytes = store->get(key);
      if (bytes.size() != sizeof(id)) throw CollectiveError(who + ": the NCCL unique id in the store has the wrong size");
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string text = e.what();
    throw CollectiveError(who + ": exchanging the NCCL unique id failed: " + text.substr(0, text.find('\n')));
  }

  // Highest priority (numerically lowest) so collectives are scheduled ahead
  // of compute kernels when both are ready; non-blocking w.r.t. the legacy
  // default stream.
  int least_priority = 0;
  int greatest_priority = 0;
  CheckCuda(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority), who,
            "cudaDeviceGetStreamPriorityRange");
  cudaStream_t stream = nullptr;
  CheckCuda(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest_priority), who,
            "cudaStreamCreateWithPriority");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and collectives return at once; Abort can always interrupt
  config.commName = name.c_str();
  ncclComm_t comm = nullptr;
  ncclResult_t state = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (state == ncclInProgress) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ncclCommAbort(comm);
      cudaStreamDestroy(stream);
      throw CollectiveError(who + ": NCCL initialisation did not finish within " + Seconds(timeout) +
                            " s (a peer rank may be missing); aborted");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm, &state);
  }
  if (state != ncclSuccess) {
    const std::string detail = comm != nullptr ? ncclGetLastError(comm) : "";
    if (comm != nullptr) ncclCommAbort(comm);
    cudaStreamDestroy(stream);
    throw CollectiveError(who + ": " + ncclGetErrorString(state) + (detail.empty() ? "" : ": " + detail));
  }
  return std::make_unique<NcclCommunicator>(comm, stream, rank, size, device, name, timeout);
}

}  // namespace llmplan::executor
