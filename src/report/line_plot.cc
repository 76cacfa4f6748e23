#include "report/line_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "report/svg_text.h"

namespace mc::report {
namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

// About n "nice" tick values (1, 2, 5 x 10^k steps) covering [lo, hi]; whole numbers only
// where the values are counts (steps, runs).
std::vector<double> ticks(double lo, double hi, int n, bool whole = false) {
  double span = hi - lo;
  if (!(span > 0)) return {lo};
  double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag * (raw / mag < 1.5 ? 1 : raw / mag < 3.5 ? 2 : raw / mag < 7.5 ? 5 : 10);
  if (whole) step = std::max(step, 1.0);
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
  return t;
}

}  // namespace

// As many digits as the tick step needs: ticks 1e-9 apart around 1.4e-4 read 1.36340e-04,
// 1.36341e-04, ..., not five times 1.4e-04.
std::string tick_label(double v, double step) {
  double a = std::abs(v);
  int digits = 1;  // significant digits that tell ticks `step` apart
  if (a != 0 && step > 0)
    digits = std::clamp(static_cast<int>(std::floor(std::log10(a) + 1e-9) - std::floor(std::log10(step) + 1e-9)) + 1, 1, 12);
  if (a != 0 && (a >= 1e5 || a < 1e-3)) return fmt::format("{:.{}e}", v, std::max(1, digits - 1));
  return fmt::format("{:.{}g}", v, std::max(4, digits));
}

std::string render_svg(const std::vector<Panel>& panels, int columns, int pw, int ph) {
  int rows = (static_cast<int>(panels.size()) + columns - 1) / std::max(1, columns);
  int W = pw * std::min<int>(columns, static_cast<int>(panels.size())), H = ph * rows;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H, W, H);
  const double L = 62, R = 14, T = 28, B = 40;
  for (size_t p = 0; p < panels.size(); ++p) {
    const Panel& pn = panels[p];
    double ox = (p % columns) * pw, oy = (p / columns) * ph;
    double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
    bool whole_x = true;  // every x drawn a whole number (steps, runs): no ticks between them
    auto ty = [&](double v) { return pn.log_y ? std::log10(std::max(v, 1e-30)) : v; };
    for (const auto& se : pn.series)
      for (size_t i = 0; i < se.x.size(); ++i) {
        if (!std::isfinite(se.y[i]) || (pn.log_y && se.y[i] <= 0)) continue;
        whole_x = whole_x && (!std::isfinite(se.x[i]) || se.x[i] == std::round(se.x[i]));
        x0 = std::min(x0, se.x[i]);
        x1 = std::max(x1, se.x[i]);
        y0 = std::min(y0, ty(se.y[i]));
        y1 = std::max(y1, ty(se.y[i]));
      }
    s += fmt::format("<g transform=\"translate({},{})\">\n<text x=\"{}\" y=\"18\" text-anchor=\"middle\" font-size=\"13\" "
                     "font-weight=\"bold\">{}</text>\n",
                     ox, oy, pw / 2, xml_escape(pn.title));
    double iw = pw - L - R, ih = ph - T - B;
    s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", L, T, iw, ih);
    if (!std::isfinite(x0)) {
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no data</text>\n</g>\n", L + iw / 2, T + ih / 2);
      continue;
    }
    if (x1 == x0) x1 = x0 + 1;
    if (y1 == y0) {
      y0 -= 0.5;
      y1 += 0.5;
    }
    double pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
    auto X = [&](double v) { return L + (v - x0) / (x1 - x0) * iw; };
    auto Y = [&](double v) { return T + ih - (v - y0) / (y1 - y0) * ih; };
    const std::vector<double> xt = ticks(x0, x1, 6, whole_x), yt = ticks(y0, y1, 5);
    const double xs = xt.size() > 1 ? xt[1] - xt[0] : 0, ys = yt.size() > 1 ? yt[1] - yt[0] : 0;
    for (double t : xt)
      s += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#ddd\"/><text x=\"{0:.1f}\" y=\"{3}\" "
                       "text-anchor=\"middle\">{4}</text>\n",
                       X(t), T, T + ih, T + ih + 14, tick_label(t, xs));
    for (double t : yt)
      s += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/><text x=\"{3}\" y=\"{4:.1f}\" "
                       "text-anchor=\"end\">{5}</text>\n",
                       L, L + iw, Y(t), L - 4, Y(t) + 4, pn.log_y ? tick_label(std::pow(10.0, t), std::pow(10.0, t) * (1 - std::pow(10.0, -ys))) : tick_label(t, ys));
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", L + iw / 2, ph - 6, xml_escape(pn.x_label));
    for (size_t k = 0; k < pn.series.size(); ++k) {
      const auto& se = pn.series[k];
      std::string pts;
      for (size_t i = 0; i < se.x.size(); ++i)
        if (std::isfinite(se.y[i]) && !(pn.log_y && se.y[i] <= 0)) pts += fmt::format("{:.1f},{:.1f} ", X(se.x[i]), Y(ty(se.y[i])));
      const size_t ci = se.color >= 0 ? static_cast<size_t>(se.color) : k;
      const char* c = kColors[ci % (sizeof kColors / sizeof *kColors)];
      s += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\" points=\"{}\"/>\n", c, pts);
      if (pn.series.size() > 1 || !se.label.empty())
        s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"3\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                         L + 8, T + 10 + 14 * k, c, L + 22, T + 14 + 14 * k, xml_escape(se.label));
    }
    s += "</g>\n";
  }
  return s + "</svg>\n";
}

}  // namespace mc::report
