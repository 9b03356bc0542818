#include "feedback/least_squares.h"

#include <gtest/gtest.h>

namespace llmplan {
namespace {

TEST(NonNegativeLeastSquaresTest, SolvesAPositiveSystemExactly) {
  Eigen::MatrixXd A(4, 3);
  A << 1, 2e9, 3, 4, 1e9, 1, 2, 7e9, 5, 1, 1e9, 9;  // columns of very different scales
  const Eigen::Vector3d truth(2.0, 3e-9, 0.5);
  const Eigen::VectorXd x = NonNegativeLeastSquares(A, A * truth);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(x(j), truth(j), 1e-9 * truth(j)) << j;
}

TEST(NonNegativeLeastSquaresTest, HoldsAVariableTheUnconstrainedFitDrivesNegativeAtZero) {
  Eigen::MatrixXd A(4, 2);
  A << 1, 1, 1, 2, 1, 3, 1, 4;
  const Eigen::VectorXd b = A * Eigen::Vector2d(5.0, -1.0);  // a falling line
  const Eigen::VectorXd unconstrained = A.colPivHouseholderQr().solve(b);
  ASSERT_LT(unconstrained(1), 0);
  const Eigen::VectorXd x = NonNegativeLeastSquares(A, b);
  EXPECT_EQ(x(1), 0.0);
  EXPECT_NEAR(x(0), b.mean(), 1e-12);  // the best constant
  // Optimality (Kuhn-Tucker): the bound variable's gradient points outside.
  const Eigen::VectorXd gradient = A.transpose() * (b - A * x);
  EXPECT_LE(gradient(1), 1e-9);
  EXPECT_NEAR(gradient(0), 0.0, 1e-9);
}

TEST(IdentifyColumnsTest, TellsZeroCollinearAndIdentifiedColumnsApart) {
  Eigen::MatrixXd A(4, 4);
  A << 1, 0, 2, 1,  //
      2, 0, 4, 0,   //
      3, 0, 6, 1,   //
      4, 0, 8.001, 0;
  const auto status = IdentifyColumns(A, 0.02);
  EXPECT_EQ(status[0].status, ColumnStatus::kIdentified);
  EXPECT_EQ(status[1].status, ColumnStatus::kAllZero);
  EXPECT_EQ(status[2].status, ColumnStatus::kCollinear);  // twice the first, within 0.01%
  EXPECT_LT(status[2].independent_fraction, 1e-3);
  EXPECT_EQ(status[3].status, ColumnStatus::kIdentified);
}

}  // namespace
}  // namespace llmplan
