// MeasurePinnedCopies (see host_copies.h): CUDA runtime only.
#include "executor/profile/host_copies.h"

#include <algorithm>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "executor/hardware/cuda_calls.h"

namespace llmplan::executor {

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

HostCopyMeasurement MeasurePinnedCopies(int device, double bytes, int repeats) {
  const std::string what = "pinned host copies";
  const size_t n = static_cast<size_t>(bytes);
  cuda::PinnedBuffer up_host(n), down_host(n);
  cuda::DeviceBuffer up_device(device, n), down_device(device, n);
  cuda::Stream up(device), down(device);
  cuda::Event up_start(device), up_end(device), down_start(device), down_end(device);

  auto copy_up = [&] {
    up_start.Record(up.get(), what);
    cuda::Check(cudaMemcpyAsync(up_device.get(), up_host.get(), n, cudaMemcpyHostToDevice, up.get()), what,
                "cudaMemcpyAsync");
    up_end.Record(up.get(), what);
  };
  auto copy_down = [&] {
    down_start.Record(down.get(), what);
    cuda::Check(cudaMemcpyAsync(down_host.get(), down_device.get(), n, cudaMemcpyDeviceToHost, down.get()), what,
                "cudaMemcpyAsync");
    down_end.Record(down.get(), what);
  };

  HostCopyMeasurement m;
  m.bytes = static_cast<double>(n);
  std::vector<double> h2d, d2h, both_h2d, both_d2h;
  for (int i = 0; i <= repeats; ++i) {  // round 0 warms up (page tables, DMA engines)
    const bool timed = i > 0;
    copy_up();
    up.Synchronize(what);
    if (timed) h2d.push_back(up_end.SecondsSince(up_start, what));
    copy_down();
    down.Synchronize(what);
    if (timed) d2h.push_back(down_end.SecondsSince(down_start, what));
    // Both at once, issued back to back on two streams: they overlap unless
    // the link (or one copy engine) serialises them.
    copy_up();
    copy_down();
    up.Synchronize(what);
    down.Synchronize(what);
    if (timed) {
      both_h2d.push_back(up_end.SecondsSince(up_start, what));
      both_d2h.push_back(down_end.SecondsSince(down_start, what));
    }
  }
  m.host_to_device_s = Median(h2d);
  m.device_to_host_s = Median(d2h);
  m.both_host_to_device_s = Median(both_h2d);
  m.both_device_to_host_s = Median(both_d2h);
  return m;
}

}  // namespace llmplan::executor
