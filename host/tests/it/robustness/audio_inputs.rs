//! WAV files for audio prompts, written here with `hound` as real files:
//! each integer and float sample format decodes to the same signal, channels
//! mix down by the mean, other rates resample to 16 kHz with the length the
//! rate implies, and every bad file is one error line naming it.

use crate::common;

use common::{expect_error, fixture, Scratch};
use famlx::audio::{load_audio, SAMPLE_RATE};
use std::f32::consts::TAU;
use std::path::PathBuf;

fn sine(rate: u32, secs: f32, hz: f32) -> Vec<f32> {
    (0..(rate as f32 * secs) as usize).map(|i| 0.5 * (TAU * hz * i as f32 / rate as f32).sin()).collect()
}

fn write(dir: &Scratch, name: &str, rate: u32, channels: u16, bits: u16, float: bool, frames: &[Vec<f32>]) -> PathBuf {
    let path = dir.path().join(name);
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: bits,
        sample_format: if float { hound::SampleFormat::Float } else { hound::SampleFormat::Int },
    };
    let mut w = hound::WavWriter::create(&path, spec).unwrap();
    for i in 0..frames[0].len() {
        for ch in frames {
            if float {
                w.write_sample(ch[i]).unwrap();
            } else {
                let full = (1i64 << (bits - 1)) as f32;
                w.write_sample((ch[i] * full).round().clamp(-full, full - 1.0) as i32).unwrap();
            }
        }
    }
    w.finalize().unwrap();
    path
}

#[test]
fn every_sample_format_decodes_to_the_same_signal() {
    let dir = Scratch::new("audio-formats");
    let s = sine(SAMPLE_RATE, 0.25, 440.0);
    for (bits, float, tol) in
        [(8, false, 1.0 / 128.0), (16, false, 1e-4), (24, false, 1e-6), (32, false, 1e-6), (32, true, 0.0)]
    {
        let p = write(&dir, &format!("s{bits}{float}.wav"), SAMPLE_RATE, 1, bits, float, std::slice::from_ref(&s));
        let a = load_audio(&p).unwrap_or_else(|e| panic!("{bits} {float}: {e:#}"));
        assert_eq!((a.samples.len(), a.source_rate, a.channels), (s.len(), SAMPLE_RATE, 1));
        let err = a.samples.iter().zip(&s).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        assert!(err <= tol, "{bits}-bit float={float}: max error {err}");
    }
}

#[test]
fn channels_mix_down_by_the_mean() {
    let dir = Scratch::new("audio-stereo");
    let l = sine(SAMPLE_RATE, 0.1, 440.0);
    let r: Vec<f32> = l.iter().map(|x| 0.5 - x).collect();
    let p = write(&dir, "st.wav", SAMPLE_RATE, 2, 32, true, &[l, r]);
    let a = load_audio(&p).unwrap();
    assert_eq!(a.channels, 2);
    assert!(a.samples.iter().all(|&x| (x - 0.25).abs() < 1e-6), "{:?}", &a.samples[..4]);
}

/// 44.1 kHz stereo, 1.5 s: 24,000 samples at 16 kHz, and the 440 Hz tone
/// survives (away from the edges, within 1% of full scale).
#[test]
fn other_rates_resample_to_16_khz() {
    let dir = Scratch::new("audio-44k");
    let s = sine(44_100, 1.5, 440.0);
    let p = write(&dir, "cd.wav", 44_100, 2, 16, false, &[s.clone(), s]);
    let a = load_audio(&p).unwrap();
    assert_eq!((a.samples.len(), a.source_rate), (24_000, 44_100));
    let want = sine(SAMPLE_RATE, 1.5, 440.0);
    let err = a.samples[500..23_500].iter().zip(&want[500..23_500]).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(err < 0.01, "max error {err}");
}

/// The bad files of [`bad_files_are_one_line_naming_the_file`], each with
/// what its error says.
fn bad_files(dir: &Scratch) -> Vec<(PathBuf, &'static str)> {
    let good = write(dir, "ok.wav", SAMPLE_RATE, 1, 16, false, &[sine(SAMPLE_RATE, 0.5, 440.0)]);
    let bytes = std::fs::read(&good).unwrap();
    let text = dir.path().join("notes.wav");
    std::fs::write(&text, "this is not audio").unwrap();
    let cut = dir.path().join("cut.wav");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let empty = write(dir, "empty.wav", SAMPLE_RATE, 1, 16, false, &[vec![]]);
    // A WAVE_FORMAT_IEEE_FLOAT header with 64-bit samples.
    let mut f64wav = bytes[..44].to_vec();
    f64wav[20..22].copy_from_slice(&3u16.to_le_bytes());
    f64wav[34..36].copy_from_slice(&64u16.to_le_bytes());
    f64wav[32..34].copy_from_slice(&8u16.to_le_bytes());
    f64wav[28..32].copy_from_slice(&(SAMPLE_RATE * 8).to_le_bytes());
    f64wav[40..44].copy_from_slice(&16u32.to_le_bytes());
    f64wav.extend_from_slice(&[0u8; 16]);
    let f64p = dir.path().join("f64.wav");
    std::fs::write(&f64p, &f64wav).unwrap();
    let missing = dir.path().join("missing.wav");
    vec![(text, "not a WAV"), (cut, "truncated"), (empty, "no samples"), (f64p, "64"), (missing, "no such file")]
}

#[test]
fn bad_files_are_one_line_naming_the_file() {
    let dir = Scratch::new("audio-bad");
    for (p, says) in bad_files(&dir) {
        let e = format!("{:#}", load_audio(&p).expect_err(&p.display().to_string()));
        assert!(e.contains(&p.display().to_string()) && e.contains(says), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// `famlx generate --audio` with each bad file, on a model without audio,
/// and with `--prompt-ids` that do not hold the clip's placeholders: one
/// error line each, no panic.
#[test]
fn bad_audio_input_is_one_error_line() {
    let dir = Scratch::new("audio-bad-cli");
    let model = fixture("gemma4-audio-f32").display().to_string();
    let run = |model: &str, audio: &std::path::Path, extra: &[&str], must: &[&str]| {
        let a = audio.display().to_string();
        let mut args = vec!["generate", "--model", model, "--audio", &a, "--max-tokens", "2"];
        args.extend_from_slice(extra);
        expect_error(&args, must);
    };
    for (p, says) in bad_files(&dir) {
        run(&model, &p, &[], &[&p.display().to_string(), says]);
    }
    let good = write(&dir, "ok.wav", SAMPLE_RATE, 1, 16, false, &[sine(SAMPLE_RATE, 1.0, 440.0)]);
    let text_only = fixture("llama-bf16").display().to_string();
    run(&text_only, &good, &[], &["--audio", "takes no audio"]);
    // The clip takes 25 placeholders; these ids hold 3.
    run(&model, &good, &["--prompt-ids", "508,519,518,518,518,520"], &["placeholder tokens", "25"]);
    run(&model, &good, &["--prompt-ids", "508,1,2"], &["audio placeholder run"]);
}

/// A clip over the 30 s the model takes is cut there, as the reference's
/// feature extractor cuts it: 750 placeholders, 2999 log-mel frames.
#[test]
fn clips_over_thirty_seconds_are_cut() {
    let _g = common::mlx_lock();
    let dir = Scratch::new("audio-long");
    let long = write(&dir, "long.wav", SAMPLE_RATE, 1, 16, false, &[sine(SAMPLE_RATE, 31.0, 440.0)]);
    let m = famlx::model::LoadedModel::load(
        &fixture("gemma4-audio-f32"),
        &common::registry(),
        None,
        famlx::cache::CacheOptions::default(),
    )
    .unwrap();
    let clip = famlx::prompt::load_audio_clips(&m, &[long]).unwrap();
    assert_eq!(clip[0].tokens(), 750);
    assert_eq!(clip[0].processed.grid[0], 2999);
}

/// A WAV file's bytes as written by hand: a `fmt ` chunk of format `tag`
/// (1 integer PCM, 3 float), `extra` chunks before the data, then `data`.
fn raw_wav(tag: u16, channels: u16, rate: u32, bits: u16, extra: &[u8], data: &[u8]) -> Vec<u8> {
    let align = channels * bits / 8;
    let mut fmt = Vec::new();
    fmt.extend_from_slice(&tag.to_le_bytes());
    fmt.extend_from_slice(&channels.to_le_bytes());
    fmt.extend_from_slice(&rate.to_le_bytes());
    fmt.extend_from_slice(&rate.wrapping_mul(u32::from(align)).to_le_bytes());
    fmt.extend_from_slice(&align.to_le_bytes());
    fmt.extend_from_slice(&bits.to_le_bytes());
    let mut body = b"WAVE".to_vec();
    body.extend_from_slice(&chunk(b"fmt ", &fmt));
    body.extend_from_slice(extra);
    body.extend_from_slice(&chunk(b"data", data));
    let mut out = b"RIFF".to_vec();
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// A RIFF chunk: tag, size, body, and the pad byte an odd size takes.
fn chunk(tag: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut c = tag.to_vec();
    c.extend_from_slice(&(body.len() as u32).to_le_bytes());
    c.extend_from_slice(body);
    if body.len() % 2 == 1 {
        c.push(0);
    }
    c
}

fn pcm16(s: &[f32]) -> Vec<u8> {
    s.iter().flat_map(|x| ((x * 32767.0).round() as i16).to_le_bytes()).collect()
}

/// Rates of a few Hz and rates that are large primes (which would size the
/// resampler's FFT at up to 4 GiB samples) are refused at once, by name;
/// the edges of the range and a prime inside it resample to the length the
/// rate implies.
#[test]
fn sample_rates_outside_the_range_are_refused() {
    let dir = Scratch::new("audio-rates");
    let data = pcm16(&[0.1; 400]);
    for rate in [0, 1, 7, 999, 384_001, 1_000_000_007, 2_147_483_647, 4_294_967_291] {
        let p = dir.path().join(format!("r{rate}.wav"));
        std::fs::write(&p, raw_wav(1, 1, rate, 16, &[], &data)).unwrap();
        let t = std::time::Instant::now();
        let e = format!("{:#}", load_audio(&p).expect_err(&rate.to_string()));
        assert!(t.elapsed().as_secs() < 5, "{rate} Hz took {:?}", t.elapsed());
        assert!(e.contains(&p.display().to_string()) && e.contains(&format!("sample rate {rate} Hz")), "{e}");
        assert!(e.contains("1000-384000 Hz") && e.lines().count() == 1, "{e}");
        assert!(famlx::audio::resample(&[0.0; 8], rate).is_err(), "resample takes {rate} Hz");
    }
    for rate in [1_000, 383_987, 384_000] {
        let p = dir.path().join(format!("ok{rate}.wav"));
        std::fs::write(&p, raw_wav(1, 1, rate, 16, &[], &data)).unwrap();
        let a = load_audio(&p).unwrap_or_else(|e| panic!("{rate}: {e:#}"));
        assert_eq!(a.samples.len() as u64, (400u64 * 16_000).div_ceil(u64::from(rate)), "{rate} Hz");
        assert!(a.samples.iter().all(|x| x.is_finite()));
    }
}

/// NaN and infinite float samples are refused, naming the sample; so are
/// finite ones so large that mixing or resampling them would overflow f32
/// (rubato panicked on them: found by the `wav` fuzz target).
#[test]
fn non_finite_samples_are_refused() {
    let dir = Scratch::new("audio-nan");
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut s = vec![0.25f32; 300];
    for (name, bad, says) in [
        ("nan", f32::NAN, "sample 7 is NaN"),
        ("inf", f32::INFINITY, "sample 7 is inf"),
        ("neg-inf", f32::NEG_INFINITY, "sample 7 is -inf"),
    ] {
        s[7] = bad;
        let p = dir.path().join(format!("{name}.wav"));
        std::fs::write(&p, raw_wav(3, 1, SAMPLE_RATE, 32, &[], &f32s(&s))).unwrap();
        let e = format!("{:#}", load_audio(&p).expect_err(name));
        assert!(e.contains(&p.display().to_string()) && e.contains(says), "{e}");
    }
    for (rate, v) in [(SAMPLE_RATE, f32::MAX), (22_050, 3e38), (44_100, -2.2e9)] {
        let p = dir.path().join(format!("huge{rate}.wav"));
        std::fs::write(&p, raw_wav(3, 2, rate, 32, &[], &f32s(&[v; 600]))).unwrap();
        let e = format!("{:#}", load_audio(&p).expect_err("huge"));
        assert!(e.contains(&p.display().to_string()) && e.contains("sample 0 is") && e.contains("beyond"), "{e}");
    }
    // Integer-scaled float files (up to 2^31) still read.
    let p = dir.path().join("int-scaled.wav");
    std::fs::write(&p, raw_wav(3, 1, 22_050, 32, &[], &f32s(&[30_000.0; 600]))).unwrap();
    assert!(load_audio(&p).unwrap().samples.iter().all(|x| x.is_finite()));
}

/// An odd-sized chunk before the data (LIST, JUNK) is followed by the pad
/// byte RIFF requires: the file reads as the same clip without it. A data
/// chunk declaring more than the file holds is truncated, by name.
#[test]
fn odd_sized_chunks_are_read_with_their_pad_byte() {
    let dir = Scratch::new("audio-pad");
    let data = pcm16(&sine(44_100, 0.05, 440.0));
    let plain = dir.path().join("plain.wav");
    std::fs::write(&plain, raw_wav(1, 1, 44_100, 16, &[], &data)).unwrap();
    let want = load_audio(&plain).unwrap();
    let mut extra = chunk(b"LIST", b"INFOISFT\x03\0\0\0ab\0");
    extra.extend(chunk(b"JUNK", &[0; 5]));
    extra.extend(chunk(b"fact", &[0; 7]));
    assert_eq!(extra.len() % 2, 0);
    let odd = dir.path().join("odd.wav");
    std::fs::write(&odd, raw_wav(1, 1, 44_100, 16, &extra, &data)).unwrap();
    let got = load_audio(&odd).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(got, want);
    // The data chunk says 1000 bytes more than there are.
    let mut cut = raw_wav(1, 1, 44_100, 16, &[], &data);
    let at = cut.len() - data.len() - 4;
    cut[at..at + 4].copy_from_slice(&(data.len() as u32 + 1000).to_le_bytes());
    let e = format!("{:#}", famlx::audio::decode_audio(&cut, "cut.wav").unwrap_err());
    assert!(e.contains("cut.wav") && e.contains("truncated"), "{e}");
}

/// Files at ordinary rates read as hound reads them, resampled as before:
/// the chunk walk changes no sample.
#[test]
fn ordinary_files_decode_as_hound_reads_them() {
    for f in ["sine440.wav", "chirp.wav", "stereo44k.wav"] {
        let p = fixture("audio").join(f);
        let mut r = hound::WavReader::open(&p).unwrap();
        let spec = r.spec();
        let ch = usize::from(spec.channels);
        let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f64;
        let inter: Vec<f32> = match spec.sample_format {
            hound::SampleFormat::Float => r.samples::<f32>().map(Result::unwrap).collect(),
            hound::SampleFormat::Int => r.samples::<i32>().map(|s| (f64::from(s.unwrap()) * scale) as f32).collect(),
        };
        let mono: Vec<f32> = inter.chunks_exact(ch).map(|c| c.iter().sum::<f32>() / ch as f32).collect();
        let want = famlx::audio::resample(&mono, spec.sample_rate).unwrap();
        let got = load_audio(&p).unwrap();
        assert_eq!(got.samples.len(), want.len(), "{f}");
        assert!(got.samples.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{f}: samples differ");
    }
}

/// `--audio` with a clip shorter than the audio tower reads (64 and 160
/// samples at 16 kHz) is one error line naming the file and the minimum;
/// 161 samples, the minimum, generate.
#[test]
fn clips_too_short_for_the_tower_are_refused() {
    let dir = Scratch::new("audio-short");
    let model = fixture("gemma4-audio-f32").display().to_string();
    for n in [64, 160, 161] {
        let p = write(
            &dir,
            &format!("n{n}.wav"),
            SAMPLE_RATE,
            1,
            16,
            false,
            &[sine(SAMPLE_RATE, n as f32 / 16_000.0, 440.0)],
        );
        let a = p.display().to_string();
        let args = ["generate", "--model", &model, "--audio", &a, "-p", "Hear.", "--max-tokens", "2"];
        if n < 161 {
            expect_error(&args, &[&a, &format!("is {n} samples long"), "at least 161"]);
        } else {
            let o = common::run(&args);
            assert!(o.status.success(), "{n} samples: {}", common::texts(&o).1);
        }
    }
}

/// `famlx serve`: a clip too short for the tower, a WAV at a prime rate of
/// a billion Hz and one with a NaN sample are each a 400 naming the message
/// part; the server keeps answering /health and a good clip.
#[test]
fn bad_clips_in_requests_are_400_and_the_server_goes_on() {
    use base64::Engine as _;
    let m = fixture("gemma4-audio-f32");
    let s = common::server::Server::start(&["--model", m.to_str().unwrap()]);
    let ask = |wav: &[u8]| {
        let data = base64::engine::general_purpose::STANDARD.encode(wav);
        serde_json::json!({"max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}},
            {"type": "text", "text": "Hear."}]}]})
        .to_string()
    };
    let mut nan = vec![0.1f32; 400];
    nan[3] = f32::NAN;
    let nan: Vec<u8> = nan.iter().flat_map(|x| x.to_le_bytes()).collect();
    for (wav, says) in [
        (raw_wav(1, 1, SAMPLE_RATE, 16, &[], &pcm16(&[0.1; 64])), "at least 161"),
        (raw_wav(1, 1, 1_000_000_007, 8, &[], &[128; 300]), "sample rate 1000000007 Hz"),
        (raw_wav(3, 1, SAMPLE_RATE, 32, &[], &nan), "sample 3 is NaN"),
    ] {
        let (status, body) = s.post("/v1/chat/completions", &ask(&wav), None);
        assert_eq!(status, 400, "{says}: {body}");
        assert!(body.contains(says) && body.contains("messages[0].content[0]"), "{body}");
        assert_eq!(s.get("/health").0, 200);
    }
    let good = pcm16(&sine(SAMPLE_RATE, 0.5, 440.0));
    let (status, body) = s.post("/v1/chat/completions", &ask(&raw_wav(1, 1, SAMPLE_RATE, 16, &[], &good)), None);
    assert_eq!(status, 200, "{body}");
}
