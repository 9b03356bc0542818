// HostMemoryWatch on resident-memory curves with a known answer: a plateau
// and noise are not leaks; a steady climb is, found once, at its rate.
#include "executor/run/host_memory_watch.h"

#include <cmath>
#include <string>

#include <gtest/gtest.h>

namespace llmplan::executor {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(HostMemoryWatchTest, APlateauAndNoiseAreNotALeak) {
  HostMemoryWatch watch;
  for (int64_t step = 1; step <= 3000; ++step) {
    // Climbs 300 MiB a step over the warm-up (allocator and loader caches
    // filling), then stays, 20 MiB up and down.
    const int64_t rss = 2048 * kMiB + std::min<int64_t>(step, HostMemoryWatch::kWarmUpSteps) * 300 * kMiB +
                        (step % 3 == 0 ? 20 * kMiB : 0);
    EXPECT_EQ(watch.Step(step, 0.5, rss), "") << "step " << step;
  }
  EXPECT_FALSE(watch.growth().has_value());
}

TEST(HostMemoryWatchTest, ASteadyClimbIsALeakFoundOnceAtItsRate) {
  HostMemoryWatch watch;
  int warnings = 0;
  std::string warning;
  for (int64_t step = 1; step <= 400; ++step) {
    const std::string w = watch.Step(step, 0.25, 4096 * kMiB + step * 8 * kMiB + (step % 2) * 3 * kMiB);
    if (!w.empty()) {
      ++warnings;
      warning = w;
    }
  }
  EXPECT_EQ(warnings, 1);
  ASSERT_TRUE(watch.growth().has_value());
  const HostMemoryGrowth& g = *watch.growth();
  EXPECT_NEAR(g.bytes_per_step, 8.0 * kMiB, 0.05 * kMiB);
  EXPECT_NEAR(g.bytes_per_hour, 8.0 * kMiB * 3600 / 0.25, 0.01 * 8.0 * kMiB * 3600 / 0.25);
  EXPECT_EQ(g.from_step, HostMemoryWatch::kWarmUpSteps + 1);
  EXPECT_LE(g.to_step, 50);  // found within a few dozen steps, not at the end
  EXPECT_NE(warning.find("host memory keeps growing"), std::string::npos) << warning;
  EXPECT_NE(warning.find("+8.0 MiB a step"), std::string::npos) << warning;
}

TEST(HostMemoryWatchTest, AVeryLongRunKeepsFewSamplesAndStillFindsALateLeak) {
  HostMemoryWatch watch;
  // 200,000 flat steps, then a leak of 1 MiB a step that has run for as long.
  for (int64_t step = 1; step <= 400'000; ++step) {
    const int64_t rss = 8192 * kMiB + (step > 200'000 ? (step - 200'000) * kMiB : 0);
    watch.Step(step, 1.0, rss);
  }
  ASSERT_TRUE(watch.growth().has_value());
  EXPECT_GT(watch.growth()->to_step, 200'000);
}

TEST(HostMemoryWatchTest, ThisProcessHasResidentMemory) { EXPECT_GT(ProcessAnonRssBytes(), 1 * kMiB); }

}  // namespace
}  // namespace llmplan::executor
