// PeerLink: how two GPUs of this host reach each other, measured: whether
// CUDA peer access works between them and how fast a device-to-device copy
// runs each way (cudaMemcpyPeerAsync, timed with CUDA events). NVLink moves
// hundreds of GB/s, PCIe tens, a path staged through host memory less; the
// link class follows from the slower direction (doctor_checks.h).
//
// This header needs no CUDA; MeasurePeerLink exists only in CUDA builds
// (peer_links_cuda.cc).
#pragma once

#include <algorithm>
#include <string>

namespace llmplan::executor {

struct PeerLink {
  int a = 0, b = 0;
  bool peer_access = false;  // cudaDeviceCanAccessPeer both ways (direct DMA, no host staging)
  double a_to_b_bytes_per_s = 0, b_to_a_bytes_per_s = 0;
  std::string error;  // a failed CUDA call; the rates are then 0
  double BytesPerSecond() const { return std::min(a_to_b_bytes_per_s, b_to_a_bytes_per_s); }
};

#ifdef LLMPLAN_WITH_CUDA
// Enables peer access both ways where it is possible, then copies `bytes`
// each way: one warm-up, the median of `repeats`. Never throws: a failure is
// `error`.
// REQUIRES: a != b, both visible; bytes > 0; repeats >= 1.
PeerLink MeasurePeerLink(int a, int b, double bytes, int repeats);
#endif

}  // namespace llmplan::executor
