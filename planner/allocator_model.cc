#include "planner/allocator_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

namespace llmplan {

namespace {

// round_size: every block is a multiple of 512 B, so that blocks carved out of
// one segment stay aligned for vectorised kernels.
int64_t RoundSize(int64_t bytes) {
  using M = CachingAllocatorModel;
  if (bytes < M::kMinBlockSize) return M::kMinBlockSize;
  return M::kMinBlockSize * ((bytes + M::kMinBlockSize - 1) / M::kMinBlockSize);
}

// get_allocation_size: the cudaMalloc a request needs when no cached block
// fits. Small requests share 2 MiB segments and mid-sized ones 20 MiB
// segments, because cudaMalloc is slow (it synchronizes the device) and each
// segment is a separate piece of the address space that cannot merge with
// its neighbours.
int64_t SegmentSizeFor(int64_t size) {
  using M = CachingAllocatorModel;
  if (size <= M::kSmallSize) return M::kSmallBuffer;
  if (size < M::kMinLargeAlloc) return M::kLargeBuffer;
  return M::kRoundLarge * ((size + M::kRoundLarge - 1) / M::kRoundLarge);
}

}  // namespace

void CachingAllocatorModel::Stat::Add(int64_t bytes) {
  current += bytes;
  peak = std::max(peak, current);
}

CachingAllocatorModel::CachingAllocatorModel() : CachingAllocatorModel(Options()) {}

CachingAllocatorModel::CachingAllocatorModel(Options options)
    : capacity_bytes_(static_cast<int64_t>(std::max(0.0, options.device_capacity_bytes))),
      next_address_(kSmallBuffer) {}

int CachingAllocatorModel::NewBlock() {
  if (!unused_block_slots_.empty()) {
    int b = unused_block_slots_.back();
    unused_block_slots_.pop_back();
    blocks_[b] = Block{};
    blocks_[b].live = true;
    return b;
  }
  blocks_.push_back(Block{});
  blocks_.back().live = true;
  return static_cast<int>(blocks_.size()) - 1;
}

void CachingAllocatorModel::DropBlock(int b) {
  blocks_[b].live = false;
  unused_block_slots_.push_back(b);
}

FreeBlockKey CachingAllocatorModel::KeyOf(int b) const {
  const Block& blk = blocks_[b];
  return FreeBlockKey{blk.size, blk.address, blk.stream, b};
}

// alloc_block: one cudaMalloc, which fails when the device (or the
// per-process fraction) has not `segment_size` bytes left.
int CachingAllocatorModel::AllocateSegment(int64_t segment_size, int stream, Pool pool) {
  if (capacity_bytes_ > 0 && reserved_.current + segment_size > capacity_bytes_) return -1;
  Segment seg;
  seg.address = next_address_;
  seg.size = segment_size;
  seg.stream = stream;
  seg.pool = pool;
  seg.held = true;
  next_address_ += segment_size;
  segments_.push_back(seg);
  reserved_.Add(segment_size);
  ++num_segments_;

  const int b = NewBlock();
  Block& blk = blocks_[b];
  blk.address = seg.address;
  blk.size = segment_size;
  blk.stream = stream;
  blk.pool = pool;
  blk.segment = static_cast<int>(segments_.size()) - 1;
  return b;
}

int64_t CachingAllocatorModel::Malloc(double bytes, int stream) {
  if (!(bytes >= 1 && bytes < 9007199254740992.0))
    throw std::invalid_argument("CachingAllocatorModel::Malloc: bytes must be in [1, 2^53), got " +
                                std::to_string(bytes));
  ProcessCompletedEvents();

  const int64_t size = RoundSize(static_cast<int64_t>(std::ceil(bytes)));
  const Pool pool = size <= kSmallSize ? Pool::kSmall : Pool::kLarge;
  FreeBlockPool& free_blocks = PoolOf(pool);
  // get_free_block: the lower bound of (stream, size) in the pool is the
  // smallest block of this stream that fits, the lowest-addressed among
  // equals. The block it takes stays in the pool until it is known whether
  // its tail goes back there (then the tail's key replaces the block's).
  // (`cached` is used only when from_pool: a retry below changes the pool).
  const FreeBlockPool::Position cached = free_blocks.LowerBound(size, stream);
  const bool from_pool = cached.valid();
  int b = from_pool ? free_blocks.At(cached).block : -1;
  if (!from_pool) {
    const int64_t segment_size = SegmentSizeFor(size);
    b = AllocateSegment(segment_size, stream, pool);
    if (b < 0) {
      // cudaMalloc failed. release_available_cached_blocks frees nothing
      // without max_split_size, so release_cached_blocks: wait for every
      // outstanding event, cudaFree all wholly free segments, retry once.
      WaitForAllEvents();
      ReleaseWhollyFreeSegments();
      ++num_alloc_retries_;
      b = AllocateSegment(segment_size, stream, pool);
      if (b < 0) {
        ++num_ooms_;
        return kOutOfMemory;
      }
    }
  }

  // should_split: a large block keeps its tail only when the tail could hold
  // another large request (> 1 MiB); a smaller tail would only fragment the
  // pool, so it is handed out with the block and counts as allocated.
  const int64_t remaining = blocks_[b].size - size;
  const bool split = pool == Pool::kSmall ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    const int rest = NewBlock();  // may move blocks_: index, do not hold references across it
    Block& head = blocks_[b];
    Block& tail = blocks_[rest];
    tail.address = head.address + size;
    tail.size = remaining;
    tail.stream = head.stream;
    tail.pool = head.pool;
    tail.segment = head.segment;
    tail.prev = b;
    tail.next = head.next;
    if (tail.next >= 0) blocks_[tail.next].prev = rest;
    head.next = rest;
    head.size = size;
    if (from_pool) free_blocks.Replace(cached, KeyOf(rest));
    else free_blocks.Insert(KeyOf(rest));
  } else if (from_pool) {
    free_blocks.Erase(cached);
  }

  Block& blk = blocks_[b];
  blk.allocated = true;
  allocated_.Add(blk.size);
  return b;
}

void CachingAllocatorModel::Free(int64_t handle) {
  if (handle < 0 || handle >= static_cast<int64_t>(blocks_.size()) || !blocks_[handle].live ||
      !blocks_[handle].allocated)
    throw std::invalid_argument("CachingAllocatorModel::Free: " + std::to_string(handle) +
                                " is not an allocated block");
  const int b = static_cast<int>(handle);
  Block& blk = blocks_[b];
  blk.allocated = false;
  allocated_.Add(-blk.size);
  if (blk.used_on.empty()) {
    ReturnToPool(b);
    return;
  }
  // insert_events: one event per other stream, recorded now; the block is
  // reusable once all of them have completed.
  for (int s : blk.used_on) {
    StreamEvents& ev = events_[s];
    ev.outstanding.push_back(StreamEvent{++ev.recorded, b});
    ++blk.pending_events;
  }
  blk.used_on.clear();
}

void CachingAllocatorModel::RecordStream(int64_t handle, int stream) {
  if (handle < 0 || handle >= static_cast<int64_t>(blocks_.size()) || !blocks_[handle].live ||
      !blocks_[handle].allocated)
    throw std::invalid_argument("CachingAllocatorModel::RecordStream: " + std::to_string(handle) +
                                " is not an allocated block");
  Block& blk = blocks_[handle];
  if (stream == blk.stream) return;
  if (std::find(blk.used_on.begin(), blk.used_on.end(), stream) == blk.used_on.end()) blk.used_on.push_back(stream);
}

void CachingAllocatorModel::StreamWorkDone(int stream) {
  auto it = events_.find(stream);
  if (it != events_.end()) it->second.completed = it->second.recorded;
}

void CachingAllocatorModel::StreamWorkDoneThrough(int stream, int64_t sequence) {
  auto it = events_.find(stream);
  if (it != events_.end()) it->second.completed = std::max(it->second.completed, std::min(sequence, it->second.recorded));
}

int64_t CachingAllocatorModel::EventsRecorded(int stream) const {
  auto it = events_.find(stream);
  return it == events_.end() ? 0 : it->second.recorded;
}

// free_block: merge with the free neighbours in the segment, then back into
// the pool. Neighbours that are allocated or still waiting for events stay
// separate blocks.
void CachingAllocatorModel::ReturnToPool(int b) {
  FreeBlockPool& free_blocks = PoolOf(blocks_[b].pool);
  auto is_free = [&](int n) { return n >= 0 && !blocks_[n].allocated && blocks_[n].pending_events == 0; };

  const int prev = blocks_[b].prev, next = blocks_[b].next;
  const bool merge_prev = is_free(prev), merge_next = is_free(next);
  // The merged block's key takes the place of a neighbour's (Replace moves
  // only the keys between the two), or is inserted when neither was free.
  // A free neighbour is in the pool.
  FreeBlockPool::Position absorbed;
  if (merge_next) {
    if (merge_prev) free_blocks.Erase(free_blocks.Find(KeyOf(next)));
    else absorbed = free_blocks.Find(KeyOf(next));
  }
  if (merge_prev) absorbed = free_blocks.Find(KeyOf(prev));
  if (merge_prev) {
    Block& blk = blocks_[b];
    blk.address = blocks_[prev].address;
    blk.size += blocks_[prev].size;
    blk.prev = blocks_[prev].prev;
    if (blk.prev >= 0) blocks_[blk.prev].next = b;
    DropBlock(prev);
  }
  if (merge_next) {
    Block& blk = blocks_[b];
    blk.size += blocks_[next].size;
    blk.next = blocks_[next].next;
    if (blk.next >= 0) blocks_[blk.next].prev = b;
    DropBlock(next);
  }
  if (absorbed.valid()) free_blocks.Replace(absorbed, KeyOf(b));
  else free_blocks.Insert(KeyOf(b));
}

// process_events, at the start of every Malloc: each stream's events complete
// in the order they were recorded, so the queue is drained from the front
// until the first one not yet done.
void CachingAllocatorModel::ProcessCompletedEvents() {
  for (auto& [stream, ev] : events_) {
    while (!ev.outstanding.empty() && ev.outstanding.front().sequence <= ev.completed) {
      const int b = ev.outstanding.front().block;
      ev.outstanding.pop_front();
      if (--blocks_[b].pending_events == 0) ReturnToPool(b);
    }
  }
}

// synchronize_and_free_events: cudaEventSynchronize on every outstanding
// event, so every pending block is free afterwards.
void CachingAllocatorModel::EmptyCache() {
  WaitForAllEvents();
  ReleaseWhollyFreeSegments();
}

void CachingAllocatorModel::WaitForAllEvents() {
  for (auto& [stream, ev] : events_) {
    ev.completed = ev.recorded;
    while (!ev.outstanding.empty()) {
      const int b = ev.outstanding.front().block;
      ev.outstanding.pop_front();
      if (--blocks_[b].pending_events == 0) ReturnToPool(b);
    }
  }
}

// release_blocks on both pools: only a segment that is one free block (never
// split, or merged back whole) can be cudaFree'd; a segment with any block in
// use keeps all of it.
void CachingAllocatorModel::ReleaseWhollyFreeSegments() {
  for (FreeBlockPool* free_blocks : {&large_free_, &small_free_}) {
    free_blocks->EraseIf([&](const FreeBlockKey& key) {
      const int b = key.block;
      const Block& blk = blocks_[b];
      if (blk.prev >= 0 || blk.next >= 0) return false;
      segments_[blk.segment].held = false;
      reserved_.Add(-blk.size);
      --num_segments_;
      DropBlock(b);
      return true;
    });
  }
}

std::vector<CachingAllocatorModel::SegmentInfo> CachingAllocatorModel::Segments() const {
  std::vector<SegmentInfo> by_index(segments_.size());
  for (const Block& blk : blocks_) {
    if (!blk.live) continue;
    SegmentInfo& info = by_index[blk.segment];
    ++info.num_blocks;
    if (blk.allocated) info.allocated_bytes += blk.size;
  }
  std::vector<SegmentInfo> held;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& seg = segments_[i];
    if (!seg.held) continue;
    SegmentInfo info = by_index[i];
    info.address = seg.address;
    info.size = seg.size;
    info.stream = seg.stream;
    info.pool = seg.pool;
    held.push_back(info);
  }
  // Segments are created at increasing addresses, so index order is address order.
  return held;
}

std::vector<CachingAllocatorModel::BlockInfo> CachingAllocatorModel::Blocks() const {
  // Each segment's first block, then the chain of its neighbours.
  std::vector<int> first(segments_.size(), -1);
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (blocks_[b].live && blocks_[b].prev < 0) first[blocks_[b].segment] = static_cast<int>(b);
  std::vector<BlockInfo> out;
  for (size_t i = 0; i < segments_.size(); ++i) {  // index order is address order
    if (!segments_[i].held) continue;
    for (int b = first[i]; b >= 0; b = blocks_[b].next) {
      const Block& blk = blocks_[b];
      BlockInfo info;
      info.address = blk.address;
      info.size = blk.size;
      info.allocated = blk.allocated;
      info.handle = blk.allocated ? b : -1;
      info.pending = blk.pending_events > 0;
      info.starts_segment = blk.prev < 0;
      info.stream = blk.stream;
      info.pool = blk.pool;
      out.push_back(info);
    }
  }
  return out;
}

bool CachingAllocatorModel::events_outstanding() const {
  for (const auto& [stream, ev] : events_)
    if (!ev.outstanding.empty()) return true;
  return false;
}

}  // namespace llmplan
