// FreeBlockPool: the free blocks of one pool of the caching allocator model
// (planner/allocator_model.h), in the order of the real allocator's pool set:
// by (stream, size, address). Its one question is get_free_block's lower
// bound: the smallest block of a stream with at least n bytes, the lowest
// address among equals.
//
// Why not one sorted list: the allocator replay of the plan search asks the
// pool two or three exact or lower-bound searches per Malloc and Free, about
// 3 million a search, and a binary search over the whole list (70 blocks on
// average in the Llama-3-70B search) was a chain of dependent loads: most of
// the replay's time. Here each stream's blocks are split by size class into
// short sorted lists (eight classes per power of two, as TLSF does), with a
// bitmap of the classes that hold any: a lower bound searches one short list
// and, when nothing there is large enough, takes the first block of the next
// class that holds one. The answers are those of one sorted list: classes are
// increasing ranges of sizes, so every block of a later class is larger.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace llmplan {

// A free block's key: the pool's order is (stream, size, address).
struct FreeBlockKey {
  int64_t size = 0;
  int64_t address = 0;
  int stream = 0;
  int block = -1;  // the allocator model's index of the block (not part of the order)
};

class FreeBlockPool {
 public:
  // Where a block is in the pool; valid until the pool next changes.
  struct Position {
    int list = -1;  // -1: no block
    int index = 0;
    bool valid() const { return list >= 0; }
  };

  // The smallest block of `stream` with size >= `size`, the lowest address
  // among equals; an invalid Position when there is none.
  Position LowerBound(int64_t size, int stream) const;
  // The block with `key`'s stream, size and address; invalid when absent.
  Position Find(const FreeBlockKey& key) const;
  // REQUIRES: `p` is valid.
  const FreeBlockKey& At(Position p) const { return lists_[p.list][p.index]; }

  // REQUIRES: no block with `key`'s stream and address is in the pool.
  void Insert(const FreeBlockKey& key);
  // REQUIRES: `p` is valid.
  void Erase(Position p);
  // Erase(p) then Insert(key), moving only what lies between the two places
  // when both are in one list (a split block's tail, a merged block).
  void Replace(Position p, const FreeBlockKey& key);

  // Calls `drop(key)` for every block, in the pool's order, and removes those
  // for which it returns true.
  template <typename Drop>
  void EraseIf(Drop drop) {
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      for (int c = 0; c < kClasses; ++c) {
        std::vector<FreeBlockKey>& list = lists_[s * kClasses + static_cast<std::size_t>(c)];
        std::size_t kept = 0;
        for (std::size_t i = 0; i < list.size(); ++i)
          if (!drop(list[i])) list[kept++] = list[i];
        list.resize(kept);
        if (list.empty()) MarkEmpty(static_cast<int>(s), c);
      }
    }
  }

  // Size classes: 0-7 exactly, then eight per power of two (the three bits
  // after the leading one). Increasing in the size.
  static constexpr int kClasses = 8 + 60 * 8;
  static int SizeClass(int64_t size) {
    const uint64_t x = static_cast<uint64_t>(size < 1 ? 1 : size);
    const int top = std::bit_width(x) - 1;
    if (top < 3) return static_cast<int>(x);
    return 8 + (top - 3) * 8 + static_cast<int>((x >> (top - 3)) & 7);
  }

 private:
  static constexpr int kWords = (kClasses + 63) / 64;
  // (size, address) order within one stream's list.
  static bool Less(const FreeBlockKey& a, int64_t size, int64_t address) {
    return (a.size < size) | ((a.size == size) & (a.address < address));
  }
  // The first key in [first, last) not below (size, address), found without
  // branches on the comparisons (conditional moves); the list form returns its index.
  static const FreeBlockKey* LowerBoundIn(const FreeBlockKey* first, const FreeBlockKey* last, int64_t size,
                                          int64_t address);
  static int LowerBoundIn(const std::vector<FreeBlockKey>& list, int64_t size, int64_t address);
  // The index of `stream` in streams_, or -1.
  int SlotOf(int stream) const;
  // Adds `stream` (keeping streams_ sorted) and returns its slot.
  int AddStream(int stream);
  void MarkEmpty(int slot, int c) { nonempty_[slot][c / 64] &= ~(uint64_t{1} << (c % 64)); }
  void MarkNonEmpty(int slot, int c) { nonempty_[slot][c / 64] |= uint64_t{1} << (c % 64); }

  std::vector<int> streams_;  // in increasing order; slot s holds lists_[s * kClasses ...]
  std::vector<std::vector<FreeBlockKey>> lists_;  // per (slot, class), sorted by (size, address)
  std::vector<std::array<uint64_t, kWords>> nonempty_;  // per slot: the classes whose list holds a block
};

}  // namespace llmplan
