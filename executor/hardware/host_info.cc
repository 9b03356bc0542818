// ReadHostInfo (see host_info.h).
#include "executor/hardware/host_info.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

namespace llmplan::executor {

namespace {

// "MemTotal:       24684096 kB" -> bytes.
double MeminfoBytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(key.size() + 1));
    double kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

}  // namespace

HostInfo ReadHostInfo() {
  HostInfo h;
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) h.host_name = name;
  h.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  h.memory_bytes = MeminfoBytes("MemTotal");
  h.available_bytes = MeminfoBytes("MemAvailable");

  std::ifstream in("/proc/cpuinfo");
  std::string line, flags, vendor;
  double mhz = 0;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && h.cpu_model.empty()) h.cpu_model = value;
    if (key == "vendor_id" && vendor.empty()) vendor = value;
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
    if (key == "cpu MHz") mhz = std::max(mhz, std::atof(value.c_str()));
  }
  auto has = [&](const char* flag) { return flags.find(std::string(" ") + flag + " ") != std::string::npos; };
  const bool wide = has("avx512f") && vendor == "GenuineIntel";  // AMD's Zen 4 runs AVX-512 on 256-bit units
  const int lanes = wide ? 16 : has("avx2") && has("fma") ? 8 : 4;
  h.fp32_flops_per_cycle = lanes * 2 * 2;
  h.bf16_flops_per_cycle = has("amx_bf16") ? 1024 : has("avx512_bf16") ? 2 * h.fp32_flops_per_cycle : h.fp32_flops_per_cycle;
  h.simd = has("amx_bf16") ? "AMX BF16" : has("avx512_bf16") ? "AVX-512 BF16" : has("avx512f") ? "AVX-512" : has("avx2") ? "AVX2 + FMA" : "SSE";
  if (has("avx512f") && !wide) h.simd += " on 256-bit units";
  h.clock_hz = (mhz > 0 ? mhz : 3000) * 1e6;
  if (h.cpu_model.empty()) h.cpu_model = "CPU";
  return h;
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace llmplan::executor
