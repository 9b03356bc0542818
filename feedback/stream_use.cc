#include "feedback/stream_use.h"

#include <algorithm>

namespace llmplan {

namespace {

bool IsCommunication(StreamKind s) {
  return s == StreamKind::kGather || s == StreamKind::kReduce || s == StreamKind::kHostToDevice ||
         s == StreamKind::kDeviceToHost;
}

}  // namespace

StreamUse MeasureStreamUse(const StepProgram& program, const std::vector<OpTiming>& spans) {
  // A sweep over span edges, counting what runs: +1 at a start, -1 at an
  // end. Measured spans on one stream may touch or (with clock jitter)
  // overlap, so counts, not flags.
  struct Edge {
    double t;
    int compute, communication;
  };
  std::vector<Edge> edges;
  StreamUse use;
  for (const StepOp& op : program.ops) {
    const OpTiming& s = spans.at(op.id);
    if (s.end <= s.start) continue;
    const int compute = op.stream == StreamKind::kCompute ? 1 : 0;
    const int communication = IsCommunication(op.stream) ? 1 : 0;
    if (compute + communication == 0) continue;
    edges.push_back({s.start, compute, communication});
    edges.push_back({s.end, -compute, -communication});
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.t < b.t; });
  int compute = 0, communication = 0;
  for (size_t i = 0; i < edges.size(); ++i) {
    compute += edges[i].compute;
    communication += edges[i].communication;
    if (i + 1 == edges.size()) break;
    const double dt = edges[i + 1].t - edges[i].t;
    if (compute > 0) use.compute_busy += dt;
    if (communication > 0 && compute == 0) use.exposed_communication += dt;
  }
  return use;
}

}  // namespace llmplan
