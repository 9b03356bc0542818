#include "base/format.h"

#include <cmath>
#include <cstdio>

namespace llmplan {

std::string FormatBytes(double bytes) {
  char buf[64];
  double a = std::fabs(bytes);
  if (a >= 1024.0 * 1024 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f TiB", bytes / (1024.0 * 1024 * 1024 * 1024));
  else if (a >= 1024.0 * 1024 * 1024) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
  else if (a >= 1024.0 * 1024) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
  else if (a >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

std::string FormatSeconds(double s) {
  char buf[64];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else if (s < 120) std::snprintf(buf, sizeof buf, "%.2f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else if (s < 172800) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else std::snprintf(buf, sizeof buf, "%.1f days", s / 86400);
  return buf;
}

}  // namespace llmplan
