// Least squares for calibration: a non-negative solver (a profile's times per
// FLOP, per byte and per kernel cannot be negative) and a test of which
// unknowns the data can tell apart at all.
//
// Both scale every column to unit length first: calibration's columns are
// FLOPs (1e12), bytes (1e9) and kernel counts (1e1) side by side, and without
// the scaling the small ones drown in rounding.
#pragma once

#include <vector>

#include <Eigen/Dense>

namespace llmplan {

// x >= 0 minimising |A x - b|, by Lawson and Hanson's active-set method
// (Solving Least Squares Problems, 1974, ch. 23): move the variable whose
// gradient most wants to grow into the free set, solve the free set by
// unconstrained least squares, and step back to the boundary whenever that
// solution turns a free variable negative.
// REQUIRES: A.rows() == b.size().
Eigen::VectorXd NonNegativeLeastSquares(const Eigen::MatrixXd& A, const Eigen::VectorXd& b);

enum class ColumnStatus {
  kIdentified,  // enough of the column lies outside the span of the earlier identified ones
  kAllZero,     // nothing in the data exercises it
  kCollinear,   // it moves (nearly) in proportion to earlier identified columns
};

struct ColumnIdentification {
  ColumnStatus status = ColumnStatus::kAllZero;
  // The length of the column's part outside the span of the identified
  // columns before it, as a fraction of its own length.
  double independent_fraction = 0;
};

// Which columns of A the data determine, decided in column order (an earlier
// column wins over a later one it is collinear with): column j is identified
// when its independent fraction is at least `min_independent_fraction`. A
// column 1% independent of the others turns 1% of measurement noise into an
// error of order 100% in its coefficient.
std::vector<ColumnIdentification> IdentifyColumns(const Eigen::MatrixXd& A, double min_independent_fraction);

}  // namespace llmplan
