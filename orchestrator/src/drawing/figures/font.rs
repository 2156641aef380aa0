//! The embedded font (DejaVu Sans, `orchestrator/assets/`) and the text
//! layout both figure backends share, so a figure renders the same on a
//! machine without any system font.

use std::sync::{Once, OnceLock};

use ab_glyph::{Font, FontRef, GlyphId, OutlineCurve, PxScale, ScaleFont};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendTextStyle, FontTransform};

pub static FONT_BYTES: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

/// The family name figures use; registered with plotters for its own
/// text measurements.
pub const FAMILY: &str = "sans-serif";

pub fn font() -> Option<&'static FontRef<'static>> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FONT.get_or_init(|| FontRef::try_from_slice(FONT_BYTES).ok())
        .as_ref()
}

/// Makes plotters measure text with the same font (it never falls back to
/// system fonts: the `ttf` feature is off).
pub fn register_with_plotters() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [
            plotters::style::FontStyle::Normal,
            plotters::style::FontStyle::Bold,
        ] {
            // A failure leaves plotters without the font; drawing then
            // reports the font error instead of panicking.
            let _ = plotters::style::register_font(FAMILY, style, FONT_BYTES);
        }
    });
}

/// One line of text laid out at a pixel size: glyphs with their pen
/// offsets, and the line box.
pub struct Line {
    pub glyphs: Vec<(GlyphId, f32)>,
    pub width: f32,
    pub ascent: f32,
    pub height: f32,
    pub scale: PxScale,
}

pub fn layout(text: &str, size: f64) -> Line {
    let scale = PxScale::from(size as f32);
    let Some(f) = font() else {
        return Line {
            glyphs: Vec::new(),
            width: 0.0,
            ascent: 0.0,
            height: size as f32,
            scale,
        };
    };
    let sf = f.as_scaled(scale);
    let mut pen = 0.0f32;
    let mut prev: Option<GlyphId> = None;
    let mut glyphs = Vec::with_capacity(text.len());
    for c in text.chars() {
        let id = sf.glyph_id(c);
        if let Some(p) = prev {
            pen += sf.kern(p, id);
        }
        glyphs.push((id, pen));
        pen += sf.h_advance(id);
        prev = Some(id);
    }
    Line {
        glyphs,
        width: pen,
        ascent: sf.ascent(),
        height: sf.ascent() - sf.descent(),
        scale,
    }
}

/// Width and height in whole pixels, as plotters wants them.
pub fn measure(text: &str, size: f64) -> (u32, u32) {
    let l = layout(text, size);
    (l.width.ceil() as u32, l.height.ceil() as u32)
}

/// Where the baseline starts, relative to the anchor point, before rotation.
pub fn origin<S: BackendTextStyle>(line: &Line, style: &S) -> (f32, f32) {
    let a = style.anchor();
    let dx = match a.h_pos {
        HPos::Left => 0.0,
        HPos::Center => -line.width / 2.0,
        HPos::Right => -line.width,
    };
    let top = match a.v_pos {
        VPos::Top => 0.0,
        VPos::Center => -line.height / 2.0,
        VPos::Bottom => -line.height,
    };
    (dx, top + line.ascent)
}

/// Rotation of text in degrees, clockwise on screen (SVG convention).
pub fn degrees(t: &FontTransform) -> i32 {
    match t {
        FontTransform::None => 0,
        FontTransform::Rotate90 => 90,
        FontTransform::Rotate180 => 180,
        FontTransform::Rotate270 => 270,
    }
}

/// A glyph outline as SVG path data in font units, y flipped to point down.
pub fn glyph_path(id: GlyphId) -> String {
    let Some(outline) = font().and_then(|f| f.outline(id)) else {
        return String::new();
    };
    let mut d = String::new();
    let mut last: Option<(f32, f32)> = None;
    let p = |pt: ab_glyph::Point| (pt.x.round(), -pt.y.round());
    for curve in &outline.curves {
        let (start, rest): ((f32, f32), Vec<(f32, f32)>) = match curve {
            OutlineCurve::Line(a, b) => (p(*a), vec![p(*b)]),
            OutlineCurve::Quad(a, b, c) => (p(*a), vec![p(*b), p(*c)]),
            OutlineCurve::Cubic(a, b, c, e) => (p(*a), vec![p(*b), p(*c), p(*e)]),
        };
        if last != Some(start) {
            if last.is_some() {
                d.push('Z');
            }
            d.push_str(&format!("M{} {}", start.0, start.1));
        }
        let cmd = match rest.len() {
            1 => 'L',
            2 => 'Q',
            _ => 'C',
        };
        d.push(cmd);
        let coords: Vec<String> = rest.iter().map(|(x, y)| format!("{x} {y}")).collect();
        d.push_str(&coords.join(" "));
        last = rest.last().copied();
    }
    if last.is_some() {
        d.push('Z');
    }
    d
}

/// Font units to pixels at this scale (horizontal, vertical).
pub fn unit_scale(scale: PxScale) -> (f32, f32) {
    match font() {
        Some(f) => {
            let s = f.as_scaled(scale);
            (s.h_scale_factor(), s.v_scale_factor())
        }
        None => (0.0, 0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_font_parses_and_has_the_symbols_figures_use() {
        let f = font().expect("embedded font");
        for c in ['µ', '×', '≤', '≥', '–', '%', '²'] {
            assert_ne!(f.glyph_id(c).0, 0, "no glyph for {c}");
        }
    }

    #[test]
    fn wider_text_measures_wider_and_size_scales_height() {
        let (w1, h1) = measure("1", 14.0);
        let (w2, _) = measure("1000", 14.0);
        let (_, h2) = measure("1", 28.0);
        assert!(w2 > 3 * w1, "{w1} {w2}");
        assert!((h2 as i32 - 2 * h1 as i32).abs() <= 1, "{h1} {h2}");
    }

    #[test]
    fn glyph_paths_are_closed_outlines() {
        let id = font().unwrap().glyph_id('o');
        let d = glyph_path(id);
        // 'o' has an outer and an inner contour.
        assert_eq!(d.matches('M').count(), 2, "{d}");
        assert!(d.ends_with('Z'));
    }
}
