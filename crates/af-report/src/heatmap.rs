//! A heatmap of signed values (a detector's edge over chance) with some cells marked, drawn cell
//! by cell in pixels: long row names on the left, short column names on top, the value written in
//! each cell, so the picture reads without a colour scale.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::plot::{draw_err, register_font, PlotError, FONT};

/// Rows by columns of values (None: not measured), with marked cells outlined.
#[derive(Clone, Debug)]
pub struct Heatmap<'a> {
    pub title: &'a str,
    /// A line under the title: what the colours and the outlines mean.
    pub legend: &'a str,
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    pub values: Vec<Vec<Option<f64>>>,
    pub marked: Vec<Vec<bool>>,
}

const LEFT: i32 = 250;
const TOP: i32 = 84;
const CELL: (i32, i32) = (118, 24);

fn size(map: &Heatmap) -> (u32, u32) {
    (
        (LEFT + CELL.0 * map.columns.len() as i32 + 16) as u32,
        (TOP + CELL.1 * map.rows.len() as i32 + 16) as u32,
    )
}

/// White at 0, red for positive values, blue for negative, full colour at `scale`.
fn colour(value: f64, scale: f64) -> RGBColor {
    let t = (value / scale).clamp(-1.0, 1.0);
    let (r, g, b) = if t >= 0.0 {
        (214.0, 39.0, 40.0)
    } else {
        (31.0, 119.0, 180.0)
    };
    let mix = |c: f64| (255.0 + (c - 255.0) * t.abs()).round() as u8;
    RGBColor(mix(r), mix(g), mix(b))
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, map: &Heatmap) -> Result<(), PlotError>
where
    DB::ErrorType: 'static,
{
    register_font();
    root.fill(&WHITE).map_err(draw_err)?;
    let scale = map
        .values
        .iter()
        .flatten()
        .flatten()
        .fold(0.05f64, |m, v| m.max(v.abs()));
    let centred =
        |size: u32| TextStyle::from((FONT, size)).pos(Pos::new(HPos::Center, VPos::Center));
    root.draw(&Text::new(map.title.to_string(), (12, 8), (FONT, 18)))
        .map_err(draw_err)?;
    root.draw(&Text::new(map.legend.to_string(), (12, 32), (FONT, 12)))
        .map_err(draw_err)?;
    for (c, name) in map.columns.iter().enumerate() {
        let x = LEFT + CELL.0 * c as i32 + CELL.0 / 2;
        root.draw(&Text::new(name.clone(), (x, TOP - 12), centred(12)))
            .map_err(draw_err)?;
    }
    for (r, name) in map.rows.iter().enumerate() {
        let y = TOP + CELL.1 * r as i32;
        root.draw(&Text::new(
            name.clone(),
            (LEFT - 8, y + CELL.1 / 2),
            TextStyle::from((FONT, 12)).pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(draw_err)?;
        for c in 0..map.columns.len() {
            let x = LEFT + CELL.0 * c as i32;
            let value = map.values[r][c];
            let fill = value.map_or(RGBColor(235, 235, 235), |v| colour(v, scale));
            root.draw(&Rectangle::new(
                [(x, y), (x + CELL.0, y + CELL.1)],
                fill.filled(),
            ))
            .map_err(draw_err)?;
            root.draw(&Rectangle::new(
                [(x, y), (x + CELL.0, y + CELL.1)],
                RGBColor(200, 200, 200).stroke_width(1),
            ))
            .map_err(draw_err)?;
            if map.marked[r][c] {
                root.draw(&Rectangle::new(
                    [(x + 2, y + 2), (x + CELL.0 - 2, y + CELL.1 - 2)],
                    BLACK.stroke_width(2),
                ))
                .map_err(draw_err)?;
            }
            let text = value.map_or("-".to_string(), |v| format!("{v:+.3}"));
            root.draw(&Text::new(
                text,
                (x + CELL.0 / 2, y + CELL.1 / 2),
                centred(12),
            ))
            .map_err(draw_err)?;
        }
    }
    root.present().map_err(draw_err)
}

fn check(map: &Heatmap) -> Result<(), PlotError> {
    if map.rows.is_empty() || map.columns.is_empty() {
        return Err(PlotError::Empty("no rows or no columns"));
    }
    let shape = |lens: Vec<usize>| {
        lens.len() == map.rows.len() && lens.iter().all(|&l| l == map.columns.len())
    };
    if !shape(map.values.iter().map(Vec::len).collect())
        || !shape(map.marked.iter().map(Vec::len).collect())
    {
        return Err(PlotError::Draw(
            "values and marks must have one entry per row and column".into(),
        ));
    }
    Ok(())
}

/// The heatmap as SVG text.
pub fn heatmap_svg(map: &Heatmap) -> Result<String, PlotError> {
    check(map)?;
    let mut out = String::new();
    draw(
        SVGBackend::with_string(&mut out, size(map)).into_drawing_area(),
        map,
    )?;
    Ok(out)
}

/// The heatmap as a PNG file, drawn beside it and renamed into place.
pub fn heatmap_png(map: &Heatmap, path: &Path) -> Result<(), PlotError> {
    check(map)?;
    let tmp = path.with_extension("tmp.png");
    draw(BitMapBackend::new(&tmp, size(map)).into_drawing_area(), map)?;
    std::fs::rename(&tmp, path).map_err(draw_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cell_is_written_and_marks_are_outlined() {
        let map = Heatmap {
            title: "cross-matrix",
            legend: "edge over chance",
            rows: vec!["bow alone".into(), "length".into()],
            columns: vec!["random".into(), "without-bow".into()],
            values: vec![vec![Some(0.25), Some(-0.01)], vec![Some(0.1), None]],
            marked: vec![vec![false, true], vec![false, false]],
        };
        let svg = heatmap_svg(&map).unwrap();
        for text in [
            "cross-matrix",
            "bow alone",
            "without-bow",
            "+0.250",
            "-0.010",
            "+0.100",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert_eq!(colour(0.0, 1.0), RGBColor(255, 255, 255));
        assert_eq!(colour(2.0, 1.0), RGBColor(214, 39, 40));
        let dir = tempfile::tempdir().unwrap();
        heatmap_png(&map, &dir.path().join("h.png")).unwrap();
        assert_eq!(
            &std::fs::read(dir.path().join("h.png")).unwrap()[1..4],
            b"PNG"
        );
        let bad = Heatmap {
            values: vec![vec![None]],
            ..map
        };
        assert!(heatmap_svg(&bad).is_err());
    }
}
