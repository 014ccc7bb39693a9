//! Pillow's bicubic resize of 8-bit images, to the bit.
//!
//! Hand-written because the reference processors resize with Pillow
//! (`Image.resize(size, BICUBIC)` on uint8 pixels) and no crate reproduces
//! its arithmetic: a separable convolution whose kernel widens with the
//! downscale factor (antialiasing), coefficients in 22-bit fixed point, a
//! horizontal pass first, rounded and clipped to 8 bits, then a vertical
//! pass. The `image` crate's and `fast_image_resize`'s filters differ from
//! it by up to a few levels, which is far from the 1e-5 (after /255) the
//! processors must match.

/// Bits of the fixed-point coefficients (Pillow: 32 - 8 - 2).
const PRECISION_BITS: u32 = 22;

/// The bicubic kernel with a = -0.5, support 2.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Per output pixel: the first input pixel and the fixed-point weights.
struct Coeffs {
    first: Vec<usize>,
    weights: Vec<Vec<i32>>,
}

fn coeffs(in_size: usize, out_size: usize) -> Coeffs {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = 2.0 * filterscale;
    let mut first = Vec::with_capacity(out_size);
    let mut weights = Vec::with_capacity(out_size);
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        // C casts truncate toward zero; negative starts clamp to 0 anyway.
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let n = xmax.saturating_sub(xmin);
        let w: Vec<f64> = (0..n).map(|x| bicubic(((x + xmin) as f64 - center + 0.5) * ss)).collect();
        let total: f64 = w.iter().sum();
        let fixed = w
            .iter()
            .map(|&v| {
                let v = if total != 0.0 { v / total } else { v };
                let f = v * (1u32 << PRECISION_BITS) as f64;
                (if v < 0.0 { f - 0.5 } else { f + 0.5 }) as i32
            })
            .collect();
        first.push(xmin);
        weights.push(fixed);
    }
    Coeffs { first, weights }
}

/// Rounds a fixed-point sum to 8 bits, clipping.
fn clip8(v: i64) -> u8 {
    if v <= 0 {
        0
    } else if v >= 256 << PRECISION_BITS {
        255
    } else {
        (v >> PRECISION_BITS) as u8
    }
}

/// Resizes an 8-bit image of `channels` interleaved channels from
/// `width x height` to `out_w x out_h` with Pillow's bicubic filter
/// (`Image.resize((out_w, out_h), Image.BICUBIC)`), bit for bit.
pub fn resize_bicubic(
    pixels: &[u8],
    width: usize,
    height: usize,
    channels: usize,
    out_w: usize,
    out_h: usize,
) -> Vec<u8> {
    assert_eq!(pixels.len(), width * height * channels, "resize_bicubic: pixel buffer size");
    let horizontal = out_w != width;
    let vertical = out_h != height;
    let cv = coeffs(height, out_h);
    // Rows the vertical pass reads; the horizontal pass computes only those.
    let (y0, y1) = if out_h == 0 { (0, 0) } else { (cv.first[0], cv.first[out_h - 1] + cv.weights[out_h - 1].len()) };
    let mut img: Vec<u8>;
    let (mut w, mut rows_from) = (width, 0usize);
    let src: &[u8] = if horizontal {
        let ch = coeffs(width, out_w);
        img = vec![0u8; out_w * (y1 - y0) * channels];
        for y in y0..y1 {
            let row = &pixels[y * width * channels..(y + 1) * width * channels];
            let out = &mut img[(y - y0) * out_w * channels..(y - y0 + 1) * out_w * channels];
            for xx in 0..out_w {
                let (x0, k) = (ch.first[xx], &ch.weights[xx]);
                for c in 0..channels {
                    let mut ss: i64 = 1 << (PRECISION_BITS - 1);
                    for (i, &kv) in k.iter().enumerate() {
                        ss += row[(x0 + i) * channels + c] as i64 * kv as i64;
                    }
                    out[xx * channels + c] = clip8(ss);
                }
            }
        }
        w = out_w;
        rows_from = y0;
        &img
    } else {
        pixels
    };
    if !vertical {
        return if horizontal { src.to_vec() } else { pixels.to_vec() };
    }
    let mut out = vec![0u8; out_w * out_h * channels];
    for yy in 0..out_h {
        let (first, k) = (cv.first[yy] - rows_from, &cv.weights[yy]);
        for x in 0..w * channels {
            let mut ss: i64 = 1 << (PRECISION_BITS - 1);
            for (i, &kv) in k.iter().enumerate() {
                ss += src[(first + i) * w * channels + x] as i64 * kv as i64;
            }
            out[yy * w * channels + x] = clip8(ss);
        }
    }
    out
}

/// [`resize_bicubic`] of an RGB image.
pub fn resize_bicubic_rgb(rgb: &[u8], width: usize, height: usize, out_w: usize, out_h: usize) -> Vec<u8> {
    resize_bicubic(rgb, width, height, 3, out_w, out_h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_flat_images_stay_put() {
        let px: Vec<u8> = (0..5 * 4 * 3).map(|i| (i * 7 % 256) as u8).collect();
        assert_eq!(resize_bicubic(&px, 5, 4, 3, 5, 4), px);
        let flat = vec![77u8; 9 * 7 * 3];
        assert!(resize_bicubic(&flat, 9, 7, 3, 4, 11).iter().all(|&v| v == 77));
    }

    #[test]
    fn weights_sum_to_one_in_fixed_point() {
        for (i, o) in [(10, 3), (3, 10), (448, 224), (7, 7)] {
            for w in coeffs(i, o).weights {
                let s: i64 = w.iter().map(|&v| v as i64).sum();
                assert!((s - (1 << PRECISION_BITS)).abs() <= w.len() as i64, "{i}->{o}: {s}");
            }
        }
    }
}
