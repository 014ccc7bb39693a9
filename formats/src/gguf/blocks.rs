//! GGML's block layouts (`ggml-common.h`), dequantized to float32 one
//! block at a time: our own reading of them, checked against the `gguf`
//! Python package's dequantizer (formats/tests/gguf_reference.rs).

use half::f16;

pub(super) fn half_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

pub(super) fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = ((qs[j] & 0x0F) as i32 - 8) as f32 * d;
        y[j + 16] = ((qs[j] >> 4) as i32 - 8) as f32 * d;
    }
}

pub(super) fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0x0F) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// The fifth bits of a Q5 block's 32 values (bit j is value j's).
pub(super) fn q5_high(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

pub(super) fn q5_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    let qh = q5_high(&b[2..6]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = (((qs[j] & 0x0F) as u32 | h0) as i32 - 16) as f32 * d;
        y[j + 16] = (((qs[j] >> 4) as u32 | h1) as i32 - 16) as f32 * d;
    }
}

pub(super) fn q5_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (half_at(b, 0), half_at(b, 2));
    let qh = q5_high(&b[4..8]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) << 4;
        let h1 = ((qh >> (j + 16)) & 1) << 4;
        y[j] = ((qs[j] & 0x0F) as u32 | h0) as f32 * d + m;
        y[j + 16] = ((qs[j] >> 4) as u32 | h1) as f32 * d + m;
    }
}

pub(super) fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = half_at(b, 0);
    for (j, &q) in b[2..34].iter().enumerate() {
        y[j] = q as i8 as f32 * d;
    }
}

/// Layout of a 256-value k-quant super-block: the scale / minimum pairs of
/// its eight sub-blocks of 32, six bits each, packed into 12 bytes (Q4_K, Q5_K).
pub(super) fn scale_min_k4(j: usize, s: &[u8]) -> (f32, f32) {
    let (sc, m) = if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    };
    (sc as f32, m as f32)
}

pub(super) fn q2_k(b: &[u8], y: &mut [f32]) {
    // scales[16] | qs[64] | d | dmin
    let (scales, qs) = (&b[0..16], &b[16..80]);
    let (d, dmin) = (half_at(b, 80), half_at(b, 82));
    let mut out = 0;
    let mut is = 0;
    for half in 0..2 {
        let q = &qs[32 * half..32 * half + 32];
        for shift in [0, 2, 4, 6] {
            for part in 0..2 {
                let sc = scales[is];
                is += 1;
                let (dl, ml) = (d * (sc & 0x0F) as f32, dmin * (sc >> 4) as f32);
                for l in 0..16 {
                    y[out] = dl * ((q[16 * part + l] >> shift) & 3) as f32 - ml;
                    out += 1;
                }
            }
        }
    }
}

pub(super) fn q3_k(b: &[u8], y: &mut [f32]) {
    // hmask[32] | qs[64] | scales[12] | d
    let (hmask, qs, packed) = (&b[0..32], &b[32..96], &b[96..108]);
    let d = half_at(b, 108);
    // Sixteen 6-bit scales: low four bits from the first 8 bytes, high two
    // bits from the last 4, minus 32.
    let mut scales = [0i32; 16];
    for (i, s) in scales.iter_mut().enumerate() {
        let low = if i < 8 { packed[i] & 0x0F } else { packed[i - 8] >> 4 };
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        *s = (low | (high << 4)) as i32 - 32;
    }
    let mut out = 0;
    let mut is = 0;
    let mut m = 1u8;
    for half in 0..2 {
        let q = &qs[32 * half..32 * half + 32];
        for shift in [0, 2, 4, 6] {
            for part in 0..2 {
                let dl = d * scales[is] as f32;
                is += 1;
                for l in 0..16 {
                    let k = 16 * part + l;
                    let low = ((q[k] >> shift) & 3) as i32;
                    let sub = if hmask[k] & m != 0 { 0 } else { 4 };
                    y[out] = dl * (low - sub) as f32;
                    out += 1;
                }
            }
            m <<= 1;
        }
    }
}

pub(super) fn q4_k(b: &[u8], y: &mut [f32]) {
    // d | dmin | scales[12] | qs[128]
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    for j in 0..4 {
        let (s1, m1) = scale_min_k4(2 * j, scales);
        let (s2, m2) = scale_min_k4(2 * j + 1, scales);
        let q = &qs[32 * j..32 * j + 32];
        for l in 0..32 {
            y[64 * j + l] = d * s1 * (q[l] & 0x0F) as f32 - dmin * m1;
            y[64 * j + 32 + l] = d * s2 * (q[l] >> 4) as f32 - dmin * m2;
        }
    }
}

pub(super) fn q5_k(b: &[u8], y: &mut [f32]) {
    // d | dmin | scales[12] | qh[32] | qs[128]
    let (d, dmin) = (half_at(b, 0), half_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    for j in 0..4 {
        let (s1, m1) = scale_min_k4(2 * j, scales);
        let (s2, m2) = scale_min_k4(2 * j + 1, scales);
        let q = &qs[32 * j..32 * j + 32];
        let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[64 * j + l] = d * s1 * ((q[l] & 0x0F) + h1) as f32 - dmin * m1;
            y[64 * j + 32 + l] = d * s2 * ((q[l] >> 4) + h2) as f32 - dmin * m2;
        }
    }
}

pub(super) fn q6_k(b: &[u8], y: &mut [f32]) {
    // ql[128] | qh[64] | scales[16] (int8) | d
    let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
    let d = half_at(b, 208);
    for half in 0..2 {
        let (ql, qh, sc) = (&ql[64 * half..], &qh[32 * half..], &sc[8 * half..]);
        let y = &mut y[128 * half..];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

/// The 16 values IQ4_NL and IQ4_XS index (GGML's `kvalues_iq4nl`, a fixed
/// non-uniform 4-bit grid: a format constant, not code).
pub(super) const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

pub(super) fn iq4_nl(b: &[u8], y: &mut [f32]) {
    // d | qs[16]: values 0..16 the low nibbles, 16..32 the high.
    let d = half_at(b, 0);
    for j in 0..16 {
        y[j] = d * IQ4_VALUES[(b[2 + j] & 0x0F) as usize] as f32;
        y[j + 16] = d * IQ4_VALUES[(b[2 + j] >> 4) as usize] as f32;
    }
}

/// IQ4_XS sub-block `ib`'s scale: `d * (ls - 32)` for its 6-bit `ls`.
pub(super) fn iq4_xs_scale(b: &[u8], ib: usize) -> f32 {
    let d = half_at(b, 0);
    let high = u16::from_le_bytes([b[2], b[3]]);
    let ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0x0F) as i32 | ((((high >> (2 * ib)) & 3) as i32) << 4);
    d * (ls - 32) as f32
}

pub(super) fn iq4_xs(b: &[u8], y: &mut [f32]) {
    // d | scales_h (u16) | scales_l[4] | qs[128]: sub-block ib's 32 values
    // from qs[16 ib..16 ib + 16], low nibbles first.
    for ib in 0..8 {
        let dl = iq4_xs_scale(b, ib);
        let qs = &b[8 + 16 * ib..8 + 16 * ib + 16];
        for j in 0..16 {
            y[32 * ib + j] = dl * IQ4_VALUES[(qs[j] & 0x0F) as usize] as f32;
            y[32 * ib + j + 16] = dl * IQ4_VALUES[(qs[j] >> 4) as usize] as f32;
        }
    }
}
