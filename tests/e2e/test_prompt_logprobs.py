"""Scoring a prompt end to end (issue 37): `echo` on /v1/completions (with `logprobs`, and
`max_tokens: 0` to score without generating), vLLM's `prompt_logprobs` on completions and chat,
echo streamed and with n > 1, and lm-evaluation-harness's loglikelihood request. Checked against
llama.cpp's logits (tests/reference/smollm2_prompt_logprobs.json: per prompt token k + 1 its
logprob, rank and top 5 from position k) and against the engine's own teacher forcing (a prompt
cut at j, generating one token, must see exactly the distribution the scored prompt has at j).
Tokens are compared by id (vLLM's `return_tokens_as_token_ids`). Nothing waits on time or asserts
on speed."""
import json
import math
import re
import time

import openai
import pytest
import requests

from conftest import ROOT, skip_unless_prompt_outputs

MODEL_ID = "SmolLM2-135M-Instruct"
REFERENCE = json.loads((ROOT / "tests" / "reference" / "smollm2_prompt_logprobs.json")
                       .read_text())
PROMPTS = REFERENCE["prompts"]
TOP_N = REFERENCE["top_n"]  # 5
TOLERANCE = 1e-3  # |our logprob - llama.cpp's|
TIE = 1e-3  # logprobs closer than this may order either way
LONG = next(i for i, p in enumerate(PROMPTS) if p["kind"] == "raw_long")
WAIT_S = 120


def tid(token_id):
    return f"token_id:{token_id}"


def id_of(token):
    assert token.startswith("token_id:"), token
    return int(token[len("token_id:"):])


def score(client, prompt, n=TOP_N, **kwargs):
    """The prompt scored: echo, logprobs n, max_tokens 0, greedy, tokens named by id."""
    return client.completions.create(
        model=MODEL_ID, prompt=prompt, echo=True, logprobs=n, max_tokens=0, temperature=0,
        extra_body={"return_tokens_as_token_ids": True, **kwargs.pop("extra_body", {})}, **kwargs)


def prompt_id(i):
    return f"{PROMPTS[i]['kind']}{i}"


@pytest.fixture(scope="module", autouse=True)
def _needs_a_backend_with_prompt_outputs(server):
    skip_unless_prompt_outputs(requests.post(
        server.base_url + "/v1/completions",
        json={"prompt": "x y", "echo": True, "logprobs": 1, "max_tokens": 0}, timeout=WAIT_S))


@pytest.fixture(scope="module")
def scored(client_module):
    """Every reference prompt scored once by echo (cached: several tests read them)."""
    return {i: score(client_module, p["prompt_ids"]) for i, p in enumerate(PROMPTS)}


@pytest.fixture(scope="module")
def client_module(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


# --- llama.cpp's logits --------------------------------------------------------------------------

def check_against_reference(r, reference):
    ids = reference["prompt_ids"]
    choice = r.choices[0]
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 0
    assert r.usage.prompt_tokens == len(ids)
    lp = choice.logprobs
    assert lp.tokens == [tid(i) for i in ids]
    assert len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == len(ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.text_offset == sorted(lp.text_offset)
    worst = 0.0
    for k, ref in enumerate(reference["positions"]):
        ours, top = lp.token_logprobs[k + 1], lp.top_logprobs[k + 1]
        assert len(top) == TOP_N, k
        diff = abs(ours - ref["logprob"])
        worst = max(worst, diff)
        assert diff <= TOLERANCE, (k, ours, ref["logprob"])
        # the alternatives, by id: llama.cpp's best is ours where it is not a near tie
        ref_top = ref["top"]
        ours_best = max(top.items(), key=lambda kv: kv[1])
        if ref_top[0][1] - ref_top[1][1] > TIE:
            assert id_of(ours_best[0]) == ref_top[0][0], (k, ours_best, ref_top[:2])
        for token_id, ref_logprob in ref_top:
            if tid(token_id) in top:
                assert abs(top[tid(token_id)] - ref_logprob) <= TOLERANCE, (k, token_id)
    return worst


@pytest.mark.parametrize("i", range(len(PROMPTS)), ids=prompt_id)
def test_echo_logprobs_of_a_prompt_match_llama_cpp(scored, i):
    """Every prompt token after the first: its logprob within 1e-3 of llama.cpp's and the top
    alternative llama.cpp's (the 1059-token prompt crosses prefill chunks)."""
    check_against_reference(scored[i], PROMPTS[i])


def test_the_long_prompt_scores_across_prefill_chunks(client):
    """The >512-token prompt, scored afresh (its prefix now cached from the first scoring) and
    within the tolerance still."""
    reference = PROMPTS[LONG]
    assert len(reference["prompt_ids"]) > 512
    check_against_reference(score(client, reference["prompt_ids"]), reference)


def test_scoring_twice_gives_the_same_numbers(client, scored):
    """The second scoring of a prompt finds its prefix in the cache: the numbers do not move."""
    again = score(client, PROMPTS[0]["prompt_ids"])
    assert again.choices[0].logprobs.token_logprobs == scored[0].choices[0].logprobs.token_logprobs
    assert again.choices[0].logprobs.top_logprobs == scored[0].choices[0].logprobs.top_logprobs


# --- the engine's own teacher forcing ------------------------------------------------------------

def test_scored_positions_equal_teacher_forced_first_tokens_exactly(client, scored):
    """For 8 positions j of a prompt, the prompt ids[:j] generating one token (greedy, logprobs 5)
    gets top_logprobs exactly (==) the scored prompt's at j, and its token the best of them."""
    ids = PROMPTS[2]["prompt_ids"]
    lp = scored[2].choices[0].logprobs
    positions = sorted({1, 2} | {round(f * (len(ids) - 1)) for f in (0.15, 0.3, 0.45, 0.6, 0.8, 1)})
    assert len(positions) == 8
    for j in positions:
        r = client.completions.create(model=MODEL_ID, prompt=ids[:j], max_tokens=1, temperature=0,
                                      logprobs=TOP_N,
                                      extra_body={"return_tokens_as_token_ids": True})
        first = r.choices[0].logprobs
        assert first.top_logprobs[0] == lp.top_logprobs[j], j
        best = max(lp.top_logprobs[j].items(), key=lambda kv: kv[1])
        assert first.tokens[0] == best[0] and first.token_logprobs[0] == best[1], j
        if lp.tokens[j] in lp.top_logprobs[j]:
            assert lp.top_logprobs[j][lp.tokens[j]] == lp.token_logprobs[j], j


# --- echo's text ---------------------------------------------------------------------------------

PLAIN = "The capital of France is"


def test_echo_without_logprobs_is_the_prompt_text(client):
    r = client.completions.create(model=MODEL_ID, prompt=PLAIN, echo=True, max_tokens=0)
    assert r.choices[0].text == PLAIN
    assert r.choices[0].logprobs is None
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 0


def test_echo_with_generation_is_prompt_then_the_plain_text(client):
    plain = client.completions.create(model=MODEL_ID, prompt=PLAIN, max_tokens=5, temperature=0,
                                      logprobs=2)
    echoed = client.completions.create(model=MODEL_ID, prompt=PLAIN, max_tokens=5, temperature=0,
                                       logprobs=2, echo=True)
    assert plain.choices[0].text
    assert echoed.choices[0].text == PLAIN + plain.choices[0].text
    assert echoed.usage.completion_tokens == plain.usage.completion_tokens
    assert echoed.usage.prompt_tokens == plain.usage.prompt_tokens
    # logprobs: the prompt's tokens first, then exactly the plain request's
    ep, pp = echoed.choices[0].logprobs, plain.choices[0].logprobs
    k = echoed.usage.prompt_tokens
    assert len(ep.tokens) == k + len(pp.tokens)
    assert "".join(ep.tokens[:k]) == PLAIN
    assert ep.tokens[k:] == pp.tokens
    assert ep.token_logprobs[k:] == pp.token_logprobs
    assert ep.top_logprobs[k:] == pp.top_logprobs
    assert ep.token_logprobs[0] is None and ep.top_logprobs[0] is None
    assert all(x is not None for x in ep.token_logprobs[1:])
    # text_offset indexes the echoed text, prompt and generation alike
    assert ep.text_offset[k:] == [len(PLAIN) + o for o in pp.text_offset]
    for token, offset in zip(ep.tokens, ep.text_offset):
        assert echoed.choices[0].text[offset:offset + len(token)] == token


def test_stop_strings_look_at_the_generation_only(client):
    """A stop string the prompt contains does not end an echoed request; one in the generated
    text cuts it there, after the prompt."""
    plain = client.completions.create(model=MODEL_ID, prompt=PLAIN, max_tokens=12, temperature=0)
    generated = plain.choices[0].text
    assert len(generated) > 4
    stop = generated[2:4]
    in_prompt = PLAIN[:3]
    echoed = client.completions.create(model=MODEL_ID, prompt=PLAIN, max_tokens=12, temperature=0,
                                       echo=True, stop=[stop, in_prompt])
    kept = generated[:generated.find(stop)] if in_prompt not in generated[:generated.find(stop)] \
        else None
    assert kept is not None, "pick another stop string: the prompt's comes first"
    assert echoed.choices[0].text == PLAIN + kept
    assert echoed.choices[0].finish_reason == "stop"


def test_max_tokens_zero_without_echo_is_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=MODEL_ID, prompt=PLAIN, max_tokens=0)
    assert bad.value.body["param"] == "max_tokens"


# --- vLLM's prompt_logprobs ----------------------------------------------------------------------

def check_prompt_logprobs(prompt_logprobs, ids, echo_logprobs, reference):
    """vLLM's list against the echo logprobs of the same ids (exactly) and llama.cpp's ranks."""
    assert len(prompt_logprobs) == len(ids)
    assert prompt_logprobs[0] is None
    for k in range(1, len(ids)):
        entry = prompt_logprobs[k]
        token = entry[str(ids[k])]
        assert token["logprob"] == echo_logprobs.token_logprobs[k], k
        # the top N by id, as echo's top_logprobs (the prompt token is one more when not in it)
        top = {tid(int(key)): v["logprob"] for key, v in entry.items() if v["rank"] <= TOP_N}
        assert top == echo_logprobs.top_logprobs[k], k
        assert len(entry) == TOP_N + (0 if token["rank"] <= TOP_N else 1), k
        assert sorted(v["rank"] for key, v in entry.items() if v["rank"] <= TOP_N) \
            == list(range(1, TOP_N + 1)), k
        assert all(isinstance(v["decoded_token"], str) for v in entry.values())
        best = max(entry.items(), key=lambda kv: kv[1]["logprob"])
        assert best[1]["rank"] == 1
        if best[0] == str(ids[k]):
            assert token["rank"] == 1, k  # the prompt token is the top alternative
        # llama.cpp's rank, where no near tie can reorder it
        ref = reference["positions"][k - 1]
        ref_rank, ref_top = ref["rank"], ref["top"]
        if ref_rank <= TOP_N:
            neighbours = [ref_top[r][1] for r in (ref_rank - 2, ref_rank) if 0 <= r < TOP_N]
            if all(abs(ref["logprob"] - x) > TIE for x in neighbours):
                assert token["rank"] == ref_rank, k
        elif ref["logprob"] < ref_top[-1][1] - TIE:
            assert token["rank"] > TOP_N, k


def test_prompt_logprobs_on_completions_equal_the_echo_logprobs(server, scored):
    for i in (0, LONG):
        ids = PROMPTS[i]["prompt_ids"]
        r = requests.post(server.base_url + "/v1/completions",
                          json={"model": MODEL_ID, "prompt": ids, "prompt_logprobs": TOP_N,
                                "max_tokens": 1, "temperature": 0}, timeout=WAIT_S)
        assert r.status_code == 200, r.text
        body = r.json()
        assert "prompt_logprobs" not in body  # completions: in the choice
        choice = body["choices"][0]
        assert choice["text"] and choice["logprobs"] is None  # no echo asked for
        check_prompt_logprobs(choice["prompt_logprobs"], ids, scored[i].choices[0].logprobs,
                              PROMPTS[i])
        assert body["usage"]["completion_tokens"] == 1


def test_prompt_logprobs_on_chat_are_top_level(server, scored):
    reference = PROMPTS[0]
    r = requests.post(server.base_url + "/v1/chat/completions",
                      json={"model": MODEL_ID, "messages": reference["messages"],
                            "prompt_logprobs": TOP_N, "max_tokens": 1, "temperature": 0},
                      timeout=WAIT_S)
    assert r.status_code == 200, r.text
    body = r.json()
    assert "prompt_logprobs" not in body["choices"][0]
    # the chat template renders llama.cpp's prompt: the same ids, the same numbers as echo's
    assert body["usage"]["prompt_tokens"] == len(reference["prompt_ids"])
    check_prompt_logprobs(body["prompt_logprobs"], reference["prompt_ids"],
                          scored[0].choices[0].logprobs, reference)


@pytest.mark.parametrize("logprobs,prompt_logprobs", [(2, 4), (4, 2), (3, 3)])
def test_prompt_logprobs_with_echo_and_logprobs_together(server, logprobs, prompt_logprobs):
    """Both asked for: echo's logprobs hold `logprobs` alternatives at every token, prompt and
    generated alike (as vLLM's do), and the list `prompt_logprobs` (plus the prompt token)."""
    ids = PROMPTS[1]["prompt_ids"]
    r = requests.post(server.base_url + "/v1/completions",
                      json={"model": MODEL_ID, "prompt": ids, "echo": True, "logprobs": logprobs,
                            "prompt_logprobs": prompt_logprobs, "max_tokens": 2,
                            "temperature": 0, "return_tokens_as_token_ids": True},
                      timeout=WAIT_S)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    lp, pl = choice["logprobs"], choice["prompt_logprobs"]
    assert pl[0] is None and lp["top_logprobs"][0] is None
    assert len(pl) == len(ids) and len(lp["tokens"]) == len(ids) + 2
    for k in range(1, len(ids)):
        assert len(lp["top_logprobs"][k]) == logprobs, k
        assert sum(v["rank"] <= prompt_logprobs for v in pl[k].values()) == prompt_logprobs, k
        assert len(pl[k]) in (prompt_logprobs, prompt_logprobs + 1), k
        assert pl[k][str(ids[k])]["logprob"] == lp["token_logprobs"][k], k
    for k in range(len(ids), len(ids) + 2):
        assert len(lp["top_logprobs"][k]) == logprobs, k


# --- echo streamed, and with n > 1 ---------------------------------------------------------------

def test_streamed_echo_sends_the_prompt_first(client):
    whole = client.completions.create(model=MODEL_ID, prompt=PLAIN, echo=True, max_tokens=6,
                                      temperature=0)
    texts = [c.choices[0].text for c in client.completions.create(
        model=MODEL_ID, prompt=PLAIN, echo=True, max_tokens=6, temperature=0, stream=True)
        if c.choices]
    assert texts[0] == PLAIN
    assert "".join(texts) == whole.choices[0].text
    assert whole.choices[0].text.startswith(PLAIN) and len(whole.choices[0].text) > len(PLAIN)


def test_echo_with_n2_echoes_in_each_choice(client):
    r = client.completions.create(model=MODEL_ID, prompt=PLAIN, echo=True, n=2, max_tokens=6,
                                  temperature=1, seed=11)
    assert [c.index for c in r.choices] == [0, 1]
    for choice in r.choices:
        assert choice.text.startswith(PLAIN) and len(choice.text) > len(PLAIN)
    firsts, texts = {}, {0: "", 1: ""}
    for chunk in client.completions.create(model=MODEL_ID, prompt=PLAIN, echo=True, n=2,
                                           max_tokens=6, temperature=1, seed=11, stream=True):
        for choice in chunk.choices:
            firsts.setdefault(choice.index, choice.text)
            texts[choice.index] += choice.text
    assert firsts == {0: PLAIN, 1: PLAIN}
    assert [texts[0], texts[1]] == [c.text for c in r.choices]


def test_echo_max_tokens_zero_with_n2_scores_each_choice(client):
    r = client.completions.create(model=MODEL_ID, prompt=PLAIN, echo=True, n=2, max_tokens=0,
                                  logprobs=1)
    assert len(r.choices) == 2 and r.usage.completion_tokens == 0
    assert r.choices[0].text == r.choices[1].text == PLAIN
    assert r.choices[0].logprobs.token_logprobs == r.choices[1].logprobs.token_logprobs


# --- lm-evaluation-harness ------------------------------------------------------------------------

def loglikelihood(server, context, continuation):
    """lm-eval's loglikelihood request (its OpenAI completions model): context + continuation as
    one string, echo, max_tokens 0, logprobs 1, greedy; the continuation's tokens are those after
    the context's (found here by /tokenize, as lm-eval's own tokenizer would). Returns
    (summed logprob, is_greedy, the continuation's token_logprobs)."""
    r = requests.post(server.base_url + "/v1/completions",
                      json={"model": MODEL_ID, "prompt": context + continuation, "echo": True,
                            "max_tokens": 0, "logprobs": 1, "temperature": 0}, timeout=WAIT_S)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == context + continuation
    lp = choice["logprobs"]
    t = requests.post(server.base_url + "/tokenize", json={"content": context}, timeout=WAIT_S)
    ctxlen = len(t.json()["tokens"])
    assert 0 < ctxlen < len(lp["tokens"])
    assert lp["text_offset"][ctxlen] == len(context)  # the split is at the context's end
    # lm-eval's get_result
    logprobs = lp["token_logprobs"][ctxlen:]
    continuation_logprob = sum(logprobs)
    is_greedy = True
    for i in range(ctxlen, len(lp["tokens"])):
        token = lp["tokens"][i]
        top_tokens = lp["top_logprobs"][i]
        top_token = max(top_tokens.keys(), key=lambda x: top_tokens[x])
        if top_token != token:
            is_greedy = False
            break
    return continuation_logprob, is_greedy, logprobs, lp


def test_lm_eval_loglikelihood_request(server, client):
    context = "The capital of France is"
    greedy = client.completions.create(model=MODEL_ID, prompt=context, max_tokens=2,
                                       temperature=0).choices[0].text
    assert greedy.startswith(" ")
    good, good_greedy, good_lps, lp = loglikelihood(server, context, greedy)
    bad, bad_greedy, bad_lps, _ = loglikelihood(server, context, " Berlin is")
    for value, lps in ((good, good_lps), (bad, bad_lps)):
        assert math.isfinite(value) and value < 0
        assert all(x is not None and math.isfinite(x) and x <= 0 for x in lps)
        assert value == sum(lps)
    # the model's own greedy continuation is greedy by lm-eval's test, and consistent with it:
    # each of its tokens is the one top alternative, at its own logprob
    assert good_greedy
    ctxlen = len(lp["tokens"]) - len(good_lps)
    for i in range(ctxlen, len(lp["tokens"])):
        assert lp["top_logprobs"][i] == {lp["tokens"][i]: lp["token_logprobs"][i]}
    assert not bad_greedy
    assert bad < good


# --- /metrics ------------------------------------------------------------------------------------

def requests_by_kind(server):
    counts = {}
    for line in requests.get(server.base_url + "/metrics", timeout=30).text.splitlines():
        m = re.match(r'^troupe:requests_by_kind_total\{[^}]*kind="([a-z]+)"[^}]*\} (\S+)$', line)
        if m:
            counts[m.group(1)] = float(m.group(2))
    return counts


def test_metrics_count_scoring_apart_from_generation(start_server):
    """echo with max_tokens 0 ends as kind "score" in troupe:requests_by_kind_total; echo that
    generates is a "generate". (Its own server: the counters hold only these.)"""
    server = start_server().wait_ready()
    for max_tokens in (0, 2):
        r = requests.post(server.base_url + "/v1/completions",
                          json={"model": MODEL_ID, "prompt": PLAIN, "echo": True, "logprobs": 1,
                                "max_tokens": max_tokens, "temperature": 0}, timeout=WAIT_S)
        assert r.status_code == 200, r.text
    deadline = time.time() + WAIT_S
    while sum(requests_by_kind(server).values()) < 2 and time.time() < deadline:
        time.sleep(0.1)
    assert requests_by_kind(server) == {"generate": 1, "embedding": 0, "score": 1}
