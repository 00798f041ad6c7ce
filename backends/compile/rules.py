"""The compile rules a circuit must follow beyond the language (docs/language.md, "Compile
rules"), checked without writing a weight.

Takes: an elaborated :class:`hdl.ir.Circuit`. Gives: nothing, or a :class:`hdl.diagnostics.CompileError` located at the source.

- :func:`check_vocabulary`: the vocabulary (every kind's ``2^payload bits`` ids together) holds
  at most :data:`MAX_VOCAB` ids; the error names the token kind that crosses the limit.
- :func:`check_tables`: once the hidden width is known, the token tables (embedding and
  lm_head, ``vocab x hidden`` each) fit :data:`MAX_TABLE_BYTES`, so a wide payload is refused
  with the figure instead of attempting the allocation.
- the depth rule is :func:`backends.compile.schedule.check_depth_rule` (called, not copied);
- :func:`backends.compile.pipeline.check_rules` runs everything ``deltachip compile`` checks (the
  above, lowering, scheduling under the target's budgets, lane allocation, the exactness
  proof) and returns the plan's figures; ``deltachip check-rules FILE`` is its command line.
"""
from __future__ import annotations


from hdl.diagnostics import CompileError, Diagnostic
from hdl.elab.files import source_texts
from hdl.ir import Circuit, TokenKind

#: most token ids a circuit may have (a 24-bit payload; measured: compiles and checks exact
#: on the compact target). Qwen3.5's own vocabulary is 248,320 ids, about 2^18.
MAX_VOCAB = 1 << 24
#: most bytes the embedding and lm_head tables may take together (2 x vocab x hidden x dtype)
MAX_TABLE_BYTES = 8 << 30
DTYPE_BYTES = {"bf16": 2, "fp32": 4}


class VocabularyError(CompileError):
    """The token kinds need more ids (or bigger token tables) than a chip may have."""


def _fields_text(k: TokenKind) -> str:
    return ", ".join(f"{f.name}: {'s' if f.signed else 'u'}{f.width}" for f in k.fields)


def check_vocabulary(c: Circuit) -> None:
    """VocabularyError at the first token kind whose ids take the vocabulary past MAX_VOCAB."""
    total = 0
    for k in c.kinds:
        total += k.ids
        if total > MAX_VOCAB:
            raise VocabularyError([Diagnostic(
                k.loc, f"token kind '{k.name}' takes the vocabulary past {MAX_VOCAB:,} (2^24) "
                       f"ids: its payload ({_fields_text(k)}) is {k.payload_bits} bits, "
                       f"2^{k.payload_bits} ids; every possible token is a row of the "
                       "embedding and lm_head: narrow the fields, or carry a wide value in "
                       "two tokens")], source_texts(k.loc.file for k in c.kinds))


def check_tables(c: Circuit, hidden: int, dtype: str) -> None:
    """VocabularyError (at the widest token kind) when the embedding and lm_head tables,
    ``vocab x hidden`` each in ``dtype``, would exceed MAX_TABLE_BYTES."""
    vocab = c.vocab_size
    need = 2 * vocab * hidden * DTYPE_BYTES[dtype]
    if need > MAX_TABLE_BYTES:
        k = max(c.kinds, key=lambda k: k.payload_bits)
        raise VocabularyError([Diagnostic(
            k.loc, f"the token tables would take {need / 2**30:,.1f} GiB (embedding and "
                   f"lm_head: {vocab:,} ids x hidden {hidden} in {dtype}), more than "
                   f"{MAX_TABLE_BYTES >> 30} GiB; token kind '{k.name}' has the widest payload "
                   f"({k.payload_bits} bits): narrow it, or carry a wide value in two tokens")],
            source_texts(k.loc.file for k in c.kinds))
