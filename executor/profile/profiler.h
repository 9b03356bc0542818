// RunProfile: `llmplan profile` — measures the machine it runs on and writes
// a hardware profile (planner/hardware_profile.h's schema) that says when,
// where and how each number was measured, with the raw tables under
// `measurements`.
//
// On CUDA GPUs: bf16 GEMMs and attention through LibTorch as the executor
// calls them, memory bandwidth, kernel launch cost, pinned host copies, NCCL
// collectives among the local GPUs, the CPU AdamW rate and the fixed device
// memory (CUDA context, cuBLAS workspaces, one NCCL communicator). On a
// machine without a GPU (or with --cpu): the CPU executor — fp32 and bf16
// GEMMs, its attention, memory bandwidth, CPU AdamW. What cannot be measured
// here (the datasheet peak, inter-node curves, price, the memory margin)
// comes from a base profile, and the source says which.
#pragma once

#include <ostream>
#include <string>

#include "executor/profile/profile_assembly.h"

namespace llmplan::executor {

struct ProfileOptions {
  std::string output_path;      // the profile file, written atomically
  std::string name;             // the profile's name; empty: the output file's stem
  std::string base;             // base profile name or path; empty: DefaultBaseProfile
  bool quick = false;           // fewer shapes and sizes, short timings: well under a minute
  bool cpu = false;             // measure the CPU executor even where there are GPUs
  int gpus = 0;                 // local GPUs to run the collectives among; 0: all visible
  // A directory on the local SSD whose read and write bandwidth to measure
  // (NVMe offload); empty: not measured (the base profile's rates stand).
  std::string nvme_dir;
  std::string llmplan_version;  // recorded in the source
};

// Measures, assembles and writes the profile; progress (one line per
// measurement, with the time left, and on a `terminal` a bar) goes to
// `progress`. Sets NCCL_NVLS_ENABLE=0 (and the other NVLink multicast
// switches) first unless the environment sets them.
// Throws UserError, before measuring anything, when the output's directory
// does not exist or is not writable, the base profile is unknown or of
// another device kind, or --gpus asks for more GPUs than are visible.
AssembledProfile RunProfile(const ProfileOptions& options, std::ostream& progress, bool terminal);

}  // namespace llmplan::executor
