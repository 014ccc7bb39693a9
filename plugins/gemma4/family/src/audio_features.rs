//! Gemma 4's log-mel features, as the reference feature extractor makes
//! them (mlx-vlm 0.7.10's / transformers' Gemma4AudioFeatureExtractor at
//! its defaults): the clip cut at 30 s and zero-padded to a multiple of 128
//! samples, 160 zeros on the left, frames of 321 samples every 160 (the
//! last sample of each dropped), a periodic Hann window of 320, a real FFT
//! of 512, magnitudes, 128 HTK mel bins over 0-8000 Hz (no normalisation),
//! log(mel + 1e-3), and frames that end in padding zeroed.

use realfft::RealFftPlanner;

/// Samples per second the features assume.
pub const SAMPLE_RATE: usize = 16_000;
/// Longest clip the extractor takes (30 s); longer clips are cut, as the reference's `truncation`.
pub const MAX_SAMPLES: usize = 480_000;
/// Mel bins per frame.
pub const MEL_BINS: usize = 128;
/// The shortest clip the features describe (161 samples, about 10 ms):
/// the first frame, which starts half a frame of zeros before the clip,
/// must end inside it. A shorter clip gives only padding frames (no frames
/// at all under 129 samples), which the tower cannot read.
pub const MIN_SAMPLES: usize = FRAME / 2 + 1;
const FRAME: usize = 320;
const HOP: usize = 160;
const FFT: usize = 512;
const PAD_MULTIPLE: usize = 128;
const MEL_FLOOR: f64 = 1e-3;

/// Log-mel features of one clip.
#[derive(Debug, Clone, PartialEq)]
pub struct LogMel {
    /// `[frames, MEL_BINS]`, row-major.
    pub features: Vec<f32>,
    /// Per frame: whether it ends inside the clip (padding frames are zero).
    pub mask: Vec<bool>,
}

impl LogMel {
    /// Frames computed.
    pub fn frames(&self) -> usize {
        self.mask.len()
    }
}

/// The HTK mel filter bank `[FFT/2 + 1][MEL_BINS]` (triangles between
/// mel-spaced corner frequencies, f64 as the reference builds it).
fn mel_filters() -> Vec<[f64; MEL_BINS]> {
    let bins = FFT / 2 + 1;
    let hz_to_mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
    let mel_to_hz = |m: f64| 700.0 * (10f64.powf(m / 2595.0) - 1.0);
    let (lo, hi) = (hz_to_mel(0.0), hz_to_mel(8000.0));
    let corners: Vec<f64> =
        (0..MEL_BINS + 2).map(|i| mel_to_hz(lo + (hi - lo) * i as f64 / (MEL_BINS + 1) as f64)).collect();
    let nyquist = (SAMPLE_RATE / 2) as f64;
    (0..bins)
        .map(|b| {
            let f = nyquist * b as f64 / (bins - 1) as f64;
            let mut row = [0.0; MEL_BINS];
            for (m, v) in row.iter_mut().enumerate() {
                let down = (f - corners[m]) / (corners[m + 1] - corners[m]);
                let up = (corners[m + 2] - f) / (corners[m + 2] - corners[m + 1]);
                *v = down.min(up).max(0.0);
            }
            row
        })
        .collect()
}

/// cos(x) in float32 as NumPy (2.4's x86-64 wheels, on CPUs with FMA: AVX2
/// or AVX-512; checked bit for bit on the window's 320 values) computes it
/// for |x| up to 71476, which the reference's
/// Hann window goes through: x reduced by the nearest multiple of pi/2 in
/// three fused steps (Cody and Waite), then a degree-8 even polynomial for
/// cos or a degree-9 odd one for sin, chosen and signed by the quadrant.
/// Written here because its results differ from the correctly rounded
/// cosine (`f32::cos`, or f64's rounded) by an ulp in some entries, which
/// moves quiet log-mel bins by up to 2.4e-4; `mul_add` is a fused
/// multiply-add on every platform, so this gives NumPy's bits everywhere.
fn numpy_cos_f32(x: f32) -> f32 {
    let c = f32::from_bits;
    debug_assert!(x.abs() <= 71_476.0);
    // x·(2/pi) rounded to an integer by the add-and-subtract trick (the
    // multiply and add fused, as the compiler of NumPy's wheels contracts
    // them: with them apart, 5·pi/4 lands in the other quadrant).
    let magic = c(0x4b40_0000);
    let q = x.mul_add(c(0x3f22_f983), magic) - magic;
    let r = q.mul_add(c(0xbfc9_0fd8), x);
    let r = q.mul_add(c(0xb4a8_885a), r);
    let r = q.mul_add(c(0xa7c2_34c4), r);
    let r2 = r * r;
    let cos = c(0x37cc_730b).mul_add(r2, c(0xbab6_036e)).mul_add(r2, c(0x3d2a_aa9e)).mul_add(r2, -0.5).mul_add(r2, 1.0);
    let sin = c(0x363e_9dde).mul_add(r2, c(0xb950_35dd)).mul_add(r2, c(0x3c08_88cd)).mul_add(r2, c(0xbe2a_aaab));
    let sin = (sin * r2).mul_add(r, r);
    // cos(x) = cos(r + q·pi/2): quadrant q + 1 picks sin or cos and the sign.
    let quadrant = q as i32 + 1;
    let v = if quadrant & 1 == 0 { sin } else { cos };
    if quadrant & 2 == 2 {
        -v
    } else {
        v
    }
}

/// The features of `samples` (mono, 16 kHz).
pub fn log_mel(samples: &[f32]) -> LogMel {
    let clip = &samples[..samples.len().min(MAX_SAMPLES)];
    let padded = clip.len().div_ceil(PAD_MULTIPLE) * PAD_MULTIPLE;
    // Left padding of half a frame, then the clip, then zeros.
    let mut wave = vec![0.0f32; FRAME / 2 + padded];
    wave[FRAME / 2..FRAME / 2 + clip.len()].copy_from_slice(clip);
    let real_end = FRAME / 2 + clip.len();
    let frames = if wave.len() > FRAME { (wave.len() - (FRAME + 1)) / HOP + 1 } else { 0 };
    // The window in f32, as the reference computes it (2*pi rounded to f32,
    // NumPy's float32 cos).
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    let window: Vec<f32> = (0..FRAME).map(|n| 0.5 - 0.5 * numpy_cos_f32(two_pi * n as f32 / FRAME as f32)).collect();
    let filters = mel_filters();
    let fft = RealFftPlanner::<f64>::new().plan_fft_forward(FFT);
    let (mut input, mut spectrum) = (fft.make_input_vec(), fft.make_output_vec());
    let mut features = vec![0.0f32; frames * MEL_BINS];
    let mut mask = Vec::with_capacity(frames);
    for (t, row) in features.chunks_exact_mut(MEL_BINS).enumerate() {
        let start = t * HOP;
        // The frame's last (dropped) sample decides whether it is padding.
        let inside = FRAME / 2 <= start + FRAME && start + FRAME < real_end;
        mask.push(inside);
        if !inside {
            continue;
        }
        for (i, x) in input.iter_mut().enumerate() {
            *x = if i < FRAME { f64::from(wave[start + i] * window[i]) } else { 0.0 };
        }
        fft.process(&mut input, &mut spectrum).expect("buffers made by the plan");
        let mut mel = [0.0f64; MEL_BINS];
        for (c, f) in spectrum.iter().zip(&filters) {
            let mag = c.norm();
            for (m, w) in mel.iter_mut().zip(f) {
                *m += mag * w;
            }
        }
        for (o, m) in row.iter_mut().zip(mel) {
            *o = (m + MEL_FLOOR).ln() as f32;
        }
    }
    LogMel { features, mask }
}
