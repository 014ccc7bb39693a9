// llama.cpp (node-llama-cpp's prebuilt CPU build) timed as `famlx bench`
// and mlx_lm.benchmark time: a prompt of P pseudo-random token ids, then G
// greedy tokens; one warm-up trial, then TRIALS timed ones.
// Usage: node llamacpp_bench.mjs MODEL.gguf P G TRIALS THREADS
// Run where `npm install node-llama-cpp@3.22.1` was done (cpu_vs_llamacpp.py
// does that in the user cache).
import {getLlama} from "node-llama-cpp";

const [modelPath, P = "128", G = "64", N = "3", threads = "2"] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const p = +P, g = +G;
const vocab = +(process.env.VOCAB || 49000);
const trials = [];
for (let t = 0; t <= +N; t++) {
  const ctx = await model.createContext({contextSize: p + g + 16, threads: +threads, batchSize: Math.max(512, p)});
  const seq = ctx.getSequence();
  let x = 12345 + t;
  const prompt = [];
  for (let i = 0; i < p; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    prompt.push(x % vocab);
  }
  const t0 = performance.now();
  await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, p - 1));
  const t1 = performance.now();
  let n = 0;
  for await (const _ of seq.evaluate([prompt[p - 1]], {temperature: 0})) {
    if (++n >= g) break;
  }
  const t2 = performance.now();
  if (t > 0) trials.push({prompt_tps: (p - 1) / ((t1 - t0) / 1000), generation_tps: n / ((t2 - t1) / 1000)});
  await ctx.dispose();
}
const median = k => {
  const v = trials.map(o => o[k]).sort((a, b) => a - b);
  return v[Math.floor(v.length / 2)];
};
console.log(JSON.stringify({tool: "llama.cpp", trials, prompt_tps: median("prompt_tps"), generation_tps: median("generation_tps"), model_bytes: model.size}));
