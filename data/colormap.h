// Colour maps for heatmaps, with matplotlib's exact colours.
//
// matplotlib draws a float t in [0, 1] from a 256-entry table: index = min(int(t·256), 255).
//   jet      LinearSegmentedColormap: the table samples its piecewise-linear segments at
//            x = index / 255 (red 0→0 at .35→1 at .66→1 at .89→.5; green 0 at .125→1 at .375
//            →1 at .64→0 at .91; blue .5→1 at .11→1 at .34→0 at .65)
//   viridis, inferno  ListedColormaps: their 256 published colours (van der Walt, Smith and
//            Firing, CC0; the values of matplotlib's _cm_listed.py)
// Reference points: jet(0) = (0, 0, .5), jet(.5) = (.4902, 1, .4775), jet(1) = (.5, 0, 0);
// viridis(0) = (.267004, .004874, .329415), viridis(.5) = (.127568, .566949, .550556),
// viridis(1) = (.993248, .906157, .143936); inferno(0) = (.001462, .000466, .013866),
// inferno(.5) = (.735683, .215906, .330245), inferno(1) = (.988362, .998364, .644924).
#pragma once
#include <array>
#include <string>

namespace sima {

enum class Colormap { Jet, Viridis, Inferno };

// "jet" | "viridis" | "inferno"; anything else is a sima::Error listing them.
Colormap parse_colormap(const std::string& name);
const char* colormap_name(Colormap c);

// RGB in [0, 1] for t (clamped to [0, 1]; NaN reads as 0), as matplotlib's cmap(t)[:3].
std::array<float, 3> colormap_rgb(Colormap c, float t);

}  // namespace sima
