// HostInfo: the host a GPU (or the CPU executor) runs on, read from Linux
// (/proc/meminfo, /proc/cpuinfo, gethostname): memory, hardware threads,
// the CPU's model and an estimate of its fp32 peak. No LibTorch, no CUDA.
#pragma once

#include <string>

namespace llmplan::executor {

struct HostInfo {
  std::string host_name;
  std::string cpu_model;          // "AMD EPYC 9654 96-Core Processor"
  int threads = 0;                // hardware threads (std::thread::hardware_concurrency)
  double memory_bytes = 0;        // MemTotal
  double available_bytes = 0;     // MemAvailable
  // What one hardware thread's SIMD units can do per cycle at most, for an
  // estimate of the peak a CPU profile's MFU is quoted against: fp32 = SIMD
  // lanes (16 with AVX-512 on Intel; 8 with AVX2, or AVX-512 on AMD's
  // 256-bit units; else 4) x 2 (FMA) x 2 FMA units; bf16 twice that with
  // AVX-512 BF16 (dot products of pairs), 1024 with AMX, else as fp32
  // (LibTorch converts). Hyperthreads share units and clocks move: an estimate.
  double clock_hz = 0;  // the fastest "cpu MHz"; 3 GHz when unknown
  int fp32_flops_per_cycle = 0;
  int bf16_flops_per_cycle = 0;
  std::string simd;  // "AVX-512 BF16", "AVX2 + FMA", ...
};

// REQUIRES: nothing; fields that cannot be read stay empty or 0.
HostInfo ReadHostInfo();

// The UTC time now as ISO 8601, "2026-12-01T14:03:07Z".
std::string UtcNow();

}  // namespace llmplan::executor
