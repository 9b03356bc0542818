#include "data/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "data/unicode.h"

namespace llmplan::data {

void BpeModel::AddToken(const std::string& bytes, uint32_t id) { vocab_[bytes] = id; }

void BpeModel::AddMerge(uint32_t left, uint32_t right, uint32_t rank, uint32_t merged) {
  merges_.emplace((uint64_t{left} << 32) | right, Merge{rank, merged});
}

void BpeModel::Finish() {
  uint32_t max_id = 0;
  for (const auto& [bytes, id] : vocab_) max_id = std::max(max_id, id);
  id_to_bytes_.assign(vocab_.empty() ? 0 : max_id + 1, nullptr);
  for (const auto& [bytes, id] : vocab_) id_to_bytes_[id] = &bytes;
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
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
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

void BpeModel::EncodeWord(std::string_view word, std::vector<uint32_t>* ids) const {
  if (word.empty()) return;
  // Most words of a corpus repeat: remember the recent ones, per thread (no
  // locks), for this model only.
  struct Cache {
    const BpeModel* owner = nullptr;
    std::unordered_map<std::string, std::vector<uint32_t>, StringHash, std::equal_to<>> words;
  };
  thread_local Cache cache;
  constexpr size_t kMaxCachedWordBytes = 64;
  constexpr size_t kMaxCachedWords = 1 << 18;
  if (word.size() > kMaxCachedWordBytes) {
    EncodeUncached(word, ids);
    return;
  }
  if (cache.owner != this) {
    cache.words.clear();
    cache.owner = this;
  }
  const auto it = cache.words.find(word);
  if (it != cache.words.end()) {
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = ids->size();
  EncodeUncached(word, ids);
  if (cache.words.size() >= kMaxCachedWords) cache.words.clear();
  cache.words.emplace(std::string(word), std::vector<uint32_t>(ids->begin() + static_cast<ptrdiff_t>(first), ids->end()));
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
    const auto it = merges_.find((uint64_t{symbols[static_cast<size_t>(left)].id} << 32) |
                                 symbols[static_cast<size_t>(right)].id);
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.merged});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    // Stale when either side has changed since the pair was queued.
    const auto it = merges_.find((uint64_t{left.id} << 32) | right.id);
    if (it == merges_.end() || it->second.merged != top.merged) continue;
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
