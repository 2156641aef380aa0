//! A plotters backend writing SVG whose text is glyph outlines of the
//! embedded font (defined once per glyph, placed with `<use>`), so the file
//! renders identically without any font installed. Output depends only on
//! what is drawn: no timestamps, no ids beyond glyph numbers.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

use super::font;

#[derive(Debug)]
pub struct SvgError(String);

impl std::fmt::Display for SvgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SvgError {}

pub struct SvgBackend<'a> {
    size: (u32, u32),
    body: String,
    glyphs: BTreeSet<u16>,
    target: &'a mut String,
}

impl<'a> SvgBackend<'a> {
    pub fn new(target: &'a mut String, size: (u32, u32)) -> Self {
        SvgBackend {
            size,
            body: String::new(),
            glyphs: BTreeSet::new(),
            target,
        }
    }
}

fn rgb(c: BackendColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.rgb.0, c.rgb.1, c.rgb.2)
}

/// ` stroke-opacity="…"` style suffix when not opaque.
fn opacity(attr: &str, c: BackendColor) -> String {
    if c.alpha >= 1.0 {
        String::new()
    } else {
        format!(" {attr}=\"{:.3}\"", c.alpha)
    }
}

/// `fill="#rrggbb"` with its opacity: the paint of solid shapes and text.
fn fill_attrs(c: BackendColor) -> String {
    format!("fill=\"{}\"{}", rgb(c), opacity("fill-opacity", c))
}

/// `stroke="#rrggbb" stroke-width="…"` with its opacity: lines and outlines.
fn stroke_attrs(c: BackendColor, width: u32) -> String {
    format!(
        "stroke=\"{}\" stroke-width=\"{width}\"{}",
        rgb(c),
        opacity("stroke-opacity", c)
    )
}

pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn points<I: IntoIterator<Item = BackendCoord>>(it: I) -> String {
    it.into_iter()
        .map(|(x, y)| format!("{x},{y}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn trim_num(v: f32) -> String {
    let s = format!("{v:.5}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

type Res = Result<(), DrawingErrorKind<SvgError>>;

impl SvgBackend<'_> {
    /// Writes a visible rectangle or circle: `element` is its tag and
    /// geometry, followed by a fill, or an outline around nothing.
    fn closed_shape<S: BackendStyle>(
        &mut self,
        s: &S,
        filled: bool,
        element: std::fmt::Arguments<'_>,
    ) -> Res {
        let c = s.color();
        if c.alpha <= 0.0 {
            return Ok(());
        }
        let paint = if filled {
            fill_attrs(c)
        } else {
            format!("fill=\"none\" {}", stroke_attrs(c, s.stroke_width()))
        };
        let _ = writeln!(self.body, "{element} {paint}/>");
        Ok(())
    }
}

impl DrawingBackend for SvgBackend<'_> {
    type ErrorType = SvgError;

    fn get_size(&self) -> (u32, u32) {
        self.size
    }

    fn ensure_prepared(&mut self) -> Res {
        Ok(())
    }

    fn present(&mut self) -> Res {
        let (w, h) = self.size;
        let mut out = String::new();
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" \
             width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n<defs>\n"
        );
        for g in &self.glyphs {
            let d = font::glyph_path(ab_glyph::GlyphId(*g));
            let _ = writeln!(out, "<path id=\"g{g}\" d=\"{d}\"/>");
        }
        out.push_str("</defs>\n");
        out.push_str(&self.body);
        out.push_str("</svg>\n");
        *self.target = out;
        Ok(())
    }

    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Res {
        if c.alpha > 0.0 {
            let _ = writeln!(
                self.body,
                "<rect x=\"{}\" y=\"{}\" width=\"1\" height=\"1\" {}/>",
                p.0,
                p.1,
                fill_attrs(c)
            );
        }
        Ok(())
    }

    fn draw_line<S: BackendStyle>(&mut self, a: BackendCoord, b: BackendCoord, s: &S) -> Res {
        let c = s.color();
        if c.alpha > 0.0 {
            let _ = writeln!(
                self.body,
                "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {}/>",
                a.0,
                a.1,
                b.0,
                b.1,
                stroke_attrs(c, s.stroke_width())
            );
        }
        Ok(())
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        ul: BackendCoord,
        br: BackendCoord,
        s: &S,
        fill: bool,
    ) -> Res {
        self.closed_shape(
            s,
            fill,
            format_args!(
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"",
                ul.0,
                ul.1,
                br.0 - ul.0,
                br.1 - ul.1
            ),
        )
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        s: &S,
    ) -> Res {
        let c = s.color();
        if c.alpha > 0.0 {
            let _ = writeln!(
                self.body,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" \
                 stroke-linejoin=\"round\"{}/>",
                points(path),
                rgb(c),
                s.stroke_width(),
                opacity("stroke-opacity", c)
            );
        }
        Ok(())
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        s: &S,
        fill: bool,
    ) -> Res {
        self.closed_shape(
            s,
            fill,
            format_args!(
                "<circle cx=\"{}\" cy=\"{}\" r=\"{radius}\"",
                center.0, center.1
            ),
        )
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        s: &S,
    ) -> Res {
        let c = s.color();
        if c.alpha > 0.0 {
            let _ = writeln!(
                self.body,
                "<polygon points=\"{}\" {}/>",
                points(vert),
                fill_attrs(c)
            );
        }
        Ok(())
    }

    fn draw_text<T: BackendTextStyle>(&mut self, text: &str, style: &T, pos: BackendCoord) -> Res {
        let c = style.color();
        if c.alpha <= 0.0 || text.is_empty() {
            return Ok(());
        }
        let line = font::layout(text, style.size());
        let (ox, oy) = font::origin(&line, style);
        let (sx, sy) = font::unit_scale(line.scale);
        let rot = font::degrees(&style.transform());
        let transform = if rot == 0 {
            format!("translate({} {})", pos.0, pos.1)
        } else {
            format!("translate({} {}) rotate({rot})", pos.0, pos.1)
        };
        let _ = writeln!(
            self.body,
            "<g aria-label=\"{}\" {} transform=\"{transform}\">",
            escape(text),
            fill_attrs(c)
        );
        for (id, pen) in &line.glyphs {
            // Space and other blank glyphs need no element.
            if font::font()
                .and_then(|f| ab_glyph::Font::outline(f, *id))
                .is_none()
            {
                continue;
            }
            self.glyphs.insert(id.0);
            let _ = writeln!(
                self.body,
                "<use xlink:href=\"#g{}\" transform=\"matrix({} 0 0 {} {} {})\"/>",
                id.0,
                trim_num(sx),
                trim_num(sy),
                trim_num(ox + pen),
                trim_num(oy)
            );
        }
        self.body.push_str("</g>\n");
        Ok(())
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<SvgError>> {
        Ok(font::measure(text, style.size()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::prelude::*;

    fn draw(text: &str) -> String {
        let mut out = String::new();
        {
            let root = SvgBackend::new(&mut out, (200, 100)).into_drawing_area();
            root.fill(&WHITE).unwrap();
            root.draw(&Text::new(
                text.to_string(),
                (10, 10),
                (font::FAMILY, 14).into_font(),
            ))
            .unwrap();
            root.present().unwrap();
        }
        out
    }

    #[test]
    fn text_becomes_glyph_outlines_with_the_text_as_label() {
        font::register_with_plotters();
        let svg = draw("µs <1>");
        assert!(svg.starts_with("<svg xmlns"));
        assert!(svg.contains("aria-label=\"µs &lt;1&gt;\""), "{svg}");
        assert!(!svg.contains("<text"), "no font-dependent text elements");
        // µ, s, <, 1, > are drawn; the space is not.
        assert_eq!(svg.matches("<use ").count(), 5);
        assert!(svg.contains("<path id=\"g"));
    }

    #[test]
    fn rendering_is_deterministic() {
        font::register_with_plotters();
        assert_eq!(draw("threads 1, 2"), draw("threads 1, 2"));
    }
}
