//! Audio files for audio prompts: WAV read with `hound` (8/16/24/32-bit
//! integer or 32-bit float, any channel count, mixed down to mono by the
//! mean), resampled to the 16 kHz the audio towers take with `rubato`.
//! Every failure is one line naming the file.
//!
//! What is read is bounded before any of it is decoded: a regular file up to
//! [`famlx_formats::input::MAX_AUDIO`] bytes, a sample rate within
//! [`MIN_RATE`]..=[`MAX_RATE`] (the resampler sizes its FFT by the rate), at
//! most [`MAX_SECONDS`], and finite samples only.

use anyhow::{anyhow, bail, Result};
use famlx_formats::input::{read_input, MAX_AUDIO};
use rubato::{FftFixedIn, Resampler};
use std::io::Read;
use std::path::Path;

/// The sample rate audio models take (Gemma 4's feature extractor).
pub const SAMPLE_RATE: u32 = 16_000;

/// The lowest sample rate read: below it there is no speech to hear, and a
/// rate of a few Hz makes a short file a long clip.
pub const MIN_RATE: u32 = 1_000;

/// The highest sample rate read (studio audio tops out at 384 kHz). The
/// resampler's FFT is `rate / gcd(rate, 16000)` samples long, so this bound
/// is what keeps it to a few megabytes whatever the rate.
pub const MAX_RATE: u32 = 384_000;

/// The largest float sample read, in magnitude. Full scale is 1.0, but some
/// tools write float files on an integer scale (up to 2^31); far beyond
/// that the resampler's FFT overflows f32 (and rubato panics on the result).
pub const MAX_FLOAT_SAMPLE: f32 = 2_147_483_648.0;

/// Longest file read (seconds): models take far less (Gemma 4: 30 s); this
/// only bounds memory before the family's own limit applies.
pub const MAX_SECONDS: u64 = 30 * 60;

/// A decoded clip: mono samples in [-1, 1] at [`SAMPLE_RATE`].
#[derive(Debug, Clone, PartialEq)]
pub struct RawAudio {
    /// Mono samples at [`SAMPLE_RATE`].
    pub samples: Vec<f32>,
    /// The file's own sample rate.
    pub source_rate: u32,
    /// The file's channel count.
    pub channels: u16,
}

/// Reads, mixes down and resamples the WAV file at `path` (a regular file
/// of at most [`MAX_AUDIO`] bytes).
pub fn load_audio(path: &Path) -> Result<RawAudio> {
    let name = path.display();
    let data = read_input(path, "an audio file", MAX_AUDIO).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => anyhow!("audio {name}: no such file"),
        _ => anyhow!("audio {name}: cannot read: {e}"),
    })?;
    decode_audio(&data, &name.to_string())
}

/// [`load_audio`] for a WAV file's bytes; `name` says where they came from
/// in messages (a path, or a request field).
pub fn decode_audio(data: &[u8], name: &str) -> Result<RawAudio> {
    let (fmt, samples) = wave_chunks(data).map_err(|e| anyhow!("audio {name}: {e}"))?;
    // The rate first: hound checks the header's byte rate against it, and
    // the resampler sizes its FFT by it.
    if let Some(r) = fmt.get(4..8) {
        let rate = u32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        if !(MIN_RATE..=MAX_RATE).contains(&rate) {
            bail!("audio {name}: sample rate {rate} Hz is outside the {MIN_RATE}-{MAX_RATE} Hz famlx reads");
        }
    }
    // hound reads the chunks in a stream and skips an unknown chunk by its
    // size alone, without the pad byte RIFF puts after an odd-sized one; so
    // it is given the two chunks it needs, found above, in a fresh header.
    let mut head = Vec::with_capacity(28 + fmt.len());
    head.extend_from_slice(b"RIFF");
    let riff_len = u32::try_from(20 + fmt.len() + samples.len()).unwrap_or(u32::MAX);
    head.extend_from_slice(&riff_len.to_le_bytes());
    head.extend_from_slice(b"WAVEfmt ");
    head.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
    head.extend_from_slice(fmt);
    head.extend_from_slice(b"data");
    head.extend_from_slice(&(samples.len() as u32).to_le_bytes());
    let r = hound::WavReader::new(std::io::Cursor::new(head).chain(samples))
        .map_err(|e| anyhow!("audio {name}: not a WAV file this reads ({e})"))?;
    read_wav(r, name)
}

/// The body of the `fmt ` chunk and of the `data` chunk of a RIFF/WAVE
/// file's bytes, or what is wrong (a phrase for "audio NAME: ..."). Chunks
/// are walked by their sizes, each odd-sized one followed by its pad byte;
/// a data chunk that claims more bytes than the file holds is truncated.
///
/// Hand-written: hound does not skip pad bytes, and the container is four
/// fields; a crate that does (symphonia) would replace hound's whole decoder.
fn wave_chunks(data: &[u8]) -> std::result::Result<(&[u8], &[u8]), String> {
    if data.len() < 12 || &data[..4] != b"RIFF" || &data[8..12] != b"WAVE" {
        return Err("not a WAV file (no RIFF/WAVE header)".into());
    }
    let mut fmt = None;
    let mut at = 12usize;
    loop {
        let Some(head) = data.get(at..at + 8) else {
            let missing = if fmt.is_some() { "data" } else { "fmt" };
            return Err(format!("not a WAV file this reads (no {missing} chunk)"));
        };
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let body = at + 8;
        let end = body.saturating_add(len);
        match &head[..4] {
            b"fmt " => fmt = Some(data.get(body..end).ok_or("truncated in the fmt chunk")?),
            b"data" => {
                let fmt = fmt.ok_or("not a WAV file this reads (the data chunk comes before the fmt chunk)")?;
                if end > data.len() {
                    return Err(format!(
                        "truncated: the data chunk holds {} of the {len} bytes it declares",
                        data.len() - body
                    ));
                }
                return Ok((fmt, &data[body..end]));
            }
            _ => {}
        }
        at = end.saturating_add(len & 1);
    }
}

fn read_wav<R: std::io::Read>(mut r: hound::WavReader<R>, name: &str) -> Result<RawAudio> {
    let spec = r.spec();
    if spec.channels == 0 {
        bail!("audio {name}: the header gives 0 channels");
    }
    let frames = u64::from(r.duration());
    if frames == 0 {
        bail!("audio {name}: no samples");
    }
    if frames > MAX_SECONDS * u64::from(spec.sample_rate) {
        bail!(
            "audio {name}: {:.0} s long, more than the {MAX_SECONDS} s famlx reads",
            frames as f64 / f64::from(spec.sample_rate)
        );
    }
    let truncated = |e: hound::Error| anyhow!("audio {name}: truncated or corrupt sample data ({e})");
    let interleaved: Vec<f32> = match (spec.sample_format, spec.bits_per_sample) {
        (hound::SampleFormat::Float, 32) => r.samples::<f32>().collect::<Result<_, _>>().map_err(truncated)?,
        (hound::SampleFormat::Int, b @ (8 | 16 | 24 | 32)) => {
            // Full scale is 2^(bits-1), as soundfile and miniaudio scale.
            let scale = 1.0 / (1u64 << (b - 1)) as f64;
            r.samples::<i32>()
                .map(|s| s.map(|v| (f64::from(v) * scale) as f32))
                .collect::<Result<_, _>>()
                .map_err(truncated)?
        }
        (f, b) => {
            bail!("audio {name}: {b}-bit {f:?} samples are not supported (integer 8/16/24/32-bit or float 32-bit)")
        }
    };
    let ch = usize::from(spec.channels);
    if interleaved.len() < frames as usize * ch {
        bail!("audio {name}: truncated: {} of {} samples", interleaved.len(), frames as usize * ch);
    }
    // NaN or infinity would pass through every later step as garbage.
    if let Some(i) = interleaved.iter().position(|x| !x.is_finite() || x.abs() > MAX_FLOAT_SAMPLE) {
        match interleaved[i] {
            v if v.is_finite() => bail!("audio {name}: sample {i} is {v:e}, beyond the ±2^31 famlx reads"),
            v => bail!("audio {name}: sample {i} is {v}, not a finite number"),
        }
    }
    let mono: Vec<f32> = interleaved.chunks_exact(ch).map(|f| f.iter().sum::<f32>() / ch as f32).collect();
    let samples = resample(&mono, spec.sample_rate).map_err(|e| anyhow!("audio {name}: resampling: {e}"))?;
    Ok(RawAudio { samples, source_rate: spec.sample_rate, channels: spec.channels })
}

/// `mono` at `rate` Hz resampled to [`SAMPLE_RATE`]: ceil(n * 16000 / rate)
/// samples, the resampler's delay removed. A rate outside
/// [`MIN_RATE`]..=[`MAX_RATE`] is refused (it would size the FFT).
pub fn resample(mono: &[f32], rate: u32) -> Result<Vec<f32>> {
    if !(MIN_RATE..=MAX_RATE).contains(&rate) {
        bail!("sample rate {rate} Hz is outside the {MIN_RATE}-{MAX_RATE} Hz famlx resamples");
    }
    if rate == SAMPLE_RATE {
        return Ok(mono.to_vec());
    }
    let want = (mono.len() as u64 * u64::from(SAMPLE_RATE)).div_ceil(u64::from(rate)) as usize;
    let mut rs = FftFixedIn::<f32>::new(rate as usize, SAMPLE_RATE as usize, 1024, 2, 1)?;
    let delay = rs.output_delay();
    let mut out = Vec::with_capacity(want + delay + 2048);
    let mut pos = 0;
    while out.len() < want + delay {
        let need = rs.input_frames_next();
        let chunk = if pos + need <= mono.len() {
            let o = rs.process(&[&mono[pos..pos + need]], None)?;
            pos += need;
            o
        } else if pos < mono.len() {
            let o = rs.process_partial(Some(&[&mono[pos..]]), None)?;
            pos = mono.len();
            o
        } else {
            rs.process_partial::<&[f32]>(None, None)?
        };
        out.extend_from_slice(&chunk[0]);
    }
    Ok(out[delay..delay + want].to_vec())
}

/// A hash of a clip's samples (FNV-1a over their bits): the same clip at the
/// same place is a prompt-cache hit.
pub fn sample_hash(samples: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ 0xa0d1_0000;
    for b in samples.iter().flat_map(|s| s.to_bits().to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}
