"""``deltachip chat MODEL_DIR``: talk to a merged model that answers its own tool calls.

Takes: a merged checkpoint with the tool-call bridge (``deltachip merge BASE OUT
--firmware calc``, either layout), ``--prompt TEXT`` (else one prompt a line from standard input),
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
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "chat", help="chat with a merged model that answers its tool calls from its weights",
        description="Stream a merged model's reply; a <tool_call> it writes is answered by "
                    "the program in its chip (calc), inside generation.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL_DIR",
                   help="a checkpoint written by `deltachip merge --firmware calc`")
    p.add_argument("--prompt", default=None, metavar="TEXT",
                   help="the user's message (default: one per line of standard input)")
    p.add_argument("--max-new-tokens", type=int, default=512, metavar="N")
    p.add_argument("--assistant-start", default="", metavar="TEXT",
                   help="begin the model's reply with TEXT (e.g. a <tool_call>…</tool_call> "
                        "to see the computer answer without waiting for the model to call)")
    p.add_argument("--show-trace", action="store_true",
                   help="after the reply, one line per tool call on stderr: tokens, "
                        "instructions, time")
    p.set_defaults(func=chat_command)


def chat_command(args: argparse.Namespace) -> int:
    from common.errors import UserError
    from deltachip.chat import Chat
    if args.max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    chat = Chat(args.model)
    prompts = [args.prompt] if args.prompt is not None else \
        [line.rstrip("\n") for line in sys.stdin if line.strip()]
    for prompt in prompts:
        n0 = len(chat.calls)
        chat.reply(prompt, args.max_new_tokens, start=args.assistant_start)
        if args.show_trace:
            for k, c in enumerate(chat.calls[n0:], 1):
                inst = f"{c['instructions']:,} instructions, " if c.get("instructions") else ""
                how = " (resumed)" if c.get("resumed") else ""
                print(f"[tool call {k}: {c['call_tokens']} text tokens in; chip{how}: "
                      f"{c['tokens']:,} tokens, {inst}{c['seconds']:.2f} s on {c['engine']}; "
                      f"printed {c['output']!r}]", file=sys.stderr)
    return 0
