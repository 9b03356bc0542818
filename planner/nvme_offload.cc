#include "planner/nvme_offload.h"

#include <algorithm>

namespace llmplan {

namespace {
int64_t AlignUp(int64_t bytes) { return (bytes + kNvmeAlignment - 1) / kNvmeAlignment * kNvmeAlignment; }
}  // namespace

int64_t NvmeBlockBytes(int64_t elements) { return 2 * AlignUp(elements * 4); }

int64_t NvmeUnitBytes(int64_t elements) {
  const int64_t full = elements / kNvmeBlockElements, rest = elements % kNvmeBlockElements;
  return full * NvmeBlockBytes(kNvmeBlockElements) + (rest > 0 ? NvmeBlockBytes(rest) : 0);
}

int64_t NvmeFileBytes(const std::vector<int64_t>& shard_numels) {
  int64_t bytes = 0;
  for (int64_t n : shard_numels) bytes += NvmeUnitBytes(n);
  return bytes;
}

int64_t NvmeStagingBlockElements(const std::vector<int64_t>& shard_numels) {
  int64_t largest = 0;
  for (int64_t n : shard_numels) largest = std::max(largest, n);
  return std::min(largest, kNvmeBlockElements);
}

double NvmeStagingBytes(const std::vector<int64_t>& shard_numels) {
  return kNvmeBuffers * static_cast<double>(NvmeBlockBytes(NvmeStagingBlockElements(shard_numels)));
}

bool HasNvmeRates(const HardwareProfile& p) { return p.nvme_read_bytes_per_s > 0 && p.nvme_write_bytes_per_s > 0; }

double NvmeStreamSeconds(double elements, int sharers, const HardwareProfile& p) {
  const double bytes = 8 * elements * std::max(1, sharers);
  return bytes / p.nvme_read_bytes_per_s + bytes / p.nvme_write_bytes_per_s;
}

double NvmeEdgeSeconds(double elements, int sharers, const HardwareProfile& p) {
  const double block = 8 * std::min(elements, static_cast<double>(kNvmeBlockElements)) * std::max(1, sharers);
  return block / p.nvme_read_bytes_per_s + block / p.nvme_write_bytes_per_s;
}

}  // namespace llmplan
