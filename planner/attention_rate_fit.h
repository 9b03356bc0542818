// FitAttentionRates: a profile's attention rates from timed attention calls
// (llmplan profile; measurements.attention.table of a profile it wrote).
//
// Each row is one causal attention call of one head width and one sequence
// length, timed forward and backward. The first width in the rows is the
// reference; every other width becomes a fraction of it
// (HardwareProfile::attention_widths). When every width was timed at two or
// more sequence lengths, each direction's rate is fitted as
//
//   1 / rate = a_w * (1 + half / seq)      (rate = r_inf * seq / (seq + half))
//
// by least squares on relative error: `half`, one per direction, is the
// mean over the widths of each width's own two-coefficient fit, then each
// width's a_w is refitted with it. The profile's rates are the curves at the
// reference width's longest sequence (attention_reference_seq). With a single
// length per width the rates are total FLOPs over total seconds per width and
// no half-rate sequence is set, as profiles carried before.
#pragma once

#include <vector>

#include "planner/hardware_profile.h"

namespace llmplan {

struct AttentionRateRow {
  int head_dim = 0;
  double seq = 0;
  double forward_flops = 0, forward_s = 0;    // causal-halved FLOPs, seconds
  double backward_flops = 0, backward_s = 0;  // 2.5x forward's FLOPs
};

// Writes attention_forward/backward_flops_per_s, attention_reference_head_dim
// (0 when one width was timed), attention_widths, attention_reference_seq and
// the half-rate sequences into `p`.
// REQUIRES: rows non-empty, every row's FLOPs and seconds positive.
void FitAttentionRates(const std::vector<AttentionRateRow>& rows, HardwareProfile& p);

}  // namespace llmplan
