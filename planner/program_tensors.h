// ProgramTensors: the program builder's book of a step program's tensors
// (every MemoryDelta::tensor: its category, bytes and whether it is live), and
// its way to make the memory events of the memory model's calls (BlockForward,
// BlockBackward, ... of planner/memory_model.h) cheaply.
//
// A 70B program of 8 micro-batches makes about 55,000 tensors, nearly all in
// a few distinct calls repeated per block and micro-batch (a block's forward
// is 60-75 events). So each distinct call is run once, on a scratch registry,
// and recorded as a MemoryTemplate; every call of it in the program appends
// the recording with its tensors renumbered (Stamp). The events and ids are
// those the call itself would have made, in the same order: ids are handed
// out in allocation order either way. Run afresh each time, those calls and
// the registry take a third of the time the search spends building programs.
//
// What makes a recording valid for every call of it: a memory-model function
// sees only its arguments (the shape, flags, sizes) and tensor ids, which it
// passes on or frees but never inspects, so its events depend on the ids it
// is given only through which of them are -1. A recording is therefore kept
// per call and pattern of absent inputs (RecordedMemoryCalls).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "planner/memory_model.h"
#include "planner/step_program.h"

namespace llmplan {

// One memory-model call's events, recorded. Tensor ids in `events` and
// `result` are relative: 0..inputs-1 name the call's inputs by position,
// inputs + j the j-th tensor it makes; -1 in `result` is none.
struct MemoryTemplate {
  int inputs = 0;
  int made = 0;
  std::vector<MemoryDelta> events;
  std::vector<int> result;  // the ids it returns (a SavedTensors flattened, or one id)
};

// Runs `call` on a scratch registry, its inputs being new tensors where
// `present` is true and -1 elsewhere, with `saved_category` (MemoryScript's),
// and records what it does. `call` returns the ids it returns.
// REQUIRES: `call` touches no registry but the script's.
MemoryTemplate RecordMemoryCall(const std::vector<bool>& present, MemoryCategory saved_category,
                                const std::function<std::vector<int>(MemoryScript&, const std::vector<int>&)>& call);

// The memory model's calls (planner/memory_model.h) a step program makes.
// Their tensors pass through the builder flattened: a SavedTensors as its
// saved ids then its output.
enum class MemoryCall {
  kEmbeddingForward,
  kBlockForward,         // keeping its graph
  kBlockForwardNoGraph,  // a checkpointed block's forward
  kHeadForward,
  kHeadEvaluate,         // an evaluation's head: the loss only
  kBlockRecompute,       // inputs: the forward's tensors
  kHeadBackward,         // inputs: the forward's tensors
  kBlockBackward,        // inputs: the forward's (or recompute's) tensors, then the gradient flowing in
  kEmbeddingBackward,    // inputs: as kBlockBackward
};

// One program's recordings of its memory calls, made at each call's first
// use with a given pattern of absent inputs.
class RecordedMemoryCalls {
 public:
  // `output_matrix_params`: the (vocab x hidden) matrix the head multiplies
  // by; `embedding_params`: the embedding's. REQUIRES: `shape` outlives this.
  RecordedMemoryCalls(const ActivationShape& shape, double output_matrix_params, double embedding_params)
      : shape_(shape), output_matrix_params_(output_matrix_params), embedding_params_(embedding_params) {}

  // The recording of `call` with `inputs`' pattern of absent ones (-1):
  // ProgramTensors::Stamp makes the call's events from it.
  const MemoryTemplate& Recorded(MemoryCall call, std::span<const int> inputs);

 private:
  struct Recording {
    MemoryCall call;
    std::vector<bool> present;  // which inputs were not -1
    MemoryTemplate events;
  };
  const ActivationShape& shape_;
  const double output_matrix_params_;
  const double embedding_params_;
  std::vector<Recording> recordings_;
};

class ProgramTensors {
 public:
  void Reserve(size_t tensors) { tensors_.reserve(tensors); }

  // A new tensor, its allocation appended to `events`; -1 (and no event)
  // for 0 bytes, as MemoryScript::Alloc.
  int Alloc(MemoryCategory category, double bytes, std::vector<MemoryDelta>& events);
  // Appends the free of a live tensor; nothing for -1.
  // Throws std::logic_error for a tensor that is not live.
  void Free(int id, std::vector<MemoryDelta>& events);

  // Appends the events of `t` called on `inputs` (t.inputs ids of this
  // program, -1 where the recording had none), making its tensors, and
  // returns the ids it returns in `result`.
  // Throws std::logic_error if it frees a tensor that is not live.
  void Stamp(const MemoryTemplate& t, std::span<const int> inputs, std::vector<MemoryDelta>& events,
             std::vector<int>& result);

 private:
  struct Tensor {
    MemoryCategory category;
    bool live;
    double bytes;
  };
  std::vector<Tensor> tensors_;  // by id (ids are handed out in order)
};

}  // namespace llmplan
