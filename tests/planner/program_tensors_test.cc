// ProgramTensors: a recorded memory-model call, stamped, makes the events and
// ids the call itself makes on a TensorRegistry, every time it is stamped.
#include "planner/program_tensors.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "planner/model_spec.h"

namespace llmplan {
namespace {

void ExpectSameEvents(const std::vector<MemoryDelta>& got, const std::vector<MemoryDelta>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].category, want[i].category) << i;
    EXPECT_EQ(got[i].bytes, want[i].bytes) << i;
    EXPECT_EQ(got[i].tensor, want[i].tensor) << i;
  }
}

std::vector<int> Flat(const SavedTensors& s) {
  std::vector<int> ids = s.saved;
  ids.push_back(s.output);
  return ids;
}

SavedTensors Unflat(const std::vector<int>& ids) {
  return {std::vector<int>(ids.begin(), ids.end() - 1), ids.back()};
}

// Two blocks' forward, recompute and backward, as the builder makes them for a
// checkpointed block and a kept one (on a GPU and on a CPU, whose plain
// attention saves more): stamped recordings against the calls themselves.
void CheckBlocks(bool cpu_device, bool fused_kernels = true) {
  const ActivationShape a = ShapeOf(PresetModel("llama3.2-1b"), 2, 512, 2, 1024, cpu_device, fused_kernels);
  auto forward = [&](bool keep) {
    return RecordMemoryCall({}, MemoryCategory::kActivations,
                            [&](MemoryScript& s, const std::vector<int>&) { return Flat(BlockForward(a, keep, s)); });
  };
  const MemoryTemplate kept = forward(true), checkpointed = forward(false);
  auto recompute_of = [&](const std::vector<int>& in) {
    return RecordMemoryCall(std::vector<bool>(in.size(), true), MemoryCategory::kRecompute,
                            [&](MemoryScript& s, const std::vector<int>& ids) {
                              return Flat(BlockRecompute(a, Unflat(ids), s));
                            });
  };
  auto backward_of = [&](const std::vector<int>& in) {
    return RecordMemoryCall(std::vector<bool>(in.size(), true), MemoryCategory::kActivations,
                            [&](MemoryScript& s, const std::vector<int>& ids) {
                              const std::vector<int> saved(ids.begin(), ids.end() - 1);
                              return std::vector<int>{BlockBackward(a, Unflat(saved), ids.back(), s)};
                            });
  };

  // The calls themselves.
  TensorRegistry registry;
  MemoryScript want(registry);
  const int flowing_want = want.Alloc(MemoryCategory::kActivations, 1000);
  const SavedTensors kept_want = BlockForward(a, true, want);
  SavedTensors ckpt_want = BlockForward(a, false, want);
  MemoryScript recompute_script(registry);
  recompute_script.saved_category = MemoryCategory::kRecompute;
  ckpt_want = BlockRecompute(a, ckpt_want, recompute_script);
  want.events.insert(want.events.end(), recompute_script.events.begin(), recompute_script.events.end());
  const int sent_want = BlockBackward(a, ckpt_want, flowing_want, want);
  const int sent2_want = BlockBackward(a, kept_want, sent_want, want);

  // Stamped.
  ProgramTensors tensors;
  std::vector<MemoryDelta> got;
  const int flowing = tensors.Alloc(MemoryCategory::kActivations, 1000, got);
  std::vector<int> kept_ids, ckpt_ids, recomputed, sent, sent2;
  tensors.Stamp(kept, {}, got, kept_ids);
  tensors.Stamp(checkpointed, {}, got, ckpt_ids);
  tensors.Stamp(recompute_of(ckpt_ids), ckpt_ids, got, recomputed);
  std::vector<int> in = recomputed;
  in.push_back(flowing);
  tensors.Stamp(backward_of(in), in, got, sent);
  in = kept_ids;
  in.push_back(sent[0]);
  tensors.Stamp(backward_of(in), in, got, sent2);

  ExpectSameEvents(got, want.events);
  EXPECT_EQ(kept_ids, Flat(kept_want));
  EXPECT_EQ(recomputed, Flat(ckpt_want));
  EXPECT_EQ(sent, std::vector<int>{sent_want});
  EXPECT_EQ(sent2, std::vector<int>{sent2_want});
  // Everything the blocks made is freed, but the gradient sent below.
  double net = 0;
  for (const MemoryDelta& d : got) net += d.bytes;
  EXPECT_EQ(net, a.compute_bytes * a.hidden * a.tokens);
}

TEST(ProgramTensorsTest, StampedCallsMakeTheCallsOwnEventsOnAGpu) { CheckBlocks(/*cpu_device=*/false); }
TEST(ProgramTensorsTest, StampedCallsMakeTheCallsOwnEventsOnACpu) { CheckBlocks(/*cpu_device=*/true); }
TEST(ProgramTensorsTest, StampedCallsMakeTheCallsOwnEventsWithCompositeKernels) {
  CheckBlocks(/*cpu_device=*/false, /*fused_kernels=*/false);
}

TEST(ProgramTensorsTest, AnAbsentInputIsPartOfTheRecording) {
  // EmbeddingBackward frees its flowing gradient; recorded without one, it
  // frees nothing there.
  const ActivationShape a = ShapeOf(PresetModel("llama3.2-1b"), 1, 128, 2, 1024, false, true);
  auto record = [&](bool with_flowing) {
    return RecordMemoryCall({true, with_flowing}, MemoryCategory::kActivations,
                            [&](MemoryScript& s, const std::vector<int>& in) {
                              EmbeddingBackward(a, {{}, in[0]}, in[1], 1e6, s);
                              return std::vector<int>{};
                            });
  };
  EXPECT_EQ(record(true).events.size(), record(false).events.size() + 1);
}

TEST(ProgramTensorsTest, FreeingATensorThatIsNotLiveThrows) {
  ProgramTensors tensors;
  std::vector<MemoryDelta> events;
  const int id = tensors.Alloc(MemoryCategory::kWorkspace, 64, events);
  EXPECT_EQ(tensors.Alloc(MemoryCategory::kWorkspace, 0, events), -1);  // 0 bytes: no tensor, no event
  tensors.Free(id, events);
  EXPECT_THROW(tensors.Free(id, events), std::logic_error);
  // A recording that frees its input, stamped on a tensor already freed.
  const MemoryTemplate frees_input = RecordMemoryCall({true}, MemoryCategory::kActivations,
                                                      [](MemoryScript& s, const std::vector<int>& in) {
                                                        s.Free(in[0]);
                                                        return std::vector<int>{};
                                                      });
  std::vector<int> result;
  EXPECT_THROW(tensors.Stamp(frees_input, std::vector<int>{id}, events, result), std::logic_error);
  ASSERT_EQ(events.size(), 2u);  // the alloc and the free
}

}  // namespace
}  // namespace llmplan
