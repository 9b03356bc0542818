// CachingAllocatorModel: a replay model of PyTorch's CUDA caching allocator
// (the native backend of c10/cuda/CUDACachingAllocator.cpp, default settings)
// for one process on one device. It takes a step's allocations and frees in
// order and reports what the real allocator would: allocated and reserved
// bytes (current and peak), the segments it holds, cudaFree-and-retry events
// and out-of-memory. What it models and leaves out, rule by rule:
// docs/ARCHITECTURE.md, "The caching-allocator model". Sources: pytorch
// c10/cuda/CUDACachingAllocator.cpp at 001074d25084fdb87a799823e395a50f5ec044d3
// and a later copy of main; AllocatorTraceTest checks it against traces of
// PyTorch 2.11 (tests/data/allocator/).
//
// Cost: per Malloc and Free, a few searches of short lists of free blocks of
// one size class (planner/free_block_pool.h), O(log n) at worst in the number
// of cached blocks, so the plan search can replay tens of thousands of
// allocations for each of dozens of plans.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "planner/free_block_pool.h"

namespace llmplan {

class CachingAllocatorModel {
 public:
  struct Options {
    // Bytes the allocator may hold in segments; a cudaMalloc that would go
    // beyond fails. 0: unlimited (no out-of-memory modelling).
    double device_capacity_bytes = 0;
  };

  enum class Pool { kSmall, kLarge };

  // One cudaMalloc'd segment, as torch.cuda.memory_snapshot() lists it.
  struct SegmentInfo {
    int64_t address = 0;          // the model's address, not the device's
    int64_t size = 0;             // total_size
    int64_t allocated_bytes = 0;  // allocated_size: blocks handed out and not freed
    int stream = 0;               // the stream it was allocated for
    Pool pool = Pool::kSmall;
    int num_blocks = 0;           // blocks it is split into (allocated, pending or free)
  };

  // Malloc's answer when the request cannot be satisfied.
  static constexpr int64_t kOutOfMemory = -1;

  // Constants of CUDACachingAllocator.cpp.
  static constexpr int64_t kMinBlockSize = 512;            // every size is rounded to this
  static constexpr int64_t kSmallSize = 1 << 20;           // largest "small" request
  static constexpr int64_t kSmallBuffer = 2 << 20;         // segment for small requests
  static constexpr int64_t kLargeBuffer = 20 << 20;        // segment for requests below kMinLargeAlloc
  static constexpr int64_t kMinLargeAlloc = 10 << 20;      // from here on a request gets its own segment
  static constexpr int64_t kRoundLarge = 2 << 20;          // ... rounded up to this

  // Unlimited capacity.
  CachingAllocatorModel();
  explicit CachingAllocatorModel(Options options);

  // Allocates `bytes` on `stream` (any small integer naming a CUDA stream) and
  // returns a handle for Free / RecordStream, or kOutOfMemory when even the
  // cudaFree-all-cached-segments retry cannot fit the segment it needs.
  // REQUIRES: 1 <= bytes < 2^53 (the real allocator hands out no block for 0).
  int64_t Malloc(double bytes, int stream);

  // Frees a block. Its bytes leave allocated_bytes now; the block returns to
  // the pool now, or, if it was recorded on other streams, at the first
  // Malloc after each of those streams has been marked StreamWorkDone.
  // REQUIRES: `handle` came from Malloc and has not been freed.
  void Free(int64_t handle);

  // As c10::cuda::CUDACachingAllocator::recordStream: the block is used on
  // `stream` too, so when freed it must wait for that stream's work. A use on
  // the block's own stream needs no wait and is ignored.
  // REQUIRES: `handle` is live (allocated, not freed).
  void RecordStream(int64_t handle, int stream);

  // All work issued on `stream` so far has completed: the events recorded on
  // it by earlier Frees are done. The blocks they held return to the pool at
  // the next Malloc (process_events), as in the real allocator. Callers decide
  // where in their replay this happens (a simulator would call it when the
  // stream's last operation using the block ends).
  void StreamWorkDone(int stream);
  // Finer: the events recorded on `stream` up to `sequence` (as
  // EventsRecorded returned it after the Free that recorded them) have
  // completed — the stream's work issued before that Free is done.
  void StreamWorkDoneThrough(int stream, int64_t sequence);
  // The sequence of the last event recorded on `stream` (0: none yet).
  int64_t EventsRecorded(int stream) const;

  // As c10::cuda::CUDACachingAllocator::emptyCache: waits for every
  // outstanding event, then cudaFrees every segment that is one free block.
  void EmptyCache();

  double allocated_bytes() const { return static_cast<double>(allocated_.current); }
  double reserved_bytes() const { return static_cast<double>(reserved_.current); }
  double peak_allocated_bytes() const { return static_cast<double>(allocated_.peak); }
  double peak_reserved_bytes() const { return static_cast<double>(reserved_.peak); }
  // Segments currently held (memory_stats "segment.all.current").
  int64_t num_segments() const { return num_segments_; }
  // cudaFree-all-cached-segments-and-retry events: each synchronizes the
  // device and empties the cache, a stall worth avoiding even when it succeeds.
  int64_t num_alloc_retries() const { return num_alloc_retries_; }
  // Malloc calls answered kOutOfMemory.
  int64_t num_ooms() const { return num_ooms_; }
  bool out_of_memory() const { return num_ooms_ > 0; }

  // Every segment held, in address order.
  std::vector<SegmentInfo> Segments() const;

  // One block of a held segment, as torch.cuda.memory_snapshot() lists it.
  struct BlockInfo {
    int64_t address = 0, size = 0;
    int64_t handle = -1;          // Malloc's handle for it (allocated blocks)
    bool allocated = false;
    bool pending = false;         // freed, waiting for other streams' events
    bool starts_segment = false;  // the first block of its segment
    int stream = 0;
    Pool pool = Pool::kSmall;
    bool operator==(const BlockInfo&) const = default;
  };
  // Every block of every held segment, in address order. Two models whose
  // lists agree but for the handles, with no events outstanding and no
  // retry yet, answer every later call alike (the handles they return
  // aside): the blocks decide each best fit, split, merge and new segment.
  std::vector<BlockInfo> Blocks() const;
  // Events recorded and not yet processed (RecordStream's frees).
  bool events_outstanding() const;

 private:
  // A piece of a segment: allocated, pending (freed, waiting for events of
  // other streams) or free (in its pool). Blocks live in blocks_, addressed by
  // index (the handle); the slot of a block merged away or cudaFree'd is
  // reused by the next new block.
  struct Block {
    bool live = false;           // false: an unused slot
    int64_t address = 0;
    int64_t size = 0;
    int stream = 0;
    Pool pool = Pool::kSmall;
    int segment = -1;            // index into segments_
    int prev = -1, next = -1;    // neighbours in the segment, -1 at its ends
    bool allocated = false;
    int pending_events = 0;      // events that must complete before it is free
    std::vector<int> used_on;    // other streams recorded since allocation
  };
  struct Segment {
    int64_t address = 0, size = 0;
    int stream = 0;
    Pool pool = Pool::kSmall;
    bool held = false;  // false once cudaFree'd
  };
  struct Stat {
    int64_t current = 0, peak = 0;
    void Add(int64_t bytes);
  };
  // An event recorded on a stream when a cross-stream block was freed.
  struct StreamEvent {
    int64_t sequence;  // per stream, increasing
    int block;
  };
  struct StreamEvents {
    std::deque<StreamEvent> outstanding;
    int64_t recorded = 0;   // sequence of the last event recorded
    int64_t completed = 0;  // events up to this sequence are done
  };

  int NewBlock();
  void DropBlock(int b);
  FreeBlockPool& PoolOf(Pool pool) { return pool == Pool::kSmall ? small_free_ : large_free_; }
  FreeBlockKey KeyOf(int b) const;
  int AllocateSegment(int64_t segment_size, int stream, Pool pool);
  void ReturnToPool(int b);
  void ProcessCompletedEvents();
  void WaitForAllEvents();
  void ReleaseWhollyFreeSegments();

  // Constant after construction.
  int64_t capacity_bytes_;  // 0: unlimited

  // Blocks and segments.
  std::vector<Block> blocks_;
  std::vector<int> unused_block_slots_;
  std::vector<Segment> segments_;
  FreeBlockPool small_free_, large_free_;
  std::map<int, StreamEvents> events_;  // by stream
  int64_t next_address_;

  // Statistics, as memory_stats() names them.
  Stat allocated_, reserved_;
  int64_t num_segments_ = 0;
  int64_t num_alloc_retries_ = 0;
  int64_t num_ooms_ = 0;
};

}  // namespace llmplan
