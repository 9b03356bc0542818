// GlooCommunicator over c10d::ProcessGroupGloo (see gloo_communicator.h).
#include "executor/torch_compat.h"  // first: defines USE_C10D_GLOO for the Gloo header

#include "executor/comm/gloo_communicator.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <utility>
#include <vector>

#if LLMPLAN_HAS_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

namespace llmplan::executor {

bool GlooCommunicatorsAvailable() { return LLMPLAN_HAS_GLOO != 0; }

#if LLMPLAN_HAS_GLOO
namespace {

// The first line of an exception message (c10d appends C++ stack traces).
std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

class GlooWork : public CollectiveWork {
 public:
  using Clock = std::chrono::steady_clock;
  // `finish` runs once, in Wait(), after the collective succeeded: it moves
  // the result from a staging buffer into the caller's tensor.
  GlooWork(c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish, std::string description,
           Clock::time_point issued)
      : work_(std::move(work)), finish_(std::move(finish)), description_(std::move(description)), issued_(issued) {}

  void Wait() override {
    if (waited_) return;
    try {
      work_->wait();
    } catch (const std::exception& e) {
      throw CollectiveError(description_ + " failed: " + FirstLine(e.what()));
    }
    SeenDone();
    if (finish_) finish_();
    waited_ = true;
  }

  bool Done() override {
    if (!work_->isCompleted()) return false;
    SeenDone();
    return true;
  }

  CollectiveSpan Span(const StepClock& clock) override {
    auto since = [&](Clock::time_point t) { return std::chrono::duration<double>(t - clock.host_start).count(); };
    const int64_t done = done_ns_.load();
    const Clock::time_point end = done != 0 ? Clock::time_point(Clock::duration(done)) : Clock::now();
    return {since(issued_), since(end)};
  }

 private:
  // The first moment completion was observed (the watchdog's thread may be
  // the one that sees it).
  void SeenDone() {
    int64_t expected = 0;
    done_ns_.compare_exchange_strong(expected, Clock::now().time_since_epoch().count());
  }

  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> finish_;
  std::string description_;
  Clock::time_point issued_;
  std::atomic<int64_t> done_ns_{0};
  bool waited_ = false;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(c10::intrusive_ptr<c10d::ProcessGroupGloo> group, int rank, int size, std::string name)
      : group_(std::move(group)), rank_(rank), size_(size), name_(std::move(name)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_ + " (gloo)"; }

  std::unique_ptr<CollectiveWork> AllGather(const at::Tensor& shard, const at::Tensor& full,
                                            const std::string& what) override {
    const std::string description = Describe("all-gather", what);
    CheckPair(shard, full, description);
    // Gloo copies each rank's piece into the list's tensors: views of `full`
    // make that copy the only one. bf16 travels as int16 (same bytes).
    at::Tensor flat_full = AsGlooBytes(full.view(-1));
    std::vector<at::Tensor> inputs = {AsGlooBytes(shard.view(-1))};
    std::vector<std::vector<at::Tensor>> outputs(1);
    const int64_t n = shard.numel();
    for (int r = 0; r < size_; ++r) outputs[0].push_back(flat_full.narrow(0, r * n, n));
    return Issue(description, [&] { return group_->allgather(outputs, inputs); }, nullptr);
  }

  std::unique_ptr<CollectiveWork> ReduceScatter(const at::Tensor& full, const at::Tensor& shard,
                                                const std::string& what) override {
    const std::string description = Describe("reduce-scatter", what);
    CheckPair(shard, full, description);
    // No reduce-scatter in 1.13's Gloo: all-reduce a copy (the caller's
    // `full` stays an input, as with NCCL) and keep our slice.
    at::Tensor summed = SumBuffer(full.view(-1), /*copy=*/true);
    std::vector<at::Tensor> tensors = {summed};
    const int64_t n = shard.numel();
    at::Tensor out = shard;
    const int64_t offset = static_cast<int64_t>(rank_) * n;
    return Issue(description, [&] { return group_->allreduce(tensors); },
                 [summed, out, offset, n]() mutable { out.view(-1).copy_(summed.narrow(0, offset, n)); });
  }

  std::unique_ptr<CollectiveWork> AllReduce(const at::Tensor& tensor, const std::string& what) override {
    const std::string description = Describe("all-reduce", what);
    Check(tensor.is_contiguous() && tensor.device().is_cpu(), description, "needs a contiguous CPU tensor");
    at::Tensor summed = SumBuffer(tensor.view(-1), /*copy=*/false);
    std::vector<at::Tensor> tensors = {summed};
    std::function<void()> finish;
    if (summed.data_ptr() != tensor.data_ptr()) {  // staged (bf16 summed in fp32)
      at::Tensor out = tensor;
      finish = [summed, out]() mutable { out.view(-1).copy_(summed); };
    }
    return Issue(description, [&] { return group_->allreduce(tensors); }, std::move(finish));
  }

  std::unique_ptr<CollectiveWork> Broadcast(const at::Tensor& tensor, int root, const std::string& what) override {
    const std::string description = Describe("broadcast from rank " + std::to_string(root), what);
    Check(tensor.is_contiguous() && tensor.device().is_cpu(), description, "needs a contiguous CPU tensor");
    Check(root >= 0 && root < size_, description, "root outside the group");
    std::vector<at::Tensor> tensors = {AsGlooBytes(tensor.view(-1))};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.rootTensor = 0;
    return Issue(description, [&] { return group_->broadcast(tensors, options); }, nullptr);
  }

  // Gloo has no abort for a group in flight; marking it aborted makes later
  // calls fail fast. The watchdog exits the process right after, which
  // closes the sockets and so unblocks the peers.
  void Abort() override { aborted_ = true; }

 private:
  std::string Describe(const std::string& op, const std::string& what) const {
    return "rank " + std::to_string(rank_) + ": " + op + " \"" + what + "\" in " + name();
  }
  static void Check(bool ok, const std::string& description, const std::string& problem) {
    if (!ok) throw CollectiveError(description + ": " + problem);
  }
  void CheckPair(const at::Tensor& shard, const at::Tensor& full, const std::string& description) const {
    Check(shard.is_contiguous() && full.is_contiguous(), description, "needs contiguous tensors");
    Check(shard.device().is_cpu() && full.device().is_cpu(), description, "needs CPU tensors");
    Check(shard.scalar_type() == full.scalar_type(), description, "shard and full differ in dtype");
    Check(full.numel() == shard.numel() * size_, description,
          "full has " + std::to_string(full.numel()) + " elements, expected size " + std::to_string(size_) + " x " +
              std::to_string(shard.numel()));
  }
  // Gloo 1.13 knows no bf16, but all-gather and broadcast only move bytes:
  static at::Tensor AsGlooBytes(const at::Tensor& t) {
    // (as fp16: Gloo has no int16, and same-dtype copies are bitwise)
    return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t;
  }
  // The tensor Gloo sums: bf16 goes through fp32 (see torch_compat.h).
  static at::Tensor SumBuffer(const at::Tensor& flat, bool copy) {
    if (flat.scalar_type() == at::kBFloat16 && !LLMPLAN_GLOO_SUMS_BFLOAT16) return flat.to(at::kFloat);
    return copy ? flat.clone() : flat;
  }

  std::unique_ptr<CollectiveWork> Issue(const std::string& description,
                                        const std::function<c10::intrusive_ptr<c10d::Work>()>& start,
                                        std::function<void()> finish) {
    if (aborted_) throw CollectiveError(description + ": the communicator was aborted");
    const auto issued = std::chrono::steady_clock::now();
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = start();
    } catch (const std::exception& e) {
      throw CollectiveError(description + " could not start: " + FirstLine(e.what()));
    }
    return std::make_unique<GlooWork>(std::move(work), std::move(finish), description, issued);
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  int rank_;
  int size_;
  std::string name_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<Communicator> MakeGlooCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                   const std::string& name, std::chrono::milliseconds timeout,
                                                   bool loopback) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  try {
    const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
    if (interface != nullptr && *interface != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    } else if (loopback) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    // Two worker threads: a collective in flight while the next is queued.
    options->threads = 2;
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
    return std::make_unique<GlooCommunicator>(std::move(group), rank, size, name);
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveError("rank " + std::to_string(rank) + ": could not connect " + name + " (gloo, " +
                          std::to_string(size) + " ranks): " + FirstLine(e.what()));
  }
}

#else  // !LLMPLAN_HAS_GLOO

std::unique_ptr<Communicator> MakeGlooCommunicator(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                   const std::string& name, std::chrono::milliseconds, bool) {
  throw CollectiveError("cannot create " + name + ": this LibTorch build has no Gloo headers (CPU collectives); "
                        "use NCCL on GPUs or build against a LibTorch with Gloo");
}

#endif

}  // namespace llmplan::executor
