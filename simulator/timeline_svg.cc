#include "simulator/timeline_svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>

#include "base/format.h"
#include "simulator/xml_escape.h"

namespace llmplan {

namespace {

const char* KindColor(OpKind k) {
  switch (k) {
    case OpKind::kForward: return "#4e79a7";
    case OpKind::kBackward: return "#f28e2b";
    case OpKind::kRecompute: return "#e15759";
    case OpKind::kAllGather: return "#59a14f";
    case OpKind::kReduceScatter: return "#b07aa1";
    case OpKind::kAllReduce:
    case OpKind::kAllReduceGradNorm:
    case OpKind::kAllReduceLoss: return "#9c755f";
    case OpKind::kAccumulateShard:
    case OpKind::kLocalReduce: return "#d37295";
    case OpKind::kGradNorm:
    case OpKind::kClipGradients:
    case OpKind::kOptimizerStep: return "#edc948";
    case OpKind::kCpuOptimizerStep: return "#bab0ac";
    case OpKind::kCopyParamsToDevice:
    case OpKind::kCopyParamsForGather:
    case OpKind::kCopyMasterToDevice: return "#76b7b2";
    case OpKind::kCopyGradsToHost:
    case OpKind::kCopyMasterToHost: return "#ff9da7";
    case OpKind::kRelease: return "#000000";
  }
  return "#999";
}

}  // namespace

std::string TimelineSvg(const StepProgram& program, const SimulationResult& sim, double persistent_bytes,
                        const std::string& title) {
  const double width = 1200, left = 120, right = 20, lane = 26, top = 40, mem_height = 120;
  const double plot_w = width - left - right;
  const double total = std::max(sim.step_seconds, 1e-12);
  // Only lanes that have work.
  std::vector<int> lanes;
  for (int s = 0; s < kNumStreams; ++s)
    if (sim.busy_seconds[s] > 0) lanes.push_back(s);
  const double lanes_h = lane * static_cast<double>(lanes.size());
  const double height = top + lanes_h + 30 + mem_height + 50;
  auto x = [&](double t) { return left + plot_w * t / total; };

  std::ostringstream svg;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                width, height);
  svg << buf;
  svg << "<text x=\"10\" y=\"22\" font-size=\"15\">" << XmlEscape(title) << "</text>\n";
  for (size_t li = 0; li < lanes.size(); ++li) {
    double y = top + lane * static_cast<double>(li);
    std::snprintf(buf, sizeof buf, "<text x=\"8\" y=\"%.1f\">%s</text>\n", y + lane * 0.65,
                  StreamName(static_cast<StreamKind>(lanes[li])).c_str());
    svg << buf;
    std::snprintf(buf, sizeof buf, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4f4f4\"/>\n",
                  left, y + 2, plot_w, lane - 4);
    svg << buf;
  }
  for (const auto& op : program.ops) {
    if (op.kind == OpKind::kRelease) continue;
    auto it = std::find(lanes.begin(), lanes.end(), static_cast<int>(op.stream));
    if (it == lanes.end()) continue;
    double y = top + lane * static_cast<double>(it - lanes.begin());
    const OpTiming& t = sim.ops[op.id];
    double w = std::max(0.5, x(t.end) - x(t.start));
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                  "stroke-width=\"0.3\"><title>%s: %s</title></rect>\n",
                  x(t.start), y + 3, w, lane - 6, KindColor(op.kind), XmlEscape(op.name).c_str(),
                  FormatSeconds(t.end - t.start).c_str());
    svg << buf;
  }
  // Memory curve (step function of allocated bytes).
  double mem_top = top + lanes_h + 30;
  double peak = persistent_bytes + sim.peak_transient_bytes;
  auto y_mem = [&](double bytes) { return mem_top + mem_height - mem_height * bytes / std::max(peak, 1.0); };
  std::snprintf(buf, sizeof buf, "<text x=\"8\" y=\"%.1f\">memory</text>\n<text x=\"8\" y=\"%.1f\">peak %s</text>\n",
                mem_top + 14, mem_top + 30, FormatBytes(peak).c_str());
  svg << buf;
  svg << "<polyline fill=\"none\" stroke=\"#333\" stroke-width=\"1.2\" points=\"";
  double last = persistent_bytes;
  std::snprintf(buf, sizeof buf, "%.1f,%.1f ", x(0), y_mem(last));
  svg << buf;
  for (const auto& s : sim.timeline) {
    double b = persistent_bytes + s.bytes;
    std::snprintf(buf, sizeof buf, "%.1f,%.1f %.1f,%.1f ", x(s.time), y_mem(last), x(s.time), y_mem(b));
    svg << buf;
    last = b;
  }
  std::snprintf(buf, sizeof buf, "%.1f,%.1f\"/>\n", x(total), y_mem(last));
  svg << buf;
  std::snprintf(buf, sizeof buf,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ccc\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\">0</text><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                left, mem_top + mem_height, width - right, mem_top + mem_height, left, mem_top + mem_height + 16,
                width - right, mem_top + mem_height + 16, FormatSeconds(total).c_str());
  svg << buf;
  // Legend.
  double lx = left, ly = height - 14;
  // The copies share a colour per direction, so the legend names directions.
  const std::pair<OpKind, std::string> legend[] = {
      {OpKind::kForward, OpKindName(OpKind::kForward)},
      {OpKind::kBackward, OpKindName(OpKind::kBackward)},
      {OpKind::kRecompute, OpKindName(OpKind::kRecompute)},
      {OpKind::kAllGather, OpKindName(OpKind::kAllGather)},
      {OpKind::kReduceScatter, OpKindName(OpKind::kReduceScatter)},
      {OpKind::kAllReduce, OpKindName(OpKind::kAllReduce)},
      {OpKind::kOptimizerStep, OpKindName(OpKind::kOptimizerStep)},
      {OpKind::kCopyParamsToDevice, "copy_to_device"},
      {OpKind::kCopyGradsToHost, "copy_to_host"},
      {OpKind::kCpuOptimizerStep, OpKindName(OpKind::kCpuOptimizerStep)}};
  for (const auto& [k, label] : legend) {
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                  lx, ly - 9, KindColor(k), lx + 13, ly, label.c_str());
    svg << buf;
    lx += 13 + 7.0 * static_cast<double>(label.size()) + 14;
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace llmplan
