//! Draws one figure with plotters on any backend: a title, one chart per
//! panel (our medians with 95 % interval bars, the paper's values as hollow
//! diamonds, bounds and bands dashed or shaded, failed points as gaps marked
//! ✕ on the x axis), and the caption underneath.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::def::{LegendPos, Panel, RefKind, Reference};
use super::extract::{PanelData, Series, XKey};
use super::font::{self, FAMILY};

pub const PANEL_W: u32 = 640;
pub const PANEL_H: u32 = 440;
const MARGIN: u32 = 16;
const TITLE_SIZE: f64 = 20.0;
const TITLE_LINE: u32 = 26;
const CAPTION_SIZE: f64 = 13.0;
const CAPTION_LINE: u32 = 18;

/// Everything a figure shows, already computed from the samples.
pub struct View<'a> {
    pub title: String,
    pub panels: Vec<(&'a Panel, &'a PanelData)>,
    pub caption: Vec<String>,
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];
const PAPER_GREY: RGBColor = RGBColor(70, 70, 70);
const GAP_RED: RGBColor = RGBColor(200, 0, 0);

fn columns(n: usize) -> u32 {
    n.clamp(1, 2) as u32
}

/// Greedy word wrap to a pixel width with the embedded font.
pub fn wrap(text: &str, size: f64, width: u32) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        let trial = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if font::measure(&trial, size).0 > width && !cur.is_empty() {
            lines.push(std::mem::take(&mut cur));
            cur = word.to_string();
        } else {
            cur = trial;
        }
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

fn caption_lines(view: &View<'_>, width: u32) -> Vec<String> {
    view.caption
        .iter()
        .flat_map(|c| wrap(c, CAPTION_SIZE, width - 2 * MARGIN))
        .collect()
}

fn title_lines(view: &View<'_>, width: u32) -> Vec<String> {
    wrap(&view.title, TITLE_SIZE, width - 2 * MARGIN)
}

fn title_height(view: &View<'_>, width: u32) -> u32 {
    14 + title_lines(view, width).len() as u32 * TITLE_LINE + 4
}

/// Pixel size of the figure.
pub fn size(view: &View<'_>) -> (u32, u32) {
    let cols = columns(view.panels.len());
    let rows = (view.panels.len() as u32).div_ceil(cols).max(1);
    let w = cols * PANEL_W + 2 * MARGIN;
    let caption = caption_lines(view, w).len() as u32 * CAPTION_LINE + 2 * MARGIN;
    (w, title_height(view, w) + rows * PANEL_H + caption)
}

/// What plotters says when drawing on backend `DB` fails.
pub type DrawError<DB> = DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>;

pub fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    view: &View<'_>,
) -> Result<(), DrawError<DB>> {
    let (w, _) = size(view);
    root.fill(&WHITE)?;
    for (i, line) in title_lines(view, w).into_iter().enumerate() {
        root.draw(&Text::new(
            line,
            (MARGIN as i32, 14 + (i as u32 * TITLE_LINE) as i32),
            (FAMILY, TITLE_SIZE).into_font().color(&BLACK),
        ))?;
    }
    let cols = columns(view.panels.len());
    let rows = (view.panels.len() as u32).div_ceil(cols).max(1);
    let (_, rest) = root.split_vertically(title_height(view, w));
    let (plots, cap) = rest.split_vertically(rows * PANEL_H);
    let cells = plots
        .margin(0, 0, MARGIN, MARGIN)
        .split_evenly((rows as usize, cols as usize));
    // Panels on the same x column share one x range (the union), so an
    // empty panel's "no data" sits on the axis the data would have had.
    let xr: Vec<Option<(f64, f64)>> = view.panels.iter().map(|(p, d)| ranges(p, d).x).collect();
    for (i, ((panel, data), area)) in view.panels.iter().zip(cells.iter()).enumerate() {
        let shared = view
            .panels
            .iter()
            .zip(&xr)
            .filter(|((p, d), _)| {
                p.x.column == panel.x.column
                    && p.x.log == panel.x.log
                    && d.categories.is_none()
                    && data.categories.is_none()
            })
            .filter_map(|(_, r)| *r)
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
        let borrowed = shared.or(xr[i]);
        draw_panel(area, panel, data, borrowed)?;
    }
    for (i, line) in caption_lines(view, w).iter().enumerate() {
        cap.draw(&Text::new(
            line.clone(),
            (
                MARGIN as i32,
                MARGIN as i32 / 2 + (i as u32 * CAPTION_LINE) as i32,
            ),
            (FAMILY, CAPTION_SIZE)
                .into_font()
                .color(&RGBColor(40, 40, 40)),
        ))?;
    }
    Ok(())
}

/// Colour of each series key, stable: data series first, then series only
/// the paper has.
fn colour_keys(panel: &Panel, data: &PanelData) -> Vec<String> {
    let mut keys: Vec<String> = data.series.iter().map(|s| s.key.clone()).collect();
    for k in panel
        .series
        .expected
        .iter()
        .chain(panel.reference.iter().filter_map(|r| r.series.as_ref()))
    {
        if !keys.contains(k) {
            keys.push(k.clone());
        }
    }
    keys
}

fn colour(keys: &[String], key: &str) -> RGBColor {
    keys.iter()
        .position(|k| k == key)
        .map_or(PAPER_GREY, |i| PALETTE[i % PALETTE.len()])
}

/// x position of a reference value on this panel's axis.
fn ref_x(v: &toml::Value, cats: Option<&Vec<String>>) -> Option<f64> {
    let cell = super::data::Cell::from_toml(v)?;
    match cats {
        Some(c) => c.iter().position(|k| *k == cell.text()).map(|i| i as f64),
        None => cell.as_f64(),
    }
}

struct Ranges {
    /// None when the panel has no x value of its own.
    x: Option<(f64, f64)>,
    y: (f64, f64),
}

fn ranges(panel: &Panel, data: &PanelData) -> Ranges {
    let cats = data.categories.as_ref();
    let mut xs: Vec<f64> = Vec::new();
    let mut ys: Vec<f64> = Vec::new();
    for s in &data.series {
        for p in &s.points {
            xs.push(p.x.pos());
            ys.extend(
                [Some(p.est.value), p.est.lo, p.est.hi]
                    .into_iter()
                    .flatten(),
            );
        }
    }
    xs.extend(data.gaps.iter().map(|g| g.x.pos()));
    for r in &panel.reference {
        match r.kind {
            RefKind::Points => {
                for (x, y) in r.x.iter().zip(&r.y) {
                    if let Some(x) = ref_x(x, cats) {
                        xs.push(x);
                        ys.push(*y);
                    }
                }
            }
            RefKind::Hline => ys.extend(r.value),
            RefKind::Band => {
                ys.extend(r.low);
                ys.extend(r.high);
                xs.extend(r.x_from);
                xs.extend(r.x_to);
            }
        }
    }
    let finite = |v: &f64| v.is_finite();
    xs.retain(finite);
    ys.retain(finite);
    if panel.x.log {
        xs.retain(|v| *v > 0.0);
    }
    if panel.y.log {
        ys.retain(|v| *v > 0.0);
    }
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let x = if let Some(c) = cats {
        Some((-0.5, c.len().max(1) as f64 - 0.5))
    } else if xs.is_empty() {
        None
    } else if panel.x.log {
        Some((min(&xs) / 1.4, max(&xs) * 1.4))
    } else {
        let (a, b) = (min(&xs), max(&xs));
        // A single x gets room for side-by-side series and the legend.
        let pad = if b > a { (b - a) * 0.06 } else { 1.0 };
        Some((a - pad, b + pad))
    };
    let y = if ys.is_empty() {
        if panel.y.log { (1.0, 10.0) } else { (0.0, 1.0) }
    } else if panel.y.log {
        let (lo, hi) = (min(&ys) / 2.5, max(&ys) * 2.5);
        // The legend gets the outer third on its side, free of points.
        let room = (hi / lo).powf(0.5);
        match panel.legend {
            LegendPos::LowerLeft | LegendPos::LowerRight => (lo / room, hi),
            LegendPos::UpperLeft | LegendPos::UpperRight => (lo, hi * room),
        }
    } else {
        let (a, b) = (min(&ys).min(0.0), max(&ys));
        // An upper legend gets the top of the panel, free of points.
        let pad = match panel.legend {
            LegendPos::UpperLeft | LegendPos::UpperRight => 0.5,
            LegendPos::LowerLeft | LegendPos::LowerRight => 0.22,
        };
        let top = if b > a { b + (b - a) * pad } else { a + 1.0 };
        (a, top)
    };
    Ranges { x, y }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    data: &PanelData,
    x: Option<(f64, f64)>,
) -> Result<(), DrawError<DB>> {
    let r = ranges(panel, data);
    let (x0, x1) = x.unwrap_or(if panel.x.log { (1.0, 10.0) } else { (0.0, 1.0) });
    let xr = x0..x1;
    let yr = r.y.0..r.y.1;
    let log_x = panel.x.log && data.categories.is_none();
    match (log_x, panel.y.log) {
        (false, false) => chart(area, panel, data, xr, yr),
        (true, false) => chart(area, panel, data, xr.log_scale(), yr),
        (false, true) => chart(area, panel, data, xr, yr.log_scale()),
        (true, true) => chart(area, panel, data, xr.log_scale(), yr.log_scale()),
    }
}

/// Tick label: category names, or short numbers (1k, 2.5M).
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 && (v / 1e6).fract().abs() < 1e-9 {
        format!("{}M", v / 1e6)
    } else if a >= 1e4 && (v / 1e3).fract().abs() < 1e-9 {
        format!("{}k", v / 1e3)
    } else {
        super::extract::fmt_num(v)
    }
}

fn axis_desc(label: &str, unit: &str, log: bool) -> String {
    let mut s = label.to_string();
    if !unit.is_empty() {
        s.push_str(&format!(" ({unit})"));
    }
    if log {
        s.push_str(", log scale");
    }
    s
}

fn legend_pos(p: LegendPos) -> SeriesLabelPosition {
    match p {
        LegendPos::UpperRight => SeriesLabelPosition::UpperRight,
        LegendPos::UpperLeft => SeriesLabelPosition::UpperLeft,
        LegendPos::LowerRight => SeriesLabelPosition::LowerRight,
        LegendPos::LowerLeft => SeriesLabelPosition::LowerLeft,
    }
}

/// Runs of consecutive points not separated by a failed point's x.
pub(crate) fn segments(s: &Series, data: &PanelData) -> Vec<Vec<(f64, f64)>> {
    let gaps: Vec<&XKey> = data
        .gaps
        .iter()
        .filter(|g| g.base.as_ref().is_none_or(|b| *b == s.base))
        .map(|g| &g.x)
        .collect();
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut cur: Vec<(f64, f64)> = Vec::new();
    let mut prev: Option<&XKey> = None;
    for p in &s.points {
        if let Some(a) = prev
            && gaps.iter().any(|g| *g > a && *g < &p.x)
        {
            out.push(std::mem::take(&mut cur));
        }
        cur.push((p.x.pos(), p.est.value));
        prev = Some(&p.x);
    }
    out.push(cur);
    out.retain(|s| s.len() >= 2);
    out
}

/// Side-by-side offsets of series (and their paper values) where points
/// would sit on top of each other: categorical axes, or a single x.
fn dodge(panel: &Panel, data: &PanelData, keys: &[String]) -> impl Fn(&str) -> f64 {
    let mut xs: Vec<f64> = data
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.x.pos()))
        .collect();
    xs.extend(panel.reference.iter().flat_map(|r| {
        r.x.iter()
            .filter_map(|v| ref_x(v, data.categories.as_ref()))
    }));
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let on = !panel.x.log && (data.categories.is_some() || xs.len() == 1) && keys.len() > 1;
    let n = keys.len() as f64;
    let step = (0.6 / n).min(0.15);
    let keys = keys.to_vec();
    move |key: &str| match keys.iter().position(|k| k == key) {
        Some(i) if on => (i as f64 - (n - 1.0) / 2.0) * step,
        _ => 0.0,
    }
}

fn chart<DB, X, Y>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    data: &PanelData,
    x: X,
    y: Y,
) -> Result<(), DrawError<DB>>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let title = if panel.title.is_empty() {
        panel.name.clone()
    } else {
        panel.title.clone()
    };
    let mut ch = ChartBuilder::on(area)
        .caption(title, (FAMILY, 16).into_font())
        .margin(8)
        .x_label_area_size(46)
        .y_label_area_size(74)
        .build_cartesian_2d(x, y)?;
    let cats = data.categories.clone();
    let yfmt = |v: &f64| tick(*v);
    let ref_xs = panel
        .reference
        .iter()
        .flat_map(|r| r.x.iter().filter_map(|v| ref_x(v, cats.as_ref())));
    let all_x: Vec<f64> = data
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.x.pos()))
        .chain(ref_xs)
        .collect();
    let integer_x = !all_x.is_empty() && all_x.iter().all(|v| v.fract() == 0.0);
    let xfmt = |v: &f64| match &cats {
        Some(c) => {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < c.len() {
                c[i as usize].clone()
            } else {
                String::new()
            }
        }
        // Integer sweeps (threads, depth) get no fractional ticks.
        None if integer_x && !panel.x.log && v.fract().abs() > 1e-9 => String::new(),
        None => tick(*v),
    };
    let x_labels = match &cats {
        Some(c) => c.len().max(1),
        None if integer_x && !panel.x.log => {
            let r = ch.x_range();
            ((r.end - r.start).floor() as usize + 1).clamp(2, 12)
        }
        None => 8,
    };
    ch.configure_mesh()
        .x_desc(axis_desc(&panel.x.label, &panel.x.unit, panel.x.log))
        .y_desc(axis_desc(&panel.y.label, &panel.y.unit, panel.y.log))
        .x_label_formatter(&xfmt)
        .y_label_formatter(&yfmt)
        .x_labels(x_labels)
        .y_labels(8)
        .label_style((FAMILY, 13).into_font())
        .axis_desc_style((FAMILY, 15).into_font())
        .bold_line_style(RGBColor(214, 214, 214))
        .light_line_style(RGBColor(244, 244, 244))
        .max_light_lines(2)
        .draw()?;

    let keys = colour_keys(panel, data);
    let (x0, x1) = (ch.x_range().start, ch.x_range().end);
    let y0 = ch.y_range().start;
    let categorical = cats.is_some();
    let shift = dodge(panel, data, &keys);

    for r in &panel.reference {
        let dx = r.series.as_deref().map_or(0.0, &shift);
        draw_reference(&mut ch, r, &keys, cats.as_ref(), (x0, x1), dx)?;
    }
    for s in &data.series {
        let c = colour(&keys, &s.key);
        let dx = shift(&s.key);
        let line = ShapeStyle::from(&c).stroke_width(2);
        if !categorical {
            for seg in segments(s, data) {
                ch.draw_series(std::iter::once(PathElement::new(seg, line)))?;
            }
        }
        for p in &s.points {
            if let (Some(lo), Some(hi)) = (p.est.lo, p.est.hi) {
                let xp = p.x.pos() + dx;
                let bar = ShapeStyle::from(&c).stroke_width(1);
                ch.draw_series([PathElement::new(vec![(xp, lo), (xp, hi)], bar)])?;
                for yv in [lo, hi] {
                    ch.draw_series(std::iter::once(
                        EmptyElement::at((xp, yv)) + PathElement::new(vec![(-5, 0), (5, 0)], bar),
                    ))?;
                }
            }
        }
        let label = if s.key.is_empty() {
            s.label.clone()
        } else {
            format!("{} (this run)", s.label)
        };
        ch.draw_series(
            s.points
                .iter()
                .map(|p| Circle::new((p.x.pos() + dx, p.est.value), 4, c.filled())),
        )?
        .label(label)
        .legend(move |(lx, ly)| {
            EmptyElement::at((lx + 8, ly))
                + PathElement::new(vec![(-8, 0), (8, 0)], ShapeStyle::from(&c).stroke_width(2))
                + Circle::new((0, 0), 4, c.filled())
        });
    }
    if !data.gaps.is_empty() {
        let red = ShapeStyle::from(&GAP_RED).stroke_width(2);
        let mut first = true;
        for g in &data.gaps {
            let el = EmptyElement::at((g.x.pos(), y0))
                + PathElement::new(vec![(-6, -14), (6, -2)], red)
                + PathElement::new(vec![(-6, -2), (6, -14)], red);
            let drawn = ch.draw_series(std::iter::once(el))?;
            if first {
                drawn.label("failed point (gap)").legend(move |(lx, ly)| {
                    EmptyElement::at((lx + 8, ly))
                        + PathElement::new(vec![(-5, -5), (5, 5)], red)
                        + PathElement::new(vec![(-5, 5), (5, -5)], red)
                });
                first = false;
            }
        }
    }
    if data.series.is_empty() {
        let msg = if data.unavailable.is_some() {
            "not measurable in this run (see the caption)".to_string()
        } else if data.absent.is_empty() {
            "no data from this run".to_string()
        } else {
            format!("no data from this run (absent: {})", data.absent.join(", "))
        };
        let (w, h) = ch.plotting_area().dim_in_pixel();
        let style = (FAMILY, 15)
            .into_font()
            .color(&RGBColor(120, 120, 120))
            .pos(Pos::new(HPos::Center, VPos::Center));
        ch.plotting_area().strip_coord_spec().draw(&Text::new(
            msg,
            (w as i32 / 2, h as i32 * 7 / 8),
            style,
        ))?;
    }
    ch.configure_series_labels()
        .position(legend_pos(panel.legend))
        .label_font((FAMILY, 13).into_font())
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(170, 170, 170))
        .draw()?;
    Ok(())
}

fn draw_reference<'a, DB, X, Y>(
    ch: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    r: &Reference,
    keys: &[String],
    cats: Option<&Vec<String>>,
    (x0, x1): (f64, f64),
    dx: f64,
) -> Result<(), DrawError<DB>>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let c = r.series.as_deref().map_or(PAPER_GREY, |k| colour(keys, k));
    let stroke = ShapeStyle::from(&c).stroke_width(2);
    match r.kind {
        RefKind::Points => {
            let pts: Vec<(f64, f64)> =
                r.x.iter()
                    .zip(&r.y)
                    .filter_map(|(x, y)| Some((ref_x(x, cats)? + dx, *y)))
                    .collect();
            if pts.len() >= 2 && cats.is_none() {
                ch.draw_series(DashedLineSeries::new(
                    pts.clone(),
                    6,
                    4,
                    ShapeStyle::from(&c).stroke_width(1),
                ))?;
            }
            let shape = move |p: (f64, f64)| {
                EmptyElement::at(p)
                    + PathElement::new(vec![(0, -7), (7, 0), (0, 7), (-7, 0), (0, -7)], stroke)
            };
            ch.draw_series(pts.into_iter().map(shape))?
                .label(r.label.clone())
                .legend(move |(lx, ly)| {
                    EmptyElement::at((lx + 8, ly))
                        + PathElement::new(vec![(0, -6), (6, 0), (0, 6), (-6, 0), (0, -6)], stroke)
                });
        }
        RefKind::Hline => {
            let v = r.value.unwrap_or(f64::NAN);
            ch.draw_series(DashedLineSeries::new(vec![(x0, v), (x1, v)], 10, 6, stroke))?
                .label(r.label.clone())
                .legend(move |(lx, ly)| {
                    EmptyElement::at((lx, ly))
                        + PathElement::new(vec![(0, 0), (6, 0)], stroke)
                        + PathElement::new(vec![(10, 0), (16, 0)], stroke)
                });
        }
        RefKind::Band => {
            let (lo, hi) = (r.low.unwrap_or(f64::NAN), r.high.unwrap_or(f64::NAN));
            let (a, b) = (r.x_from.unwrap_or(x0), r.x_to.unwrap_or(x1));
            let fill = c.mix(0.14).filled();
            ch.draw_series(std::iter::once(Rectangle::new([(a, lo), (b, hi)], fill)))?
                .label(r.label.clone())
                .legend(move |(lx, ly)| Rectangle::new([(lx, ly - 5), (lx + 16, ly + 5)], fill));
            ch.draw_series(DashedLineSeries::new(
                vec![(a, lo), (b, lo)],
                6,
                4,
                ShapeStyle::from(&c).stroke_width(1),
            ))?;
            ch.draw_series(DashedLineSeries::new(
                vec![(a, hi), (b, hi)],
                6,
                4,
                ShapeStyle::from(&c).stroke_width(1),
            ))?;
        }
    }
    Ok(())
}
