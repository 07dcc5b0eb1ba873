//! Plots, drawn once with plotters onto an SVG string or a PNG file. Text goes through ab_glyph
//! with DejaVu Sans compiled in (fonts/LICENSE), so a machine without fonts draws the same.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum PlotError {
    #[error("drawing failed: {0}")]
    Draw(String),
    #[error("nothing to plot: {0}")]
    Empty(&'static str),
}

pub(crate) fn draw_err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

pub(crate) const FONT: &str = "sans-serif";

pub(crate) fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is valid: a test draws with it.
        let _ = plotters::style::register_font(
            FONT,
            FontStyle::Normal,
            include_bytes!("../fonts/DejaVuSans.ttf"),
        );
    });
}

/// One line of a plot.
#[derive(Clone, Debug)]
pub struct Curve {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

const SIZE: (u32, u32) = (900, 520);

/// Axis titles and the dashed reference line of a [0, 1] line plot.
#[derive(Clone, Debug)]
pub struct LinePlot<'a> {
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// A horizontal dashed line: its legend label and height (chance, usually).
    pub reference: Option<(&'a str, f64)>,
}

fn draw_lines<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    curves: &[Curve],
    plot: &LinePlot,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    register_font();
    let max_x = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1.0);
    root.fill(&WHITE).map_err(draw_err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(plot.title, (FONT, 20))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..max_x, 0.0..1.0)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(plot.x_desc)
        .y_desc(plot.y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style((FONT, 14))
        .draw()
        .map_err(draw_err)?;
    for (i, c) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                c.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label(c.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    if let Some((label, level)) = plot.reference {
        let grey = RGBColor(90, 90, 90);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(0.0, level), (max_x, level)],
                6,
                4,
                grey.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label(format!("{label} ({level:.3})"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2))
            });
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight, 14)?;
    root.present().map_err(draw_err)
}

/// The legend box of every chart: white, framed, in a corner.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<
        'a,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    position: SeriesLabelPosition,
    font_size: u32,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FONT, font_size))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)
}

/// Lines with values in [0, 1] against iteration, as SVG text.
pub fn lines_svg(curves: &[Curve], plot: &LinePlot) -> Result<String, PlotError> {
    if curves.iter().all(|c| c.points.is_empty()) {
        return Err(PlotError::Empty("no iterations"));
    }
    let mut out = String::new();
    draw_lines(
        SVGBackend::with_string(&mut out, SIZE).into_drawing_area(),
        curves,
        plot,
    )?;
    Ok(out)
}

/// The same plot as a PNG file, drawn beside it and renamed into place: a crash never leaves half
/// a picture.
pub fn lines_png(curves: &[Curve], plot: &LinePlot, path: &Path) -> Result<(), PlotError> {
    if curves.iter().all(|c| c.points.is_empty()) {
        return Err(PlotError::Empty("no iterations"));
    }
    // The encoder picks the format from the extension, so the temporary name ends in .png too.
    let tmp = path.with_extension("tmp.png");
    draw_lines(
        BitMapBackend::new(&tmp, SIZE).into_drawing_area(),
        curves,
        plot,
    )?;
    std::fs::rename(&tmp, path).map_err(draw_err)
}

fn accuracy_plot(chance: f64, title: &str) -> LinePlot<'_> {
    LinePlot {
        title,
        x_desc: "AF iteration",
        y_desc: "held-out accuracy",
        reference: Some(("chance", chance)),
    }
}

/// Held-out accuracy per head against iteration, with chance as a dashed line, as SVG text.
pub fn accuracy_svg(curves: &[Curve], chance: f64, title: &str) -> Result<String, PlotError> {
    lines_svg(curves, &accuracy_plot(chance, title))
}

/// The same plot as a PNG file.
pub fn accuracy_png(
    curves: &[Curve],
    chance: f64,
    title: &str,
    path: &Path,
) -> Result<(), PlotError> {
    lines_png(curves, &accuracy_plot(chance, title), path)
}

/// Overlaid histograms (shares, so that series of different sizes compare), as SVG text.
pub fn histogram_svg(
    series: &[(&str, &[f64])],
    bins: usize,
    x_desc: &str,
    title: &str,
) -> Result<String, PlotError> {
    register_font();
    let all = series
        .iter()
        .flat_map(|s| s.1.iter().copied())
        .filter(|v| v.is_finite());
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    if !lo.is_finite() {
        return Err(PlotError::Empty("no values"));
    }
    let hi = if hi > lo { hi } else { lo + 1.0 };
    let width = (hi - lo) / bins as f64;
    let shares: Vec<Vec<f64>> = series
        .iter()
        .map(|(_, v)| {
            let mut h = vec![0.0; bins];
            let n = v.iter().filter(|x| x.is_finite()).count().max(1) as f64;
            for x in v.iter().filter(|x| x.is_finite()) {
                h[(((x - lo) / width) as usize).min(bins - 1)] += 1.0 / n;
            }
            h
        })
        .collect();
    let top = shares.iter().flatten().fold(0.0f64, |a, &b| a.max(b)) * 1.1;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (640, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(lo..hi, 0.0..top.max(1e-9))
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("share")
            .label_style((FONT, 13))
            .draw()
            .map_err(draw_err)?;
        for (i, ((name, _), h)) in series.iter().zip(&shares).enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(h.iter().enumerate().map(|(b, &y)| {
                    let x0 = lo + b as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width, y)], color.mix(0.45).filled())
                }))
                .map_err(draw_err)?
                .label(name.to_string())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.mix(0.45).filled())
                });
        }
        draw_legend(&mut chart, SeriesLabelPosition::MiddleRight, 13)?;
        root.present().map_err(draw_err)?;
    }
    Ok(out)
}

/// Bars of a count per iteration (e.g. swaps), as SVG text.
pub fn bars_svg(values: &[(f64, f64)], y_desc: &str, title: &str) -> Result<String, PlotError> {
    register_font();
    if values.is_empty() {
        return Err(PlotError::Empty("no values"));
    }
    let max_x = values.iter().map(|v| v.0).fold(0.0, f64::max) + 1.0;
    let top = values.iter().map(|v| v.1).fold(0.0, f64::max).max(1.0) * 1.1;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (640, 320)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, (FONT, 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..max_x, 0.0..top)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .x_desc("AF iteration")
            .y_desc(y_desc)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .label_style((FONT, 13))
            .draw()
            .map_err(draw_err)?;
        chart
            .draw_series(
                values
                    .iter()
                    .map(|&(x, y)| Rectangle::new([(x, 0.0), (x + 0.8, y)], COLORS[0].filled())),
            )
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(out)
}

/// One row of a detector chart: an accuracy, its interval, and the chance it is measured against;
/// `compare` draws a second, hollow marker (the same detector on another dataset).
#[derive(Clone, Debug)]
pub struct DetectorBar {
    pub name: String,
    pub accuracy: f64,
    pub ci: (f64, f64),
    pub chance: f64,
    pub compare: Option<(f64, (f64, f64))>,
}

/// Each detector's accuracy as a bar with its 95% interval, chance as a red tick per row; with
/// comparisons, the first dataset as bars and the second as diamonds with their intervals, named
/// in the caption (a legend box would cover the longest bars).
pub fn detectors_svg(
    rows: &[DetectorBar],
    title: &str,
    legend: Option<(&str, &str)>,
) -> Result<String, PlotError> {
    register_font();
    if rows.is_empty() {
        return Err(PlotError::Empty("no detectors"));
    }
    let n = rows.len() as f64;
    let top = rows
        .iter()
        .flat_map(|r| [r.ci.1, r.compare.map_or(0.0, |c| c.1 .1), r.chance])
        .fold(0.0, f64::max);
    let x_max = (top * 1.1).clamp(0.05, 1.0);
    let height = 90 + 26 * rows.len() as u32;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(
                legend.map_or(title.to_string(), |(a, b)| {
                    format!("{title}: bars {a}, diamonds {b}")
                }),
                (FONT, 18),
            )
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(230)
            .build_cartesian_2d(0.0..x_max, -0.5..n - 0.5)
            .map_err(draw_err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(rows.len())
            .y_label_formatter(&|y| {
                let i = y.round();
                if (y - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
                    names[names.len() - 1 - i as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc("accuracy on the evaluation split (95% interval); red tick: chance")
            .label_style((FONT, 13))
            .draw()
            .map_err(draw_err)?;
        // Row 0 at the top.
        let y = |i: usize| n - 1.0 - i as f64;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let off = if r.compare.is_some() { 0.15 } else { 0.0 };
                Rectangle::new(
                    [
                        (0.0, y(i) - 0.3 + off),
                        (r.accuracy, y(i) + 0.0 + off + 0.3 - 2.0 * off),
                    ],
                    COLORS[0].mix(0.7).filled(),
                )
            }))
            .map_err(draw_err)?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let off = if r.compare.is_some() { 0.15 } else { 0.0 };
                PathElement::new(
                    vec![(r.ci.0, y(i) + off), (r.ci.1, y(i) + off)],
                    BLACK.stroke_width(2),
                )
            }))
            .map_err(draw_err)?;
        chart
            .draw_series(rows.iter().enumerate().filter_map(|(i, r)| {
                r.compare.map(|(acc, _)| {
                    EmptyElement::at((acc, y(i) - 0.2))
                        + Polygon::new(vec![(0, -6), (6, 0), (0, 6), (-6, 0)], COLORS[1].filled())
                })
            }))
            .map_err(draw_err)?;
        chart
            .draw_series(rows.iter().enumerate().filter_map(|(i, r)| {
                r.compare.map(|(_, (lo, hi))| {
                    PathElement::new(
                        vec![(lo, y(i) - 0.2), (hi, y(i) - 0.2)],
                        COLORS[1].stroke_width(2),
                    )
                })
            }))
            .map_err(draw_err)?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                PathElement::new(
                    vec![(r.chance, y(i) - 0.45), (r.chance, y(i) + 0.45)],
                    COLORS[3].stroke_width(2),
                )
            }))
            .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(out)
}

/// One instance of a data map (Dataset Cartography): the spread and mean of its gold-option
/// probability across epochs, and the share of epochs it was right.
#[derive(Clone, Copy, Debug)]
pub struct MapPoint {
    pub variability: f64,
    pub confidence: f64,
    pub correctness: f64,
}

fn draw_datamap<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    points: &[MapPoint],
    title: &str,
) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    register_font();
    root.fill(&WHITE).map_err(draw_err)?;
    // The largest spread of values in [0, 1] is 0.5.
    let max_x = points
        .iter()
        .map(|p| p.variability)
        .fold(0.0, f64::max)
        .clamp(0.05, 0.5)
        * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..max_x, 0.0..1.0)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("variability")
        .y_desc("confidence")
        .label_style((FONT, 14))
        .draw()
        .map_err(draw_err)?;
    // Correctness in six bands, red (never right) to green (always right), as the paper's map.
    let bands = 6;
    for band in 0..bands {
        let (low, high) = (band as f64 / bands as f64, (band + 1) as f64 / bands as f64);
        let inside: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| {
                p.correctness >= low
                    && (p.correctness < high || (band == bands - 1 && p.correctness <= 1.0))
            })
            .map(|p| (p.variability, p.confidence))
            .collect();
        if inside.is_empty() {
            continue;
        }
        let t = band as f64 / (bands - 1) as f64;
        let color = RGBColor(
            (215.0 * (1.0 - t) + 30.0 * t) as u8,
            (48.0 * (1.0 - t) + 150.0 * t) as u8,
            (39.0 * (1.0 - t) + 60.0 * t) as u8,
        );
        chart
            .draw_series(
                inside
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.mix(0.6).filled())),
            )
            .map_err(draw_err)?
            .label(format!("correctness {low:.2}-{high:.2} ({})", inside.len()))
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, color.filled()));
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight, 13)?;
    root.present().map_err(draw_err)
}

/// A data map (variability across, confidence up, coloured by correctness), as SVG text.
pub fn datamap_svg(points: &[MapPoint], title: &str) -> Result<String, PlotError> {
    if points.is_empty() {
        return Err(PlotError::Empty("no instances"));
    }
    let mut out = String::new();
    draw_datamap(
        SVGBackend::with_string(&mut out, SIZE).into_drawing_area(),
        points,
        title,
    )?;
    Ok(out)
}

/// The same map as a PNG file, drawn beside it and renamed into place.
pub fn datamap_png(points: &[MapPoint], title: &str, path: &Path) -> Result<(), PlotError> {
    if points.is_empty() {
        return Err(PlotError::Empty("no instances"));
    }
    let tmp = path.with_extension("tmp.png");
    draw_datamap(
        BitMapBackend::new(&tmp, SIZE).into_drawing_area(),
        points,
        title,
    )?;
    std::fs::rename(&tmp, path).map_err(draw_err)
}

#[cfg(test)]
mod tests {
    #[test]
    fn detector_chart_names_every_detector() {
        let rows = vec![
            DetectorBar {
                name: "random".into(),
                accuracy: 0.26,
                ci: (0.2, 0.3),
                chance: 0.25,
                compare: Some((0.24, (0.2, 0.28))),
            },
            DetectorBar {
                name: "ngram/ending".into(),
                accuracy: 0.6,
                ci: (0.55, 0.65),
                chance: 0.25,
                compare: Some((0.3, (0.25, 0.35))),
            },
        ];
        let svg = detectors_svg(&rows, "audit", Some(("random", "af"))).unwrap();
        for text in ["random", "ngram/ending", "audit", "chance", "af"] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert!(detectors_svg(&[], "x", None).is_err());
    }

    use super::*;

    fn curves() -> Vec<Curve> {
        vec![
            Curve {
                name: "joint".into(),
                points: (0..20).map(|i| (i as f64, 0.6 - 0.02 * i as f64)).collect(),
            },
            Curve {
                name: "mlp".into(),
                points: (0..20)
                    .map(|i| (i as f64, 0.5 - 0.015 * i as f64))
                    .collect(),
            },
        ]
    }

    #[test]
    fn accuracy_plot_draws_every_head_and_chance_as_svg_and_png() {
        let svg = accuracy_svg(&curves(), 0.1, "test run").unwrap();
        assert!(svg.starts_with("<svg"));
        for text in [
            "joint",
            "mlp",
            "chance (0.100)",
            "AF iteration",
            "held-out accuracy",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("a.png");
        accuracy_png(&curves(), 0.1, "test run", &png).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(
            bytes.len() > 10_000,
            "a real picture, not an empty frame: {} bytes",
            bytes.len()
        );
        assert!(matches!(
            accuracy_svg(&[], 0.1, "x"),
            Err(PlotError::Empty(_))
        ));
    }

    #[test]
    fn a_data_map_draws_every_correctness_band() {
        let points: Vec<MapPoint> = (0..60)
            .map(|i| MapPoint {
                variability: (i % 10) as f64 / 25.0,
                confidence: i as f64 / 60.0,
                correctness: (i % 6) as f64 / 5.0,
            })
            .collect();
        let svg = datamap_svg(&points, "map").unwrap();
        for text in [
            "variability",
            "confidence",
            "correctness 0.00-0.17 (10)",
            "correctness 0.83-1.00 (10)",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        let dir = tempfile::tempdir().unwrap();
        datamap_png(&points, "map", &dir.path().join("m.png")).unwrap();
        assert!(datamap_svg(&[], "x").is_err());
    }

    #[test]
    fn histograms_and_bars_render() {
        let a: Vec<f64> = (0..100).map(|i| i as f64 / 10.0).collect();
        let b: Vec<f64> = (0..50).map(|i| 3.0 + i as f64 / 20.0).collect();
        let svg = histogram_svg(&[("gold", &a), ("distractors", &b)], 20, "log ppl", "h").unwrap();
        assert!(svg.contains("gold") && svg.contains("distractors"));
        assert!(bars_svg(&[(0.0, 3.0), (1.0, 5.0)], "swaps", "s")
            .unwrap()
            .contains("swaps"));
    }
}
