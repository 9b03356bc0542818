// MeasureCpuAdamWBesideCopies (see cpu_adamw_copies.h): the CUDA runtime only.
#include "executor/profile/cpu_adamw_copies.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>

#include "executor/hardware/cuda_calls.h"
#include "executor/profile/cpu_adamw_rate.h"

namespace llmplan::executor {

CpuAdamWCopiesMeasurement MeasureCpuAdamWBesideCopies(int device, int64_t params, int threads, double copy_bytes,
                                                      int repeats) {
  const std::string what = "CPU AdamW beside pinned copies";
  const size_t n = static_cast<size_t>(copy_bytes);
  cuda::PinnedBuffer down_host(n), up_host(n);
  cuda::DeviceBuffer down_device(device, n), up_device(device, n);
  cuda::Stream down(device), up(device);
  cuda::Event down_done(device), up_done(device);

  // `copies` copies each way, queued back to back; returns at once.
  auto queue = [&](int copies) {
    for (int i = 0; i < copies; ++i) {
      cuda::Check(cudaMemcpyAsync(down_host.get(), down_device.get(), n, cudaMemcpyDeviceToHost, down.get()), what,
                  "cudaMemcpyAsync");
      cuda::Check(cudaMemcpyAsync(up_device.get(), up_host.get(), n, cudaMemcpyHostToDevice, up.get()), what,
                  "cudaMemcpyAsync");
    }
    down_done.Record(down.get(), what);
    up_done.Record(up.get(), what);
  };
  auto finish = [&] {
    down.Synchronize(what);
    up.Synchronize(what);
  };
  auto running = [&](const cuda::Event& done) {
    const cudaError_t status = cudaEventQuery(done.get());
    if (status == cudaErrorNotReady) return true;
    cuda::Check(status, what, "cudaEventQuery");
    return false;
  };

  // One copy each way at once, after a warm-up (page tables, DMA engines):
  // how many of them a span of seconds takes.
  queue(1);
  finish();
  const auto start = std::chrono::steady_clock::now();
  queue(1);
  finish();
  const double copy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  WorkBesideUpdate copies;
  copies.start = [&](double seconds) { queue(static_cast<int>(std::ceil(seconds / std::max(copy_s, 1e-6))) + 1); };
  copies.still_running = [&] { return running(down_done) && running(up_done); };
  copies.finish = finish;
  const UpdateBesideSeconds timed = MeasureCpuAdamWBeside(params, threads, repeats, copies);

  // The copies beside the update: the same pair of copies timed alone, then
  // while updates run back to back on another thread (its first one already
  // under way, so each timed pair has the update beside it throughout).
  auto timed_pairs = [&] {
    std::vector<double> seconds;
    for (int r = 0; r < 2 * repeats + 1; ++r) {
      const auto begin = std::chrono::steady_clock::now();
      queue(1);
      finish();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    }
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  };
  const double copies_alone_s = timed_pairs();
  double copies_beside_s = 0;
  {
    BackgroundCpuAdamW updating(params, threads);
    while (updating.updates() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    copies_beside_s = timed_pairs();
  }

  CpuAdamWCopiesMeasurement m;
  m.copies_alone_s = copies_alone_s;
  m.copies_beside_update_s = copies_beside_s;
  m.params = params;
  m.threads = threads;
  m.copy_bytes = static_cast<double>(n);
  m.alone_s = timed.alone;
  m.beside_copies_s = timed.beside;
  return m;
}

}  // namespace llmplan::executor
