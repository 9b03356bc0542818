// RunHealthAllReduce (see health_all_reduce.h): CUDA runtime and NCCL only.
#include "executor/doctor/health_all_reduce.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <cuda_runtime.h>
#include <nccl.h>

#include "executor/hardware/cuda_calls.h"
#include "executor/hardware/cuda_machine.h"

namespace llmplan::executor {

namespace {

class Communicators {
 public:
  explicit Communicators(const std::vector<int>& devices) : comms_(devices.size(), nullptr) {
    cuda::Check(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()), "health all-reduce",
                "ncclCommInitAll");
  }
  ~Communicators() {
    for (ncclComm_t comm : comms_)
      if (comm != nullptr) ncclCommDestroy(comm);
  }
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;
  ncclComm_t operator[](size_t i) const { return comms_[i]; }

 private:
  std::vector<ncclComm_t> comms_;
};

}  // namespace

HealthAllReduce RunHealthAllReduce(const std::vector<int>& devices, double bytes, int iterations) {
  const std::string what = "health all-reduce";
  HealthAllReduce result;
  const size_t n = devices.size();
  result.gpus = static_cast<int>(n);
  const size_t count = static_cast<size_t>(bytes) / sizeof(float);
  result.bytes = static_cast<double>(count * sizeof(float));
  try {
    KeepNvlinkMulticastOff();
    std::vector<std::unique_ptr<cuda::DeviceBuffer>> send, recv;
    std::vector<std::unique_ptr<cuda::Stream>> streams;
    std::vector<float> host(count);
    for (size_t i = 0; i < n; ++i) {
      send.push_back(std::make_unique<cuda::DeviceBuffer>(devices[i], count * sizeof(float)));
      recv.push_back(std::make_unique<cuda::DeviceBuffer>(devices[i], count * sizeof(float)));
      streams.push_back(std::make_unique<cuda::Stream>(devices[i]));
      std::fill(host.begin(), host.end(), static_cast<float>(i + 1));
      cuda::Check(cudaMemcpy(send[i]->get(), host.data(), count * sizeof(float), cudaMemcpyHostToDevice), what,
                  "cudaMemcpy");
      cuda::Check(cudaMemset(recv[i]->get(), 0, count * sizeof(float)), what, "cudaMemset");
      cuda::Check(cudaDeviceSynchronize(), what, "cudaDeviceSynchronize");
    }
    Communicators comms(devices);
    auto all_reduce = [&] {
      cuda::Check(ncclGroupStart(), what, "ncclGroupStart");
      for (size_t i = 0; i < n; ++i) {
        cuda::Check(ncclAllReduce(send[i]->get(), recv[i]->get(), count, ncclFloat32, ncclSum, comms[i],
                                  streams[i]->get()),
                    what, "ncclAllReduce");
      }
      cuda::Check(ncclGroupEnd(), what, "ncclGroupEnd");
    };

    // The check: small integers sum exactly in fp32, in any order.
    all_reduce();
    for (const auto& s : streams) s->Synchronize(what);
    const float expected = static_cast<float>(n * (n + 1) / 2);
    result.sums_correct = true;
    for (size_t i = 0; i < n && result.sums_correct; ++i) {
      cuda::Check(cudaMemcpy(host.data(), recv[i]->get(), count * sizeof(float), cudaMemcpyDeviceToHost), what,
                  "cudaMemcpy");
      for (size_t e = 0; e < count; ++e) {
        if (host[e] != expected) {
          result.sums_correct = false;
          result.mismatch = "GPU " + std::to_string(devices[i]) + " element " + std::to_string(e) + " is " +
                            std::to_string(host[e]) + ", expected " + std::to_string(expected);
          break;
        }
      }
    }

    // The timing: events on every GPU's stream around back-to-back calls.
    std::vector<std::unique_ptr<cuda::Event>> starts, ends;
    for (size_t i = 0; i < n; ++i) {
      starts.push_back(std::make_unique<cuda::Event>(devices[i]));
      ends.push_back(std::make_unique<cuda::Event>(devices[i]));
      starts[i]->Record(streams[i]->get(), what);
    }
    for (int k = 0; k < iterations; ++k) all_reduce();
    for (size_t i = 0; i < n; ++i) ends[i]->Record(streams[i]->get(), what);
    for (size_t i = 0; i < n; ++i) {
      streams[i]->Synchronize(what);
      result.seconds = std::max(result.seconds, ends[i]->SecondsSince(*starts[i], what) / iterations);
    }
    if (n > 1) result.bus_bytes_per_s = result.bytes * 2.0 * static_cast<double>(n - 1) / n / result.seconds;
  } catch (const std::runtime_error& e) {
    result.error = e.what();
  }
  return result;
}

}  // namespace llmplan::executor
