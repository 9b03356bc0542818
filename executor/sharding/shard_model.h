// Sharding applied to a plain model, as torchtitan's parallelize functions
// apply parallelism: the model (model/llama_model.h) knows nothing of ranks;
// these functions lay its units' parameters out as FlatUnits — whole on one
// process, or each rank's contiguous slice of the padded flat vector in a
// shard group — and gather them back for the final weights.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "executor/sharding/flat_unit.h"
#include "executor/model/llama_model.h"
#include "planner/plan.h"

namespace llmplan::executor {

class Communicator;
class CollectiveWatchdog;

// LibTorch's name for a planner dtype.
at::ScalarType ScalarTypeOf(DType dtype);
// The compute dtype a plan asks for (ScalarTypeOf(plan.param_dtype)).
at::ScalarType ComputeDtype(const Plan& plan);

// One FlatUnit per model unit on `device` (unsharded), initialised with the
// model's initial values from `seed` and gathered, ready to train.
std::vector<FlatUnit> MakeFlatUnits(const LlamaModel& model, const at::Device& device, at::ScalarType compute_dtype,
                                    uint64_t seed);

// One FlatUnit per model unit for rank `shard_rank` of a shard group of
// plan.shard_group_size, its master shard in host memory when the plan
// offloads the optimizer. Every rank draws the whole unit's initial values
// from plan.seed (on the host, one unit at a time) and keeps its slice, so
// the model equals the single-process one. Unsharded units are gathered
// (ready to train); sharded ones start released (the program gathers them).
// REQUIRES: plan.Validate() passes; 0 <= shard_rank < plan.shard_group_size.
// `values`, when given, supplies each unit's master instead of the seed (a
// checkpoint or pretrained weights): values(u, begin, count) returns elements
// [begin, begin + count) of unit u's unpadded flat vector, fp32, any device.
using UnitValues = std::function<at::Tensor(int unit, int64_t begin, int64_t count)>;
std::vector<FlatUnit> MakeShardedUnits(const LlamaModel& model, const Plan& plan, const at::Device& device,
                                       int shard_rank, const UnitValues& values = {});

// The whole unit's fp32 values, unpadded, on the host: this rank's master
// when unsharded, else the master shards all-gathered over `shard` (a
// collective: every rank of the shard group calls it for the same unit).
// Offloaded masters are read from the host. `name` names the unit in the
// watchdog's message when the all-gather hangs (watched when non-null).
// REQUIRES: shard non-null when unit.group_size() > 1, of that size.
at::Tensor FullMaster(FlatUnit& unit, Communicator* shard, CollectiveWatchdog* watchdog = nullptr,
                      const std::string& name = "unit");

// The master buffers' lengths, for AdamW.
std::vector<int64_t> ShardNumels(const std::vector<FlatUnit>& units);

}  // namespace llmplan::executor
