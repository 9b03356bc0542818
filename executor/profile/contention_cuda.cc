// MeasureContention (see contention.h): LibTorch for the GEMMs, as the
// executor's model calls them; the CUDA runtime and NCCL for the collectives
// and every timing event.
#include "executor/profile/contention.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <ATen/ATen.h>

#include "executor/hardware/cuda_calls.h"
#include "executor/hardware/cuda_machine.h"
#include "executor/profile/nccl_clique.h"
#include "executor/profile/profile_shapes.h"

namespace llmplan::executor {

namespace {

const std::string kWhat = "collectives beside compute";

// The cover (the other stream's work) is sized for the timed work slowed 3x
// (collectives beside GEMMs have been seen 1.9x slower on H200); a batch it
// did not cover is run again with twice the cover, this many times at most.
constexpr double kCoverMargin = 3;
constexpr int kCoverAttempts = 4;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The block's forward GEMMs on one GPU, on that GPU's current stream (the
// executor's compute stream): every pass reads the same inputs and weights,
// and each output goes back to the caching allocator at once, to be reused
// by the next call in stream order.
class BlockGemms {
 public:
  BlockGemms(int device, const std::vector<GemmShape>& shapes) : device_(static_cast<c10::DeviceIndex>(device)) {
    const c10::cuda::CUDAGuard guard(device_);
    const auto fp32 = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_);
    for (const GemmShape& s : shapes) {
      // Weights scaled as an initialised layer's, so values stay finite in bf16.
      inputs_.push_back(at::randn({s.tokens, s.in}, fp32).to(at::kBFloat16));
      weights_.push_back((at::randn({s.out, s.in}, fp32) / std::sqrt(static_cast<double>(s.in))).to(at::kBFloat16));
    }
  }
  // Queues `passes` passes over the block; the host does not wait.
  void Issue(int passes) const {
    const c10::cuda::CUDAGuard guard(device_);
    for (int p = 0; p < passes; ++p)
      for (size_t i = 0; i < weights_.size(); ++i) (void)at::linear(inputs_[i], weights_[i]);
  }
  cudaStream_t stream() const { return at::cuda::getCurrentCUDAStream(device_).stream(); }

 private:
  c10::DeviceIndex device_;
  std::vector<at::Tensor> inputs_, weights_;
};

// A timing event before and after some work on one stream of each GPU.
class Spans {
 public:
  explicit Spans(const std::vector<int>& devices) : devices_(devices) {
    for (int d : devices) {
      starts_.push_back(std::make_unique<cuda::Event>(d));
      ends_.push_back(std::make_unique<cuda::Event>(d));
    }
  }
  // The GPU is made current first: the GEMMs run on the default stream,
  // whose handle (0) means "the current device's", and an event recorded on
  // another device's stream fails (cudaErrorInvalidResourceHandle).
  void Start(size_t gpu, cudaStream_t stream) {
    cuda::Check(cudaSetDevice(devices_[gpu]), kWhat, "cudaSetDevice");
    starts_[gpu]->Record(stream, kWhat);
  }
  void End(size_t gpu, cudaStream_t stream) {
    cuda::Check(cudaSetDevice(devices_[gpu]), kWhat, "cudaSetDevice");
    ends_[gpu]->Record(stream, kWhat);
  }
  // The slowest GPU's span. REQUIRES: every event complete.
  double SlowestSeconds() const {
    double s = 0;
    for (size_t i = 0; i < starts_.size(); ++i) s = std::max(s, ends_[i]->SecondsSince(*starts_[i], kWhat));
    return s;
  }
  // True when, on every GPU, this span began after `cover`'s began and ended
  // before it ended (events on two streams of one device compare).
  bool Within(const Spans& cover) const {
    for (size_t i = 0; i < starts_.size(); ++i)
      if (starts_[i]->SecondsSince(*cover.starts_[i], kWhat) < 0 || cover.ends_[i]->SecondsSince(*ends_[i], kWhat) < 0)
        return false;
    return true;
  }

 private:
  std::vector<int> devices_;
  std::vector<std::unique_ptr<cuda::Event>> starts_, ends_;
};

// Everything one measurement drives: per GPU a send and a receive buffer of
// `buffer_bytes`, an NCCL stream, the block's GEMMs; one communicator each.
class Rig {
 public:
  Rig(const std::vector<int>& devices, size_t buffer_bytes) : devices_(devices) {
    const std::vector<GemmShape> shapes = ContentionBlockGemms();
    for (int device : devices) {
      send_.push_back(std::make_unique<cuda::DeviceBuffer>(device, buffer_bytes));
      recv_.push_back(std::make_unique<cuda::DeviceBuffer>(device, buffer_bytes));
      cuda::Check(cudaMemset(send_.back()->get(), 0, buffer_bytes), kWhat, "cudaMemset");
      cuda::Check(cudaMemset(recv_.back()->get(), 0, buffer_bytes), kWhat, "cudaMemset");
      streams_.push_back(std::make_unique<cuda::Stream>(device, /*highest_priority=*/true));
      send_ptrs_.push_back(send_.back()->get());
      recv_ptrs_.push_back(recv_.back()->get());
      nccl_.push_back(streams_.back()->get());
      gemms_.push_back(std::make_unique<BlockGemms>(device, shapes));
    }
    Synchronize();
    clique_ = std::make_unique<Clique>(devices);
  }

  size_t gpus() const { return devices_.size(); }

  // Seconds per call of `calls` back-to-back `op`s of `share` elements per
  // GPU, the slowest GPU's; with `cover_passes` > 0, every GPU first queues
  // that many passes over the block's GEMMs. Second: whether they covered
  // the collectives on every GPU (true without a cover).
  std::pair<double, bool> Collectives(CollectiveOp op, size_t share, int calls, int cover_passes) {
    Spans timed(devices_), cover(devices_);
    if (cover_passes > 0) {
      for (size_t i = 0; i < gpus(); ++i) {
        cover.Start(i, gemms_[i]->stream());
        gemms_[i]->Issue(cover_passes);
        cover.End(i, gemms_[i]->stream());
      }
    }
    for (size_t i = 0; i < gpus(); ++i) timed.Start(i, nccl_[i]);
    for (int c = 0; c < calls; ++c) LaunchCollective(*clique_, op, share, send_ptrs_, recv_ptrs_, nccl_, kWhat);
    for (size_t i = 0; i < gpus(); ++i) timed.End(i, nccl_[i]);
    Synchronize();
    return {timed.SlowestSeconds() / calls, cover_passes == 0 || timed.Within(cover)};
  }

  // Seconds per pass of `passes` passes over the block's GEMMs, the slowest
  // GPU's; with `cover_calls` > 0, every GPU first queues that many
  // all-gathers of `gather_share` elements per GPU.
  std::pair<double, bool> Gemms(int passes, size_t gather_share, int cover_calls) {
    Spans timed(devices_), cover(devices_);
    if (cover_calls > 0) {
      for (size_t i = 0; i < gpus(); ++i) cover.Start(i, nccl_[i]);
      for (int c = 0; c < cover_calls; ++c)
        LaunchCollective(*clique_, CollectiveOp::kAllGather, gather_share, send_ptrs_, recv_ptrs_, nccl_, kWhat);
      for (size_t i = 0; i < gpus(); ++i) cover.End(i, nccl_[i]);
    }
    for (size_t i = 0; i < gpus(); ++i) {
      timed.Start(i, gemms_[i]->stream());
      gemms_[i]->Issue(passes);
      timed.End(i, gemms_[i]->stream());
    }
    Synchronize();
    return {timed.SlowestSeconds() / passes, cover_calls == 0 || timed.Within(cover)};
  }

 private:
  void Synchronize() const {
    for (int device : devices_) {
      cuda::Check(cudaSetDevice(device), kWhat, "cudaSetDevice");
      cuda::Check(cudaDeviceSynchronize(), kWhat, "cudaDeviceSynchronize");
    }
  }

  std::vector<int> devices_;
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> send_, recv_;
  std::vector<std::unique_ptr<cuda::Stream>> streams_;
  std::vector<void*> send_ptrs_, recv_ptrs_;
  std::vector<cudaStream_t> nccl_;
  std::vector<std::unique_ptr<BlockGemms>> gemms_;
  std::unique_ptr<Clique> clique_;  // last: destroyed first, while its streams exist
};

// How many back-to-back calls of `seconds_per_call` fill `batch_seconds`.
int CallsFor(double batch_seconds, double seconds_per_call, int most) {
  return static_cast<int>(std::clamp(std::ceil(batch_seconds / std::max(seconds_per_call, 1e-7)), 2.0,
                                     static_cast<double>(most)));
}

// How many calls of `seconds_per_call` outlast `seconds` slowed kCoverMargin times.
int CoverFor(double seconds, double seconds_per_call) {
  return static_cast<int>(std::ceil(kCoverMargin * seconds / std::max(seconds_per_call, 1e-7))) + 1;
}

// The median of `repeats` covered batches; `batch(cover)` runs one.
template <typename Batch>
double MedianCovered(int repeats, int cover, Batch batch) {
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    int c = cover;
    for (int attempt = 0;; ++attempt, c *= 2) {
      const auto [s, covered] = batch(c);
      if (covered) {
        seconds.push_back(s);
        break;
      }
      if (attempt + 1 == kCoverAttempts)
        throw std::runtime_error(kWhat + ": the covering work ended before the timed batch even at " +
                                 std::to_string(c) + " (" + std::to_string(cover) + " planned)");
    }
  }
  return Median(seconds);
}

}  // namespace

ContentionMeasurement MeasureContention(const std::vector<int>& devices, const std::vector<double>& sizes,
                                        double gather_bytes, int repeats, double batch_seconds,
                                        const std::function<void(int done, int total)>& progress) {
  KeepNvlinkMulticastOff();
  const size_t n = devices.size();
  const double largest = std::max(*std::max_element(sizes.begin(), sizes.end()), gather_bytes);
  Rig rig(devices, static_cast<size_t>(largest));
  // bf16 elements per GPU's share of a full buffer of `bytes`.
  auto share_of = [&](double bytes) { return static_cast<size_t>(bytes) / 2 / n; };
  const int total = static_cast<int>(sizes.size() * 3 + 1);
  int done = 0;

  ContentionMeasurement m;
  m.group_size = static_cast<int>(n);
  m.block_gemms = ContentionBlockGemms();
  const size_t gather_share = share_of(gather_bytes);
  m.gather_bytes = static_cast<double>(gather_share * n) * 2;

  // The GEMMs alone: warm up (cuBLAS picks its kernels, the allocator its
  // blocks), size the batch from one pass, then the median batch.
  rig.Gemms(1, 0, 0);
  const int passes = CallsFor(batch_seconds, rig.Gemms(1, 0, 0).first, 100);
  std::vector<double> alone;
  for (int r = 0; r < repeats; ++r) alone.push_back(rig.Gemms(passes, 0, 0).first);
  m.gemm_loop_alone_s = Median(alone);

  for (double size : sizes) {
    const size_t share = share_of(size);
    for (CollectiveOp op : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce}) {
      ContentionPoint point;
      point.op = CollectiveOpName(op);
      point.bytes = static_cast<double>(share * n) * 2;
      rig.Collectives(op, share, 2, 0);  // warm-up: NCCL connects this algorithm's channels
      const int calls = CallsFor(batch_seconds, rig.Collectives(op, share, 1, 0).first, 500);
      std::vector<double> times;
      for (int r = 0; r < repeats; ++r) times.push_back(rig.Collectives(op, share, calls, 0).first);
      point.alone_s = Median(times);
      // A collective that the GEMMs never cover (its kernels get no SMs until
      // the GEMM queue drains) has no "beside" time: left out (0), not fatal.
      try {
        point.beside_compute_s =
            MedianCovered(repeats, CoverFor(calls * point.alone_s, m.gemm_loop_alone_s),
                          [&](int cover) { return rig.Collectives(op, share, calls, cover); });
      } catch (const std::runtime_error&) {
        point.beside_compute_s = 0;
      }
      m.collectives.push_back(point);
      if (progress) progress(++done, total);
    }
  }

  // The GEMMs beside back-to-back all-gathers.
  rig.Collectives(CollectiveOp::kAllGather, gather_share, 2, 0);
  const double gather_s = rig.Collectives(CollectiveOp::kAllGather, gather_share, 4, 0).first;
  m.gemm_loop_beside_gathers_s =
      MedianCovered(repeats, CoverFor(passes * m.gemm_loop_alone_s, gather_s),
                    [&](int cover) { return rig.Gemms(passes, gather_share, cover); });
  if (progress) progress(++done, total);
  return m;
}

}  // namespace llmplan::executor
