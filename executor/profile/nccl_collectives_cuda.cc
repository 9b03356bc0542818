// MeasureCollectives (see nccl_collectives.h): CUDA runtime and NCCL only.
#include "executor/profile/nccl_collectives.h"

#include <algorithm>
#include <memory>
#include <string>

#include <cuda_runtime.h>
#include <nccl.h>

#include "executor/hardware/cuda_calls.h"
#include "executor/hardware/cuda_machine.h"
#include "executor/profile/nccl_clique.h"

namespace llmplan::executor {

CollectiveMeasurement MeasureCollectives(const std::vector<int>& devices, const std::vector<double>& sizes,
                                         int warmup, int iterations,
                                         const std::function<void(int done, int total)>& progress) {
  KeepNvlinkMulticastOff();
  const size_t n = devices.size();
  const std::string what = "NCCL collectives among " + std::to_string(n) + " GPUs";
  const double largest = *std::max_element(sizes.begin(), sizes.end());
  const size_t buffer_bytes = static_cast<size_t>(largest);

  // Buffers and streams first, so that the communicator is the only change
  // between the two memory readings.
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> send, recv;
  std::vector<std::unique_ptr<cuda::Stream>> streams;
  for (int device : devices) {
    send.push_back(std::make_unique<cuda::DeviceBuffer>(device, buffer_bytes));
    recv.push_back(std::make_unique<cuda::DeviceBuffer>(device, buffer_bytes));
    cuda::Check(cudaMemset(send.back()->get(), 0, buffer_bytes), what, "cudaMemset");
    cuda::Check(cudaMemset(recv.back()->get(), 0, buffer_bytes), what, "cudaMemset");
    streams.push_back(std::make_unique<cuda::Stream>(device));
  }
  for (int device : devices) {
    cuda::Check(cudaSetDevice(device), what, "cudaSetDevice");
    cuda::Check(cudaDeviceSynchronize(), what, "cudaDeviceSynchronize");
  }
  const double free_before = DeviceMemory(devices[0]).first;
  Clique clique(devices);

  CollectiveMeasurement result;
  result.group_size = static_cast<int>(n);
  std::vector<void*> send_ptrs, recv_ptrs;
  std::vector<cudaStream_t> stream_ptrs;
  for (size_t i = 0; i < n; ++i) {
    send_ptrs.push_back(send[i]->get());
    recv_ptrs.push_back(recv[i]->get());
    stream_ptrs.push_back(streams[i]->get());
  }
  const CollectiveOp ops[] = {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce};
  const int total = static_cast<int>(sizes.size() * 3);
  int done = 0;
  for (double size : sizes) {
    // Elements of bf16 per GPU's share (all-gather's input, reduce-scatter's
    // output) and in the full buffer.
    const size_t share = static_cast<size_t>(size) / 2 / n;
    const size_t full = share * n;
    for (CollectiveOp op : ops) {
      auto launch = [&] { LaunchCollective(clique, op, share, send_ptrs, recv_ptrs, stream_ptrs, what); };
      for (int i = 0; i < warmup; ++i) launch();
      for (const auto& s : streams) s->Synchronize(what);
      std::vector<std::unique_ptr<cuda::Event>> starts, ends;
      for (size_t i = 0; i < n; ++i) {
        starts.push_back(std::make_unique<cuda::Event>(devices[i]));
        ends.push_back(std::make_unique<cuda::Event>(devices[i]));
        starts[i]->Record(streams[i]->get(), what);
      }
      for (int i = 0; i < iterations; ++i) launch();
      double seconds = 0;
      for (size_t i = 0; i < n; ++i) ends[i]->Record(streams[i]->get(), what);
      for (size_t i = 0; i < n; ++i) {
        streams[i]->Synchronize(what);
        seconds = std::max(seconds, ends[i]->SecondsSince(*starts[i], what) / iterations);
      }
      const double bytes = static_cast<double>(full) * 2;
      (op == CollectiveOp::kAllGather       ? result.all_gather
       : op == CollectiveOp::kReduceScatter ? result.reduce_scatter
                                            : result.all_reduce)
          .emplace_back(bytes, seconds);
      if (progress) progress(++done, total);
    }
  }
  result.communicator_bytes = std::max(0.0, free_before - DeviceMemory(devices[0]).first);
  return result;
}

}  // namespace llmplan::executor
