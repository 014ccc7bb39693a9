//! Audio files for audio prompts: WAV read with `hound` (8/16/24/32-bit
//! integer or 32-bit float, any channel count, mixed down to mono by the
//! mean), resampled to the 16 kHz the audio towers take with `rubato`.
//! Every failure is one line naming the file.

use anyhow::{anyhow, bail, Result};
use rubato::{FftFixedIn, Resampler};
use std::path::Path;

/// The sample rate audio models take (Gemma 4's feature extractor).
pub const SAMPLE_RATE: u32 = 16_000;

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

/// Reads, mixes down and resamples the WAV file at `path`.
pub fn load_audio(path: &Path) -> Result<RawAudio> {
    let name = path.display();
    let r = hound::WavReader::open(path).map_err(|e| match e {
        hound::Error::IoError(e) if e.kind() == std::io::ErrorKind::NotFound => {
            anyhow!("audio {name}: no such file")
        }
        e => anyhow!("audio {name}: not a WAV file this reads ({e})"),
    })?;
    read_wav(r, &name.to_string())
}

/// [`load_audio`] for a WAV file's bytes; `name` says where they came from
/// in messages (a path, or a request field).
pub fn decode_audio(data: &[u8], name: &str) -> Result<RawAudio> {
    let r = hound::WavReader::new(std::io::Cursor::new(data))
        .map_err(|e| anyhow!("audio {name}: not a WAV file this reads ({e})"))?;
    read_wav(r, name)
}

fn read_wav<R: std::io::Read>(mut r: hound::WavReader<R>, name: &str) -> Result<RawAudio> {
    let spec = r.spec();
    if spec.channels == 0 || spec.sample_rate == 0 {
        bail!("audio {name}: the header gives {} channels at {} Hz", spec.channels, spec.sample_rate);
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
    let mono: Vec<f32> = interleaved.chunks_exact(ch).map(|f| f.iter().sum::<f32>() / ch as f32).collect();
    let samples = resample(&mono, spec.sample_rate).map_err(|e| anyhow!("audio {name}: resampling: {e}"))?;
    Ok(RawAudio { samples, source_rate: spec.sample_rate, channels: spec.channels })
}

/// `mono` at `rate` Hz resampled to [`SAMPLE_RATE`]: ceil(n * 16000 / rate)
/// samples, the resampler's delay removed.
pub fn resample(mono: &[f32], rate: u32) -> Result<Vec<f32>> {
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
