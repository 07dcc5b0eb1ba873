//! af-report owns what people look at: the plots of a run (accuracy per head against iteration,
//! like SWAG's Figure 2; swap counts; histograms) as SVG and PNG, and the HTML report, one file
//! with everything inlined so it opens anywhere without a network. It knows nothing of how the
//! numbers were made: the CLI reads the run directory and hands them over.

mod heatmap;
mod html;
mod plot;

pub use heatmap::{heatmap_png, heatmap_svg, Heatmap};
pub use html::{escape, table, Page, Question, Section};
pub use plot::{
    accuracy_png, accuracy_svg, bars_svg, detectors_svg, histogram_svg, lines_png, lines_svg,
    Curve, DetectorBar, LinePlot, PlotError,
};
pub use plot::{datamap_png, datamap_svg, MapPoint};
