// UserError: a failure caused by what the user asked for (a bad model name, a
// malformed profile, a request that fits nowhere). The CLI prints its message
// on one line and exits with status 2; the message says what to change.
#pragma once

#include <stdexcept>
#include <string>

namespace llmplan {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace llmplan
