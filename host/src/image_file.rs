//! Image files for vision prompts: decoded with the `image` crate (PNG,
//! JPEG, WebP, GIF's first frame), EXIF orientation applied, greyscale and
//! palette images made RGB, the alpha channel kept apart (families decide
//! whether to drop it or composite over white, as their reference
//! processors do), every failure one line naming the file.

use anyhow::{anyhow, bail, Context, Result};
use image::{DynamicImage, ImageDecoder, ImageReader, Limits};
use plugin_api::RawImage;
use std::path::Path;

/// The most pixels an image may have (a 64-megapixel photo; larger files
/// are refused before they are decoded, so a small file that declares huge
/// dimensions cannot exhaust memory).
pub const MAX_PIXELS: u64 = 64 << 20;

/// Reads and decodes the image at `path`.
pub fn load_image(path: &Path) -> Result<RawImage> {
    let shown = path.display().to_string();
    let data = famlx_formats::input::read_input(path, "an image", famlx_formats::input::MAX_IMAGE)
        .with_context(|| format!("image {shown}: cannot read"))?;
    decode_image(&data, &shown)
}

/// Decodes an image file's bytes; `name` says where they came from in
/// messages (a path, or a request field).
pub fn decode_image(data: &[u8], name: &str) -> Result<RawImage> {
    let shown = name;
    // The content decides, not the file name.
    let head = &data[..data.len().min(64)];
    use image::ImageFormat::{Gif, Jpeg, Png, WebP};
    let format = image::guess_format(head)
        .ok()
        .filter(|f| matches!(f, Png | Jpeg | WebP | Gif))
        .ok_or_else(|| anyhow!("image {shown}: not a PNG, JPEG, WebP or GIF file"))?;
    let mut reader = ImageReader::with_format(std::io::Cursor::new(data), format);
    let mut limits = Limits::default();
    limits.max_alloc = Some(MAX_PIXELS * 8);
    reader.limits(limits);
    let is_jpeg = format == Jpeg;
    let mut decoder = reader.into_decoder().with_context(|| format!("image {shown}: cannot decode"))?;
    let (w, h) = decoder.dimensions();
    if w == 0 || h == 0 {
        bail!("image {shown}: it is {w}x{h} pixels: empty");
    }
    if w as u64 * h as u64 > MAX_PIXELS {
        bail!("image {shown}: {w}x{h} pixels is more than famlx takes ({} megapixels)", MAX_PIXELS >> 20);
    }
    let orientation = decoder.orientation().unwrap_or(image::metadata::Orientation::NoTransforms);
    let mut img = DynamicImage::from_decoder(decoder).with_context(|| format!("image {shown}: cannot decode"))?;
    if is_jpeg {
        // Decoded above to check the file; the pixels come from libjpeg-turbo.
        if let Some(rgb) = decode_jpeg_rgb(data, shown)? {
            img = DynamicImage::ImageRgb8(rgb);
        }
    }
    img.apply_orientation(orientation);
    Ok(raw(&img))
}

/// A JPEG decoded by libjpeg-turbo's code (mozjpeg): the integer IDCT and
/// fancy chroma upsampling Pillow gets, so pixels match the reference
/// processors' to the bit. `None` for color spaces it does not turn into RGB
/// the way Pillow does (CMYK, YCCK): the `image` crate's pixels are used.
fn decode_jpeg_rgb(data: &[u8], shown: &str) -> Result<Option<image::RgbImage>> {
    use mozjpeg::{ColorSpace, Decompress};
    // libjpeg reports errors by unwinding out of its C frames.
    let decoded = std::panic::catch_unwind(|| -> std::io::Result<Option<(u32, u32, Vec<u8>)>> {
        let d = Decompress::new_mem(data)?;
        if !matches!(d.color_space(), ColorSpace::JCS_YCbCr | ColorSpace::JCS_GRAYSCALE | ColorSpace::JCS_RGB) {
            return Ok(None);
        }
        let mut started = d.rgb()?;
        let (w, h) = (started.width() as u32, started.height() as u32);
        let px: Vec<[u8; 3]> = started.read_scanlines()?;
        started.finish()?;
        Ok(Some((w, h, px.into_iter().flatten().collect())))
    });
    match decoded {
        Ok(Ok(Some((w, h, px)))) => Ok(image::RgbImage::from_raw(w, h, px)),
        Ok(Ok(None)) => Ok(None),
        Ok(Err(e)) => bail!("image {shown}: cannot decode: {e}"),
        Err(_) => bail!("image {shown}: cannot decode: libjpeg refused the file"),
    }
}

/// The decoded image as RGB bytes plus its alpha channel (if it has one).
pub fn raw(img: &DynamicImage) -> RawImage {
    let (width, height) = (img.width(), img.height());
    if img.color().has_alpha() {
        let rgba = img.to_rgba8();
        let rgb: Vec<u8> = rgba.pixels().flat_map(|p| [p[0], p[1], p[2]]).collect();
        let alpha: Vec<u8> = rgba.pixels().map(|p| p[3]).collect();
        RawImage { width, height, rgb: rgb.into(), alpha: alpha.into() }
    } else {
        RawImage { width, height, rgb: img.to_rgb8().into_raw().into(), alpha: Vec::new().into() }
    }
}

/// A hash of an image's pixels: the same picture at the same place in a
/// conversation is a prompt-cache hit, whatever file it came from.
pub fn pixel_hash(img: &RawImage) -> u64 {
    // FNV-1a over size and bytes: fast, stable across runs and builds.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    };
    for b in img.width.to_le_bytes().into_iter().chain(img.height.to_le_bytes()) {
        eat(b);
    }
    for &b in img.rgb.iter().chain(img.alpha.iter()) {
        eat(b);
    }
    h
}
