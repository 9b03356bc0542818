#include "data/bpe.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>

#include "data/unicode.h"

namespace llmplan::data {

namespace {

// Spreads a (left, right) id pair over the table (a 64-bit finalizer).
uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

const BpeModel::Merge* BpeModel::FindMerge(uint32_t left, uint32_t right) const {
  const uint64_t key = (uint64_t{left} << 32) | right;
  for (size_t i = Mix(key) & merge_mask_;; i = (i + 1) & merge_mask_) {
    const MergeSlot& slot = merge_table_[i];
    if (slot.key == key) return &slot.merge;
    if (slot.key == kEmptyKey) return nullptr;
  }
}

void BpeModel::AddToken(const std::string& bytes, uint32_t id) { vocab_[bytes] = id; }

void BpeModel::AddMerge(uint32_t left, uint32_t right, uint32_t rank, uint32_t merged) {
  merges_.emplace((uint64_t{left} << 32) | right, Merge{rank, merged});
}

void BpeModel::Finish() {
  uint32_t max_id = 0;
  for (const auto& [bytes, id] : vocab_) max_id = std::max(max_id, id);
  id_to_bytes_.assign(vocab_.empty() ? 0 : max_id + 1, nullptr);
  for (const auto& [bytes, id] : vocab_) id_to_bytes_[id] = &bytes;
  size_t slots = 16;
  while (slots < 2 * merges_.size()) slots *= 2;
  merge_table_.assign(slots, MergeSlot{});
  merge_mask_ = slots - 1;
  for (const auto& [key, merge] : merges_) {
    size_t i = Mix(key) & merge_mask_;
    while (merge_table_[i].key != kEmptyKey) i = (i + 1) & merge_mask_;
    merge_table_[i] = {key, merge};
  }
  merge_count_ = merges_.size();
  merges_ = {};
  for (int b = 0; b < 256; ++b) {
    std::string key;
    if (options_.byte_level) {
      key = std::string(1, static_cast<char>(b));
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      key = hex;
    }
    const auto it = vocab_.find(key);
    byte_ids_[b] = it == vocab_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
  }
}

std::optional<uint32_t> BpeModel::Find(std::string_view bytes) const {
  const auto it = vocab_.find(bytes);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::TokenBytes(uint32_t id) const {
  return id < id_to_bytes_.size() ? id_to_bytes_[id] : nullptr;
}

namespace {

// A per-thread cache of recent words: a direct-mapped table of cache-line
// entries, so that a hit costs one memory access (a node-based hash map costs
// three, and most words of a corpus are hits). A word of up to 22 bytes with
// up to 8 ids fits an entry; a colliding word replaces the one there.
struct alignas(64) CacheEntry {
  uint64_t hash;
  uint8_t key_len;  // 0: empty
  uint8_t id_count;
  char key[22];
  uint32_t ids[8];
};
static_assert(sizeof(CacheEntry) == 64);

struct WordCache {
  static constexpr size_t kEntries = size_t{1} << 16;  // 4 MiB per thread
  const void* owner = nullptr;
  std::vector<CacheEntry> entries;
};

}  // namespace

void BpeModel::EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  if (word.empty()) return;
  thread_local WordCache cache;
  if (word.size() > sizeof(CacheEntry::key)) {
    EncodeUncached(word, ids);
    return;
  }
  if (cache.owner != this) {  // a cache holds one model's words
    cache.entries.assign(WordCache::kEntries, CacheEntry{});
    cache.owner = this;
  }
  const uint64_t hash = std::hash<std::string_view>{}(word);
  CacheEntry& e = cache.entries[hash & (WordCache::kEntries - 1)];
  if (e.hash == hash && e.key_len == word.size() && std::memcmp(e.key, word.data(), word.size()) == 0) {
    ids->insert(ids->end(), e.ids, e.ids + e.id_count);
    return;
  }
  const size_t first = ids->size();
  EncodeUncached(word, ids);
  const size_t n = ids->size() - first;
  if (n > 8) return;
  e.hash = hash;
  e.key_len = static_cast<uint8_t>(word.size());
  e.id_count = static_cast<uint8_t>(n);
  std::memcpy(e.key, word.data(), word.size());
  std::copy(ids->begin() + static_cast<std::ptrdiff_t>(first), ids->end(), e.ids);
}

void BpeModel::EncodeUncached(std::string_view word, std::vector<uint32_t>* ids) const {
  if (options_.ignore_merges) {
    if (const auto id = Find(word)) {
      ids->push_back(*id);
      return;
    }
  }
  // The word's symbols, a doubly linked list over a vector.
  struct Symbol {
    uint32_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto push = [&](uint32_t id) {
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  bool last_was_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    int len = 1;
    if (options_.byte_level) {
      const int64_t id = byte_ids_[static_cast<unsigned char>(word[pos])];
      if (id >= 0) push(static_cast<uint32_t>(id));
      ++pos;
      continue;
    }
    unicode::DecodeUtf8(word, pos, &len);
    const std::string_view ch = word.substr(pos, static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    if (const auto id = Find(ch)) {
      push(*id);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) push(static_cast<uint32_t>(byte_ids_[static_cast<unsigned char>(c)]));
        last_was_unk = false;
        continue;
      }
    }
    if (!options_.unk) continue;  // Hugging Face drops what it cannot code
    if (options_.fuse_unk && last_was_unk) continue;
    push(*options_.unk);
    last_was_unk = true;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int pos;
    uint32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const Merge* m = FindMerge(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id);
    if (m != nullptr) queue.push({m->rank, left, m->merged});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    // Stale when either side has changed since the pair was queued.
    const Merge* m = FindMerge(left.id, right.id);
    if (m == nullptr || m->merged != top.merged) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) ids->push_back(symbols[static_cast<size_t>(i)].id);
}

}  // namespace llmplan::data
