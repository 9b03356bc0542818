// CachingAllocatorModel against behaviours of PyTorch's CUDA caching
// allocator, with the numbers worked out by hand from
// c10/cuda/CUDACachingAllocator.cpp (see planner/allocator_model.h), and
// against traces recorded on a GPU (tests/data/allocator/, written by
// tools/device/record_allocator.py). MiB = 1,048,576 bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/allocator_model.h"
#include "base/json_read.h"
#include "tests/planner/test_support.h"

namespace llmplan {
namespace {

using Model = CachingAllocatorModel;
constexpr double MiB = 1024.0 * 1024.0;

// ---------------------------------------------------------------------------
// Sizes, pools and segments

TEST(AllocatorModelTest, OneByteTakes512BytesOfOneSmallSegment) {
  Model m;
  m.Malloc(1, 0);
  EXPECT_EQ(m.allocated_bytes(), 512);
  EXPECT_EQ(m.reserved_bytes(), 2 * MiB);
  ASSERT_EQ(m.num_segments(), 1);
  auto seg = m.Segments().at(0);
  EXPECT_EQ(seg.pool, Model::Pool::kSmall);
  EXPECT_EQ(seg.allocated_bytes, 512);
  EXPECT_EQ(seg.num_blocks, 2);  // 512 B handed out, 2 MiB - 512 B left free
  // A second tiny request is carved from the same segment.
  m.Malloc(100, 0);
  EXPECT_EQ(m.allocated_bytes(), 1024);
  EXPECT_EQ(m.reserved_bytes(), 2 * MiB);
}

TEST(AllocatorModelTest, SizesRoundUpTo512Bytes) {
  Model m;
  m.Malloc(513, 0);   // -> 1024
  m.Malloc(1024, 0);  // -> 1024
  m.Malloc(1025, 0);  // -> 1536
  EXPECT_EQ(m.allocated_bytes(), 1024 + 1024 + 1536);
}

TEST(AllocatorModelTest, OneMibIsStillSmall) {
  Model m;
  m.Malloc(MiB, 0);  // kSmallSize itself: small pool, a 2 MiB segment split in halves
  m.Malloc(MiB, 0);  // takes the other half; nothing left to split off
  EXPECT_EQ(m.reserved_bytes(), 2 * MiB);
  EXPECT_EQ(m.allocated_bytes(), 2 * MiB);
  ASSERT_EQ(m.num_segments(), 1);
  EXPECT_EQ(m.Segments()[0].pool, Model::Pool::kSmall);
}

TEST(AllocatorModelTest, InTheSmallPoolEvenA512ByteTailIsSplitOff) {
  Model m;
  m.Malloc(MiB, 0);        // [1 MiB][1 MiB free]
  m.Malloc(MiB - 512, 0);  // [1 MiB][1 MiB - 512][512 free]
  EXPECT_EQ(m.allocated_bytes(), 2 * MiB - 512);
  m.Malloc(1, 0);  // the 512 B tail
  EXPECT_EQ(m.allocated_bytes(), 2 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 2 * MiB);
}

TEST(AllocatorModelTest, JustAboveOneMibGetsA20MibLargeSegment) {
  Model m;
  m.Malloc(MiB + 1, 0);  // rounds to 1 MiB + 512, large pool
  EXPECT_EQ(m.allocated_bytes(), MiB + 512);
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
  ASSERT_EQ(m.num_segments(), 1);
  EXPECT_EQ(m.Segments()[0].pool, Model::Pool::kLarge);
  // Requests below 10 MiB keep packing into it while they fit.
  m.Malloc(9 * MiB, 0);
  m.Malloc(9 * MiB, 0);  // 20 - (1 MiB + 512) - 9 = 10 MiB - 512 left: fits
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
  EXPECT_EQ(m.num_segments(), 1);
}

TEST(AllocatorModelTest, TenMibAndAboveGetTheirOwnSegmentRoundedTo2Mib) {
  Model m;
  m.Malloc(10 * MiB, 0);  // exactly kMinLargeAlloc: a 10 MiB segment of its own
  EXPECT_EQ(m.reserved_bytes(), 10 * MiB);
  m.Malloc(10 * MiB + 1, 0);  // 10 MiB + 512 -> a 12 MiB segment
  EXPECT_EQ(m.reserved_bytes(), 22 * MiB);
  EXPECT_EQ(m.allocated_bytes(), 20 * MiB + 512);
  EXPECT_EQ(m.num_segments(), 2);
  // The 2 MiB - 512 B tail (> 1 MiB) was split off and serves a 1.5 MiB request.
  m.Malloc(1.5 * MiB, 0);
  EXPECT_EQ(m.reserved_bytes(), 22 * MiB);
  EXPECT_EQ(m.num_segments(), 2);
}

TEST(AllocatorModelTest, ATailOfAtMostOneMibIsHandedOutAndCountsAsAllocated) {
  Model m;
  m.Malloc(19.5 * MiB, 0);  // own 20 MiB segment; the 0.5 MiB tail is not split off
  EXPECT_EQ(m.allocated_bytes(), 20 * MiB);
  EXPECT_EQ(m.Segments()[0].num_blocks, 1);

  Model n;
  n.Malloc(5 * MiB, 0);     // 20 MiB segment: 5 allocated, 15 free
  n.Malloc(14.5 * MiB, 0);  // best fit is the 15 MiB block; 0.5 MiB tail stays with it
  EXPECT_EQ(n.allocated_bytes(), 20 * MiB);
  EXPECT_EQ(n.reserved_bytes(), 20 * MiB);
}

TEST(AllocatorModelTest, SmallAndLargePoolsNeverShareSegments) {
  Model m;
  int64_t small = m.Malloc(512 * 1024, 0);
  m.Free(small);  // a free 2 MiB small segment
  m.Malloc(MiB + 1, 0);
  EXPECT_EQ(m.reserved_bytes(), 22 * MiB);
  EXPECT_EQ(m.num_segments(), 2);
}

// ---------------------------------------------------------------------------
// Reuse: best fit, streams, splitting and merging

TEST(AllocatorModelTest, AFreedBlockIsReusedOnItsStreamButNotOnAnother) {
  Model m;
  int64_t a = m.Malloc(12 * MiB, /*stream=*/1);
  m.Free(a);
  EXPECT_EQ(m.allocated_bytes(), 0);
  EXPECT_EQ(m.reserved_bytes(), 12 * MiB);  // cached, not returned to CUDA
  m.Malloc(12 * MiB, /*stream=*/0);         // stream 0 cannot take stream 1's block
  EXPECT_EQ(m.reserved_bytes(), 24 * MiB);
  m.Malloc(12 * MiB, /*stream=*/1);  // stream 1 can
  EXPECT_EQ(m.reserved_bytes(), 24 * MiB);
  int64_t c = m.Malloc(12 * MiB, /*stream=*/2);  // and a third stream gets its own
  m.Free(c);
  m.Malloc(12 * MiB, /*stream=*/0);  // nor can stream 0 take stream 2's
  EXPECT_EQ(m.reserved_bytes(), 48 * MiB);
  EXPECT_EQ(m.num_segments(), 4);
  auto segs = m.Segments();
  EXPECT_EQ(segs[0].stream, 1);
  EXPECT_EQ(segs[1].stream, 0);
  EXPECT_EQ(segs[2].stream, 2);
}

TEST(AllocatorModelTest, BestFitTakesTheSmallestFreeBlockThatFits) {
  Model m;
  int64_t a = m.Malloc(12 * MiB, 0), b = m.Malloc(14 * MiB, 0), c = m.Malloc(16 * MiB, 0);
  m.Free(a);
  m.Free(b);
  m.Free(c);
  m.Malloc(13 * MiB, 0);  // 14 MiB block; its 1 MiB tail is not split off
  EXPECT_EQ(m.allocated_bytes(), 14 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 42 * MiB);
  auto segs = m.Segments();
  EXPECT_EQ(segs[0].allocated_bytes, 0);
  EXPECT_EQ(segs[1].allocated_bytes, 14 * MiB);
  EXPECT_EQ(segs[2].allocated_bytes, 0);
}

TEST(AllocatorModelTest, SplitBlocksMergeBackSoTheWholeSegmentIsReused) {
  Model m;
  int64_t a = m.Malloc(8 * MiB, 0);  // 20 MiB segment: [a 8][free 12]
  int64_t b = m.Malloc(8 * MiB, 0);  // [a 8][b 8][free 4]
  EXPECT_EQ(m.Segments()[0].num_blocks, 3);
  m.Free(a);  // [free 8][b 8][free 4]: a cannot merge past b
  EXPECT_EQ(m.Segments()[0].num_blocks, 3);
  m.Free(b);  // b merges with both neighbours: one free 20 MiB block
  EXPECT_EQ(m.Segments()[0].num_blocks, 1);
  m.Malloc(20 * MiB, 0);  // fits the merged block exactly: no new segment
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
  EXPECT_EQ(m.num_segments(), 1);
}

TEST(AllocatorModelTest, AlternatingFreesFragmentAndReservedOutgrowsAllocated) {
  Model m;
  std::vector<int64_t> six;
  for (int i = 0; i < 6; ++i) six.push_back(m.Malloc(6 * MiB, 0));
  // Two 20 MiB segments, each [6][6][6][2 free]: 36 MiB allocated, 40 reserved.
  EXPECT_EQ(m.allocated_bytes(), 36 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 40 * MiB);
  m.Free(six[0]);  // segment 1: [6 free][6][6][2 free]
  m.Free(six[2]);  //            [6 free][6][8 free]   (merges with the 2 MiB tail)
  m.Free(six[4]);  // segment 2: [6][6 free][6][2 free]
  EXPECT_EQ(m.allocated_bytes(), 18 * MiB);
  // 20 MiB is free, but the largest hole is 8 MiB.
  m.Malloc(7 * MiB, 0);  // best fit: the 8 MiB hole; its 1 MiB tail is not split off
  EXPECT_EQ(m.allocated_bytes(), 26 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 40 * MiB);
  m.Malloc(7 * MiB, 0);  // only 6, 6 and 2 MiB holes left: a third segment
  EXPECT_EQ(m.allocated_bytes(), 33 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 60 * MiB);
  EXPECT_EQ(m.peak_allocated_bytes(), 36 * MiB);
  EXPECT_EQ(m.peak_reserved_bytes(), 60 * MiB);
  EXPECT_EQ(m.reserved_bytes() - m.allocated_bytes(), 27 * MiB);
}

// ---------------------------------------------------------------------------
// recordStream

TEST(AllocatorModelTest, ABlockUsedOnAnotherStreamWaitsForThatStream) {
  Model m;
  int64_t a = m.Malloc(12 * MiB, 0);
  m.RecordStream(a, 1);
  m.Free(a);
  EXPECT_EQ(m.allocated_bytes(), 0);  // allocated bytes drop at free() time
  int64_t b = m.Malloc(12 * MiB, 0);  // a is still waiting for stream 1: a new segment
  EXPECT_EQ(m.reserved_bytes(), 24 * MiB);
  m.Free(b);
  m.StreamWorkDone(1);
  // The next Malloc sees stream 1's event complete and gets a back; of the two
  // equal free blocks it takes the lower address, a's.
  m.Malloc(12 * MiB, 0);
  EXPECT_EQ(m.reserved_bytes(), 24 * MiB);
  auto segs = m.Segments();
  EXPECT_EQ(segs[0].allocated_bytes, 12 * MiB);
  EXPECT_EQ(segs[1].allocated_bytes, 0);
}

TEST(AllocatorModelTest, WorkDoneBeforeTheFreeDoesNotReleaseTheBlock) {
  Model m;
  int64_t a = m.Malloc(12 * MiB, 0);
  m.RecordStream(a, 1);
  m.StreamWorkDone(1);  // the event is recorded at Free, after this
  m.Free(a);
  // However many mallocs come, a stays out until stream 1 is done again.
  m.Malloc(12 * MiB, 0);
  m.Malloc(12 * MiB, 0);
  EXPECT_EQ(m.reserved_bytes(), 36 * MiB);
  m.StreamWorkDone(1);
  m.Malloc(12 * MiB, 0);
  EXPECT_EQ(m.reserved_bytes(), 36 * MiB);
}

TEST(AllocatorModelTest, UseOnTheBlocksOwnStreamNeedsNoWait) {
  Model m;
  int64_t a = m.Malloc(12 * MiB, 0);
  m.RecordStream(a, 0);
  m.Free(a);
  m.Malloc(12 * MiB, 0);
  EXPECT_EQ(m.reserved_bytes(), 12 * MiB);
}

TEST(AllocatorModelTest, ABlockRecordedOnTwoStreamsWaitsForBoth) {
  Model m;
  int64_t a = m.Malloc(12 * MiB, 0);
  m.RecordStream(a, 1);
  m.RecordStream(a, 2);
  m.Free(a);
  m.StreamWorkDone(1);
  int64_t b = m.Malloc(12 * MiB, 0);  // stream 2 still owes an event
  EXPECT_EQ(m.reserved_bytes(), 24 * MiB);
  m.Free(b);
  m.StreamWorkDone(2);
  m.Malloc(12 * MiB, 0);
  m.Malloc(12 * MiB, 0);  // both blocks free now: still two segments
  EXPECT_EQ(m.reserved_bytes(), 24 * MiB);
}

// ---------------------------------------------------------------------------
// cudaMalloc failure: free cached segments, retry, out of memory

TEST(AllocatorModelTest, ARequestThatDoesNotFitFreesCachedSegmentsAndRetries) {
  Model::Options o;
  o.device_capacity_bytes = 64 * MiB;
  Model m(o);
  int64_t a = m.Malloc(30 * MiB, 0);
  m.Malloc(20 * MiB, 0);
  m.Free(a);  // 30 MiB cached; 50 reserved
  EXPECT_EQ(m.reserved_bytes(), 50 * MiB);
  // 50 + 40 > 64: cudaFree the wholly free 30 MiB segment, then 20 + 40 fits.
  EXPECT_NE(m.Malloc(40 * MiB, 0), Model::kOutOfMemory);
  EXPECT_EQ(m.num_alloc_retries(), 1);
  EXPECT_EQ(m.reserved_bytes(), 60 * MiB);
  EXPECT_EQ(m.num_segments(), 2);
  EXPECT_FALSE(m.out_of_memory());
  // 60 + 10 > 64 and nothing is cached: out of memory after a second retry.
  EXPECT_EQ(m.Malloc(10 * MiB, 0), Model::kOutOfMemory);
  EXPECT_TRUE(m.out_of_memory());
  EXPECT_EQ(m.num_ooms(), 1);
  EXPECT_EQ(m.num_alloc_retries(), 2);
  EXPECT_EQ(m.reserved_bytes(), 60 * MiB);
  EXPECT_EQ(m.peak_reserved_bytes(), 60 * MiB);
}

TEST(AllocatorModelTest, TheRetryKeepsSegmentsThatAreInPartUse) {
  Model::Options o;
  o.device_capacity_bytes = 40 * MiB;
  Model m(o);
  m.Malloc(6 * MiB, 0);               // 20 MiB segment: [6][14 free]
  int64_t b = m.Malloc(16 * MiB, 0);  // 14 MiB is too small: a 16 MiB segment
  m.Free(b);
  EXPECT_EQ(m.reserved_bytes(), 36 * MiB);
  // No free block holds 18 MiB; 36 + 18 > 40. Only the 16 MiB segment is
  // wholly free; the 20 MiB one stays though 14 MiB of it is free.
  EXPECT_NE(m.Malloc(18 * MiB, 0), Model::kOutOfMemory);
  EXPECT_EQ(m.num_alloc_retries(), 1);
  EXPECT_EQ(m.reserved_bytes(), 38 * MiB);
  EXPECT_EQ(m.num_segments(), 2);
}

TEST(AllocatorModelTest, TheRetryWaitsForOtherStreamsAndFreesTheirBlocksToo) {
  Model::Options o;
  o.device_capacity_bytes = 20 * MiB;
  Model m(o);
  int64_t a = m.Malloc(12 * MiB, 0);
  m.RecordStream(a, 1);
  m.Free(a);  // waiting for stream 1, whose work is not known to be done
  // No free block (a is pending); 12 + 14 > 20. The retry synchronizes every
  // outstanding event, so a is free, its segment is wholly free and is
  // cudaFree'd, and 0 + 14 fits.
  EXPECT_NE(m.Malloc(14 * MiB, 0), Model::kOutOfMemory);
  EXPECT_EQ(m.num_alloc_retries(), 1);
  EXPECT_EQ(m.reserved_bytes(), 14 * MiB);
  EXPECT_EQ(m.num_segments(), 1);
}

// ---------------------------------------------------------------------------
// Replaying traces recorded by tools/device/record_allocator.py (format in
// tests/data/allocator/README.md)

struct TraceReplay {
  double peak_allocated_bytes = 0;
  double peak_reserved_bytes = 0;
  int64_t num_segments = 0;
  int64_t num_alloc_retries = 0;
  int64_t num_ooms = 0;
  int64_t deferred_frees = 0;  // frees that waited for other streams' events
  // The first allocation after which the model reserved other than PyTorch
  // did (reserved bytes follow segment_alloc / segment_free events); empty
  // when they agreed throughout.
  std::string first_divergence;
};

// Replays a recorded trace through the model: alloc -> Malloc, oom -> a Malloc
// that must fail, free_requested -> Free. A free_requested not followed at
// once by the free_completed of the same address was deferred by events of
// other streams (recordStream); the replay records the block on a stream of
// its own and marks that stream done at the free_completed, which the real
// allocator logs from process_events at the start of the next malloc.
// REQUIRES: the trace starts with an empty allocator, and has no deferred
// free completed by a synchronize-all (num_sync_all_streams == 0 when any
// free is deferred): such a free_completed cannot be told apart in the trace.
TraceReplay ReplayTrace(const nlohmann::json& trace) {
  const nlohmann::json& events = trace.at("events");
  Model::Options options;
  options.device_capacity_bytes = trace.value("allowed_memory_bytes", 0.0);
  Model model(options);
  std::unordered_map<int64_t, int64_t> live;     // device address -> model handle
  std::unordered_map<int64_t, int> deferred_on;  // device address -> its own stream
  int next_deferral_stream = 1 << 20;            // above any recorded stream number
  double recorded_reserved = 0;
  TraceReplay r;

  auto check_reserved = [&](size_t i, const std::string& what) {
    if (!r.first_divergence.empty() || model.reserved_bytes() == recorded_reserved) return;
    r.first_divergence = "event " + std::to_string(i) + " (" + what + "): the model reserves " +
                         std::to_string(static_cast<int64_t>(model.reserved_bytes())) + " B, PyTorch " +
                         std::to_string(static_cast<int64_t>(recorded_reserved)) + " B";
  };
  for (size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    const std::string action = e.at(0).get<std::string>();
    const int64_t address = e.at(1).get<int64_t>();
    const double size = e.at(2).get<double>();
    const int stream = e.at(3).get<int>();
    const std::string what = action + " of " + std::to_string(static_cast<int64_t>(size)) + " B on stream " +
                             std::to_string(stream);
    if (action == "segment_alloc") {
      recorded_reserved += size;
    } else if (action == "segment_free") {
      recorded_reserved -= size;
    } else if (action == "alloc") {
      const int64_t h = model.Malloc(size, stream);
      if (h == Model::kOutOfMemory && r.first_divergence.empty())
        r.first_divergence = "event " + std::to_string(i) + " (" + what + "): the model ran out of memory";
      live[address] = h;
      check_reserved(i, what);
    } else if (action == "oom") {
      if (model.Malloc(size, stream) != Model::kOutOfMemory && r.first_divergence.empty())
        r.first_divergence = "event " + std::to_string(i) + " (" + what + "): PyTorch ran out of memory, the model did not";
      check_reserved(i, what);
    } else if (action == "free_requested") {
      auto it = live.find(address);
      if (it == live.end()) throw std::runtime_error("trace event " + std::to_string(i) + " frees an address never allocated");
      const int64_t h = it->second;
      live.erase(it);
      if (h == Model::kOutOfMemory) continue;
      const bool completes_now = i + 1 < events.size() && events[i + 1].at(0) == "free_completed" &&
                                 events[i + 1].at(1).get<int64_t>() == address;
      if (!completes_now) {
        ++r.deferred_frees;
        deferred_on[address] = next_deferral_stream;
        model.RecordStream(h, next_deferral_stream++);
      }
      model.Free(h);
    } else if (action == "free_completed") {
      auto it = deferred_on.find(address);
      if (it != deferred_on.end()) {
        model.StreamWorkDone(it->second);
        deferred_on.erase(it);
      }
    } else {
      throw std::runtime_error("trace event " + std::to_string(i) + ": action '" + action +
                               "' is not replayed (expandable segments?)");
    }
  }
  r.peak_allocated_bytes = model.peak_allocated_bytes();
  r.peak_reserved_bytes = model.peak_reserved_bytes();
  r.num_segments = model.num_segments();
  r.num_alloc_retries = model.num_alloc_retries();
  r.num_ooms = model.num_ooms();
  return r;
}

// What PyTorch records when a block used on a side stream is freed, a second
// block of its size is allocated while the first waits, and the first comes
// back at the next malloc (addresses in MiB).
nlohmann::json DeferredFreeTrace() {
  const int64_t A = 100 * (1 << 20), B = 200 * (1 << 20), S = 12 * (1 << 20);
  return nlohmann::json{
      {"events",
       {{"segment_alloc", A, S, 0},
        {"alloc", A, S, 0},
        {"free_requested", A, S, 0},  // recorded on a side stream: no free_completed yet
        {"segment_alloc", B, S, 0},
        {"alloc", B, S, 0},
        {"free_requested", B, S, 0},
        {"free_completed", B, S, 0},
        {"free_completed", A, S, 0},  // process_events at the start of the next malloc
        {"alloc", A, S, 0}}}};
}

TEST(AllocatorModelTest, ReplayKeepsADeferredFreeOutOfThePoolUntilItCompletes) {
  TraceReplay r = ReplayTrace(DeferredFreeTrace());
  EXPECT_EQ(r.first_divergence, "");
  EXPECT_EQ(r.peak_reserved_bytes, 24 * MiB);
  EXPECT_EQ(r.peak_allocated_bytes, 12 * MiB);
  EXPECT_EQ(r.num_segments, 2);
  EXPECT_EQ(r.deferred_frees, 1);
}

TEST(AllocatorModelTest, ReplayNamesTheFirstEventWhereTheModelDiverges) {
  nlohmann::json trace = DeferredFreeTrace();
  trace["events"][3][2] = 20 * (1 << 20);  // pretend PyTorch had made a 20 MiB segment
  TraceReplay r = ReplayTrace(trace);
  EXPECT_EQ(r.first_divergence,
            "event 4 (alloc of 12582912 B on stream 0): the model reserves 25165824 B, PyTorch 33554432 B");
}

TEST(AllocatorModelTest, ReplayOfAnOomEventExpectsTheModelToFail) {
  const int64_t S = 12 * (1 << 20);
  nlohmann::json trace{{"allowed_memory_bytes", 20 * (1 << 20)},
                       {"events", {{"segment_alloc", 0, S, 0}, {"alloc", 0, S, 0}, {"oom", 0, S, 0}}}};
  TraceReplay r = ReplayTrace(trace);
  EXPECT_EQ(r.first_divergence, "");
  EXPECT_EQ(r.num_ooms, 1);
  EXPECT_EQ(r.num_alloc_retries, 1);
}

std::vector<std::string> RecordedTraces() {
  std::vector<std::string> files;
  const std::filesystem::path dir = testing::SourceDir() + "/tests/data/allocator";
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// Fails until the traces are recorded on the GPU machine: the model is only as
// good as its agreement with the real allocator.
TEST(AllocatorTraceTest, ReplaysRecordedTraces) {
  const std::vector<std::string> files = RecordedTraces();
  ASSERT_FALSE(files.empty())
      << "no recorded allocator traces in tests/data/allocator/: run "
         "`python3 tools/device/record_allocator.py --out tests/data/allocator` on the GPU machine "
         "(PyTorch 2.11, one GPU) and commit the .json files it writes (tests/data/allocator/README.md)";
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const nlohmann::json trace = ReadJsonFile(file, "allocator trace " + file);
    const nlohmann::json& stats = trace.at("stats");
    const double peak_reserved = stats.at("reserved_bytes.all.peak").get<double>();
    const double peak_allocated = stats.at("allocated_bytes.all.peak").get<double>();
    const TraceReplay r = ReplayTrace(trace);
    if (r.deferred_frees > 0 && stats.at("num_sync_all_streams").get<int64_t>() > 0)
      ADD_FAILURE() << "deferred frees and a synchronize-all in one trace: the replay cannot tell which "
                       "free_completed the synchronize caused (record such sequences separately)";
    const std::string divergence =
        r.first_divergence.empty() ? "reserved bytes agreed after every allocation" : r.first_divergence;
    EXPECT_NEAR(r.peak_reserved_bytes, peak_reserved, 0.01 * peak_reserved) << divergence;
    EXPECT_NEAR(r.peak_allocated_bytes, peak_allocated, 0.01 * peak_allocated) << divergence;
    EXPECT_EQ(r.num_segments, static_cast<int64_t>(trace.at("segments").size())) << divergence;
    EXPECT_EQ(r.num_ooms, stats.at("num_ooms").get<int64_t>()) << divergence;
    EXPECT_EQ(r.num_alloc_retries, stats.at("num_alloc_retries").get<int64_t>()) << divergence;
  }
}

// ---------------------------------------------------------------------------
// Blocks(): the state two replays are compared by

TEST(AllocatorModelTest, BlocksListsEverySegmentsBlocksInAddressOrder) {
  Model m;
  const int64_t a = m.Malloc(30 * MiB, 0);  // its own 30 MiB segment
  const int64_t b = m.Malloc(1000, 0);      // a 2 MiB small segment: 1,024 B and the free rest
  const int64_t c = m.Malloc(12 * MiB, 0);  // a 12 MiB segment, taken whole
  m.Free(c);
  const auto blocks = m.Blocks();
  ASSERT_EQ(blocks.size(), 4u);
  for (size_t i = 1; i < blocks.size(); ++i) EXPECT_LT(blocks[i - 1].address, blocks[i].address);
  EXPECT_EQ(blocks[0].handle, a);
  EXPECT_TRUE(blocks[0].allocated && blocks[0].starts_segment);
  EXPECT_EQ(blocks[0].size, 30 * MiB);
  EXPECT_EQ(blocks[1].handle, b);
  EXPECT_TRUE(blocks[1].starts_segment);
  EXPECT_EQ(blocks[1].size, 1024);
  EXPECT_EQ(blocks[1].pool, Model::Pool::kSmall);
  EXPECT_FALSE(blocks[2].allocated || blocks[2].starts_segment);  // the small segment's free rest
  EXPECT_EQ(blocks[2].address, blocks[1].address + 1024);
  EXPECT_EQ(blocks[2].handle, -1);
  EXPECT_FALSE(blocks[3].allocated);  // c, freed: its segment is still held
  EXPECT_TRUE(blocks[3].starts_segment);
  EXPECT_EQ(blocks[3].size, 12 * MiB);
}

TEST(AllocatorModelTest, ModelsGivenTheSameCallsHaveEqualBlocksButForHandles) {
  // The same requests in another order end in the same blocks once all are
  // freed and merged; one request more does not.
  Model x, y;
  const int64_t x1 = x.Malloc(3 * MiB, 0), x2 = x.Malloc(5 * MiB, 0);
  const int64_t y1 = y.Malloc(3 * MiB, 0), y2 = y.Malloc(5 * MiB, 0);
  x.Free(x1);
  x.Free(x2);
  y.Free(y2);
  y.Free(y1);
  EXPECT_EQ(x.Blocks(), y.Blocks());
  y.Malloc(1 * MiB, 0);
  EXPECT_NE(x.Blocks(), y.Blocks());
}

}  // namespace
}  // namespace llmplan
