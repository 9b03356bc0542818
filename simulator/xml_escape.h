// XmlEscape: text made safe to put inside SVG or HTML, as element content or
// as a quoted attribute value. Every string the pictures and reports take
// from plans, programs and run directories goes through it.
#pragma once

#include <string>

namespace llmplan {

// Replaces & < > " ' by their character references.
std::string XmlEscape(const std::string& text);

}  // namespace llmplan
