// MeasurePeerLink (see peer_links.h): CUDA runtime only.
#include "executor/doctor/peer_links.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <cuda_runtime.h>

#include "executor/hardware/cuda_calls.h"

namespace llmplan::executor {

namespace {

void EnablePeerAccess(int from, int to, const std::string& what) {
  cuda::Check(cudaSetDevice(from), what, "cudaSetDevice");
  const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  cuda::Check(status, what, "cudaDeviceEnablePeerAccess");
}

// Bytes per second of copies from `src` on device `from` to `dst` on `to`,
// issued on a stream of `from`.
double CopyRate(int from, void* src, int to, void* dst, size_t bytes, int repeats, const std::string& what) {
  cuda::Stream stream(from);
  cuda::Event start(from), end(from);
  std::vector<double> seconds;
  for (int i = 0; i <= repeats; ++i) {  // copy 0 warms up
    start.Record(stream.get(), what);
    cuda::Check(cudaMemcpyPeerAsync(dst, to, src, from, bytes, stream.get()), what, "cudaMemcpyPeerAsync");
    end.Record(stream.get(), what);
    stream.Synchronize(what);
    if (i > 0) seconds.push_back(end.SecondsSince(start, what));
  }
  std::sort(seconds.begin(), seconds.end());
  return static_cast<double>(bytes) / seconds[seconds.size() / 2];
}

}  // namespace

PeerLink MeasurePeerLink(int a, int b, double bytes, int repeats) {
  PeerLink link;
  link.a = a;
  link.b = b;
  const std::string what = "GPU " + std::to_string(a) + " <-> GPU " + std::to_string(b);
  try {
    int ab = 0, ba = 0;
    cuda::Check(cudaDeviceCanAccessPeer(&ab, a, b), what, "cudaDeviceCanAccessPeer");
    cuda::Check(cudaDeviceCanAccessPeer(&ba, b, a), what, "cudaDeviceCanAccessPeer");
    link.peer_access = ab != 0 && ba != 0;
    if (link.peer_access) {
      EnablePeerAccess(a, b, what);
      EnablePeerAccess(b, a, what);
    }
    const size_t n = static_cast<size_t>(bytes);
    cuda::DeviceBuffer on_a(a, n), on_b(b, n);
    link.a_to_b_bytes_per_s = CopyRate(a, on_a.get(), b, on_b.get(), n, repeats, what);
    link.b_to_a_bytes_per_s = CopyRate(b, on_b.get(), a, on_a.get(), n, repeats, what);
  } catch (const std::runtime_error& e) {
    link.error = e.what();
    link.a_to_b_bytes_per_s = link.b_to_a_bytes_per_s = 0;
  }
  return link;
}

}  // namespace llmplan::executor
