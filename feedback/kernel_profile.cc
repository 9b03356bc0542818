// KernelProfile (see kernel_profile.h).
#include "feedback/kernel_profile.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/json_read.h"
#include "base/user_error.h"

namespace llmplan {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool HasAny(const std::string& lower_name, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (lower_name.find(p) != std::string::npos) return true;
  return false;
}

bool IsCopyCategory(const std::string& lower_category) {
  return lower_category == "gpu_memcpy" || lower_category == "gpu_memset" || lower_category == "memcpy" ||
         lower_category == "memset";
}

bool IsDeviceCategory(const std::string& lower_category) {
  return lower_category == "kernel" || IsCopyCategory(lower_category);
}

double Seconds(const nlohmann::json& v, const std::string& what) {
  // Kineto writes numbers; some versions write large timestamps as strings.
  if (v.is_number()) return v.get<double>() * 1e-6;
  if (v.is_string()) {
    try {
      return std::stod(v.get<std::string>()) * 1e-6;
    } catch (const std::exception&) {
    }
  }
  throw UserError(what + " is not a number of microseconds");
}

std::string Shorten(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

}  // namespace

const char* KernelClassName(KernelClass c) {
  switch (c) {
    case KernelClass::kGemm: return "gemm";
    case KernelClass::kAttention: return "attention";
    case KernelClass::kCollective: return "collective";
    case KernelClass::kCopy: return "copy";
    case KernelClass::kBlockKernel: return "norm_rope_swiglu";
    case KernelClass::kLossKernel: return "loss";
    case KernelClass::kOptimizer: return "optimizer";
    case KernelClass::kOther: return "other";
  }
  return "other";
}

KernelClass ClassifyKernel(const std::string& name, const std::string& category) {
  if (IsCopyCategory(Lower(category))) return KernelClass::kCopy;
  const std::string n = Lower(name);
  if (HasAny(n, {"nccl"})) return KernelClass::kCollective;
  // Before GEMMs: attention kernels are built from CUTLASS and wgmma pieces
  // ("fmha_cutlassF", cuDNN's "..._sdpa_sm90_flash_fprop_wgmma_...").
  if (HasAny(n, {"flash", "fmha", "sdpa", "attention", "attn"})) return KernelClass::kAttention;
  if (HasAny(n, {"gemm", "gemv", "nvjet", "cutlass", "xmma", "splitkreduce"})) return KernelClass::kGemm;
  if (HasAny(n, {"adam"})) return KernelClass::kOptimizer;
  if (HasAny(n, {"crossentropy", "cross_entropy", "softmax", "nll_loss"})) return KernelClass::kLossKernel;
  if (HasAny(n, {"rmsnorm", "rms_norm", "layer_norm", "layernorm", "ropekernel", "rotary", "swiglu"})) return KernelClass::kBlockKernel;
  return KernelClass::kOther;
}

KernelProfile SummarizeKernels(const std::vector<DeviceEvent>& events) {
  KernelProfile p;
  p.events = static_cast<int64_t>(events.size());
  if (events.empty()) return p;
  std::vector<std::pair<double, double>> spans;
  spans.reserve(events.size());
  std::set<int64_t> streams;
  std::map<std::string, KernelStat> by_name;
  for (const DeviceEvent& e : events) {
    const double end = e.start_s + std::max(0.0, e.duration_s);
    spans.emplace_back(e.start_s, end);
    streams.insert(e.stream);
    const KernelClass c = ClassifyKernel(e.name, e.category);
    KernelClassStat& cs = p.classes[static_cast<int>(c)];
    cs.count += 1;
    cs.total_s += std::max(0.0, e.duration_s);
    KernelStat& ks = by_name[e.name];
    ks.name = e.name;
    ks.kernel_class = c;
    ks.count += 1;
    ks.total_s += std::max(0.0, e.duration_s);
  }
  p.streams = static_cast<int64_t>(streams.size());
  // Busy: the union of the intervals, swept in start order; each hole in it
  // is an idle gap.
  std::vector<size_t> order(events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return spans[a] < spans[b]; });
  double first = spans[order.front()].first, last = spans[order.front()].second;
  double run_start = first, run_end = last;
  size_t run_last = order.front();  // the event whose end is run_end
  std::vector<IdleGap> gaps;
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t i = order[k];
    last = std::max(last, spans[i].second);
    if (spans[i].first > run_end) {
      p.busy_s += run_end - run_start;
      const double gap = spans[i].first - run_end;
      if (gap <= kKernelTurnaroundS) {
        p.turnaround_gaps += 1;
        p.turnaround_idle_s += gap;
      } else {
        p.wait_gaps += 1;
        p.wait_idle_s += gap;
        gaps.push_back(IdleGap{run_end, gap, events[run_last].name, events[i].name});
      }
      run_start = spans[i].first;
      run_end = spans[i].second;
      run_last = i;
    } else if (spans[i].second > run_end) {
      run_end = spans[i].second;
      run_last = i;
    }
  }
  p.busy_s += run_end - run_start;
  std::sort(gaps.begin(), gaps.end(),
            [](const IdleGap& a, const IdleGap& b) { return a.duration_s > b.duration_s; });
  if (gaps.size() > static_cast<size_t>(kMaxGapsKept)) gaps.resize(kMaxGapsKept);
  p.longest_gaps = std::move(gaps);
  p.start_s = first;
  p.span_s = last - first;
  for (auto& [name, stat] : by_name) p.kernels.push_back(std::move(stat));
  std::sort(p.kernels.begin(), p.kernels.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.total_s != b.total_s ? a.total_s > b.total_s : a.name < b.name;
  });
  return p;
}

std::vector<DeviceEvent> ReadDeviceEvents(const std::string& trace_path) {
  const std::string what = "kernel trace " + trace_path;
  const nlohmann::json j = ParseJson(ReadInputFile(trace_path, what, kMaxKernelTraceBytes), what);
  const nlohmann::json* list = nullptr;
  if (j.is_object() && j.contains("traceEvents") && j["traceEvents"].is_array()) list = &j["traceEvents"];
  if (j.is_array()) list = &j;  // the bare-array form of the Chrome trace format
  if (list == nullptr)
    throw UserError(what + ": not a Chrome trace (no traceEvents array): give the file `llmplan run --kernel-trace` "
                           "or torch.profiler's export_chrome_trace wrote");
  std::vector<DeviceEvent> events;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& e = (*list)[i];
    if (!e.is_object() || !e.contains("cat") || !e["cat"].is_string()) continue;
    const std::string category = e["cat"].get<std::string>();
    if (!IsDeviceCategory(Lower(category))) continue;
    if (e.value("ph", std::string("X")) != "X") continue;
    const std::string where = what + ": traceEvents[" + std::to_string(i) + "]";
    if (!e.contains("ts") || !e.contains("dur")) throw UserError(where + " has no ts or dur");
    DeviceEvent d;
    d.category = category;
    d.name = e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
    d.start_s = Seconds(e["ts"], where + ".ts");
    d.duration_s = Seconds(e["dur"], where + ".dur");
    if (!(d.duration_s >= 0) || d.duration_s > 3600) throw UserError(where + ".dur is out of range");
    // The stream: args.stream where Kineto writes it, else the track (tid).
    const nlohmann::json* stream = nullptr;
    if (e.contains("args") && e["args"].is_object() && e["args"].contains("stream")) stream = &e["args"]["stream"];
    else if (e.contains("tid")) stream = &e["tid"];
    if (stream != nullptr && stream->is_number_integer()) d.stream = stream->get<int64_t>();
    events.push_back(std::move(d));
  }
  return events;
}

void PrintKernelProfile(std::ostream& out, const KernelProfile& p, int top) {
  char buf[512];
  auto ms = [](double s) { return s * 1e3; };
  std::snprintf(buf, sizeof buf, "device: %lld events on %lld stream(s), span %.2f ms, busy %.2f ms, idle %.2f ms (%.1f%%)\n",
                static_cast<long long>(p.events), static_cast<long long>(p.streams), ms(p.span_s), ms(p.busy_s),
                ms(p.idle_s()), p.span_s > 0 ? 100 * p.idle_s() / p.span_s : 0.0);
  out << buf;
  if (p.turnaround_gaps + p.wait_gaps > 0) {
    std::snprintf(buf, sizeof buf, "  idle: %.2f ms in %lld gaps of <= %.0f us (kernel turnaround), %.2f ms in %lld longer\n",
                  ms(p.turnaround_idle_s), static_cast<long long>(p.turnaround_gaps), kKernelTurnaroundS * 1e6,
                  ms(p.wait_idle_s), static_cast<long long>(p.wait_gaps));
    out << buf;
    for (const IdleGap& g : p.longest_gaps) {
      std::snprintf(buf, sizeof buf, "    %8.1f us at +%.2f ms, after %s, before %s\n", g.duration_s * 1e6,
                    ms(g.start_s - p.start_s), Shorten(g.before, 50).c_str(),
                    Shorten(g.after, 50).c_str());
      out << buf;
    }
  }
  double total = 0;
  for (const KernelClassStat& c : p.classes) total += c.total_s;
  std::snprintf(buf, sizeof buf, "  %-18s %8s %11s %7s\n", "class", "kernels", "time", "share");
  out << buf;
  for (int i = 0; i < kKernelClasses; ++i) {
    const KernelClassStat& c = p.classes[i];
    if (c.count == 0) continue;
    std::snprintf(buf, sizeof buf, "  %-18s %8lld %8.2f ms %6.1f%%\n", KernelClassName(static_cast<KernelClass>(i)),
                  static_cast<long long>(c.count), ms(c.total_s), total > 0 ? 100 * c.total_s / total : 0.0);
    out << buf;
  }
  if (top <= 0 || p.kernels.empty()) return;
  out << "  most time (count, total, mean):\n";
  for (int i = 0; i < top && i < static_cast<int>(p.kernels.size()); ++i) {
    const KernelStat& k = p.kernels[i];
    std::snprintf(buf, sizeof buf, "  %6lld %9.2f ms %9.1f us  %-16s %s\n", static_cast<long long>(k.count),
                  ms(k.total_s), 1e6 * k.total_s / static_cast<double>(k.count), KernelClassName(k.kernel_class),
                  Shorten(k.name, 90).c_str());
    out << buf;
  }
}

nlohmann::json KernelProfileJson(const KernelProfile& p, int top) {
  nlohmann::json j = {{"events", p.events},   {"streams", p.streams}, {"span_s", p.span_s},
                      {"busy_s", p.busy_s},   {"idle_s", p.idle_s()}};
  nlohmann::json classes = nlohmann::json::object();
  for (int i = 0; i < kKernelClasses; ++i)
    classes[KernelClassName(static_cast<KernelClass>(i))] = {{"count", p.classes[i].count},
                                                             {"total_s", p.classes[i].total_s}};
  j["classes"] = classes;
  nlohmann::json longest = nlohmann::json::array();
  for (const IdleGap& g : p.longest_gaps)
    longest.push_back({{"start_s", g.start_s - p.start_s}, {"duration_s", g.duration_s}, {"before", g.before}, {"after", g.after}});
  j["idle"] = {{"turnaround_gaps", p.turnaround_gaps}, {"turnaround_s", p.turnaround_idle_s},
               {"wait_gaps", p.wait_gaps}, {"wait_s", p.wait_idle_s}, {"longest", longest}};
  nlohmann::json kernels = nlohmann::json::array();
  for (int i = 0; i < top && i < static_cast<int>(p.kernels.size()); ++i) {
    const KernelStat& k = p.kernels[i];
    kernels.push_back({{"name", k.name}, {"class", KernelClassName(k.kernel_class)}, {"count", k.count},
                       {"total_s", k.total_s}});
  }
  j["kernels"] = kernels;
  return j;
}

void WriteKernelProfile(int64_t step, const std::string& trace_path, bool progress) {
  // Read back from the file, not from Kineto's event objects (whose accessors
  // differ between LibTorch versions): one reader for llmplan's traces and a
  // PyTorch peer's, as `llmplan kernels` sums them up.
  const KernelProfile profile = SummarizeKernels(ReadDeviceEvents(trace_path));
  nlohmann::json j = KernelProfileJson(profile, /*top=*/40);
  j["step"] = step;
  j["trace"] = std::filesystem::path(trace_path).filename().string();
  const std::filesystem::path out = std::filesystem::path(trace_path).parent_path() / "kernel_profile.json";
  WriteFileAtomically(out.string(), j.dump(1) + "\n", "kernel profile");
  if (progress) {
    std::ostringstream text;
    PrintKernelProfile(text, profile, /*top=*/12);
    std::cerr << "kernel trace of step " << step << " (" << trace_path << "):\n" << text.str() << std::flush;
  }
}

}  // namespace llmplan
