#!/usr/bin/env python3
"""Test vectors for plugin_api::media::resize_bicubic: Pillow's
Image.resize(size, BICUBIC) of one random RGB image to several sizes
(up, down, one axis only). Pinned: pillow==13.0.0, numpy==2.4.6.

    /opt/ref/bin/python plugin-api/tests/data/make_resize_vectors.py
"""
import base64
import json
from pathlib import Path

import numpy as np
from PIL import Image

rng = np.random.default_rng(7)
w, h = 37, 23
src = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
# Smooth areas as well as noise: a gradient in the left half.
src[:, : w // 2, 0] = np.linspace(0, 255, w // 2, dtype=np.uint8)[None, :]
img = Image.fromarray(src, "RGB")
cases = []
for size in [(5, 9), (80, 51), (37, 6), (13, 23), (111, 69), (36, 22), (1, 1)]:
    out = np.asarray(img.resize(size, Image.BICUBIC))
    cases.append({"size": list(size), "rgb": base64.b64encode(out.tobytes()).decode()})
doc = {"width": w, "height": h, "rgb": base64.b64encode(src.tobytes()).decode(), "cases": cases}
Path(__file__).with_name("resize_vectors.json").write_text(json.dumps(doc) + "\n")

# Alpha over white: Hugging Face's convert_to_rgb (alpha_composite on an
# opaque white background, then RGB) of an RGBA image with every alpha.
a = np.arange(256, dtype=np.uint8)
rgba = np.stack([rng.integers(0, 256, 256, dtype=np.uint8) for _ in range(3)] + [a], axis=-1).reshape(16, 16, 4)
im = Image.fromarray(rgba, "RGBA")
bg = Image.new("RGBA", im.size, (255, 255, 255))
over = np.asarray(Image.alpha_composite(bg, im).convert("RGB"))
doc["over_white"] = {
    "rgba": base64.b64encode(rgba.tobytes()).decode(),
    "rgb": base64.b64encode(over.tobytes()).decode(),
}
Path(__file__).with_name("resize_vectors.json").write_text(json.dumps(doc) + "\n")
