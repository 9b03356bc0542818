#include "feedback/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "simulator/xml_escape.h"

namespace llmplan {

namespace {

constexpr double kWidth = 900;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// An axis from lo to hi in round steps (1, 2 or 5 times a power of ten).
struct Axis {
  double lo = 0, hi = 1, step = 0.2;
};

Axis NiceAxis(double lo, double hi) {
  if (!(hi > lo)) hi = lo + (lo == 0 ? 1 : std::fabs(lo) * 0.1);
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double f = raw / magnitude;
  Axis a;
  a.step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
  a.lo = std::floor(lo / a.step) * a.step;
  a.hi = std::ceil(hi / a.step) * a.step;
  return a;
}

std::string TickText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

std::string SvgOpen(double height) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + Num(kWidth) + " " + Num(height) + "\" width=\"" +
         Num(kWidth) + "\" height=\"" + Num(height) + "\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n";
}

std::string Text(double x, double y, const std::string& text, const std::string& extra = "") {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\"" + (extra.empty() ? "" : " " + extra) + ">" +
         XmlEscape(text) + "</text>\n";
}

// Colored swatches with names along the top.
std::string Legend(const std::vector<std::string>& names, const std::vector<std::string>& colors, double x) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += "<rect x=\"" + Num(x) + "\" y=\"6\" width=\"12\" height=\"12\" fill=\"" + XmlEscape(colors[i]) + "\"/>\n";
    out += Text(x + 16, 16, names[i]);
    x += 16 + 7.0 * static_cast<double>(names[i].size()) + 20;
  }
  return out;
}

}  // namespace

std::string HorizontalBarsSvg(const BarChart& chart) {
  const double label_w = 170, right_w = 190, bar_h = 11, bar_gap = 2, group_gap = 12, top = 30;
  const double plot_w = kWidth - label_w - right_w;
  const double n_series = static_cast<double>(chart.series.size());
  const double group_h = n_series * bar_h + (n_series - 1) * bar_gap;
  const double height = top + static_cast<double>(chart.groups.size()) * (group_h + group_gap) + 10;
  double max_value = 0;
  for (const auto& g : chart.groups)
    for (double v : g.values)
      if (std::isfinite(v)) max_value = std::max(max_value, v);
  if (max_value <= 0) max_value = 1;

  std::ostringstream svg;
  svg << SvgOpen(height) << Legend(chart.series, chart.colors, label_w);
  double y = top;
  for (const auto& g : chart.groups) {
    svg << Text(label_w - 8, y + group_h / 2 + 4, g.label, "text-anchor=\"end\"");
    for (size_t s = 0; s < g.values.size(); ++s) {
      const double v = std::isfinite(g.values[s]) ? std::max(0.0, g.values[s]) : 0;
      const double w = plot_w * v / max_value;
      const double by = y + static_cast<double>(s) * (bar_h + bar_gap);
      svg << "<rect x=\"" << Num(label_w) << "\" y=\"" << Num(by) << "\" width=\"" << Num(std::max(w, 0.5))
          << "\" height=\"" << Num(bar_h) << "\" fill=\"" << XmlEscape(chart.colors[s]) << "\"><title>"
          << XmlEscape(chart.series[s] + " " + g.label + ": " + chart.value_text(g.values[s])) << "</title></rect>\n";
      svg << Text(label_w + w + 4, by + bar_h - 2, chart.value_text(g.values[s]), "font-size=\"10\"");
    }
    if (!g.note.empty()) svg << Text(kWidth - 8, y + group_h / 2 + 4, g.note, "text-anchor=\"end\"");
    y += group_h + group_gap;
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string LineChartSvg(const LineChart& chart) {
  // Mark labels get a row each above the plot, so they never cover the data.
  const double left = 70, right = 20, bottom = 46, top = 30 + 16 * static_cast<double>(chart.marks.size());
  const double height = top + 244 + bottom;
  const double plot_w = kWidth - left - right, plot_h = height - top - bottom;
  double x_lo = INFINITY, x_hi = -INFINITY, y_lo = INFINITY, y_hi = -INFINITY;
  auto extend = [&](double x, double y) {
    if (!std::isfinite(x) || !std::isfinite(y)) return;
    x_lo = std::min(x_lo, x);
    x_hi = std::max(x_hi, x);
    y_lo = std::min(y_lo, y);
    y_hi = std::max(y_hi, y);
  };
  for (const auto& s : chart.series)
    for (const auto& [x, y] : s.points) extend(x, y);
  for (const auto& m : chart.marks) extend(m.x, m.y);
  if (!std::isfinite(x_lo)) x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  if (chart.y_from_zero) y_lo = std::min(0.0, y_lo);
  Axis xa = NiceAxis(x_lo, x_hi);
  const Axis ya = NiceAxis(y_lo, y_hi);
  // Whole-numbered x (steps, op indices) gets whole-numbered ticks.
  bool whole_x = true;
  for (const auto& s : chart.series)
    for (const auto& [x, y] : s.points) whole_x = whole_x && x == std::floor(x);
  if (whole_x && xa.step < 1) xa = {std::floor(xa.lo), std::ceil(xa.hi), 1};
  auto px = [&](double x) { return left + plot_w * (x - xa.lo) / (xa.hi - xa.lo); };
  auto py = [&](double y) { return top + plot_h - plot_h * (y - ya.lo) / (ya.hi - ya.lo); };

  std::ostringstream svg;
  svg << SvgOpen(height);
  std::vector<std::string> names, colors;
  for (const auto& s : chart.series) {
    names.push_back(s.name);
    colors.push_back(s.color);
  }
  svg << Legend(names, colors, left);
  // Grid and ticks.
  for (double t = ya.lo; t <= ya.hi + ya.step * 1e-6; t += ya.step) {
    svg << "<line x1=\"" << Num(left) << "\" y1=\"" << Num(py(t)) << "\" x2=\"" << Num(left + plot_w) << "\" y2=\""
        << Num(py(t)) << "\" stroke=\"#e4e4e4\"/>\n";
    svg << Text(left - 6, py(t) + 4, TickText(t), "text-anchor=\"end\"");
  }
  for (double t = xa.lo; t <= xa.hi + xa.step * 1e-6; t += xa.step)
    svg << Text(px(t), top + plot_h + 16, TickText(t), "text-anchor=\"middle\"");
  svg << "<rect x=\"" << Num(left) << "\" y=\"" << Num(top) << "\" width=\"" << Num(plot_w) << "\" height=\""
      << Num(plot_h) << "\" fill=\"none\" stroke=\"#888\"/>\n";
  svg << Text(left + plot_w / 2, height - 8, chart.x_label, "text-anchor=\"middle\"");
  svg << Text(14, top + plot_h / 2, chart.y_label,
              "text-anchor=\"middle\" transform=\"rotate(-90 14 " + Num(top + plot_h / 2) + ")\"");
  // Series.
  for (const auto& s : chart.series) {
    svg << "<polyline fill=\"none\" stroke=\"" << XmlEscape(s.color) << "\" stroke-width=\"1.6\" points=\"";
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) svg << Num(px(x)) << "," << Num(py(y)) << " ";
    svg << "\"><title>" << XmlEscape(s.name) << "</title></polyline>\n";
    if (!s.dots) continue;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y))
        svg << "<circle cx=\"" << Num(px(x)) << "\" cy=\"" << Num(py(y)) << "\" r=\"2.5\" fill=\"" << XmlEscape(s.color)
            << "\"/>\n";
  }
  // Marks: a ring at the point, a dashed line from its label row down across
  // the plot at its x, and the label on the side of the line with room.
  for (size_t i = 0; i < chart.marks.size(); ++i) {
    const ChartMark& m = chart.marks[i];
    if (!std::isfinite(m.x) || !std::isfinite(m.y)) continue;
    const double x = px(m.x), y = py(m.y), label_y = 30 + 12 + 16 * static_cast<double>(i);
    const std::string color = XmlEscape(m.color);
    svg << "<line x1=\"" << Num(x) << "\" y1=\"" << Num(label_y - 10) << "\" x2=\"" << Num(x) << "\" y2=\""
        << Num(top + plot_h) << "\" stroke=\"" << color << "\" stroke-dasharray=\"4 3\" stroke-width=\"1\"/>\n";
    svg << "<circle cx=\"" << Num(x) << "\" cy=\"" << Num(y) << "\" r=\"5\" fill=\"none\" stroke-width=\"2\" stroke=\""
        << color << "\"/>\n";
    const bool right_half = x > left + plot_w * 0.6;
    svg << Text(right_half ? x - 6 : x + 6, label_y, m.label,
                std::string(right_half ? "text-anchor=\"end\" " : "") + "fill=\"" + color + "\"");
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace llmplan
