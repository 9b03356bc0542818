#include "planner/program_tensors.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace llmplan {

MemoryTemplate RecordMemoryCall(const std::vector<bool>& present, MemoryCategory saved_category,
                                const std::function<std::vector<int>(MemoryScript&, const std::vector<int>&)>& call) {
  TensorRegistry scratch;
  MemoryTemplate t;
  t.inputs = static_cast<int>(present.size());
  // Scratch ids: the present inputs first (0..p-1), then what the call makes.
  std::vector<int> inputs, position;  // position: scratch id of an input -> its place among the inputs
  for (int k = 0; k < t.inputs; ++k) {
    inputs.push_back(present[k] ? scratch.Add(MemoryCategory::kActivations, 1) : -1);
    if (present[k]) position.push_back(k);
  }
  const int first_made = static_cast<int>(position.size());
  MemoryScript script(scratch);
  script.saved_category = saved_category;
  const std::vector<int> result = call(script, inputs);
  auto relative = [&](int id) {
    if (id < 0) return -1;
    return id < first_made ? position[id] : t.inputs + (id - first_made);
  };
  t.events = std::move(script.events);
  for (MemoryDelta& d : t.events) {
    d.tensor = relative(d.tensor);
    if (d.bytes > 0) ++t.made;  // every tensor the call makes is allocated once, in id order
  }
  for (int id : result) t.result.push_back(relative(id));
  return t;
}

const MemoryTemplate& RecordedMemoryCalls::Recorded(MemoryCall call, std::span<const int> inputs) {
  auto matches = [&](const Recording& r) {
    if (r.call != call || r.present.size() != inputs.size()) return false;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (r.present[k] != (inputs[k] >= 0)) return false;
    return true;
  };
  auto it = std::find_if(recordings_.begin(), recordings_.end(), matches);
  if (it != recordings_.end()) return it->events;
  std::vector<bool> present;
  for (int id : inputs) present.push_back(id >= 0);
  // SavedTensors <-> flattened ids (saved..., output).
  auto saved_of = [](const std::vector<int>& ids, size_t n) {
    SavedTensors s;
    s.saved.assign(ids.begin(), ids.begin() + static_cast<long>(n) - 1);
    s.output = ids[n - 1];
    return s;
  };
  auto flat = [](const SavedTensors& s) {
    std::vector<int> ids = s.saved;
    ids.push_back(s.output);
    return ids;
  };
  const MemoryCategory saved_category =
      call == MemoryCall::kBlockRecompute ? MemoryCategory::kRecompute : MemoryCategory::kActivations;
  MemoryTemplate recorded = RecordMemoryCall(present, saved_category, [&](MemoryScript& s, const std::vector<int>& in) {
    switch (call) {
      case MemoryCall::kEmbeddingForward: return flat(EmbeddingForward(shape_, s));
      case MemoryCall::kBlockForward: return flat(BlockForward(shape_, /*keep_graph=*/true, s));
      case MemoryCall::kBlockForwardNoGraph: return flat(BlockForward(shape_, /*keep_graph=*/false, s));
      case MemoryCall::kHeadForward: return flat(HeadForward(shape_, output_matrix_params_, s));
      case MemoryCall::kHeadEvaluate: return flat(HeadEvaluate(shape_, s));
      case MemoryCall::kBlockRecompute: return flat(BlockRecompute(shape_, saved_of(in, in.size()), s));
      case MemoryCall::kHeadBackward: return std::vector<int>{HeadBackward(shape_, saved_of(in, in.size()), s)};
      case MemoryCall::kBlockBackward:
        return std::vector<int>{BlockBackward(shape_, saved_of(in, in.size() - 1), in.back(), s)};
      case MemoryCall::kEmbeddingBackward:
        EmbeddingBackward(shape_, saved_of(in, in.size() - 1), in.back(), embedding_params_, s);
        return std::vector<int>{};
    }
    return std::vector<int>{};
  });
  recordings_.push_back({call, std::move(present), std::move(recorded)});
  return recordings_.back().events;
}

int ProgramTensors::Alloc(MemoryCategory category, double bytes, std::vector<MemoryDelta>& events) {
  if (bytes <= 0) return -1;
  const int id = static_cast<int>(tensors_.size());
  tensors_.push_back({category, true, bytes});
  events.push_back({category, bytes, id});
  return id;
}

void ProgramTensors::Free(int id, std::vector<MemoryDelta>& events) {
  if (id < 0) return;
  if (id >= static_cast<int>(tensors_.size()) || !tensors_[id].live)
    throw std::logic_error("memory model: tensor " + std::to_string(id) + " is not live");
  Tensor& t = tensors_[id];
  t.live = false;
  events.push_back({t.category, -t.bytes, id});
}

void ProgramTensors::Stamp(const MemoryTemplate& t, std::span<const int> inputs, std::vector<MemoryDelta>& events,
                           std::vector<int>& result) {
  const int base = static_cast<int>(tensors_.size()) - t.inputs;  // made tensor j: id base + inputs + j
  auto id_of = [&](int relative) { return relative < t.inputs ? inputs[relative] : base + relative; };
  events.reserve(events.size() + t.events.size());
  for (const MemoryDelta& d : t.events) {
    const int id = id_of(d.tensor);
    if (d.bytes > 0) {  // the call's next tensor (it makes them in id order)
      tensors_.push_back({d.category, true, d.bytes});
      events.push_back({d.category, d.bytes, id});
      continue;
    }
    // A free: of an input, whatever its category and size here, or of a
    // tensor the call made.
    if (id < 0 || !tensors_[id].live) throw std::logic_error("memory model: tensor " + std::to_string(id) + " is not live");
    Tensor& freed = tensors_[id];
    freed.live = false;
    events.push_back({freed.category, -freed.bytes, id});
  }
  result.resize(t.result.size());
  for (size_t i = 0; i < t.result.size(); ++i) result[i] = t.result[i] < 0 ? -1 : id_of(t.result[i]);
}

}  // namespace llmplan
