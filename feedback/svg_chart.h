// SvgChart: the charts of llmplan's HTML reports as inline SVG — horizontal
// bars in groups (predicted beside measured) and lines over a numeric x axis
// with marked points. Self-contained (no script, no web font); every label is
// escaped, so names from plans and run directories are safe to draw.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace llmplan {

struct BarChart {
  // One bar per series in each group, in this order and color.
  std::vector<std::string> series;
  std::vector<std::string> colors;  // CSS colors, one per series
  struct Group {
    std::string label;
    std::vector<double> values;  // one per series, >= 0
    std::string note;            // drawn after the group's bars (e.g. the error)
  };
  std::vector<Group> groups;
  std::function<std::string(double)> value_text;  // a bar's value as text
};

// REQUIRES: every group has one value per series; colors.size() == series.size().
std::string HorizontalBarsSvg(const BarChart& chart);

struct LineSeries {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y), x increasing
  bool dots = false;                              // a dot at each point
};

// A point worth naming (a peak), drawn as a ring with its label.
struct ChartMark {
  double x = 0, y = 0;
  std::string label;
  std::string color;
};

struct LineChart {
  std::string x_label, y_label;
  std::vector<LineSeries> series;
  std::vector<ChartMark> marks;
  bool y_from_zero = true;  // else the y axis spans the data only
};

std::string LineChartSvg(const LineChart& chart);

}  // namespace llmplan
