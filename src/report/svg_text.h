// Text placed in an SVG document (labels, titles, tooltips), escaped for XML.
#pragma once

#include <string>

namespace mc::report {

inline std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

}  // namespace mc::report
