// llama.cpp's own greedy continuation of raw-completion prompts, as the
// reference famlx is checked against teacher-forced (issue 37).
// Usage: node llamacpp_greedy.mjs MODEL.gguf N THREADS < prompts.json
// (prompts.json: a JSON array of prompt strings). Prints one JSON object:
// {"add_bos", "add_eos", "prompts": [{"text", "prompt_ids",
//  "continuation_ids", "top1_gaps", "eog_at"}]}.
// Run where `npm install node-llama-cpp@3.22.1` was done
// (fixtures/make_llamacpp_continuations.py does that in the user cache).
//
// Tokenization is what llama.cpp's completion tool does by default
// (common_tokenize with add_special and parse_special on): BOS first when the
// GGUF says add_bos_token, EOS last when it says add_eos_token, no chat
// template. Decoding is greedy (temperature 0, no penalties) for exactly N
// tokens: controlledEvaluate never stops at an end-of-generation token, so
// one the model emits is fed back like any other and its positions are listed
// in eog_at. top1_gaps[i] is llama.cpp's raw top-1 minus top-2 logit at step i
// (the greedy sampler leaves the logits untouched).
import {getLlama} from "node-llama-cpp";
import {readFileSync} from "node:fs";

const [modelPath, N = "64", threads = "2"] = process.argv.slice(2);
const steps = +N;
const texts = JSON.parse(readFileSync(0, "utf8"));
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0});
const addBos = model.tokens.shouldPrependBosToken;
const addEos = model.tokens.shouldAppendEosToken;

// Sample greedily after this token and return the top two raw logits.
const top2 = {filter: {tokens: [], includeTop: 2}};
const next = tok => [tok, {generateNext: {token: true, options: {temperature: 0}, logits: top2}}];

function step(out) {
  const {token, logits} = out.next;
  const top = [...logits.values()].sort((a, b) => b - a);
  if (logits.get(token) !== top[0]) throw new Error(`greedy token ${token} is not the top logit`);
  return {token, gap: top[0] - top[1]};
}

const prompts = [];
for (const text of texts) {
  const ids = [...(addBos ? [model.tokens.bos] : []), ...model.tokenize(text, true)];
  if (addEos) ids.push(model.tokens.eos);
  // A fresh context per prompt: no state carries from one prompt to the next.
  const ctx = await model.createContext({contextSize: ids.length + steps + 16, threads: +threads, batchSize: 512});
  const seq = ctx.getSequence();
  const first = await seq.controlledEvaluate([...ids.slice(0, -1), next(ids[ids.length - 1])]);
  let s = step(first[ids.length - 1]);
  const cont = [s.token], gaps = [s.gap];
  while (cont.length < steps) {
    s = step((await seq.controlledEvaluate([next(s.token)]))[0]);
    cont.push(s.token);
    gaps.push(s.gap);
  }
  const eogAt = cont.flatMap((t, i) => (model.isEogToken(t) ? [i] : []));
  prompts.push({text, prompt_ids: ids, continuation_ids: cont, top1_gaps: gaps.map(g => +g.toFixed(4)), eog_at: eogAt});
  await ctx.dispose();
}
console.log(JSON.stringify({add_bos: addBos, add_eos: addEos, prompts}));
await model.dispose();
await llama.dispose();
