"""The port's changes to MicroPython's ``py/`` sources, for speed (same language, same results).

Applied by ``build.py`` to the unpacked release before anything is generated or compiled;
each edit replaces text that must occur exactly once in its file (a release whose text
differs fails the build, naming the edit). Two headers the edits include are generated here:
``genhdr/parse_first.h`` (:func:`parse_first_header`) and ``genhdr/qstr_hash_table.h``
(:func:`qstr_hash_table_header`).

Why (``benchmarks/micropython_profile.py`` on the golden emulator; docs/firmware.md "Speed"):

* **parse.c, FIRST sets**: MicroPython's parser is a table-driven recursive-descent machine
  that tries every alternative by pushing its rule and popping it again when its first token
  does not match: an expression walks about 15 precedence levels, and each level's optional
  parts (trailers, ``**``, ``if``-``else``, comparison and arithmetic operators, ``lambda``,
  ``not``, unary signs, ``await``) are entered and failed one by one. Each rule that can only
  begin with a token from a known set (its FIRST set: every rule of the grammar except one
  that begins with an optional part) gets that set as a bitmap; a rule whose set does not hold
  the current token is not entered, and the parser goes on exactly as it would after that
  rule had failed without consuming a token (the next alternative, an empty optional node, the
  end of a list, or the same backtrack). The parse tree, the errors and their lines are
  unchanged.
* **parse.c, entering a child**: a rule's child was pushed on the rule stack and popped
  straight away; it is now entered directly (the same state: rule, argument 0, the token's
  line).
* **parse.c, ending a rule without a visit**: once a rule's first item is parsed, the parser
  popped the rule and visited it to find that the current token does not continue it (no
  separator of a list, no optional part of an ``and_ident`` rule such as a trailer or ``**``,
  an or-rule's alternative done), which leaves the item as the rule's result: a dozen such
  visits end each operand of an expression (or_test, and_test, comparison, expr, ...,
  term, power, atom_expr_normal). Each rule's set of tokens that may continue it
  (``rule_cont_table``, generated beside the FIRST sets: :func:`continue_sets`) lets the
  pop end such a rule at once. The rule arguments' offsets are read from a 16-bit table
  (the 8-bit one needs a test of its 9th bit on every visit).
* **parse.c, the node chunk**: parse nodes go into a chunk (``MICROPY_ALLOC_PARSE_CHUNK_INIT``
  bytes) that, once full, was grown in place by each node's few bytes, and ``gc_realloc``
  walks the whole chunk's blocks on each growth (quadratic in the tree's size); it now grows
  by at least 256 bytes at a time (the exact size when that does not fit in place), and is
  still cut to what it holds at the end.
* **lexer.c, keywords**: each name was compared with the sorted keyword table one keyword at
  a time (up to 35 ``strcmp`` a name); it is now a binary search (6).
* **lexer.c, characters**: every character of a name went through ``is_tail_of_identifier``
  (two calls into ``py/unicode.c``'s table) and ``vstr_add_byte`` (a call and another);
  the classes are now tested inline (the same table: space 9-13 and 32, letters ``A-Z
  a-z``, digits ``0-9``, nothing from 128 up), and a name's byte is stored inline when the
  buffer has room.
* **lexer.c, the next character**: ``next_char`` called the reader through a pointer for each
  byte and kept six registers for its rare cases (CR LF, injected f-string text, the end of
  the input). Its common case (nothing injected, no CR to convert, a memory reader, as
  ``mp_lexer_new_from_str_len`` makes, with a byte left) now reads the byte itself
  (``mp_reader_mem_t`` moved to ``py/reader.h``); the rest is the release's code
  (``next_char_fetch``).
* **lexer.c, operators and keywords**: an operator's place in ``tok_enc`` was found by a scan
  of the string; it now comes from a 128-entry table by its first character
  (:func:`tok_enc_first_table`, the same scan run here). A keyword probe compares the first
  characters before calling ``strcmp``.
* **gc.c, runs of blocks**: an allocation marked its tail blocks one at a time (two bits
  each in the allocation table), ``gc_realloc`` counted a block's tail and freed a shrunk
  one's a block at a time: a 1 KiB parse chunk is 64 blocks. Whole table bytes (4 blocks)
  inside the run are now set, counted or cleared at once.
* **qstr.c, the firmware's pools**: looking up a string (every name a program uses, when the
  lexer interns it) searched the pools of interned strings in turn: the program's own, the
  firmware's sorted pool by binary search (``strncmp`` each step) and its unsorted static
  pool (216 strings, whose order is fixed for ``.mpy`` compatibility) by a linear scan. The
  firmware's two pools are now one hash table (``genhdr/qstr_hash_table.h``, generated from
  ``qstrdefs.generated.h``, whose hashes are the ones ``qstr_compute_hash`` gives): one
  probe or a few, then a length and ``memcmp``. The qstr numbers are unchanged.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, NamedTuple


class Edit(NamedTuple):
    path: str       # under the source root
    old: str        # must occur exactly once
    new: str


#: the release's operator encoding in py/lexer.c (the edit below must find it as it is)
TOK_ENC_SOURCE = """static const char *const tok_enc =
    "()[]{},;~"   // singles
    ":e="         // : :=
    "<e=c<e="     // < <= << <<=
    ">e=c>e="     // > >= >> >>=
    "*e=c*e="     // * *= ** **=
    "+e="         // + +=
    "-e=e>"       // - -= ->
    "&e="         // & &=
    "|e="         // | |=
    "/e=c/e="     // / /= // //=
    "%e="         // % %=
    "^e="         // ^ ^=
    "@e="         // @ @=
    "=e="         // = ==
    "!.";         // start of special cases: != . ...
"""


def tok_enc_first_table() -> str:
    """``tok_enc_first[c]``: where the lexer's scan of ``tok_enc`` stops for the character
    ``c`` (0-127), ``index << 8 | offset``, as the release's loop computes them."""
    enc = "".join(re.findall(r'"([^"]*)"', TOK_ENC_SOURCE))

    def scan(c: int) -> tuple[int, int]:
        t = index = 0
        while t < len(enc) and ord(enc[t]) != c:
            if enc[t] in "ec":
                t += 1
            t += 1
            index += 1
        return min(t, len(enc)), index

    entries = []
    for c in range(128):
        t, index = scan(c)
        if not (t < 256 and index < 256):
            raise ValueError("tok_enc")
        entries.append(f"0x{index << 8 | t:x}")
    t, index = scan(256)    # no character matches: the end of the string
    return ("// deltachip: for each character, where the scan of tok_enc stops (index << 8 | "
            "offset)\n"
            f"#define TOK_ENC_NONE 0x{index << 8 | t:x}\n"
            f"static const uint16_t tok_enc_first[128] = {{{', '.join(entries)}}};\n")


EDITS: tuple[Edit, ...] = (
    # ---- parse.c: FIRST-set pruning ------------------------------------------------
    Edit("py/parse.c", """static void push_rule(parser_t *parser, size_t src_line, uint8_t rule_id, size_t arg_i) {""",
         """// deltachip: the tokens each rule can begin with (genhdr/parse_first.h, generated from
// py/grammar.h by the port's build): a rule whose set lacks the current token fails at
// once, without consuming a token, so it is not entered
#include "genhdr/parse_first.h"

static inline bool rule_may_start(const parser_t *parser, size_t arg) {
    const uint32_t *set = rule_first_table[arg & RULE_ARG_ARG_MASK];
    size_t tok = parser->lexer->tok_kind;
    return (set[tok >> 5] >> (tok & 31)) & 1;
}

// whether the current token may continue a rule after its first item
static inline bool rule_may_continue(const parser_t *parser, size_t rule_id) {
    const uint32_t *set = rule_cont_table[rule_id];
    size_t tok = parser->lexer->tok_kind;
    return (set[tok >> 5] >> (tok & 31)) & 1;
}

static void push_rule(parser_t *parser, size_t src_line, uint8_t rule_id, size_t arg_i) {"""),
    # or-rule: an alternative that cannot start here is skipped (as if it had failed)
    Edit("py/parse.c", """                        assert(kind == RULE_ARG_RULE);
                        if (i + 1 < n) {""",
         """                        assert(kind == RULE_ARG_RULE);
                        if (!rule_may_start(&parser, rule_arg[i])) {
                            continue;
                        }
                        if (i + 1 < n) {"""),
    # and-rule: an optional part that cannot start here is an empty node; a mandatory one
    # fails the rule (a backtrack before any token was eaten, else a syntax error)
    Edit("py/parse.c", """                    } else {
                        push_rule(&parser, rule_src_line, rule_id, i + 1); // save this and-rule""",
         """                    } else if (!rule_may_start(&parser, rule_arg[i])) {
                        if ((rule_arg[i] & RULE_ARG_KIND_MASK) == RULE_ARG_OPT_RULE) {
                            push_result_node(&parser, MP_PARSE_NODE_NULL);
                        } else if (i > 0) {
                            goto syntax_error;
                        } else {
                            backtrack = true;
                            goto next_rule;
                        }
                    } else {
                        push_rule(&parser, rule_src_line, rule_id, i + 1); // save this and-rule"""),
    # list-rule: an item that cannot start here ends (or fails) the list
    Edit("py/parse.c", """                            assert((arg & RULE_ARG_KIND_MASK) == RULE_ARG_RULE);
                            push_rule(&parser, rule_src_line, rule_id, i + 1); // save this list-rule""",
         """                            assert((arg & RULE_ARG_KIND_MASK) == RULE_ARG_RULE);
                            if (!rule_may_start(&parser, arg)) {
                                i += 1;
                                backtrack = true;
                                goto list_backtrack;
                            }
                            push_rule(&parser, rule_src_line, rule_id, i + 1); // save this list-rule"""),
    # the child of a rule is entered at once rather than pushed and popped straight away
    Edit("py/parse.c", """        uint8_t rule_id = pop_rule(&parser, &i, &rule_src_line);
        uint8_t rule_act = rule_act_table[rule_id];""",
         """        uint8_t rule_id = pop_rule(&parser, &i, &rule_src_line);
        // deltachip: a rule whose first item has just been parsed (i == 1), whose next part
        // the current token cannot begin (rule_cont_table), and whose item is a node ends
        // with that item as its result, unchanged: an or-rule, a list of one item, an
        // and_ident rule with an empty optional part. So it ends here, without a visit.
        if (i == 1 && !backtrack && !rule_may_continue(&parser, rule_id)
            && parser.result_stack[parser.result_stack_top - 1] != MP_PARSE_NODE_NULL) {
            goto next_rule;
        }
    enter_rule:;
        uint8_t rule_act = rule_act_table[rule_id];"""),
    Edit("py/parse.c", """                        push_rule_from_arg(&parser, rule_arg[i]); // push child of or-rule
                        goto next_rule;""",
         """                        ENTER_CHILD(rule_arg[i]); // enter child of or-rule"""),
    Edit("py/parse.c", """                        push_rule_from_arg(&parser, rule_arg[i]); // push child of and-rule
                        goto next_rule;""",
         """                        ENTER_CHILD(rule_arg[i]); // enter child of and-rule"""),
    Edit("py/parse.c", """                            push_rule_from_arg(&parser, arg); // push child of list-rule
                            goto next_rule;""",
         """                            ENTER_CHILD(arg); // enter child of list-rule"""),
    Edit("py/parse.c", """    // parse!

    bool backtrack = false;
""", """    // parse!

    bool backtrack = false;

    // deltachip: what push_rule_from_arg and the pop of that rule did (backtrack is false
    // wherever a child is entered)
    #define ENTER_CHILD(arg) do { \
        rule_id = (arg) & RULE_ARG_ARG_MASK; \
        i = 0; \
        rule_src_line = lex->tok_line; \
        goto enter_rule; \
    } while (0)
"""),
    # ---- parse.c: a rule's arguments from a 16-bit offset (no 9th-bit test) ---------------
    Edit("py/parse.c", """static const uint16_t *get_rule_arg(uint8_t r_id) {
    size_t off = rule_arg_offset_table[r_id];
    if (r_id >= FIRST_RULE_WITH_OFFSET_ABOVE_255) {
        off |= 0x100;
    }
    return &rule_arg_combined_table[off];
}""", """// deltachip: each rule's offset whole (the 8-bit table needs a test for its 9th bit)
static const uint16_t rule_arg_offset16_table[] = {
#define DEF_RULE(rule, comp, kind, ...) RULE_ARG_OFFSET(rule, __VA_ARGS__),
#define DEF_RULE_NC(rule, kind, ...)
#include "py/grammar.h"
#undef DEF_RULE
#undef DEF_RULE_NC
    0, // RULE_const_object
#define DEF_RULE(rule, comp, kind, ...)
#define DEF_RULE_NC(rule, kind, ...) RULE_ARG_OFFSET(rule, __VA_ARGS__),
#include "py/grammar.h"
#undef DEF_RULE
#undef DEF_RULE_NC
};

static const uint16_t *get_rule_arg(uint8_t r_id) {
    return &rule_arg_combined_table[rule_arg_offset16_table[r_id]];
}"""),
    # ---- parse.c: grow the node chunk by at least 256 bytes ----------------------------
    Edit("py/parse.c", """    if (chunk != NULL && chunk->union_.used + num_bytes > chunk->alloc) {
        // not enough room at end of previously allocated chunk so try to grow
        mp_parse_chunk_t *new_data = (mp_parse_chunk_t *)m_renew_maybe(byte, chunk,
            sizeof(mp_parse_chunk_t) + chunk->alloc,
            sizeof(mp_parse_chunk_t) + chunk->alloc + num_bytes, false);
        if (new_data == NULL) {""",
         """    if (chunk != NULL && chunk->union_.used + num_bytes > chunk->alloc) {
        // not enough room at end of previously allocated chunk so try to grow
        // (deltachip: by 256 bytes at least, as each growth walks the whole chunk)
        size_t grow = num_bytes < 256 ? 256 : num_bytes;
        mp_parse_chunk_t *new_data = (mp_parse_chunk_t *)m_renew_maybe(byte, chunk,
            sizeof(mp_parse_chunk_t) + chunk->alloc,
            sizeof(mp_parse_chunk_t) + chunk->alloc + grow, false);
        if (new_data == NULL && grow != num_bytes) {
            grow = num_bytes;
            new_data = (mp_parse_chunk_t *)m_renew_maybe(byte, chunk,
                sizeof(mp_parse_chunk_t) + chunk->alloc,
                sizeof(mp_parse_chunk_t) + chunk->alloc + grow, false);
        }
        if (new_data == NULL) {"""),
    Edit("py/parse.c", """            // could grow existing memory
            chunk->alloc += num_bytes;""",
         """            // could grow existing memory
            chunk->alloc += grow;"""),
    # ---- lexer.c: keywords by binary search -------------------------------------------
    Edit("py/lexer.c", """        for (size_t i = 0; i < MP_ARRAY_SIZE(tok_kw); i++) {
            int cmp = strcmp(s, tok_kw[i]);
            if (cmp == 0) {
                lex->tok_kind = MP_TOKEN_KW_FALSE + i;
                if (lex->tok_kind == MP_TOKEN_KW___DEBUG__) {
                    lex->tok_kind = (MP_STATE_VM(mp_optimise_value) == 0 ? MP_TOKEN_KW_TRUE : MP_TOKEN_KW_FALSE);
                }
                break;
            } else if (cmp < 0) {
                // Table is sorted and comparison was less-than, so stop searching
                break;
            }
        }""",
         """        // (deltachip: a binary search of the sorted table)
        for (size_t lo = 0, hi = MP_ARRAY_SIZE(tok_kw); lo < hi;) {
            size_t i = (lo + hi) / 2;
            int cmp = strcmp(s, tok_kw[i]);
            if (cmp == 0) {
                lex->tok_kind = MP_TOKEN_KW_FALSE + i;
                if (lex->tok_kind == MP_TOKEN_KW___DEBUG__) {
                    lex->tok_kind = (MP_STATE_VM(mp_optimise_value) == 0 ? MP_TOKEN_KW_TRUE : MP_TOKEN_KW_FALSE);
                }
                break;
            } else if (cmp < 0) {
                hi = i;
            } else {
                lo = i + 1;
            }
        }"""),
    # ---- lexer.c: character classes inline, a name's bytes appended inline ------------------
    Edit("py/lexer.c", """static bool is_whitespace(mp_lexer_t *lex) {
    return unichar_isspace(lex->chr0);
}

static bool is_letter(mp_lexer_t *lex) {
    return unichar_isalpha(lex->chr0);
}

static bool is_digit(mp_lexer_t *lex) {
    return unichar_isdigit(lex->chr0);
}""", """// deltachip: unichar_isspace, unichar_isalpha and unichar_isdigit (py/unicode.c's table:
// space is 9-13 and 32, letters A-Z a-z, digits 0-9, nothing from 128) without a call
static bool is_whitespace(mp_lexer_t *lex) {
    unichar c = lex->chr0;
    return c == ' ' || (c - 9) <= (13 - 9);
}

static bool is_letter(mp_lexer_t *lex) {
    return ((lex->chr0 | 0x20) - 'a') <= ('z' - 'a');
}

static bool is_digit(mp_lexer_t *lex) {
    return (lex->chr0 - '0') <= 9;
}

// vstr_add_byte, the common case (room in the buffer) without a call
static inline void lex_add_byte(vstr_t *vstr, byte b) {
    if (vstr->len < vstr->alloc) {
        vstr->buf[vstr->len++] = b;
    } else {
        vstr_add_byte(vstr, b);
    }
}"""),
    Edit("py/lexer.c", """        // get first char (add as byte to remain 8-bit clean and support utf-8)
        vstr_add_byte(&lex->vstr, CUR_CHAR(lex));
        next_char(lex);

        // get tail chars
        while (!is_end(lex) && is_tail_of_identifier(lex)) {
            vstr_add_byte(&lex->vstr, CUR_CHAR(lex));
            next_char(lex);
        }""", """        // get first char (add as byte to remain 8-bit clean and support utf-8)
        lex_add_byte(&lex->vstr, CUR_CHAR(lex));
        next_char(lex);

        // get tail chars
        while (!is_end(lex) && is_tail_of_identifier(lex)) {
            lex_add_byte(&lex->vstr, CUR_CHAR(lex));
            next_char(lex);
        }"""),
    # ---- reader.c/lexer.c: a string's bytes read directly, not through the reader's call --
    Edit("py/reader.c", """typedef struct _mp_reader_mem_t {
    size_t free_len; // if >0 mem is freed on close by: m_free(beg, free_len)
    const byte *beg;
    const byte *cur;
    const byte *end;
} mp_reader_mem_t;

static mp_uint_t mp_reader_mem_readbyte(void *data) {""", """// deltachip: mp_reader_mem_t is in py/reader.h, and mp_reader_mem_readbyte is not static
// (the lexer reads a memory reader's bytes itself)
mp_uint_t mp_reader_mem_readbyte(void *data) {"""),
    Edit("py/reader.h", """void mp_reader_new_mem(mp_reader_t *reader, const byte *buf, size_t len, size_t free_len);""",
         """void mp_reader_new_mem(mp_reader_t *reader, const byte *buf, size_t len, size_t free_len);

// deltachip: the memory reader, for the lexer to read its bytes without a call
typedef struct _mp_reader_mem_t {
    size_t free_len; // if >0 mem is freed on close by: m_free(beg, free_len)
    const byte *beg;
    const byte *cur;
    const byte *end;
} mp_reader_mem_t;
mp_uint_t mp_reader_mem_readbyte(void *data);"""),
    # next_char's common case: no injected characters, a memory reader with a byte left, the
    # new chr1 not a CR; anything else goes on to the release's code (next_char_fetch)
    Edit("py/lexer.c", """    // shift the input queue forward
    lex->chr0 = lex->chr1;
    lex->chr1 = lex->chr2;

    // and add the next byte from either inject_chrs or the reader
    mp_uint_t chr2;
fetch_next_byte:""", """    // shift the input queue forward
    lex->chr0 = lex->chr1;
    lex->chr1 = lex->chr2;

    // deltachip: the common case, a memory reader's next byte (as mp_reader_mem_readbyte
    // gives it) with nothing injected and no CR to convert, is read here without a call;
    // the release's code below (next_char_fetch) does the rest
    #if MICROPY_PY_FSTRINGS
    if (lex->inject_chrs_idx == 0)
    #endif
    {
        if (lex->chr1 != '\\r' && lex->reader.readbyte == mp_reader_mem_readbyte) {
            mp_reader_mem_t *mem = (mp_reader_mem_t *)lex->reader.data;
            const byte *cur = mem->cur;
            if (cur < mem->end) {
                byte b = *cur;
                mem->cur = cur + 1;
                lex->chr2 = b == MP_LEXER_EOF ? MP_LEXER_INVALID_BYTE : b;
                return;
            }
        }
    }
    next_char_fetch(lex);
}

static MP_NOINLINE void next_char_fetch(mp_lexer_t *lex) {
    // and add the next byte from either inject_chrs or the reader
    mp_uint_t chr2;
fetch_next_byte:"""),
    Edit("py/lexer.c", """static void next_char(mp_lexer_t *lex) {
    if (lex->chr0 == '\\n') {""", """static void next_char_fetch(mp_lexer_t *lex);

static void next_char(mp_lexer_t *lex) {
    if (lex->chr0 == '\\n') {"""),
    # ---- lexer.c: an operator's entry in tok_enc from a table by its first character --------
    Edit("py/lexer.c", TOK_ENC_SOURCE, TOK_ENC_SOURCE + "\n" + tok_enc_first_table()),
    Edit("py/lexer.c", """        const char *t = tok_enc;
        size_t tok_enc_index = 0;
        for (; *t != 0 && !is_char(lex, *t); t += 1) {
            if (*t == 'e' || *t == 'c') {
                t += 1;
            }
            tok_enc_index += 1;
        }
""", """        // (deltachip: where the scan of tok_enc below stops for this character, from
        // tok_enc_first; none from 128 up)
        // for (; *t != 0 && !is_char(lex, *t); t += 1) {
        //     if (*t == 'e' || *t == 'c') {
        //         t += 1;
        //     }
        //     tok_enc_index += 1;
        // }
        uint16_t tok_enc_at = lex->chr0 < 128 ? tok_enc_first[lex->chr0] : TOK_ENC_NONE;
        const char *t = tok_enc + (tok_enc_at & 0xff);
        size_t tok_enc_index = tok_enc_at >> 8;
"""),
    # ---- lexer.c: a keyword probe compares the first characters before strcmp ------------
    Edit("py/lexer.c", """            size_t i = (lo + hi) / 2;
            int cmp = strcmp(s, tok_kw[i]);""", """            size_t i = (lo + hi) / 2;
            int cmp = (byte)s[0] - (byte)tok_kw[i][0];
            if (cmp == 0) {
                cmp = strcmp(s, tok_kw[i]);
            }"""),
    # ---- gc.c: runs of tail blocks a table byte (4 blocks) at a time ----------------------
    Edit("py/gc.c", """    // mark rest of blocks as used tail
    // TODO for a run of many blocks can make this more efficient
    for (size_t bl = start_block + 1; bl <= end_block; bl++) {
        ATB_FREE_TO_TAIL(area, bl);
    }""", """    // mark rest of blocks as used tail
    // (deltachip: the table's whole bytes in the run at once, 4 free blocks made tails)
    {
        size_t bl = start_block + 1;
        for (; bl <= end_block && bl % BLOCKS_PER_ATB != 0; bl++) {
            ATB_FREE_TO_TAIL(area, bl);
        }
        for (; bl + BLOCKS_PER_ATB - 1 <= end_block; bl += BLOCKS_PER_ATB) {
            area->gc_alloc_table_start[bl / BLOCKS_PER_ATB] = 0xaa; // AT_TAIL x 4
        }
        for (; bl <= end_block; bl++) {
            ATB_FREE_TO_TAIL(area, bl);
        }
    }"""),
    Edit("py/gc.c", """    for (size_t bl = block + n_blocks; bl < max_block; bl++) {
        byte block_type = ATB_GET_KIND(area, bl);
        if (block_type == AT_TAIL) {
            n_blocks++;
            continue;
        }""", """    for (size_t bl = block + n_blocks; bl < max_block; bl++) {
        // deltachip: a whole table byte of tails (4 blocks) at once
        if (bl % BLOCKS_PER_ATB == 0 && area->gc_alloc_table_start[bl / BLOCKS_PER_ATB] == 0xaa) {
            n_blocks += BLOCKS_PER_ATB;
            bl += BLOCKS_PER_ATB - 1;
            continue;
        }
        byte block_type = ATB_GET_KIND(area, bl);
        if (block_type == AT_TAIL) {
            n_blocks++;
            continue;
        }"""),
    Edit("py/gc.c", """        for (size_t bl = block + new_blocks, count = n_blocks - new_blocks; count > 0; bl++, count--) {
            ATB_ANY_TO_FREE(area, bl);
        }""", """        // (deltachip: the table's whole bytes in the run at once)
        for (size_t bl = block + new_blocks, count = n_blocks - new_blocks; count > 0; bl++, count--) {
            if (bl % BLOCKS_PER_ATB == 0 && count >= BLOCKS_PER_ATB) {
                area->gc_alloc_table_start[bl / BLOCKS_PER_ATB] = 0;
                bl += BLOCKS_PER_ATB - 1;
                count -= BLOCKS_PER_ATB - 1;
                continue;
            }
            ATB_ANY_TO_FREE(area, bl);
        }"""),
    # ---- qstr.c: the firmware's pools through a hash table -------------------------------
    Edit("py/qstr.c", """        // binary search inside the pool
        if (pool->is_sorted) {""",
         """        #if !defined(NO_QSTR) && MICROPY_QSTR_BYTES_IN_HASH && !defined(MICROPY_QSTR_EXTRA_POOL)
        // deltachip: the firmware's two pools (this sorted one and the static one before it,
        // the last of the chain) through one hash table (genhdr/qstr_hash_table.h): each
        // entry the qstr's number and hash, open addressing, linear probing
        if (pool == &mp_qstr_const_pool) {
            for (size_t h = str_hash & QSTR_HASH_TABLE_MASK;; h = (h + 1) & QSTR_HASH_TABLE_MASK) {
                uint32_t e = qstr_hash_table[h];
                if (e == 0) {
                    break;
                }
                if ((e & 0xffff) == str_hash) {
                    size_t id = e >> 16;
                    const qstr_pool_t *p = id < mp_qstr_const_pool.total_prev_len
                        ? &mp_qstr_const_pool_static : &mp_qstr_const_pool;
                    size_t at = id - p->total_prev_len;
                    if (p->lengths[at] == str_len && memcmp(p->qstrs[at], str, str_len) == 0) {
                        return id;
                    }
                }
            }
            break;
        }
        #endif

        // binary search inside the pool
        if (pool->is_sorted) {"""),
    Edit("py/qstr.c", """#include "py/runtime.h"
""", """#include "py/runtime.h"
#if !defined(NO_QSTR) && MICROPY_QSTR_BYTES_IN_HASH
#include "genhdr/qstr_hash_table.h"
#endif
"""),
)


def apply(root: Path, error: Callable[[str], Exception]) -> None:
    """Apply :data:`EDITS` to the unpacked source at ``root``."""
    texts: dict[str, str] = {}
    for k, e in enumerate(EDITS):
        text = texts.get(e.path)
        if text is None:
            text = (root / e.path).read_text()
        count = text.count(e.old)
        if count != 1:
            raise error(f"the port's edit {k} of {e.path} matches {count} places in this "
                        "MicroPython source (1 expected): firmware/micropython/patches.py")
        texts[e.path] = text.replace(e.old, e.new)
    for path, text in texts.items():
        (root / path).write_text(text)


# ---- genhdr/parse_first.h ------------------------------------------------------------

#: the preprocessor input that lists the grammar's rules as the build's config selects them
GRAMMAR_PROBE = """\
#include "py/mpconfig.h"
#define DEF_RULE(rule, comp, kind, ...) @RULE rule ; kind ; __VA_ARGS__ @END
#define DEF_RULE_NC(rule, kind, ...) @RULE rule ; kind ; __VA_ARGS__ @END
#include "py/grammar.h"
"""

_RULE = re.compile(r"@RULE\s+(\w+)\s*;\s*(\w+)\s*(?:\(\s*\d+\s*\))?\s*;(.*?)@END", re.S)
_ARG = re.compile(r"(tok|rule|opt_rule)\s*\(\s*(\w+)\s*\)")


def first_sets(preprocessed: str) -> dict[str, frozenset[str] | None]:
    """Each rule's FIRST set (token names), or None where the rule may begin without a token
    of a known set (it begins with an optional part, or with a rule that does)."""
    rules: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for name, kind, args in _RULE.findall(preprocessed):
        rules[name] = (kind, _ARG.findall(args))
    if not rules:
        raise ValueError("no grammar rules found")
    # least fixed point: None (unknown/open) until proven to start with a token
    first: dict[str, frozenset[str] | None] = {r: None for r in rules}

    def of(arg: tuple[str, str]) -> frozenset[str] | None:
        kind, x = arg
        if kind == "tok":
            return frozenset([x])
        if kind == "opt_rule":
            return None
        return first[x]

    changed = True
    while changed:
        changed = False
        for name, (kind, args) in rules.items():
            if first[name] is not None:
                continue
            if kind == "or":
                sets = [of(a) for a in args]
                new = None if any(s is None for s in sets) else frozenset().union(*sets)
            else:               # and, and_ident, and_blank, one_or_more, list, list_with_end
                new = of(args[0])
            if new is not None:
                first[name] = new
                changed = True
    return first


def continue_sets(preprocessed: str) -> dict[str, frozenset[str] | None]:
    """For each rule, the tokens that may continue it once its first item (a rule) has been
    parsed, where not continuing leaves that item as the rule's result unchanged; None
    (all tokens) for the rules where it may not: the parser's fast path then never applies.

    * an or-rule: none (it has ended);
    * a list (``list``, ``list_with_end``: item, separator; ``one_or_more``: item, item):
      those the separator or the next item may begin with (a list of one item is that item);
    * an ``and_ident(2)`` rule whose second part is an optional rule: those that rule may
      begin with (an empty optional part leaves the one non-empty item); not ``expr_stmt``,
      which may drop a lone constant.
    """
    first = first_sets(preprocessed)
    rules = {name: (kind, _ARG.findall(args)) for name, kind, args in _RULE.findall(preprocessed)}
    ns = {name: int(n) for name, n in re.findall(r"@RULE\s+(\w+)\s*;\s*\w+\s*\(\s*(\d+)\s*\)", preprocessed)}

    def of(arg: tuple[str, str]) -> frozenset[str] | None:
        kind, x = arg
        return frozenset([x]) if kind == "tok" else first[x]

    cont: dict[str, frozenset[str] | None] = {}
    for name, (kind, args) in rules.items():
        if kind == "or":
            cont[name] = frozenset()
        elif kind in ("list", "list_with_end") and len(args) == 2 and args[0][0] == "rule":
            cont[name] = of(args[1])
        elif kind == "one_or_more" and len(args) == 1 and args[0][0] == "rule":
            cont[name] = of(args[0])
        elif (kind == "and_ident" and ns.get(name) == 2 and len(args) == 2 and name != "expr_stmt"
              and args[0][0] == "rule" and args[1][0] == "opt_rule"):
            cont[name] = of(args[1])
        else:
            cont[name] = None
    return cont


def _bitmap_table(name: str, sets: dict[str, frozenset[str] | None], words: int) -> list[str]:
    lines = [f"static const uint32_t {name}[][PF_WORDS] = {{"]
    for rule, s in sets.items():
        if s is None:
            words_c = ", ".join(["0xffffffffu"] * words)
        else:
            words_c = ", ".join("(0u" + "".join(f" | PF({t}, {w})" for t in sorted(s)) + ")"
                                for w in range(words))
        lines.append(f"    [RULE_{rule}] = {{{words_c}}},")
    return lines + ["};"]


def parse_first_header(preprocessed: str) -> str:
    """``genhdr/parse_first.h``: ``rule_first_table[rule][word]``, a bitmap of token kinds
    each rule can begin with, and ``rule_cont_table`` (:func:`continue_sets`)."""
    first = first_sets(preprocessed)
    words = 4
    lines = ["// generated by the deltachip port's build (firmware/micropython/patches.py):",
             "// for each grammar rule, the tokens it can begin with (all: unknown)",
             f"#define PF_WORDS {words}",
             "#define PF(t, w) ((MP_TOKEN_##t) / 32 == (w) ? 1u << ((MP_TOKEN_##t) % 32) : 0u)",
             "_Static_assert(MP_TOKEN_NUMBER_OF <= 32 * PF_WORDS, \"PF_WORDS\");"]
    lines += _bitmap_table("rule_first_table", first, words)
    lines += ["// for each rule, the tokens that may continue it after its first item (all: the",
              "// parser's fast path does not apply)"]
    lines += _bitmap_table("rule_cont_table", continue_sets(preprocessed), words)
    lines += ["#undef PF", ""]
    return "\n".join(lines)


# ---- genhdr/qstr_hash_table.h ---------------------------------------------------------

_QDEF = re.compile(r'^QDEF([01])\((\w+), (\d+), (\d+), "(.*)"\)\s*$')

#: the table's entries (a power of two; the firmware has about 400 qstrs)
QSTR_HASH_TABLE_SIZE = 1024


def qstr_hash_table_header(generated: str) -> str:
    """``genhdr/qstr_hash_table.h``: the static (QDEF0) and sorted (QDEF1) pools' qstrs by
    hash, ``qstr_hash_table[h]`` = ``number << 16 | hash`` (0: empty), at the hash modulo the
    size or the next free entry after it (the empty string, qstr 1, is found before the
    table is used)."""
    static: list[int] = []
    sorted_: list[int] = []
    for line in generated.splitlines():
        m = _QDEF.match(line)
        if m:
            (static if m.group(1) == "0" else sorted_).append(int(m.group(3)))
    if not 0 < len(static) <= 256:
        raise ValueError(f"{len(static)} static qstrs")
    size = QSTR_HASH_TABLE_SIZE
    hashes = static + sorted_
    if len(hashes) > size // 2 or len(hashes) >= 1 << 16:
        raise ValueError(f"{len(hashes)} qstrs for a table of {size}")
    table = [0] * size
    for q, h in enumerate(hashes):
        if q < 2:                       # MP_QSTRnull and MP_QSTR_ (the empty string)
            continue
        if not 0 < h < 1 << 16:
            raise ValueError(f"qstr {q}: hash {h}")
        at = h % size
        while table[at]:
            at = (at + 1) % size
        table[at] = q << 16 | h
    body = ",".join(f"0x{e:x}" if e else "0" for e in table)
    return ("// generated by the deltachip port's build (firmware/micropython/patches.py):\n"
            "// the firmware's qstrs by hash: number << 16 | hash, open addressing\n"
            f"#define QSTR_HASH_TABLE_MASK ({size - 1})\n"
            f"_Static_assert(MP_QSTRnumber_of_static == {len(static)}, \"qstr_hash_table\");\n"
            f"static const uint32_t qstr_hash_table[{size}] = {{{body}}};\n")
