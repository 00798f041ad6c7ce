"""``deltachip chat MODEL_DIR``: talk to a merged model that answers its own tool calls.

Takes: a merged checkpoint with the tool-call bridge (``deltachip merge BASE OUT
--firmware calc|python``, either layout), ``--prompt TEXT`` (else one prompt a line from standard input),
``--max-new-tokens N``, ``--show-trace``. Gives: the reply streamed on stdout; with
``--show-trace``, one line per tool call on stderr (the call's tokens, the chip's tokens,
instructions retired, seconds, engine, what the program printed). :mod:`deltachip.chat`.
"""
from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  deltachip merge ~/models/qwen3.5-4b-text build/merged-calc --firmware calc
  deltachip chat build/merged-calc --prompt 'What is 2**100 exactly?' --show-trace
  deltachip merge ~/models/qwen3.5-4b-text build/merged-tools --firmware calc --firmware python
  deltachip chat build/merged-tools --prompt 'Which primes are below 50?' --show-trace
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "chat", help="chat with a merged model that answers its tool calls from its weights",
        description="Stream a merged model's reply; a <tool_call> it writes is answered by "
                    "the program in its chip (calc, MicroPython: the one whose tool the call "
                    "names), inside generation.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL_DIR",
                   help="a checkpoint written by `deltachip merge --firmware calc` (or "
                        "python, or both)")
    p.add_argument("--prompt", default=None, metavar="TEXT",
                   help="the user's message (default: one per line of standard input)")
    p.add_argument("--max-new-tokens", type=int, default=512, metavar="N")
    p.add_argument("--assistant-start", default="", metavar="TEXT",
                   help="begin the model's reply with TEXT (e.g. a <tool_call>…</tool_call> "
                        "to see the computer answer without waiting for the model to call)")
    p.add_argument("--think", action="store_true",
                   help="thinking mode: the generation prompt opens a think block (a call "
                        "written inside it is not run; default: the template's non-thinking "
                        "form)")
    p.add_argument("--call-budget", type=int, default=None, metavar="N",
                   help="the most chip tokens one tool call may run before it is answered "
                        "with an error (default: the model's generation_config "
                        "chip_call_budget, else 250,000: about a minute on the fast engine)")
    p.add_argument("--show-trace", action="store_true",
                   help="after the reply, one line per tool call on stderr: tokens, "
                        "instructions, time")
    p.set_defaults(func=chat_command)


#: the most bytes read from standard input (prompts, one a line)
MAX_STDIN = 1 << 20
#: the most characters of a prompt (and of --assistant-start)
MAX_PROMPT = 65_536


def chat_command(args: argparse.Namespace) -> int:
    from common.errors import UserError
    from common.inputs import read_bounded
    from deltachip.chat import Chat
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.call_budget is not None and args.call_budget < 1:
        raise UserError(f"--call-budget must be >= 1, got {args.call_budget}")
    for name, text in (("--prompt", args.prompt), ("--assistant-start", args.assistant_start)):
        if text is not None and len(text) > MAX_PROMPT:
            raise UserError(f"{name} has {len(text):,} characters; chat takes at most "
                            f"{MAX_PROMPT:,}")
    if args.prompt is not None:
        prompts = [args.prompt]
    else:
        data = read_bounded(sys.stdin.buffer, MAX_STDIN, "prompts (one a line)")
        try:
            lines = data.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise UserError(f"standard input: not UTF-8 text (byte {e.start}); chat reads "
                            "prompts in UTF-8, one a line") from None
        prompts = [line for line in lines if line.strip()]
        long = next((p for p in prompts if len(p) > MAX_PROMPT), None)
        if long is not None:
            raise UserError(f"standard input: a prompt of {len(long):,} characters; chat "
                            f"takes at most {MAX_PROMPT:,}")
    chat = Chat(args.model, thinking=args.think, call_budget=args.call_budget)
    for prompt in prompts:
        n0 = len(chat.calls)
        chat.reply(prompt, args.max_new_tokens, start=args.assistant_start)
        if args.show_trace:
            for k, c in enumerate(chat.calls[n0:], 1):
                print(f"[tool call {k}: {trace_line(c)}]", file=sys.stderr)
    return 0


def trace_line(c: dict) -> str:
    """One call's record in words (``--show-trace``)."""
    head = f"{c['call_tokens']} text tokens in; "
    if c.get("engine") is None:             # refused before the chip ran (too long)
        return head + f"not run; answered {c['output']!r}"
    inst = f"{c['instructions']:,} instructions, " if c.get("instructions") else ""
    how = " (resumed)" if c.get("resumed") else ""
    return (head + f"chip{how}: {c['tokens']:,} tokens, {inst}{c['seconds']:.2f} s on "
            f"{c['engine']}; printed {c['output']!r}")
