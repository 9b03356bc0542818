// Numbers as people read them in llmplan's output: bytes in binary units and
// durations in the unit that keeps them short.
#pragma once

#include <cstdint>
#include <string>

namespace llmplan {

std::string FormatBytes(double bytes);      // "12.3 GiB"
std::string FormatSeconds(double seconds);  // "812.0 ms", "3.20 s", "4.1 days"
std::string FormatCount(int64_t n);         // "1,234,567"
std::string SignalName(int signal);         // "SIGTERM"; "signal 40" for one without a name here

}  // namespace llmplan
