"""A small Qwen3.5 base that calls the computer by itself (issue 39, item 7).

Trains a Qwen3.5 text model (transformers' ``Qwen3_5ForCausalLM``: GDN layers, full
attention every 4th) with Qwen3.5's real tokenizer and the project's chat template
(tests/merge/qwen35.py) on generated conversations in Qwen3.5's format:

- **tools offered** (the ``calc`` tool of deltachip/chat.py in the system turn): the user
  asks an arithmetic question (big integers, fractions, floor division, gcd: what calc
  takes); the assistant writes the XML call with the question's expression; the tool turn
  holds the exact result (Python's ``fractions.Fraction``, printed as calc prints it); the
  assistant answers with one sentence holding the result;
- **no tools**: the user asks, the assistant answers with the sentence directly (the true
  result as its target): the base alone.

Each conversation is what the model sees at inference, piece by piece: the prompt as
``apply_chat_template(..., add_generation_prompt=True)`` renders it (tokenized alone, as a
chat's prompt is), then the call as the template renders an assistant's ``tool_calls``,
then the tool turn as the template renders it after the call (``<|im_end|>\\n<|im_start|>
user\\n<tool_response>\\n…\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n<think>\\n
\\n</think>\\n\\n``: what the bridge gives after ``</tool_call>``), then the sentence. A
quarter of the prompts are in thinking mode (``<think>\\n``): the model closes the empty
block itself before it calls or answers. The loss is on the assistant's tokens only (the
call, the ``<|im_end|>`` after it, the sentence and its ``<|im_end|>``).

Training is cheap on a CPU because the corpus uses a few hundred of Qwen3.5's 248,320 ids:
the model is trained on those ids alone (its embedding and lm_head have one row per id used)
and saved with the full vocabulary, the rows of every other id zero. A zero lm_head row
gives the logit 0, so the training loss is the full vocabulary's: the softmax over the ids
used has one more logit, ``log(248,320 - used)``, the zero rows' share, and the loss pushes
every target's logit far above 0. ``accuracy`` counts the ids outside the corpus that greedy
decoding picked (none, measured).

The model (:func:`default_params`): hidden 64, 4 layers (3 GDN layers of 2 key and 4 value
heads of 64, full attention in the 4th), MLP 128, untied: 336,280 parameters besides its
embedding and lm_head (248,320 x 64 each, 214 rows trained). What it must learn is to copy
digits (the question's expression into the call, the tool's result into the sentence), and
a model this small learns that in one sudden step that may not come in the budget (in
1,500 steps at a constant learning rate it did not; with the slow ramp below it came after
200-500 steps, seeds 0-2). So a **warm-up** first trains on short conversations without
tools that ask the value of a lone number (the answer copies it), until the copy is learnt
(the loss's running mean below 0.1; at most 1,500 steps), with the learning rate ramping
from lr/25 to lr over 130 steps as a cosine; then 2,000 steps of the conversations (12 with
tools and 4 without a step), a one-cycle learning rate (peak 3e-3), AdamW, gradients
clipped at 1. The tools' prefix (the system turn, the same in every conversation) runs once
a step and its cache is shared by the batch's rows, gradients included. Seed 0: 353 warm-up
steps, 25 minutes in all on one thread of a shared 2-core machine, 1.9 GB peak.

    python benchmarks/tool_model.py build --seed 0          # prints the model's directory
    python benchmarks/tool_model.py accuracy --model DIR [--merged MERGED] --n 200 --seed 12345

``build`` caches the model (bf16 safetensors, Qwen3.5's tokenizer files and chat template,
a base ``deltachip merge`` takes) in ``$DELTACHIP_CACHE/tool-model-<params-hash>/`` and
reuses it; the loss goes on stderr. ``accuracy`` measures, on held-out questions (a seed
training never uses; a question whose expression is a training one is skipped): (a) the
base alone, no tools: exact answers; (b) the base with the tool offered and nobody to
answer: well-formed calls with the question's expression (and, with the exact result given
as the tool turn by Python, exact answers); (c) with ``--merged``: the merged model, the
computer answering inside ``generate()``: exact answers.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.trained_base import config as base_config  # noqa: E402

#: Qwen3.5's ids (tests/merge/qwen35.py): vocab_size, <|im_end|> (eos), <|endoftext|> (pad)
VOCAB_SIZE, EOS, PAD = 248_320, 248_046, 248_044
#: the generator's version: part of the cache key (change it when conversations change)
CORPUS_VERSION = 1

QUESTIONS = ("What is {e}?", "What is {e} exactly?", "Compute {e}.", "Calculate {e}.",
             "How much is {e}?", "Please work out {e}.", "{e} = ?", "Evaluate {e}.",
             "What does {e} equal?", "I need the exact value of {e}.", "what's {e}",
             "Can you compute {e} for me?")
ANSWER = "The answer is {r}."


# ---- questions ----------------------------------------------------------------------

def _num(rng: random.Random, digits: int) -> int:
    """A number of exactly ``digits`` digits (no leading zero: calc refuses them; not 0)."""
    return rng.randrange(10 ** (digits - 1) if digits > 1 else 1, 10 ** digits)


def _op(op: str, spaced: bool) -> str:
    return f" {op} " if spaced else op


def expression(rng: random.Random) -> str:
    """One arithmetic expression of the kinds calc takes (firmware/calc/calc.c): big
    powers, products, sums and differences of long integers, floor division and
    remainders, gcd, and sums, products and quotients of fractions; results up to about
    40 digits."""
    kind = rng.choices(("pow", "mul", "add", "sub", "frac", "fracmix", "floordiv", "mod",
                        "gcd", "mix"), (3, 3, 2, 2, 2, 1, 1, 1, 1, 1))[0]
    s = rng.random() < 0.5
    if kind == "pow":
        a = rng.choice((2, 2, 2, 3, 5, 7, 10, 11, 12, 13, 17, rng.randrange(2, 100)))
        top = max(2, int(40 / math.log10(a)))
        return f"{a}{_op('**', s and rng.random() < 0.3)}{rng.randrange(2, top + 1)}"
    if kind == "mul":
        m = rng.randrange(2, 21)
        return f"{_num(rng, m)}{_op('*', s)}{_num(rng, rng.randrange(1, max(2, 41 - m)))}"
    if kind in ("add", "sub"):
        op = "+" if kind == "add" else "-"
        a, b = _num(rng, rng.randrange(3, 36)), _num(rng, rng.randrange(3, 36))
        return f"{a}{_op(op, s)}{b}"
    if kind == "frac":
        op = rng.choice("+-*")
        a, b, c, d = (rng.randrange(1, 100) for _ in range(4))
        return f"{a}/{b}{_op(op, s)}{c}/{d}"
    if kind == "fracmix":
        a, b, c, d, e = (rng.randrange(1, 50) for _ in range(5))
        return f"({a}/{b}{_op(rng.choice('+-'), s)}{c}/{d}){_op('*', s)}{e}"
    if kind in ("floordiv", "mod"):
        op = "//" if kind == "floordiv" else "%"
        a, b = _num(rng, rng.randrange(6, 36)), _num(rng, rng.randrange(1, 11))
        return f"{a}{_op(op, s)}{b}"
    if kind == "gcd":
        g = _num(rng, rng.randrange(1, 8))
        x, y = (_num(rng, rng.randrange(1, 10)) for _ in range(2))
        return f"gcd({g * x},{' ' if s else ''}{g * y})"
    a, b, c = (_num(rng, rng.randrange(2, 13)) for _ in range(3))
    if rng.random() < 0.5:
        return f"{a}{_op('*', s)}{b}{_op('+', s)}{c}"
    return f"({a}{_op('+', s)}{b}){_op('*', s)}{c}"


def evaluate(expr: str) -> str:
    """``expr``'s exact value as calc prints it: an integer, or p/q in lowest terms (q > 0);
    every number a ``fractions.Fraction``, Python's operators and precedence (calc's)."""
    def gcd(a: Fraction, b: Fraction) -> Fraction:
        return Fraction(math.gcd(int(a), int(b)))
    if not re.fullmatch(r"[\d\s+\-*/%(),]*(gcd[\d\s+\-*/%(),]*)*", expr):
        raise ValueError(f"not an expression calc takes: {expr!r}")
    code = re.sub(r"\d+", lambda m: f"F({m.group()})", expr)
    value = eval(code, {"__builtins__": {}, "F": Fraction, "gcd": gcd})  # noqa: S307
    return str(Fraction(value))


def question(rng: random.Random) -> dict:
    """A question: its expression, the text the user writes, the exact result."""
    e = expression(rng)
    return {"expression": e, "text": rng.choice(QUESTIONS).format(e=e), "result": evaluate(e)}


def number_question(rng: random.Random) -> dict:
    """A warm-up question: the value of a lone number of up to 40 digits (the answer copies
    it)."""
    e = str(_num(rng, rng.randrange(1, 41)))
    return {"expression": e, "text": rng.choice(QUESTIONS).format(e=e), "result": e}


def training_questions(p: dict) -> tuple[list[dict], list[dict]]:
    """The warm-up's questions and the training's (params ``p``)."""
    rng = random.Random(f"warm-up {p['seed']}")
    return ([number_question(rng) for _ in range(p["warmup_steps"] * p["warmup_batch"])],
            questions(p["seed"], p["steps"] * (p["tools_batch"] + p["plain_batch"])))


def questions(seed: int, n: int, exclude: set[str] = frozenset()) -> list[dict]:
    """``n`` questions from ``seed``, none whose expression is in ``exclude``."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        q = question(rng)
        if q["expression"] not in exclude:
            out.append(q)
    return out


# ---- conversations ------------------------------------------------------------------

def call_message(expr: str) -> dict:
    """The assistant's turn that calls calc on ``expr``."""
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calc", "arguments": {"expression": expr}}}]}


def prompt_text(tok, user: str, tools: bool, thinking: bool = False) -> str:
    """The chat's prompt: the user's turn and the generation prompt (the calc tool offered
    in the system turn when ``tools``), as the chat template renders it."""
    from deltachip.chat import CALC_TOOL
    return tok.apply_chat_template([{"role": "user", "content": user}],
                                   tools=[CALC_TOOL] if tools else None, tokenize=False,
                                   add_generation_prompt=True, enable_thinking=thinking)


def tool_turn_text(tok, user: str, expr: str, result: str, thinking: bool = False
                   ) -> tuple[str, str]:
    """(the call, what follows it): the assistant's call as the template renders it, and the
    template's text after ``</tool_call>`` for the tool's answer ``result`` with the next
    generation prompt (what the bridge gives)."""
    from deltachip.chat import CALC_TOOL
    msgs = [{"role": "user", "content": user}, call_message(expr),
            {"role": "tool", "content": result}]
    full = tok.apply_chat_template(msgs, tools=[CALC_TOOL], tokenize=False,
                                   add_generation_prompt=True, enable_thinking=thinking)
    before = tok.apply_chat_template(msgs[:1], tools=[CALC_TOOL], tokenize=False)
    turn = full[len(before):]
    assert turn.startswith("<|im_start|>assistant\n<tool_call>"), turn
    call, end = turn[len("<|im_start|>assistant\n"):].split("</tool_call>", 1)
    return call + "</tool_call>", end


def conversation(tok, q: dict, tools: bool, thinking: tuple[bool, bool] = (False, False)
                 ) -> tuple[list[int], list[int]]:
    """(ids, mask) of one training conversation about question ``q`` (see the module
    docstring); ``mask`` is 1 on the tokens the assistant writes. ``thinking``: whether the
    prompt, and the generation prompt after the tool turn, are in thinking mode."""
    ids: list[int] = []
    mask: list[int] = []

    def add(text: str, trained: bool) -> None:
        t = tok(text, add_special_tokens=False).input_ids
        ids.extend(t)
        mask.extend([int(trained)] * len(t))
    add(prompt_text(tok, q["text"], tools, thinking[0]), False)
    if thinking[0]:
        add("\n</think>\n\n", True)
    if tools:
        call, end = tool_turn_text(tok, q["text"], q["expression"], q["result"], thinking[1])
        add(call, True)
        assert end.startswith("<|im_end|>")
        add("<|im_end|>", True)
        add(end[len("<|im_end|>"):], False)
        if thinking[1]:
            add("\n</think>\n\n", True)
    add(ANSWER.format(r=q["result"]) + "<|im_end|>", True)
    return ids, mask


def corpus(tok, seed: int, n: int, tools_share: float = 0.75, thinking_share: float = 0.25
           ) -> tuple[list[dict], list[tuple[list[int], list[int]]]]:
    """``n`` training conversations from ``seed``: the questions, and (ids, mask) each."""
    qs = questions(seed, n)
    rng = random.Random(f"conversations {seed}")
    convs = []
    for q in qs:
        tools = rng.random() < tools_share
        thinking = (rng.random() < thinking_share, rng.random() < thinking_share)
        convs.append(conversation(tok, q, tools, thinking))
    return qs, convs


def tokenizer(path: Path | None = None):
    """Qwen3.5's real tokenizer and the project's chat template (tests/merge/qwen35.py)."""
    import tempfile
    from transformers import AutoTokenizer
    from tests.merge.qwen35 import save_tokenizer
    if path is not None:
        save_tokenizer(path)
        return AutoTokenizer.from_pretrained(str(path))
    with tempfile.TemporaryDirectory(prefix="qwen35-tok-") as d:    # read whole, then gone
        save_tokenizer(Path(d))
        return AutoTokenizer.from_pretrained(d)


# ---- training -----------------------------------------------------------------------

def model_config(hidden: int, layers: int, intermediate: int, heads: int,
                 vocab: int = VOCAB_SIZE, eos: int = EOS, pad: int = PAD):
    """trained_base's Qwen3.5 config (GDN layers with ``heads`` key heads of 64 and twice as
    many value heads, full attention every 4th layer), untied, with Qwen3.5's ids (the
    compact model's: ``vocab``, ``eos``, ``pad``)."""
    cfg = base_config(vocab, hidden, layers, intermediate, heads)
    cfg.tie_word_embeddings, cfg.eos_token_id, cfg.pad_token_id = False, eos, pad
    return cfg


def _prefix_cache(model, prefix: torch.Tensor, batch: int):
    """The model's cache after ``prefix`` (one row, gradients kept), read by ``batch`` rows
    (expanded, not copied); its layers return the cached state joined to the new one
    instead of updating it in place, so backward reaches the prefix through it."""
    cache = model.model(prefix, use_cache=True).past_key_values
    for layer in cache.layers:
        if hasattr(layer, "recurrent_states"):      # a GDN layer: conv and recurrent states
            layer.conv_states = {k: s.expand(batch, *s.shape[1:])
                                 for k, s in layer.conv_states.items()}
            layer.recurrent_states = {k: s.expand(batch, *s.shape[1:])
                                      for k, s in layer.recurrent_states.items()}
            layer.update_conv_state = (lambda lay: lambda x, state_idx=0, **kw: torch.cat(
                [lay.conv_states[state_idx], x], -1))(layer)
            layer.update_recurrent_state = lambda r, state_idx=0, **kw: r
        else:                                       # full attention: keys and values
            layer.keys = layer.keys.expand(batch, *layer.keys.shape[1:])
            layer.values = layer.values.expand(batch, *layer.values.shape[1:])
    return cache


def _batch(convs: list, start: int, remap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows (ids, mask arrays) from token ``start`` on, right-padded: (compact ids, loss
    mask of the next token)."""
    n = max(len(ids) for ids, _ in convs) - start
    x = torch.full((len(convs), n), int(remap[PAD]), dtype=torch.long)
    m = torch.zeros(len(convs), n, dtype=torch.bool)
    for r, (ids, mask) in enumerate(convs):
        t = torch.from_numpy(ids[start:].astype(np.int64))
        x[r, :len(t)] = remap[t]
        m[r, :len(t) - 1] = torch.from_numpy(mask[start + 1:])
    return x, m


def masked_loss(model, x: torch.Tensor, m: torch.Tensor, zero_logit: float, cache=None
                ) -> tuple[torch.Tensor, int]:
    """Summed cross-entropy of the next tokens where ``m`` is set, the softmax over the
    compact vocabulary plus one logit ``zero_logit`` (the zero rows of the ids not used)."""
    h = model.model(x, cache=cache, use_cache=cache is not None).last_hidden_state
    logits = model.lm_head(h[m])
    logits = torch.cat([logits, logits.new_full((len(logits), 1), zero_logit)], 1)
    target = torch.roll(x, -1, 1)[m]
    return torch.nn.functional.cross_entropy(logits, target, reduction="sum"), int(m.sum())


def train(tok, p: dict, log=sys.stderr):
    """The model of params ``p`` (see :func:`default_params`) trained on fresh conversations
    (``questions(p['seed'], steps * batch)``), in fp32 on the compact vocabulary; returns
    (model, the ids used, a dict of figures: warm-up steps run, last losses, seconds)."""
    from transformers import Qwen3_5ForCausalLM
    torch.set_num_threads(p["threads"])
    warm_qs, qs = training_questions(p)
    rng = random.Random(f"training {p['seed']}")
    plan = [True] * (p["steps"] * p["tools_batch"]) + [False] * (p["steps"] * p["plain_batch"])
    rng.shuffle(plan)
    # every conversation's tokens first: the ids used are the compact vocabulary
    convs, warm = [], []
    for q, tools in zip(qs, plan):
        thinking = (rng.random() < p["thinking"], rng.random() < p["thinking"])
        ids, mask = conversation(tok, q, tools, thinking)
        convs.append((np.array(ids, np.int32), np.array(mask, np.bool_)))
    for q in warm_qs:
        ids, mask = conversation(tok, q, False, (rng.random() < p["thinking"], False))
        warm.append((np.array(ids, np.int32), np.array(mask, np.bool_)))
    used = sorted(set(np.unique(np.concatenate([ids for ids, _ in convs + warm])).tolist())
                  | {EOS, PAD})
    remap = torch.zeros(VOCAB_SIZE, dtype=torch.long)
    remap[torch.tensor(used)] = torch.arange(len(used))
    tools = [c for c, t in zip(convs, plan) if t]
    plain = [c for c, t in zip(convs, plan) if not t]
    prefix = tools[0][0]
    for ids, _ in tools:                     # the tools' prefix: everything before the question
        k = min(len(prefix), len(ids))
        prefix = prefix[:int(np.argmin(np.append(prefix[:k] == ids[:k], False)))]
    prefix_ids = remap[torch.from_numpy(prefix.astype(np.int64))][None]
    zero_logit = math.log(VOCAB_SIZE - len(used))
    torch.manual_seed(p["seed"])
    model = Qwen3_5ForCausalLM(model_config(
        p["hidden"], p["layers"], p["intermediate"], p["heads"], len(used),
        used.index(EOS), used.index(PAD))).train()
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], weight_decay=0.01)
    t0, bw, bt, bp = time.perf_counter(), p["warmup_batch"], p["tools_batch"], p["plain_batch"]
    info: dict = {}

    def update(step: int, total: int, what: str) -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        if step % 25 == 0 or step == total - 1:
            print(f"tool model: {what}, {time.perf_counter() - t0:.0f} s", file=log, flush=True)

    # the warm-up: lone numbers, no tools; the learning rate ramps up from lr/25 to lr over
    # warmup_ramp steps (a cosine, as OneCycleLR's) and stays; it ends when the loss's
    # running mean is below warmup_until (a copy is learnt)
    mean = math.inf
    for step in range(p["warmup_steps"]):
        ramp = (1 - math.cos(math.pi * min(1.0, step / p["warmup_ramp"]))) / 2
        for group in opt.param_groups:
            group["lr"] = p["lr"] * (1 / 25 + (1 - 1 / 25) * ramp)
        xw, mw = _batch(warm[step * bw:(step + 1) * bw], 0, remap)
        lw, nw = masked_loss(model, xw, mw, zero_logit)
        (lw / nw).backward()
        mean = lw.item() / nw if step == 0 else 0.9 * mean + 0.1 * lw.item() / nw
        update(step, p["warmup_steps"], f"warm-up step {step + 1}, loss {lw.item() / nw:.4f}"
                                        f" (running mean {mean:.4f})")
        if mean < p["warmup_until"]:
            break
    info["warmup_steps_run"], info["warmup_loss"] = step + 1, round(mean, 4)
    if mean >= p["warmup_until"]:
        print(f"tool model: warning: the warm-up ended at {p['warmup_steps']} steps with the loss"
              f" at {mean:.3f} (not below {p['warmup_until']}): copying may not be learnt",
              file=log)
    # the conversations: a one-cycle learning rate (up in 5 % of the steps, then down)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, p["lr"], total_steps=p["steps"],
                                                pct_start=0.05)
    for step in range(p["steps"]):
        xt, mt = _batch(tools[step * bt:(step + 1) * bt], len(prefix), remap)
        lt, nt = masked_loss(model, xt, mt, zero_logit, _prefix_cache(model, prefix_ids, bt))
        xp, mp = _batch(plain[step * bp:(step + 1) * bp], 0, remap)
        lp, np_ = masked_loss(model, xp, mp, zero_logit)
        ((lt + lp) / (nt + np_)).backward()
        update(step, p["steps"], f"step {step + 1}/{p['steps']}, loss with tools "
                                 f"{lt.item() / nt:.4f}, without {lp.item() / np_:.4f}")
        sched.step()
    info["loss_tools"], info["loss_plain"] = round(lt.item() / nt, 4), round(lp.item() / np_, 4)
    info["train_seconds"] = round(time.perf_counter() - t0, 1)
    return model.eval(), used, info


# ---- measuring ----------------------------------------------------------------------

CALL = re.compile(r"<tool_call>\n<function=calc>\n<parameter=expression>\n(.*?)\n</parameter>\n"
                  r"</function>\n</tool_call>", re.S)
NUMBER = re.compile(r"-?\d+(?:/\d+)?")


def final_answer(reply: str) -> str | None:
    """The last number (or p/q) of the reply's last turn (after the last ``</think>`` or
    ``</tool_response>``), or None."""
    for mark in ("</think>", "</tool_response>"):
        if mark in reply:
            reply = reply.rsplit(mark, 1)[1]
    found = NUMBER.findall(reply.split("<tool_call>")[0])
    return found[-1] if found else None


class Greedy:
    """Greedy decoding on a Qwen3.5 model, a token at a time with its cache; ``used``: the
    real ids of a compact model's rows (None: the model has the full vocabulary). Counts
    the tokens decoded and those a full-vocabulary model would have picked outside ``used``
    (for a compact model: when every logit is below the zero rows' 0)."""

    def __init__(self, model, used: list[int] | None = None):
        self.model, self.used = model, used
        self.remap = None
        if used is not None:
            self.remap = torch.zeros(VOCAB_SIZE, dtype=torch.long)
            self.remap[torch.tensor(used)] = torch.arange(len(used))
        self.allowed = torch.zeros(VOCAB_SIZE, dtype=torch.bool)
        self.tokens = self.outside = 0

    def start(self, ids: list[int]) -> None:
        self.cache, self.pending = None, list(ids)

    @torch.no_grad()
    def until(self, stops: tuple[int, ...], limit: int) -> list[int]:
        """Feeds what is pending, then decodes until a token of ``stops`` (kept) or
        ``limit`` tokens; returns the tokens decoded."""
        out: list[int] = []
        while len(out) < limit:
            x = torch.tensor([self.pending])
            if self.remap is not None:
                x = self.remap[x]
            r = self.model(x, cache=self.cache, use_cache=True, logits_to_keep=1)
            self.cache = r.past_key_values
            logits = r.logits[0, -1].float()
            k = int(logits.argmax())
            if self.used is not None:
                if logits[k] < 0:
                    self.outside += 1
                k = self.used[k]
            elif self.allowed.any() and not self.allowed[k]:
                self.outside += 1
            self.tokens += 1
            out.append(k)
            self.pending = [k]
            if k in stops:
                break
        return out


def run_question(g: Greedy, tok, q: dict, tools: bool, answer_calls: bool = False,
                 limit: int = 160) -> dict:
    """One held-out question on a base: the reply (no tools, or the tool offered), the call
    it wrote (if any) and its final answer; ``answer_calls``: the call's tool turn is the
    template's with the exact result (what the computer answers), given by Python."""
    g.start(tok(prompt_text(tok, q["text"], tools), add_special_tokens=False).input_ids)
    tool_call_end = tok.convert_tokens_to_ids("</tool_call>")
    out = g.until((EOS, tool_call_end), limit)
    reply = tok.decode(out)
    call = CALL.search(reply)
    res = {"reply": reply, "call": call.group(1) if call else None}
    if answer_calls and out[-1] == tool_call_end and call:
        _, end = tool_turn_text(tok, q["text"], call.group(1), evaluate_or_error(call.group(1)))
        g.pending += tok(end, add_special_tokens=False).input_ids
        more = g.until((EOS,), limit)
        res["reply"] = reply = reply + end + tok.decode(more)
    res["answer"] = final_answer(reply)
    return res


def evaluate_or_error(expr: str) -> str:
    try:
        return evaluate(expr)
    except Exception as e:                       # what calc would answer a bad expression
        return f"error: {type(e).__name__}"


# ---- the cached model ---------------------------------------------------------------

def default_params(seed: int = 0) -> dict:
    """What ``build`` trains (all of it goes into the cache key)."""
    return dict(seed=seed, hidden=64, layers=4, intermediate=128, heads=2, warmup_steps=1500,
                warmup_batch=16, warmup_ramp=130, warmup_until=0.1, steps=2000, tools_batch=12,
                plain_batch=4, lr=3e-3, thinking=0.25, threads=1, corpus=CORPUS_VERSION)


def params_hash(p: dict) -> str:
    return hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()[:12]


def save(model, used: list[int], p: dict, out: Path) -> Path:
    """The compact ``model`` as a Qwen3.5 checkpoint of the full vocabulary at ``out``: bf16,
    embedding and lm_head rows of the ids in ``used`` trained, the others zero; Qwen3.5's
    tokenizer files and chat template beside it."""
    from transformers import GenerationConfig, Qwen3_5ForCausalLM
    from tests.merge.qwen35 import save_tokenizer
    cfg = model_config(p["hidden"], p["layers"], p["intermediate"], p["heads"])
    full = Qwen3_5ForCausalLM(cfg)
    rows = torch.tensor(used)
    with torch.no_grad():
        state = model.state_dict()
        for name, t in full.state_dict().items():
            if name in ("model.embed_tokens.weight", "lm_head.weight"):
                t.zero_()
                t[rows] = state[name]
            else:
                t.copy_(state[name])
    full = full.to(torch.bfloat16)
    full.generation_config = GenerationConfig(eos_token_id=EOS, pad_token_id=PAD)
    full.save_pretrained(str(out))
    save_tokenizer(out)
    return out


def build(seed: int = 0, p: dict | None = None, log=sys.stderr) -> Path:
    """The trained model's directory in the cache (trained and saved there the first time:
    about half an hour on one CPU thread)."""
    import os
    import shutil
    import tempfile
    from common.cachedir import cache_root
    p = p or default_params(seed)
    out = cache_root() / f"tool-model-{params_hash(p)}"
    if (out / "tool_model.json").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}-"))
    tmp.chmod(0o755)
    try:
        tok = tokenizer(tmp)
        model, used, info = train(tok, p, log)
        save(model, used, p, tmp)
        (tmp / "tool_model.json").write_text(json.dumps(
            {"params": p, "ids_used": len(used), **info, "torch": torch.__version__},
            indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ---- accuracy -----------------------------------------------------------------------

def held_out(model_dir: Path, seed: int, n: int) -> tuple[list[dict], int]:
    """``n`` questions from ``seed``, none whose expression the model was trained on (its
    tool_model.json names the training's seed and size); and how many were skipped."""
    p = json.loads((model_dir / "tool_model.json").read_text())["params"]
    if seed == p["seed"]:
        raise SystemExit(f"error: seed {seed} is the training's; choose another")
    seen = {q["expression"] for qs in training_questions(p) for q in qs}
    rng, qs, skipped = random.Random(seed), [], 0
    while len(qs) < n:                          # as questions(seed, n, seen) draws them
        q = question(rng)
        if q["expression"] in seen:
            skipped += 1
        else:
            qs.append(q)
    return qs, skipped


def run_merged(chat, base_tok, q: dict, limit: int = 200) -> dict:
    """One held-out question on a merged model as ``deltachip chat`` asks it
    (``deltachip.chat.Chat``: the prompt rendered by the merged tokenizer's template, calc
    offered, non-thinking; plain ``generate()``, greedy, the computer answering the call
    inside it)."""
    import io
    ids = chat.prompt_ids(q["text"])[0].tolist()
    n0 = len(chat.calls)
    reply = chat.reply(q["text"], max_new_tokens=limit, out=io.StringIO())
    call = CALL.search(reply)
    response = re.search(r"<tool_response>\n(.*?)\n</tool_response>", reply, re.S)
    return {"reply": reply, "call": call.group(1) if call else None,
            "response": response.group(1) if response else None,
            "answer": final_answer(reply), "calls": len(chat.calls) - n0,
            "same_prompt_ids": ids == base_tok(prompt_text(base_tok, q["text"], True),
                                                add_special_tokens=False).input_ids}


def accuracy(model_dir: Path, merged: Path | None, n: int, seed: int, out=sys.stdout,
             verbose: bool = False) -> dict:
    """The table of the module docstring, printed on ``out`` (Markdown); returns its
    figures."""
    from transformers import AutoTokenizer, Qwen3_5ForCausalLM
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    qs, skipped = held_out(model_dir, seed, n)
    base = Qwen3_5ForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).eval()
    g = Greedy(base)
    g.allowed = base.lm_head.weight.detach().abs().sum(1) > 0     # the rows trained
    r = {"n": n, "seed": seed, "skipped_as_training": skipped}
    t = time.perf_counter()
    rows = [(q, run_question(g, tok, q, False), run_question(g, tok, q, True),
             run_question(g, tok, q, True, answer_calls=True)) for q in qs]
    r["base_seconds"] = round(time.perf_counter() - t, 1)
    lines = [("(a) base alone, no tools: final answer exact",
              [a["answer"] == q["result"] for q, a, _, _ in rows]),
             ("(b) base, calc offered, no computer: a well-formed call",
              [b["call"] is not None for _, _, b, _ in rows]),
             ("(b) ... whose expression is the question's",
              [b["call"] == q["expression"] for q, _, b, _ in rows]),
             ("(b') base, the exact result given as the tool turn by Python: final answer "
              "exact", [c["answer"] == q["result"] for q, _, _, c in rows])]
    r["tokens"], r["tokens_outside_corpus"] = g.tokens, g.outside
    if verbose:
        for q, a, b, c in rows:
            if b["call"] != q["expression"] or c["answer"] != q["result"]:
                print(f"  {q['text']!r} -> {c['reply']!r} (want {q['result']})", file=out)
    if merged is not None:
        from deltachip.chat import Chat
        chat = Chat(merged)
        t = time.perf_counter()
        mrows = []
        for q in qs:
            try:
                mrows.append((q, run_merged(chat, tok, q)))
            except Exception as e:                  # reported, not hidden
                mrows.append((q, {"error": f"{type(e).__name__}: {e}"}))
        r["merged_seconds"] = round(time.perf_counter() - t, 1)
        r["c_errors"] = sum("error" in m for _, m in mrows)
        if r["c_errors"]:
            r["c_first_error"] = next(m["error"] for _, m in mrows if "error" in m)
        r["c_prompt_ids_differ"] = sum(not m.get("same_prompt_ids", True) for _, m in mrows)
        r["c_calls_run"] = sum(m.get("calls", 0) for _, m in mrows)
        # the computer against Python on the calls the model wrote, right or wrong
        r["c_responses_equal_python"] = sum(
            m.get("call") is not None and m.get("response") == evaluate_or_error(m["call"])
            for _, m in mrows)
        lines += [("(c) merged with calc, the computer answering inside generate(): a call "
                   "with the question's expression", [m.get("call") == q["expression"]
                                                      for q, m in mrows]),
                  ("(c) ... the computer's answer (the tool turn) exact",
                   [m.get("response") == q["result"] for q, m in mrows]),
                  ("(c) ... final answer exact", [m.get("answer") == q["result"]
                                                  for q, m in mrows])]
        if verbose:
            for q, m in mrows:
                if m.get("answer") != q["result"]:
                    print(f"  merged: {q['text']!r} -> {m!r} (want {q['result']})", file=out)
    # the published experiment's "long integers": integer results of 20 digits or more
    long = [("/" not in q["result"] and len(q["result"].lstrip("-")) >= 20) for q in qs]
    fracs = sum("/" in q["result"] for q in qs)
    print(f"| {n} held-out questions (seed {seed}) | all | long integers ({sum(long)}: "
          f"results of 20+ digits) | the others ({n - sum(long)}; {fracs} fractions) |\n"
          f"|---|---|---|---|", file=out)
    for label, ok in lines:
        cells = [sum(ok), sum(k for k, lg in zip(ok, long) if lg),
                 sum(k for k, lg in zip(ok, long) if not lg)]
        total = [n, sum(long), n - sum(long)]
        r[label] = cells
        print(f"| {label} | " + " | ".join(f"{100 * c / max(t, 1):.1f} %"
                                           for c, t in zip(cells, total)) + " |", file=out)
    print(f"\ngreedy picks outside the training corpus's ids: {r['tokens_outside_corpus']} of "
          f"{r['tokens']:,} tokens; held-out questions skipped as training ones: {skipped}",
          file=out)
    print(json.dumps(r), file=out)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    b = sub.add_parser("build", help="train the model (or find it in the cache); print its dir")
    b.add_argument("--seed", type=int, default=0)
    a = sub.add_parser("accuracy", help="the accuracy table on held-out questions")
    a.add_argument("--model", type=Path, required=True, help="the directory build printed")
    a.add_argument("--merged", type=Path, help="its merge with calc (deltachip merge)")
    a.add_argument("--n", type=int, default=200)
    a.add_argument("--seed", type=int, default=12345)
    a.add_argument("--verbose", action="store_true", help="print the misses")
    args = ap.parse_args()
    if args.verb == "build":
        print(build(args.seed))
    else:
        accuracy(args.model, args.merged, args.n, args.seed, verbose=args.verbose)


if __name__ == "__main__":
    main()
