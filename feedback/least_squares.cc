#include "feedback/least_squares.h"

#include <algorithm>
#include <limits>

namespace llmplan {

namespace {

// 1/length of each column (0 for an all-zero column, which then stays at 0).
Eigen::VectorXd InverseColumnNorms(const Eigen::MatrixXd& A) {
  Eigen::VectorXd inv(A.cols());
  for (Eigen::Index j = 0; j < A.cols(); ++j) {
    const double norm = A.col(j).norm();
    inv(j) = norm > 0 ? 1.0 / norm : 0.0;
  }
  return inv;
}

// Unconstrained least squares on the columns in `free_set`; zero elsewhere.
Eigen::VectorXd SolveOnFreeSet(const Eigen::MatrixXd& A, const Eigen::VectorXd& b, const std::vector<bool>& free_set) {
  std::vector<Eigen::Index> cols;
  for (Eigen::Index j = 0; j < A.cols(); ++j)
    if (free_set[j]) cols.push_back(j);
  Eigen::VectorXd x = Eigen::VectorXd::Zero(A.cols());
  if (cols.empty()) return x;
  Eigen::MatrixXd sub(A.rows(), static_cast<Eigen::Index>(cols.size()));
  for (size_t k = 0; k < cols.size(); ++k) sub.col(static_cast<Eigen::Index>(k)) = A.col(cols[k]);
  const Eigen::VectorXd z = sub.colPivHouseholderQr().solve(b);
  for (size_t k = 0; k < cols.size(); ++k) x(cols[k]) = z(static_cast<Eigen::Index>(k));
  return x;
}

}  // namespace

Eigen::VectorXd NonNegativeLeastSquares(const Eigen::MatrixXd& A_in, const Eigen::VectorXd& b) {
  const Eigen::Index n = A_in.cols();
  const Eigen::VectorXd scale = InverseColumnNorms(A_in);
  const Eigen::MatrixXd A = A_in * scale.asDiagonal();
  const double tolerance = 10 * std::numeric_limits<double>::epsilon() * std::max<Eigen::Index>(n, A.rows()) *
                           std::max(1.0, A.lpNorm<Eigen::Infinity>()) * std::max(1.0, b.lpNorm<Eigen::Infinity>());

  Eigen::VectorXd x = Eigen::VectorXd::Zero(n);
  std::vector<bool> free_set(n, false);
  // Each outer pass frees one variable; the inner loop only ever binds
  // variables again, so 3n passes is far more than the method needs.
  for (Eigen::Index pass = 0; pass < 3 * n + 1; ++pass) {
    const Eigen::VectorXd gradient = A.transpose() * (b - A * x);
    Eigen::Index best = -1;
    for (Eigen::Index j = 0; j < n; ++j)
      if (!free_set[j] && scale(j) > 0 && gradient(j) > tolerance && (best < 0 || gradient(j) > gradient(best)))
        best = j;
    if (best < 0) break;  // Kuhn-Tucker conditions hold: optimal
    free_set[best] = true;
    while (true) {
      const Eigen::VectorXd z = SolveOnFreeSet(A, b, free_set);
      bool feasible = true;
      for (Eigen::Index j = 0; j < n; ++j)
        if (free_set[j] && z(j) <= 0) feasible = false;
      if (feasible) {
        x = z;
        break;
      }
      // Step from x towards z only as far as the first free variable reaching 0.
      double step = 1.0;
      for (Eigen::Index j = 0; j < n; ++j)
        if (free_set[j] && z(j) <= 0) step = std::min(step, x(j) / (x(j) - z(j)));
      x += step * (z - x);
      for (Eigen::Index j = 0; j < n; ++j) {
        if (free_set[j] && x(j) <= tolerance) {
          free_set[j] = false;
          x(j) = 0;
        }
      }
    }
  }
  return scale.asDiagonal() * x;
}

std::vector<ColumnIdentification> IdentifyColumns(const Eigen::MatrixXd& A_in, double min_independent_fraction) {
  const Eigen::MatrixXd A = A_in * InverseColumnNorms(A_in).asDiagonal();
  std::vector<ColumnIdentification> status(A.cols());
  std::vector<Eigen::VectorXd> basis;  // orthonormal, spanning the identified columns
  for (Eigen::Index j = 0; j < A.cols(); ++j) {
    if (A_in.col(j).norm() == 0) continue;
    Eigen::VectorXd rest = A.col(j);
    // Gram-Schmidt twice: one pass loses orthogonality when the column is
    // nearly in the span, which is exactly the case being measured.
    for (int repeat = 0; repeat < 2; ++repeat)
      for (const auto& q : basis) rest -= q.dot(rest) * q;
    status[j].independent_fraction = rest.norm();
    if (rest.norm() < min_independent_fraction) {
      status[j].status = ColumnStatus::kCollinear;
      continue;
    }
    status[j].status = ColumnStatus::kIdentified;
    basis.push_back(rest / rest.norm());
  }
  return status;
}

}  // namespace llmplan
