// FreeBlockPool answers as the one sorted set of (stream, size, address) it
// stands for: random inserts, erases, replaces, lower bounds and exact finds
// on several streams, checked step by step against a std::set.
#include "planner/free_block_pool.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace llmplan {
namespace {

using Key = std::tuple<int, int64_t, int64_t>;  // (stream, size, address): the pool's order

Key KeyOf(const FreeBlockKey& k) { return {k.stream, k.size, k.address}; }

TEST(FreeBlockPoolTest, SizeClassesIncreaseWithTheSize) {
  int previous = FreeBlockPool::SizeClass(1);
  for (int64_t size = 2; size < (int64_t{1} << 20); size += 37) {
    const int c = FreeBlockPool::SizeClass(size);
    EXPECT_GE(c, previous) << size;
    previous = c;
  }
  EXPECT_LT(FreeBlockPool::SizeClass(std::numeric_limits<int64_t>::max()), FreeBlockPool::kClasses);
}

TEST(FreeBlockPoolTest, AnswersAsOneSortedSet) {
  std::mt19937_64 rng(12);
  FreeBlockPool pool;
  std::set<Key> reference;
  int64_t next_address = 0;
  const std::vector<int> streams = {0, 3, -1};
  // Sizes as the allocator has them (multiples of 512), many equal, over
  // many powers of two.
  auto random_size = [&] {
    const int64_t common[] = {512, 1 << 20, 2 << 20, 20 << 20, 128 << 20, (128 << 20) + 512};
    if (rng() % 3 == 0) return common[rng() % 6];
    return static_cast<int64_t>(512 * (1 + rng() % (int64_t{1} << (rng() % 24))));
  };
  auto check_lower_bound = [&](int64_t size, int stream) {
    const auto want = reference.lower_bound({stream, size, std::numeric_limits<int64_t>::min()});
    const FreeBlockPool::Position got = pool.LowerBound(size, stream);
    if (want == reference.end() || std::get<0>(*want) != stream) {
      EXPECT_FALSE(got.valid()) << "size " << size << " stream " << stream;
    } else {
      ASSERT_TRUE(got.valid()) << "size " << size << " stream " << stream;
      EXPECT_EQ(KeyOf(pool.At(got)), *want);
    }
  };
  for (int step = 0; step < 20000; ++step) {
    const int stream = streams[rng() % streams.size()];
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 || reference.empty()) {  // insert
      const FreeBlockKey key{random_size(), next_address += 512, stream, step};
      pool.Insert(key);
      reference.insert(KeyOf(key));
    } else {
      // A block of the pool, picked at random from the reference.
      auto it = reference.begin();
      std::advance(it, static_cast<long>(rng() % reference.size()));
      const auto [s, size, address] = *it;  // copies: `it` is erased below
      const FreeBlockPool::Position p = pool.Find({size, address, s, -1});
      ASSERT_TRUE(p.valid());
      EXPECT_EQ(KeyOf(pool.At(p)), *it);
      EXPECT_FALSE(pool.Find({size + 512, address, s, -1}).valid());
      reference.erase(it);
      if (op == 1) {
        pool.Erase(p);
      } else {  // replace: by a smaller block (a split's tail) or a larger one (a merge)
        const int64_t new_size = op == 2 ? (size > 512 ? size - 512 : size) : size + (rng() % 2 ? 512 : random_size());
        const FreeBlockKey key{new_size, next_address += 512, s, step};
        pool.Replace(p, key);
        reference.insert(KeyOf(key));
      }
    }
    check_lower_bound(random_size(), stream);
  }
  // EraseIf visits every block once, in the set's order.
  std::vector<Key> visited;
  pool.EraseIf([&](const FreeBlockKey& k) {
    visited.push_back(KeyOf(k));
    return k.size % 1024 == 0;
  });
  EXPECT_EQ(visited, std::vector<Key>(reference.begin(), reference.end()));
  std::erase_if(reference, [](const Key& k) { return std::get<1>(k) % 1024 == 0; });
  for (const Key& k : reference) EXPECT_TRUE(pool.Find({std::get<1>(k), std::get<2>(k), std::get<0>(k), -1}).valid());
  for (int i = 0; i < 200; ++i) check_lower_bound(random_size(), streams[i % streams.size()]);
}

}  // namespace
}  // namespace llmplan
