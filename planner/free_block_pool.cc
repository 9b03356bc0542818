#include "planner/free_block_pool.h"

#include <algorithm>
#include <limits>

namespace llmplan {

const FreeBlockKey* FreeBlockPool::LowerBoundIn(const FreeBlockKey* first, const FreeBlockKey* last, int64_t size,
                                                int64_t address) {
  size_t n = static_cast<size_t>(last - first);
  if (n == 0) return first;
  while (n > 1) {
    const size_t half = n / 2;
    first = Less(first[half], size, address) ? first + half : first;
    n -= half;
  }
  return first + (Less(*first, size, address) ? 1 : 0);
}

int FreeBlockPool::LowerBoundIn(const std::vector<FreeBlockKey>& list, int64_t size, int64_t address) {
  return static_cast<int>(LowerBoundIn(list.data(), list.data() + list.size(), size, address) - list.data());
}

int FreeBlockPool::SlotOf(int stream) const {
  for (size_t s = 0; s < streams_.size(); ++s)
    if (streams_[s] == stream) return static_cast<int>(s);
  return -1;
}

int FreeBlockPool::AddStream(int stream) {
  const auto at = std::lower_bound(streams_.begin(), streams_.end(), stream);
  const int slot = static_cast<int>(at - streams_.begin());
  streams_.insert(at, stream);
  lists_.insert(lists_.begin() + static_cast<long>(slot) * kClasses, kClasses, {});
  nonempty_.insert(nonempty_.begin() + slot, std::array<uint64_t, kWords>{});
  return slot;
}

FreeBlockPool::Position FreeBlockPool::LowerBound(int64_t size, int stream) const {
  const int slot = SlotOf(stream);
  if (slot < 0) return {};
  const int c = SizeClass(size);
  const std::vector<FreeBlockKey>& list = lists_[slot * kClasses + c];
  const int i = LowerBoundIn(list, size, std::numeric_limits<int64_t>::min());
  if (i < static_cast<int>(list.size())) return {slot * kClasses + c, i};
  // Nothing large enough in its class: the first block of the next class
  // that holds one (all of whose blocks are larger).
  const std::array<uint64_t, kWords>& bits = nonempty_[slot];
  int word = (c + 1) / 64;
  if (word >= kWords) return {};
  uint64_t rest = (c + 1) % 64 == 0 ? bits[word] : bits[word] & (~uint64_t{0} << ((c + 1) % 64));
  while (rest == 0) {
    if (++word == kWords) return {};
    rest = bits[word];
  }
  return {slot * kClasses + word * 64 + std::countr_zero(rest), 0};
}

FreeBlockPool::Position FreeBlockPool::Find(const FreeBlockKey& key) const {
  const int slot = SlotOf(key.stream);
  if (slot < 0) return {};
  const int list_index = slot * kClasses + SizeClass(key.size);
  const std::vector<FreeBlockKey>& list = lists_[list_index];
  const int i = LowerBoundIn(list, key.size, key.address);
  if (i == static_cast<int>(list.size()) || list[i].size != key.size || list[i].address != key.address) return {};
  return {list_index, i};
}

void FreeBlockPool::Insert(const FreeBlockKey& key) {
  int slot = SlotOf(key.stream);
  if (slot < 0) slot = AddStream(key.stream);
  const int c = SizeClass(key.size);
  std::vector<FreeBlockKey>& list = lists_[slot * kClasses + c];
  list.insert(list.begin() + LowerBoundIn(list, key.size, key.address), key);
  MarkNonEmpty(slot, c);
}

void FreeBlockPool::Erase(Position p) {
  std::vector<FreeBlockKey>& list = lists_[p.list];
  list.erase(list.begin() + p.index);
  if (list.empty()) MarkEmpty(p.list / kClasses, p.list % kClasses);
}

void FreeBlockPool::Replace(Position p, const FreeBlockKey& key) {
  const FreeBlockKey& old = At(p);
  if (key.stream != old.stream || SizeClass(key.size) != p.list % kClasses) {
    Erase(p);
    Insert(key);
    return;
  }
  std::vector<FreeBlockKey>& list = lists_[p.list];
  const auto it = list.begin() + p.index;
  if (Less(key, old.size, old.address)) {
    const auto to = list.begin() + LowerBoundIn(list, key.size, key.address);
    std::move_backward(to, it, it + 1);
    *to = key;
  } else {
    // Among the keys after the old one, the first not below `key`; those
    // between move down one place.
    const FreeBlockKey* end = list.data() + list.size();
    const auto to = list.begin() + (LowerBoundIn(&*it + 1, end, key.size, key.address) - list.data());
    std::move(it + 1, to, it);
    *(to - 1) = key;
  }
}

}  // namespace llmplan
