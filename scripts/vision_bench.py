#!/usr/bin/env python3
"""Image-prompt speed, famlx vs mlx-vlm, on random-weight VLM checkpoints.

For each shape: builds the checkpoint with mlx-vlm's own model class (its
random initialisation, cast to bf16, saved with ``mlx_vlm.utils.save_weights``:
the mlx-community layout), draws one test image, then in the same run

  1. ``famlx bench --model DIR --image IMG -p P -g G -n N --json`` (a warm-up
     run, then N trials on fresh caches, the vision tower run each time);
  2. mlx-vlm on the very prompt famlx printed (``prompt_ids``): the image
     through mlx-vlm's processor, then ``mlx_vlm.generate.generate_step``
     with greedy sampling on a fresh prompt cache, one warm-up, N trials.

Both sides time the same span: from the call that embeds the image to the
first token (TTFT: vision tower + prefill; image decoding and resizing are
outside it on both sides), then the tokens after the first (decode tok/s).
Medians are printed with the ratios famlx / mlx-vlm.

    # on the GPU machine (see scripts/gpu_vision_bench.sh)
    python3 scripts/vision_bench.py --famlx gpu-bin/famlx --work /tmp/vb --shape gemma4-e2b qwen3.5-0.8b
    # a CPU smoke run of the script itself (tiny shapes)
    /opt/ref/bin/python scripts/vision_bench.py --famlx target/debug/famlx --work /tmp/vb --shape tiny-gemma4 tiny-qwen3.5 -p 8 -g 4 -n 1

Pinned: mlx 0.32.4, mlx-vlm 0.7.10. Only calls mlx-vlm; copies none of it.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_bench_models import SHAPES, write_tokenizer  # noqa: E402

# Gemma-4-E2B: mlx-lm's gemma4_text shape of make_bench_models.py, the
# 16-layer 768-wide vision tower (mlx-vlm's defaults are this model's), no
# audio tower; the real checkpoint's multimodal token ids.
def gemma4_layers(n, pattern):
    """Every `pattern`-th layer full attention, the rest sliding."""
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]


GEMMA4_ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}
GEMMA4_E2B = {
    "model_type": "gemma4",
    "text_config": {
        **{k: v for k, v in SHAPES["gemma4-e2b"].items() if k != "architectures"},
        "layer_types": gemma4_layers(35, 5),
        "rope_parameters": GEMMA4_ROPE,
    },
    "vision_config": {"model_type": "gemma4_vision"},  # mlx-vlm's defaults: E2B's tower
    "audio_config": None,
    "image_token_id": 258880,
    "boi_token_id": 255999,
    "eoi_token_id": 258882,
    "video_token_id": 258884,
    "vision_soft_tokens_per_image": 280,
    "tie_word_embeddings": True,
}
GEMMA4_PROCESSOR = {
    "image_processor": {
        "do_convert_rgb": True,
        "do_normalize": False,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.0, 0.0, 0.0],
        "image_processor_type": "Gemma4ImageProcessor",
        "image_seq_length": 280,
        "image_std": [1.0, 1.0, 1.0],
        "max_soft_tokens": 280,
        "patch_size": 16,
        "pooling_kernel_size": 3,
        "resample": 3,
        "rescale_factor": 1 / 255,
    },
    "image_seq_length": 280,
    "processor_class": "Gemma4Processor",
}

# Qwen3.5-0.8B: make_bench_models.py's text shape (nested as qwen3_5_text),
# a 12-layer 768-wide Qwen3-VL vision tower merging into 1024, the real
# checkpoint's vision token ids and pixel budget.
_Q_TEXT = {k: v for k, v in SHAPES["qwen3.5-0.8b"].items() if k != "architectures"}
QWEN35_08B = {
    "model_type": "qwen3_5",
    "text_config": {**_Q_TEXT, "model_type": "qwen3_5_text"},
    "vision_config": {
        "model_type": "qwen3_5",
        "depth": 12,
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_heads": 12,
        "out_hidden_size": 1024,
        "num_position_embeddings": 2304,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "hidden_act": "gelu_pytorch_tanh",
        "deepstack_visual_indexes": [],
    },
    "image_token_id": 248056,
    "video_token_id": 248057,
    "vision_start_token_id": 248053,
    "vision_end_token_id": 248054,
    "tie_word_embeddings": True,
}
QWEN35_PREPROCESSOR = {
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "merge_size": 2,
    "patch_size": 16,
    "processor_class": "Qwen3VLProcessor",
    "rescale_factor": 1 / 255,
    "resample": 3,
    "size": {"longest_edge": 16777216, "shortest_edge": 65536},
    "temporal_patch_size": 2,
}


def _tiny(cfg, text, vision, ids):
    out = json.loads(json.dumps(cfg))
    out["text_config"].update(text)
    out["vision_config"].update(vision)
    out.update(ids)
    return out


# Small versions for a CPU run of this script (vocabulary 4096).
TINY_GEMMA4 = _tiny(
    GEMMA4_E2B,
    dict(hidden_size=64, num_hidden_layers=6, layer_types=gemma4_layers(6, 3), sliding_window_pattern=3,
         intermediate_size=128, num_attention_heads=2, head_dim=32, global_head_dim=64, num_kv_shared_layers=2, hidden_size_per_layer_input=16,
         vocab_size=4096, vocab_size_per_layer_input=4096, sliding_window=16),
    dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
         head_dim=16, global_head_dim=16, position_embedding_size=64),
    dict(image_token_id=4000, boi_token_id=4001, eoi_token_id=4002, video_token_id=4003),
)
TINY_QWEN35 = _tiny(
    QWEN35_08B,
    dict(hidden_size=64, num_hidden_layers=4, intermediate_size=128, num_attention_heads=2, num_key_value_heads=1,
         head_dim=32, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=32,
         linear_value_head_dim=32, vocab_size=4096),
    dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, num_position_embeddings=64),
    dict(image_token_id=4000, video_token_id=4001, vision_start_token_id=4002, vision_end_token_id=4003),
)

MODELS = {
    "gemma4-e2b": (GEMMA4_E2B, "processor_config.json", GEMMA4_PROCESSOR),
    "qwen3.5-0.8b": (QWEN35_08B, "preprocessor_config.json", QWEN35_PREPROCESSOR),
    "tiny-gemma4": (TINY_GEMMA4, "processor_config.json", GEMMA4_PROCESSOR),
    "tiny-qwen3.5": (TINY_QWEN35, "preprocessor_config.json", QWEN35_PREPROCESSOR),
}


def make_image(path, w, h, seed=7):
    """A smooth gradient with hard-edged shapes (so resampling has work)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    rgb = np.stack([255 * x / (w - 1), 255 * y / (h - 1), 127.5 + 120 * np.sin(3 * x / w) * np.cos(2 * y / h)], -1)
    img = Image.fromarray(rgb.round().astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    for _ in range(12):
        x0, x1 = sorted(rng.integers(0, w, 2).tolist())
        y0, y1 = sorted(rng.integers(0, h, 2).tolist())
        d.ellipse([x0, y0, x1, y1], fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    img.save(path)


def build(shape, folder):
    """The random-weight checkpoint, written as mlx-vlm writes one."""
    import mlx.core as mx
    from mlx_vlm.utils import get_model_and_args, save_config, save_weights, update_module_configs

    if (folder / "config.json").exists():
        return
    cfg, proc_name, proc = MODELS[shape]
    config = json.loads(json.dumps(cfg))
    model_class, _ = get_model_and_args(config=config)
    mc = model_class.ModelConfig.from_dict(config)
    mc = update_module_configs(mc, model_class, config, ["text", "vision", "perceiver", "projector", "audio"])
    mx.random.seed(0)
    model = model_class.Model(mc)
    model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())
    save_weights(folder, model, donate_weights=True)
    del model
    config["torch_dtype"] = "bfloat16"
    save_config(config, folder / "config.json")
    (folder / proc_name).write_text(json.dumps(proc, indent=2) + "\n")
    write_tokenizer(folder, config["text_config"]["vocab_size"])
    mx.clear_cache()


def run_famlx(famlx, folder, media, p, g, n, flag="--image"):
    """`famlx bench` with one `flag` (--image / --audio) item, its --json."""
    cmd = [famlx, "bench", "--model", str(folder), flag, str(media), "-p", str(p), "-g", str(g), "-n", str(n),
           "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"famlx bench failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def timed_generate(model, ids, pixels, g, kw):
    """One greedy mlx-vlm generation of `g` tokens on a fresh prompt cache:
    time to the first token and decode tok/s after it."""
    from mlx_vlm.generate.ar import generate_step
    from mlx_vlm.models import cache as vlm_cache

    cache = vlm_cache.make_prompt_cache(model.language_model)
    t0 = time.perf_counter()
    t_first, count = None, 0
    for _tok, _ in generate_step(ids, model, pixels, None, max_tokens=g, temperature=0.0, prompt_cache=cache, **kw):
        count += 1
        if t_first is None:
            t_first = time.perf_counter()
    t_end = time.perf_counter()
    assert count == g, count
    return {"ttft_s": t_first - t0, "generation_tps": (g - 1) / (t_end - t_first) if g > 1 else 0.0}


def run_mlx_vlm(folder, image, prompt_ids, g, n, want_image_tokens):
    import mlx.core as mx
    import mlx_vlm
    from mlx_vlm.utils import load_image

    model, processor = mlx_vlm.load(str(folder))
    img = load_image(str(image))
    ip = processor.image_processor
    out = ip([img]) if model.config.model_type == "gemma4" else ip(images=[img])
    if isinstance(out, tuple):  # gemma4's processor: (arrays, soft-token counts)
        data, counts = out
        tokens = int(counts[0])
    else:
        data = out
        thw = np.array(data["image_grid_thw"])
        tokens = int(thw.prod(axis=-1).sum()) // 4  # spatial merge 2x2
    if tokens != want_image_tokens:
        raise RuntimeError(f"mlx-vlm's processor gives {tokens} image tokens, famlx {want_image_tokens}")
    kw = {}
    pixels = mx.array(np.asarray(data["pixel_values"]))
    ids = mx.array([prompt_ids], dtype=mx.int32)
    if "image_grid_thw" in data:
        kw["image_grid_thw"] = mx.array(np.asarray(data["image_grid_thw"]))
    if model.config.model_type == "gemma4":
        kw["mm_token_type_ids"] = (ids == model.config.image_token_id).astype(mx.int32)

    trials = timed_trials(model, ids, pixels, g, n, kw, "vision_s")
    del model
    mx.clear_cache()
    return trials


def timed_trials(model, ids, pixels, g, n, kw, tower_key):
    """One warm-up and `n` timed generations (`timed_generate`), each with
    the time of the media rows alone under `tower_key`: the rows merged into
    the prompt's embeddings, what the first step of generate_step does
    before the prefill."""
    import mlx.core as mx

    def tower():
        t0 = time.perf_counter()
        out = model.get_input_embeddings(ids, pixels, **kw)
        mx.eval(out.inputs_embeds)
        return time.perf_counter() - t0

    timed_generate(model, ids, pixels, g, kw)  # warm-up
    trials = [timed_generate(model, ids, pixels, g, kw) for _ in range(n)]
    tower()
    for t in trials:
        t[tower_key] = tower()
    return trials


def med(trials, k):
    return statistics.median(t[k] for t in trials)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--famlx", required=True)
    ap.add_argument("--work", type=Path, required=True, help="where checkpoints and the image go")
    ap.add_argument("--shape", nargs="+", default=["gemma4-e2b", "qwen3.5-0.8b"], choices=sorted(MODELS))
    ap.add_argument("--image-size", default="896x672")
    ap.add_argument("-p", type=int, default=64, help="random text ids after the image")
    ap.add_argument("-g", type=int, default=128)
    ap.add_argument("-n", type=int, default=3, help="timed trials per tool (after one warm-up)")
    ap.add_argument("--json", type=Path, help="write all trials here")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    w, h = (int(v) for v in a.image_size.split("x"))
    image = a.work / f"bench-{w}x{h}.png"
    make_image(image, w, h)
    rows, record = [], {}
    for shape in a.shape:
        folder = a.work / shape
        t = time.perf_counter()
        build(shape, folder)
        print(f"[{shape}] checkpoint ready ({time.perf_counter() - t:.0f} s)", flush=True)
        try:
            fam = run_famlx(a.famlx, folder, image, a.p, a.g, a.n)
            ref = run_mlx_vlm(folder, image, fam["prompt_ids"], a.g, a.n, fam["image_tokens"])
        except (RuntimeError, subprocess.SubprocessError) as e:
            print(f"[{shape}] failed: {e}", flush=True)
            continue
        f_ttft, r_ttft = fam["median"]["ttft_s"], med(ref, "ttft_s")
        f_dec, r_dec = fam["median"]["generation_tps"], med(ref, "generation_tps")
        rows.append((shape, len(fam["prompt_ids"]), fam["image_tokens"], fam["median"]["vision_s"], f_ttft, r_ttft,
                     f_dec, r_dec))
        record[shape] = {"famlx": fam, "mlx_vlm": ref}
        print(f"[{shape}] famlx ttft {f_ttft * 1e3:.1f} ms (vision {fam['median']['vision_s'] * 1e3:.1f}), "
              f"decode {f_dec:.1f} tok/s; mlx-vlm ttft {r_ttft * 1e3:.1f} ms (vision {med(ref, 'vision_s') * 1e3:.1f}), "
              f"decode {r_dec:.1f} tok/s", flush=True)
        if a.json:
            a.json.write_text(json.dumps(record, indent=1) + "\n")
    print(f"\nimage {w}x{h}, +{a.p} text ids, {a.g} generated, median of {a.n} (after one warm-up each)")
    print(f"{'shape':<14} {'prompt':>6} {'img tok':>7} {'famlx vision ms':>15} {'famlx ttft ms':>13} "
          f"{'mlx-vlm ttft ms':>15} {'ttft ratio':>10} {'famlx tok/s':>11} {'mlx-vlm tok/s':>13} {'decode x':>8}")
    for s, plen, itok, vis, ft, rt, fd, rd in rows:
        print(f"{s:<14} {plen:>6} {itok:>7} {vis * 1e3:>15.1f} {ft * 1e3:>13.1f} {rt * 1e3:>15.1f} {ft / rt:>10.2f} "
              f"{fd:>11.1f} {rd:>13.1f} {fd / rd:>8.2f}")


if __name__ == "__main__":
    main()
