#include "simulator/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace llmplan {

namespace {

bool IsCollective(StreamKind s) { return s == StreamKind::kGather || s == StreamKind::kReduce; }
bool IsCommunication(StreamKind s) {
  return IsCollective(s) || s == StreamKind::kHostToDevice || s == StreamKind::kDeviceToHost;
}

struct StreamState {
  std::vector<int> queue;  // op ids in program order
  size_t next = 0;
  int running = -1;
  double remaining = 0;  // seconds of work left at full speed
};

}  // namespace

SimulationResult Simulate(const StepProgram& program, const CostModel& cost, const SimulationOptions& options) {
  const auto& ops = program.ops;
  const size_t n = ops.size();
  SimulationResult r;
  r.ops.assign(n, {});
  std::array<StreamState, kNumStreams> streams;
  const bool cpu_device = cost.profile().device_kind == "cpu";

  // What the event loop below asks of an op, read from the program in one
  // pass: the loop checks the head of each stream again and again, and
  // reaching each op's own heap-allocated deps there was a cache miss per
  // op, most of a simulation. Op i's deps are dep_ids[dep_begin[i]..dep_begin[i + 1]).
  std::vector<char> done(n, 0);
  std::vector<double> duration(n), issue_seconds(n);
  std::vector<int> queued(n, 0);  // kernels each op puts in the device's queue (see the host below)
  std::vector<char> blocks_host(n), priced_as_compute(n), cpu_adam(n);
  std::vector<int> dep_begin(n + 1, 0), dep_ids;
  dep_ids.reserve(3 * n);
  for (size_t i = 0; i < n; ++i) {
    const StepOp& op = ops[i];
    streams[static_cast<int>(op.stream)].queue.push_back(op.id);
    duration[i] = cost.Seconds(op);
    issue_seconds[i] = cost.IssueSeconds(op);
    if (op.stream != StreamKind::kCpu && op.kind != OpKind::kRelease) queued[i] = std::max(1, op.work.launches);
    blocks_host[i] = HostBlocks(op, cpu_device);
    priced_as_compute[i] = CostModel::PricedAsCompute(op);
    cpu_adam[i] = op.kind == OpKind::kCpuOptimizerStep;
    dep_ids.insert(dep_ids.end(), op.deps.begin(), op.deps.end());
    dep_begin[i + 1] = static_cast<int>(dep_ids.size());
  }

  const double slowdown = cost.profile().compute_slowdown_during_collectives;
  const double collective_slowdown = cost.profile().collective_slowdown_during_compute;
  const bool shared_link = cost.profile().copies_share_link;
  const double cpu_adam_slowdown = cost.profile().cpu_adam_slowdown_during_copies;
  const double copy_slowdown = cost.profile().copy_slowdown_during_cpu_adam;
  std::array<double, kNumMemoryCategories> current{};
  double in_use = 0;
  double now = 0;
  size_t finished = 0;

  // The host (rule 1 and 4 of step_program.h): it issues ops in list order,
  // IssueSeconds each, and stops after an op that HostBlocks until that op
  // ends. It also stops when the device's launch queue is full: at most
  // launch_queue_depth kernels issued and not yet finished (CUDA blocks the
  // launching thread then), which is what keeps a real host only a few tens
  // of milliseconds ahead of the GPU.
  constexpr double kInfinity = std::numeric_limits<double>::infinity();
  std::vector<double> issued_at(n, kInfinity);
  const int queue_depth = cost.profile().launch_queue_depth;
  int in_queue = 0;
  size_t next_issue = 0;
  double host_time = 0;
  int host_blocked_by = -1;
  auto queue_full = [&] {
    return !cpu_device && next_issue < n && in_queue > 0 && in_queue + queued[next_issue] > queue_depth;
  };
  auto host_can_issue = [&] { return next_issue < n && host_blocked_by < 0 && !queue_full(); };
  auto issue = [&] {
    while (host_can_issue() && host_time <= now) {
      const int id = static_cast<int>(next_issue++);
      issued_at[id] = host_time;
      r.ops[id].issued = host_time;
      host_time += issue_seconds[id];
      in_queue += queued[id];
      if (blocks_host[id]) host_blocked_by = id;
    }
  };

  const bool track_memory = options.track_memory || options.record_timeline;
  auto apply = [&](const std::vector<MemoryDelta>& deltas) {
    if (!track_memory || deltas.empty()) return;
    for (const auto& d : deltas) {
      current[static_cast<int>(d.category)] += d.bytes;
      in_use += d.bytes;
    }
    if (in_use > r.peak_transient_bytes) {
      r.peak_transient_bytes = in_use;
      r.peak_time = now;
      r.at_peak = current;
    }
    if (options.record_timeline) r.timeline.push_back({now, in_use});
  };
  auto ready = [&](int id) {
    if (issued_at[id] > now) return false;
    for (int k = dep_begin[id]; k < dep_begin[id + 1]; ++k)
      if (!done[dep_ids[k]]) return false;
    return true;
  };
  auto finish = [&](StreamState& s) {
    int id = s.running;
    r.ops[id].end = now;
    apply(ops[id].free_at_end);
    done[id] = 1;
    ++finished;
    s.running = -1;
    const bool host_waited = id == host_blocked_by || queue_full();
    in_queue -= queued[id];
    if (id == host_blocked_by) host_blocked_by = -1;
    if (host_waited) host_time = std::max(host_time, now);  // it resumes issuing now
  };

  // Exposed communication: integrate time where some communication runs and
  // compute is idle.
  double exposed = 0;
  while (finished < n) {
    // Start everything that can start now; zero-length ops finish at once and
    // may unblock others (or the host), so repeat while one did. Only a
    // finish changes what can be issued or started: a pass without one would
    // be followed by a pass that does nothing.
    bool progressed = true;
    while (progressed) {
      const size_t finished_before = finished;
      issue();
      for (auto& s : streams) {
        if (s.running >= 0 || s.next >= s.queue.size()) continue;
        int id = s.queue[s.next];
        if (!ready(id)) continue;
        ++s.next;
        s.running = id;
        s.remaining = duration[id];
        r.ops[id].start = now;
        apply(ops[id].alloc_at_start);
        if (s.remaining <= 0) finish(s);
      }
      progressed = finished != finished_before;
    }
    if (finished == n) break;

    bool collective_running = false, compute_running = false, comm_running = false;
    bool h2d = streams[static_cast<int>(StreamKind::kHostToDevice)].running >= 0;
    bool d2h = streams[static_cast<int>(StreamKind::kDeviceToHost)].running >= 0;
    const int cpu_op = streams[static_cast<int>(StreamKind::kCpu)].running;
    const bool cpu_adam_running = cpu_op >= 0 && cpu_adam[cpu_op];
    for (int k = 0; k < kNumStreams; ++k) {
      if (streams[k].running < 0) continue;
      auto kind = static_cast<StreamKind>(k);
      collective_running |= IsCollective(kind);
      comm_running |= IsCommunication(kind);
      compute_running |= kind == StreamKind::kCompute;
    }
    std::array<double, kNumStreams> rate{};
    double dt = kInfinity;
    if (host_can_issue()) dt = host_time - now;  // the host's next issue
    for (int k = 0; k < kNumStreams; ++k) {
      if (streams[k].running < 0) continue;
      auto kind = static_cast<StreamKind>(k);
      double v = 1.0;
      if (kind == StreamKind::kCompute && collective_running) v = 1.0 / (1.0 + slowdown);
      // A one-GPU "gather" is a cast, priced as compute: it does not slow.
      if (IsCollective(kind) && compute_running && !priced_as_compute[streams[k].running])
        v = 1.0 / (1.0 + collective_slowdown);
      if (shared_link && h2d && d2h && (kind == StreamKind::kHostToDevice || kind == StreamKind::kDeviceToHost))
        v = 0.5;
      // Host memory bandwidth is shared both ways: the copies' DMA slows the
      // update, and the update slows the copies (profile: measured pairwise).
      if (cpu_adam_running && (kind == StreamKind::kHostToDevice || kind == StreamKind::kDeviceToHost))
        v /= 1.0 + copy_slowdown;
      if (kind == StreamKind::kCpu && (h2d || d2h) && cpu_adam[streams[k].running]) v = 1.0 / (1.0 + cpu_adam_slowdown);
      rate[k] = v;
      dt = std::min(dt, streams[k].remaining / v);
    }
    if (!std::isfinite(dt)) throw std::logic_error("simulator: step program deadlocked (an op waits on one never run)");
    dt = std::max(dt, 0.0);
    now += dt;
    if (comm_running && !compute_running) exposed += dt;
    for (int k = 0; k < kNumStreams; ++k) {
      auto& s = streams[k];
      if (s.running < 0) continue;
      r.busy_seconds[k] += dt;
      s.remaining -= dt * rate[k];
      if (s.remaining <= 1e-15) finish(s);
    }
  }
  r.step_seconds = now;
  r.exposed_communication_seconds = exposed;
  return r;
}

}  // namespace llmplan
