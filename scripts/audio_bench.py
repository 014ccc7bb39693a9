#!/usr/bin/env python3
"""Audio-prompt speed, famlx vs mlx-vlm, on a random-weight Gemma-4-E2B-shaped
checkpoint with its audio tower (mlx-vlm's AudioConfig defaults are E2B's:
12 conformer blocks, 1024 wide, output 1536).

Builds the checkpoint as scripts/vision_bench.py builds its own (mlx-vlm's
model class, its random initialisation, bf16, saved with mlx-vlm's writer),
writes a 10-second 16 kHz clip, then in the same run

  1. ``famlx bench --model DIR --audio CLIP -p P -g G -n N --json`` (a warm-up,
     then N trials on fresh caches, the audio tower run each time);
  2. mlx-vlm on the very prompt famlx printed (``prompt_ids``): the clip's
     log-mel from mlx-vlm's feature extractor, then
     ``mlx_vlm.generate.generate_step`` (greedy, fresh prompt cache), one
     warm-up, N trials.

Both sides time from the call that embeds the clip to the first token (TTFT:
audio tower + prefill; reading the file and the log-mel are outside it on
both sides), then the tokens after the first (decode tok/s).

    # on the GPU machine (see scripts/gpu_audio_bench.sh)
    python3 scripts/audio_bench.py --famlx gpu-bin/famlx --work /tmp/ab
    # a CPU smoke run of the script (tiny shape)
    /opt/ref/bin/python scripts/audio_bench.py --famlx target/debug/famlx --work /tmp/ab --shape tiny-gemma4-audio -p 8 -g 4 -n 1 --seconds 2

Pinned: mlx 0.32.4, mlx-vlm 0.7.10. Only calls mlx-vlm; copies none of it.
"""

import argparse
import json
import sys
import time
import wave
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vision_bench as vb  # noqa: E402

AUDIO_IDS = {"audio_token_id": 258881, "boa_token_id": 256000, "eoa_token_id": 258883}
AUDIO_PROCESSOR = {
    **vb.GEMMA4_PROCESSOR,
    "feature_extractor": {"feature_extractor_type": "Gemma4AudioFeatureExtractor", "sampling_rate": 16000},
    "audio_seq_length": 750,
    "audio_ms_per_token": 40,
}


def with_audio(cfg, audio_config, ids):
    out = json.loads(json.dumps(cfg))
    out["audio_config"] = audio_config
    out.update(ids)
    return out


vb.MODELS["gemma4-e2b-audio"] = (
    with_audio(vb.GEMMA4_E2B, {"model_type": "gemma4_audio"}, AUDIO_IDS),  # mlx-vlm's defaults: E2B's tower
    "processor_config.json",
    AUDIO_PROCESSOR,
)
vb.MODELS["tiny-gemma4-audio"] = (
    with_audio(
        vb.TINY_GEMMA4,
        {"model_type": "gemma4_audio", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "subsampling_conv_channels": [8, 4], "output_proj_dims": 48},
        {"audio_token_id": 4004, "boa_token_id": 4005, "eoa_token_id": 4006},
    ),
    "processor_config.json",
    AUDIO_PROCESSOR,
)


def make_clip(path, seconds, rate=16000, seed=3):
    """A 16-bit mono WAV: a few drifting tones and some noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    x = sum(0.2 * np.sin(2 * np.pi * (f + 30 * np.sin(0.5 * t)) * t) for f in (220.0, 440.0, 1320.0))
    x = x + 0.05 * rng.standard_normal(t.shape)
    pcm = np.clip(x * 32767, -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def read_clip(path):
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0


def run_mlx_vlm(folder, clip, prompt_ids, g, n, want_tokens):
    import mlx.core as mx
    import mlx_vlm

    model, processor = mlx_vlm.load(str(folder))
    samples = read_clip(clip)
    tokens = processor._compute_audio_num_tokens(samples, 16000)
    if tokens != want_tokens:
        raise RuntimeError(f"mlx-vlm's processor gives {tokens} audio tokens, famlx {want_tokens}")
    fe = processor.feature_extractor([samples])
    feat = mx.array(np.asarray(fe["input_features"], np.float32))
    mask = mx.array(np.asarray(fe["input_features_mask"], bool))
    ids = mx.array([prompt_ids], dtype=mx.int32)
    kw = {"input_features": feat, "input_features_mask": mask,
          "mm_token_type_ids": (ids == model.config.audio_token_id).astype(mx.int32) * 3}

    trials = vb.timed_trials(model, ids, None, g, n, kw, "audio_s")
    del model
    mx.clear_cache()
    return trials


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--famlx", required=True)
    ap.add_argument("--work", type=Path, required=True, help="where the checkpoint and the clip go")
    ap.add_argument("--shape", default="gemma4-e2b-audio", choices=["gemma4-e2b-audio", "tiny-gemma4-audio"])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("-p", type=int, default=64, help="random text ids after the clip")
    ap.add_argument("-g", type=int, default=128)
    ap.add_argument("-n", type=int, default=3, help="timed trials per tool (after one warm-up)")
    ap.add_argument("--json", type=Path, help="write all trials here")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    clip = a.work / f"clip-{a.seconds:g}s.wav"
    make_clip(clip, a.seconds)
    folder = a.work / a.shape
    t = time.perf_counter()
    vb.build(a.shape, folder)
    print(f"[{a.shape}] checkpoint ready ({time.perf_counter() - t:.0f} s)", flush=True)
    fam = vb.run_famlx(a.famlx, folder, clip, a.p, a.g, a.n, flag="--audio")
    ref = run_mlx_vlm(folder, clip, fam["prompt_ids"], a.g, a.n, fam["audio_tokens"])
    f_ttft, r_ttft = fam["median"]["ttft_s"], vb.med(ref, "ttft_s")
    f_dec, r_dec = fam["median"]["generation_tps"], vb.med(ref, "generation_tps")
    if a.json:
        a.json.write_text(json.dumps({"famlx": fam, "mlx_vlm": ref}, indent=1) + "\n")
    print(f"\n{a.shape}: {a.seconds:g} s clip = {fam['audio_tokens']} audio tokens, +{a.p} text ids, {a.g} generated, "
          f"median of {a.n} (after one warm-up each)")
    print(f"{'':<8} {'audio tower ms':>14} {'ttft ms':>8} {'decode tok/s':>12}")
    print(f"{'famlx':<8} {fam['median']['audio_s'] * 1e3:>14.1f} {f_ttft * 1e3:>8.1f} {f_dec:>12.1f}")
    print(f"{'mlx-vlm':<8} {vb.med(ref, 'audio_s') * 1e3:>14.1f} {r_ttft * 1e3:>8.1f} {r_dec:>12.1f}")
    print(f"ratio famlx/mlx-vlm: ttft {f_ttft / r_ttft:.2f}, decode speed {f_dec / r_dec:.2f}x")


if __name__ == "__main__":
    main()
