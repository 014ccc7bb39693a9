"""Drives `famlx serve` with the official `openai` client (pinned in
fixtures/requirements.txt) for host/tests/it/serve/api.rs. Usage:
    python serve_client.py SCENARIO BASE_URL 'JSON ARGS'
Prints one JSON object of what it saw; the Rust test asserts on it."""

import base64
import concurrent.futures
import json
import sys
import time

import jsonschema
import openai


def client(base, key="none"):
    return openai.OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)


def err(e):
    return {"status": getattr(e, "status_code", None), "type": type(e).__name__, "body": getattr(e, "body", None)}


def basics(base, a):
    c = client(base)
    msgs = [{"role": "user", "content": a["prompt"]}]
    out = {"models": [m.id for m in c.models.list().data]}
    r = c.chat.completions.create(model=a["model"], messages=msgs, max_tokens=a["n"], temperature=0)
    out["chat"] = {"content": r.choices[0].message.content, "finish": r.choices[0].finish_reason,
                   "usage": r.usage.model_dump()}
    parts, usage, finish, roles = [], None, None, []
    for ch in c.chat.completions.create(model=a["model"], messages=msgs, max_tokens=a["n"], temperature=0,
                                        stream=True, stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage.model_dump()
        for choice in ch.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            parts.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    out["chat_stream"] = {"content": "".join(parts), "finish": finish, "usage": usage, "roles": roles}
    r = c.completions.create(model=a["model"], prompt=a["prompt"], max_tokens=a["n"], temperature=0)
    out["completion"] = {"text": r.choices[0].text, "finish": r.choices[0].finish_reason}
    text = "".join(ch.choices[0].text for ch in c.completions.create(
        model=a["model"], prompt=a["prompt"], max_tokens=a["n"], temperature=0, stream=True) if ch.choices)
    out["completion_stream"] = text
    # Stop string: a piece from the middle of the greedy reply.
    full = out["chat"]["content"]
    stop = full[len(full) // 2:len(full) // 2 + 3]
    r = c.chat.completions.create(model=a["model"], messages=msgs, max_tokens=a["n"], temperature=0, stop=[stop])
    out["stopped"] = {"stop": stop, "content": r.choices[0].message.content, "finish": r.choices[0].finish_reason}
    r = c.chat.completions.create(model=a["model"], messages=msgs, max_tokens=4, temperature=0,
                                  logprobs=True, top_logprobs=3)
    out["logprobs"] = [{"logprob": t.logprob, "top": [x.logprob for x in t.top_logprobs]}
                       for t in r.choices[0].logprobs.content]
    # Sampling with a seed repeats; penalties and bias are accepted.
    seeded = [c.chat.completions.create(model=a["model"], messages=msgs, max_tokens=8, temperature=1.0, seed=7,
                                        top_p=0.9, presence_penalty=0.5, frequency_penalty=0.5,
                                        logit_bias={"5": 2.0}).choices[0].message.content for _ in range(2)]
    out["seeded"] = seeded
    errors = {}
    for name, kw in {
        "temperature": {"temperature": -1},
        "n": {"n": 2},
        "model": {"model": "no-such-model"},
        "top_logprobs": {"top_logprobs": 3},
        "tool_choice": {"tool_choice": "required"},
    }.items():
        try:
            kw = {"model": a["model"], "messages": msgs, "max_tokens": 2, **kw}
            c.chat.completions.create(**kw)
            errors[name] = None
        except openai.APIStatusError as e:
            errors[name] = err(e)
    try:
        c.chat.completions.create(model=a["model"], messages=[{"role": "user", "content": "x " * a["long"]}],
                                  max_tokens=2)
        errors["too_long"] = None
    except openai.APIStatusError as e:
        errors["too_long"] = err(e)
    out["errors"] = errors
    return out


def together(base, a):
    """Each prompt greedily, all at once, then again one by one."""
    c = client(base)

    def one(p):
        r = c.completions.create(model=a["model"], prompt=p, max_tokens=a["n"][a["prompts"].index(p)],
                                 temperature=0)
        return r.choices[0].text

    with concurrent.futures.ThreadPoolExecutor(len(a["prompts"])) as ex:
        together = list(ex.map(one, a["prompts"]))
    alone = [one(p) for p in a["prompts"]]
    return {"together": together, "alone": alone}


def staggered(base, a):
    """Each prompt greedily, started a little apart (a request decoding
    alone is joined by others while it runs), then one by one; and one
    sampled request alone."""
    c = client(base)

    def one(i, gap=0.0):
        time.sleep(i * gap)
        r = c.completions.create(model=a["model"], prompt=a["prompts"][i], max_tokens=a["n"][i], temperature=0)
        return r.choices[0].text

    with concurrent.futures.ThreadPoolExecutor(len(a["prompts"])) as ex:
        together = list(ex.map(lambda i: one(i, a["gap"]), range(len(a["prompts"]))))
    alone = [one(i) for i in range(len(a["prompts"]))]
    r = c.completions.create(model=a["model"], prompt=a["prompts"][0], max_tokens=16, temperature=0.8, top_p=0.9)
    return {"together": together, "alone": alone, "sampled": r.usage.completion_tokens}


def guided(base, a):
    """Completions held to a JSON schema, one at a time: greedy for a few
    prompts, then sampled (no seed), each checked against the schema."""
    c = client(base)
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": a["schema"], "strict": True}}

    def ask(prompt, temperature):
        r = c.completions.create(model=a["model"], prompt=prompt, max_tokens=a["max_tokens"],
                                 temperature=temperature, extra_body={"response_format": fmt})
        return r.choices[0].text

    greedy = [ask(f"thing {i}", 0) for i in range(3)]
    failures = []
    for i in range(a["count"]):
        text = ask(f"other {i}", 1.0)
        try:
            jsonschema.validate(json.loads(text), a["schema"])
        except Exception as e:  # noqa: BLE001 - any failure is reported
            failures.append(f"{type(e).__name__}: {e}: {text!r}")
    return {"greedy": greedy, "failures": failures}


def media_part(path):
    """A content part carrying the file at `path` inline, as OpenAI takes it."""
    data = base64.b64encode(open(path, "rb").read()).decode()
    if path.endswith(".wav"):
        return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    mime = "image/jpeg" if path.endswith(".jpg") else "image/png"
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def media(base, a):
    """Chat requests with images or clips: each alone, then a follow-up turn
    (its prefix cached), all at once beside text requests; then malformed
    parts."""
    c = client(base)

    def ask(item, followup=False):
        content = [media_part(f) for f in item["files"]] + [{"type": "text", "text": item["text"]}]
        msgs = [{"role": "user", "content": content}]
        if followup:
            msgs += [{"role": "assistant", "content": "Fine."}, {"role": "user", "content": "Again?"}]
        r = c.chat.completions.create(model=a["model"], messages=msgs, max_tokens=a["n"], temperature=0,
                                      logprobs=True, top_logprobs=0)
        details = r.usage.prompt_tokens_details
        return {"tokens": [t.token for t in r.choices[0].logprobs.content],
                "cached": details.cached_tokens if details else 0, "prompt": r.usage.prompt_tokens}

    texts = [{"files": [], "text": "word " * (i * 3 + 1)} for i in range(4)]
    out = {"alone": [ask(i) for i in a["items"]], "texts_alone": [ask(t) for t in texts]}
    out["followup"] = [ask(i, True) for i in a["items"]]
    everything = a["items"] + texts
    with concurrent.futures.ThreadPoolExecutor(len(everything)) as ex:
        together = list(ex.map(ask, everything))
    out["together"] = together[:len(a["items"])]
    out["texts_together"] = together[len(a["items"]):]
    if not a.get("errors"):
        return out
    image = media_part(a["image"])
    bad = {
        "remote": {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        "not_base64": {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}},
        "not_an_image": {"type": "image_url",
                         "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"hello").decode()}},
        "mp3": {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}},
        "not_wav": {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"RIFF").decode(),
                                                           "format": "wav"}},
    }
    if a.get("not_taken"):
        bad["not_taken"] = {"image": image, "audio": media_part(a["clip"])}[a["not_taken"]]
    errors = {}
    for name, part in bad.items():
        try:
            c.chat.completions.create(model=a["model"], max_tokens=2, messages=[
                {"role": "user", "content": [{"type": "text", "text": "look"}, part]}])
            errors[name] = None
        except openai.APIStatusError as e:
            errors[name] = err(e)
    out["errors"] = errors
    return out


def tools(base, a):
    c = client(base)
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
            "parameters": a["schema"]}}
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    out = {}
    r = c.chat.completions.create(model=a["model"], messages=msgs, tools=[tool], tool_choice="required",
                                  max_tokens=200, temperature=0)
    m = r.choices[0].message
    out["required"] = {"finish": r.choices[0].finish_reason, "content": m.content,
                       "calls": [{"name": t.function.name, "arguments": t.function.arguments, "id": t.id}
                                 for t in (m.tool_calls or [])]}
    calls, finish = {}, None
    for ch in c.chat.completions.create(model=a["model"], messages=msgs, tools=[tool], max_tokens=200,
                                        temperature=0, stream=True,
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}}):
        for choice in ch.choices:
            finish = choice.finish_reason or finish
            for t in choice.delta.tool_calls or []:
                d = calls.setdefault(t.index, {"name": "", "arguments": ""})
                d["name"] += t.function.name or ""
                d["arguments"] += t.function.arguments or ""
    out["stream"] = {"finish": finish, "calls": list(calls.values())}
    call = out["required"]["calls"][0] if out["required"]["calls"] else None
    if call:
        follow = msgs + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call["id"], "type": "function", "function": {"name": call["name"],
                                                                      "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 21 C"},
        ]
        r = c.chat.completions.create(model=a["model"], messages=follow, tools=[tool], max_tokens=5, temperature=0)
        out["follow_up"] = r.choices[0].finish_reason
    return out


def schema(base, a):
    c = client(base)
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": a["schema"], "strict": True}}
    results = []
    for i in range(a["count"]):
        r = c.chat.completions.create(model=a["model"], messages=[{"role": "user", "content": f"thing {i}"}],
                                      response_format=fmt, max_tokens=a["max_tokens"], temperature=1.0, seed=i)
        text = r.choices[0].message.content
        try:
            jsonschema.validate(json.loads(text), a["schema"])
            results.append(None)
        except Exception as e:  # noqa: BLE001 - any failure is reported
            results.append(f"{type(e).__name__}: {e}: {text!r}")
    r = c.chat.completions.create(model=a["model"], messages=[{"role": "user", "content": "x"}],
                                  response_format={"type": "json_object"}, max_tokens=a["max_tokens"], temperature=0)
    return {"failures": [r for r in results if r], "count": len(results), "finish": r.choices[0].finish_reason}


def auth(base, a):
    out = {}
    try:
        client(base, "wrong").models.list()
        out["wrong"] = None
    except openai.APIStatusError as e:
        out["wrong"] = err(e)
    out["right"] = [m.id for m in client(base, a["key"]).models.list().data]
    return out


if __name__ == "__main__":
    scenario, base, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    print(json.dumps(globals()[scenario](base, args)))
