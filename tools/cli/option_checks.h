// Checks of numeric command-line options that CLI11's own do not make:
// CLI::Range lets "nan" through (a NaN compares false with both bounds), and
// a learning rate or a price that is NaN would be carried silently into the
// run. Each check names what the option must be, in one line.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

namespace llmplan::cli {

// Passes a finite number for which `ok` holds; otherwise the option's error is
// "must be WHAT (got TEXT)".
inline CLI::Validator NumberWhere(std::function<bool(double)> ok, const std::string& what) {
  return CLI::Validator(
      [ok = std::move(ok), what](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || !ok(value))
          return "must be " + what + " (got " + text + ")";
        return "";
      },
      what);
}

// A learning rate: in (0, 1).
inline CLI::Validator LearningRate() {
  return NumberWhere([](double v) { return v > 0 && v < 1; }, "a learning rate in (0, 1)");
}

}  // namespace llmplan::cli
