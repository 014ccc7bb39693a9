"""Writes the `wav` fuzz target's seeds (fuzz/corpus/wav/): small WAV files of
each sample format famlx reads, one with an odd-sized chunk and its RIFF pad
byte, one in WAVE_FORMAT_EXTENSIBLE. Standard library only; make_seeds.py
calls it too.

    python3 fuzz/make_wav_seeds.py
"""

import math
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "wav")


def chunk(tag, body):
    pad = b"\0" if len(body) % 2 else b""
    return tag + struct.pack("<I", len(body)) + body + pad


def fmt_body(fmt, channels, rate, bits, extensible=False):
    align = channels * bits // 8
    base = struct.pack("<HHIIHH", 0xFFFE if extensible else fmt, channels, rate, rate * align, align, bits)
    if not extensible:
        return base
    # cbSize 22, valid bits, channel mask, the format's GUID.
    guid = struct.pack("<I", fmt) + bytes.fromhex("000000001000800000aa00389b71")
    return base + struct.pack("<HHI", 22, bits, 0) + guid


def samples(n, channels, bits, float_):
    out = bytearray()
    for i in range(n):
        v = 0.5 * math.sin(2 * math.pi * 440 * i / 16000)
        for _ in range(channels):
            if float_:
                out += struct.pack("<f", v)
            elif bits == 8:
                out += struct.pack("<B", int(v * 127) + 128)
            elif bits == 16:
                out += struct.pack("<h", int(v * 32767))
            elif bits == 24:
                out += struct.pack("<i", int(v * 8388607))[:3]
            else:
                out += struct.pack("<i", int(v * 2147483647))
    return bytes(out)


def wav(fmt, channels, rate, bits, n, extra=b"", extensible=False):
    body = b"WAVE" + chunk(b"fmt ", fmt_body(fmt, channels, rate, bits, extensible)) + extra
    body += chunk(b"data", samples(n, channels, bits, fmt == 3))
    return b"RIFF" + struct.pack("<I", len(body)) + body


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "pcm16-16k-mono.wav": wav(1, 1, 16000, 16, 200),
        "pcm16-44k-stereo.wav": wav(1, 2, 44100, 16, 300),
        "pcm8-8k.wav": wav(1, 1, 8000, 8, 200),
        "float-22k-odd-list.wav": wav(3, 1, 22050, 32, 150, extra=chunk(b"LIST", b"INFOISFT\x03\0\0\0ab\0")),
        "pcm24-48k-extensible.wav": wav(1, 1, 48000, 24, 200, extensible=True),
        "pcm32-11k-junk.wav": wav(1, 1, 11025, 32, 100, extra=chunk(b"JUNK", b"\0" * 5)),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
