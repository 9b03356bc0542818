// DistributedEnv: where this process sits in a multi-process job — its global
// rank, its rank on its node, the node's rank, and the rendezvous address —
// read from the variables the usual launchers set, so that `torchrun` and
// `srun` start llmplan without a wrapper script.
//
//   torchrun: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
//             MASTER_ADDR, MASTER_PORT.
//   Slurm:    SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID,
//             SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE, and the first
//             host of SLURM_JOB_NODELIST as the master (MASTER_ADDR and
//             MASTER_PORT, when set, override).
//   Neither:  a single process (rank 0 of 1) on 127.0.0.1.
//
// torchrun's variables win when both are present (torchrun inside an salloc
// allocation is common). No LibTorch here: this header is cheap to include.
#pragma once

#include <map>
#include <string>

namespace llmplan::executor {

struct DistributedEnv {
  int rank = 0;              // global rank, 0 <= rank < world_size
  int world_size = 1;
  int local_rank = 0;        // rank among the processes of this node (picks the GPU)
  int local_world_size = 1;  // processes on this node
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";  // host of rank 0's TCPStore
  int master_port = 29500;
  std::string source = "single process";  // "torchrun", "slurm" or "single process"
};

// Reads the variables from `vars` (name -> value; absent = unset).
// Throws UserError (one line naming the variable and its value) for a
// non-numeric number, rank >= world_size, local_rank >= local_world_size,
// a size < 1 or a port outside 1..65535.
DistributedEnv DistributedEnvFromVariables(const std::map<std::string, std::string>& vars);

// DistributedEnvFromVariables over this process's environment.
DistributedEnv ReadDistributedEnv();

// The first host of a Slurm node list, compressed forms included:
// "node[01-04,07]" -> "node01", "a1,b2" -> "a1", "n[3-4]-ib,x" -> "n3-ib".
// Throws UserError on an empty list or an unbalanced bracket.
std::string FirstHostOfSlurmNodelist(const std::string& nodelist);

// The number of tasks on node `node_index` given Slurm's SLURM_TASKS_PER_NODE
// form, e.g. "4(x2),3": nodes 0 and 1 run 4 tasks, node 2 runs 3.
// Throws UserError when the form is malformed or has no entry for the node.
int TasksOnSlurmNode(const std::string& tasks_per_node, int node_index);

}  // namespace llmplan::executor
