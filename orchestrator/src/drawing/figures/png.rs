//! PNG output: plotters' bitmap backend for shapes, the embedded font for
//! text (laid out exactly as in the SVG), encoded without timestamps so the
//! same figure gives the same bytes everywhere.

use ab_glyph::{Font, point};
use plotters::backend::{BitMapBackend, RGBPixel};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
    FontTransform,
};

use super::font;

/// Why a figure's PNG could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PngError {
    #[error("bitmap buffer: {len} bytes for {}×{} RGB pixels", size.0, size.1)]
    Buffer { len: usize, size: (u32, u32) },
    #[error("png: {0}")]
    Encode(#[from] png::EncodingError),
}

pub struct PngBackend<'a> {
    inner: BitMapBackend<'a, RGBPixel>,
}

type Inner<'a> = BitMapBackend<'a, RGBPixel>;
type Err<'a> = <Inner<'a> as DrawingBackend>::ErrorType;
type Res<'a> = Result<(), DrawingErrorKind<Err<'a>>>;

impl<'a> PngBackend<'a> {
    /// Draws into `buf`, which must hold width × height × 3 bytes.
    pub fn new(buf: &'a mut [u8], size: (u32, u32)) -> Result<Self, PngError> {
        let len = buf.len();
        // Plotters refuses a buffer of another size than width × height × 3.
        let inner = BitMapBackend::<RGBPixel>::with_buffer_and_format(buf, size)
            .map_err(|_| PngError::Buffer { len, size })?;
        Ok(PngBackend { inner })
    }
}

fn rotate(t: &FontTransform, x: i32, y: i32) -> (i32, i32) {
    t.transform(x, y)
}

impl<'a> DrawingBackend for PngBackend<'a> {
    type ErrorType = Err<'a>;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }
    fn ensure_prepared(&mut self) -> Res<'a> {
        self.inner.ensure_prepared()
    }
    fn present(&mut self) -> Res<'a> {
        self.inner.present()
    }
    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Res<'a> {
        self.inner.draw_pixel(p, c)
    }
    fn draw_line<S: BackendStyle>(&mut self, a: BackendCoord, b: BackendCoord, s: &S) -> Res<'a> {
        self.inner.draw_line(a, b, s)
    }
    fn draw_rect<S: BackendStyle>(
        &mut self,
        ul: BackendCoord,
        br: BackendCoord,
        s: &S,
        fill: bool,
    ) -> Res<'a> {
        self.inner.draw_rect(ul, br, s, fill)
    }
    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        s: &S,
    ) -> Res<'a> {
        self.inner.draw_path(path, s)
    }
    fn draw_circle<S: BackendStyle>(
        &mut self,
        c: BackendCoord,
        r: u32,
        s: &S,
        fill: bool,
    ) -> Res<'a> {
        self.inner.draw_circle(c, r, s, fill)
    }
    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        s: &S,
    ) -> Res<'a> {
        self.inner.fill_polygon(vert, s)
    }
    fn blit_bitmap(&mut self, pos: BackendCoord, size: (u32, u32), src: &[u8]) -> Res<'a> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn draw_text<T: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &T,
        pos: BackendCoord,
    ) -> Res<'a> {
        let color = style.color();
        let Some(f) = font::font() else {
            return Ok(());
        };
        if color.alpha <= 0.0 {
            return Ok(());
        }
        let line = font::layout(text, style.size());
        let (ox, oy) = font::origin(&line, style);
        let t = style.transform();
        let mut pixels = Vec::new();
        for (id, pen) in &line.glyphs {
            let glyph = id.with_scale_and_position(line.scale, point(ox + pen, oy));
            if let Some(g) = f.outline_glyph(glyph) {
                let b = g.px_bounds();
                g.draw(|x, y, cov| {
                    if cov > 0.0 {
                        pixels.push((b.min.x as i32 + x as i32, b.min.y as i32 + y as i32, cov));
                    }
                });
            }
        }
        for (x, y, cov) in pixels {
            let (rx, ry) = rotate(&t, x, y);
            self.inner
                .draw_pixel((pos.0 + rx, pos.1 + ry), color.mix(f64::from(cov.min(1.0))))?;
        }
        Ok(())
    }

    fn estimate_text_size<T: BackendTextStyle>(
        &self,
        text: &str,
        style: &T,
    ) -> Result<(u32, u32), DrawingErrorKind<Err<'a>>> {
        Ok(font::measure(text, style.size()))
    }
}

/// Encodes an RGB buffer as PNG (no time or text chunks).
pub fn encode(rgb: &[u8], (w, h): (u32, u32)) -> Result<Vec<u8>, PngError> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        let mut writer = enc.write_header()?;
        writer.write_image_data(rgb)?;
        writer.finish()?;
    }
    Ok(out)
}
