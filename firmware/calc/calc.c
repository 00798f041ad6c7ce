/* calc: an exact calculator over big integers and fractions, for the deltachip CPU.
 *
 * Reads expressions from the input buffer, one per line, and prints each result on its
 * own line: an integer, or a fraction p/q in lowest terms (q > 0). Syntax and semantics
 * follow Python with every number a fractions.Fraction:
 *
 *   expr   := term (('+' | '-') term)*
 *   term   := factor (('*' | '/' | '//' | '%') factor)*
 *   factor := ('+' | '-') factor | power
 *   power  := primary ['**' factor]          (right-associative, binds tighter than unary -)
 *   primary:= NUMBER | '(' expr ')' | 'gcd' '(' expr ',' expr ')'
 *
 * '/' is exact division; '//' and '%' floor like Python (also on fractions); '**' takes an
 * integer exponent (a negative one gives a fraction); gcd takes integers. Numbers (and
 * every intermediate numerator and denominator) have at most 1024 digits.
 *
 * A bad line prints one line "error: ..." and the program exits with the first error's
 * code: 1 syntax, 2 arithmetic (division by zero, non-integer exponent / gcd argument),
 * 3 limits (over 1024 digits, nesting too deep). Exit 0 when every line succeeded.
 *
 * With an empty input buffer, calc serves tool calls from the UART's input instead, in
 * JSON or Qwen3.5's XML form (see "tool calls" below; exit 4 for a malformed call). */
#include "bigint.h"
#include "deltachip.h"

typedef struct {
    big_t num;
    big_t den;   /* > 0; gcd(num, den) == 1; zero is 0/1 */
} frac_t;

/* ---- error exits ---------------------------------------------------------------- */

typedef uint32_t calc_jmp_buf[14];
int calc_setjmp(calc_jmp_buf env) __attribute__((returns_twice));
__attribute__((noreturn)) void calc_longjmp(calc_jmp_buf env, int value);

static calc_jmp_buf on_error;

void big_fail(int code, const char *message) {
    printf("error: %s\n", message);
    calc_longjmp(on_error, code);
}

/* ---- fractions ------------------------------------------------------------------ */

/* Scratch numbers for the fraction operations (none of them nests another). */
static big_t t1, t2, t3, t4, t5;

static void frac_set_int(frac_t *r, const big_t *n) {
    big_copy(&r->num, n);
    big_set_u32(&r->den, 1);
}

static int frac_is_int(const frac_t *a) { return big_is_unit(&a->den); }

/* r = n / d, already in lowest terms with d > 0. */
static void frac_set(frac_t *r, const big_t *n, const big_t *d) {
    big_copy(&r->num, n);
    big_copy(&r->den, d);
}

/* Divides x and y by gcd(x, y) (x, y are scratch numbers other than t5). */
static void cancel(big_t *x, big_t *y) {
    big_gcd(&t5, x, y);
    if (!big_is_unit(&t5) && !big_is_zero(&t5)) {
        big_divmod(x, 0, x, &t5);
        big_divmod(y, 0, y, &t5);
    }
}

/* The operations follow CPython's fractions module, which keeps intermediates small:
 * a gcd of the denominators (addition) or cross-cancelling (multiplication, division)
 * instead of one gcd of the full products. */
static void frac_add(frac_t *r, const frac_t *a, const frac_t *b, int subtract) {
    if (frac_is_int(a) && frac_is_int(b)) {
        if (subtract) big_sub(&r->num, &a->num, &b->num);
        else big_add(&r->num, &a->num, &b->num);
        big_set_u32(&r->den, 1);
        return;
    }
    big_gcd(&t3, &a->den, &b->den);                 /* g = gcd(da, db) */
    if (big_is_unit(&t3)) {
        /* (na*db ± nb*da) / (da*db) is already in lowest terms. */
        big_mul(&t1, &a->num, &b->den);
        big_mul(&t2, &b->num, &a->den);
        if (subtract) big_sub(&t1, &t1, &t2);
        else big_add(&t1, &t1, &t2);
        big_mul(&t2, &a->den, &b->den);
        frac_set(r, &t1, &t2);
        return;
    }
    big_divmod(&t4, 0, &a->den, &t3);               /* s = da / g */
    big_divmod(&t5, 0, &b->den, &t3);               /* db / g */
    big_mul(&t1, &a->num, &t5);
    big_mul(&t2, &b->num, &t4);
    if (subtract) big_sub(&t1, &t1, &t2);           /* t = na*(db/g) ± nb*s */
    else big_add(&t1, &t1, &t2);
    big_gcd(&t2, &t1, &t3);                         /* g2 = gcd(t, g) */
    if (big_is_unit(&t2)) {
        big_mul(&t4, &t4, &b->den);                 /* t / (s*db) */
    } else {
        big_divmod(&t1, 0, &t1, &t2);
        big_divmod(&t5, 0, &b->den, &t2);
        big_mul(&t4, &t4, &t5);                     /* (t/g2) / (s*(db/g2)) */
    }
    frac_set(r, &t1, &t4);
}

static void frac_mul(frac_t *r, const frac_t *a, const frac_t *b) {
    big_copy(&t1, &a->num);
    big_copy(&t2, &b->den);
    if (!big_is_unit(&t2)) cancel(&t1, &t2);        /* na, db by gcd(na, db) */
    big_copy(&t3, &b->num);
    big_copy(&t4, &a->den);
    if (!big_is_unit(&t4)) cancel(&t3, &t4);        /* nb, da by gcd(nb, da) */
    big_mul(&t1, &t1, &t3);
    big_mul(&t2, &t2, &t4);
    frac_set(r, &t1, &t2);
}

static void require_nonzero(const frac_t *b) {
    if (big_is_zero(&b->num)) big_fail(CALC_MATH, "division by zero");
}

static void frac_div(frac_t *r, const frac_t *a, const frac_t *b) {
    require_nonzero(b);
    big_copy(&t1, &a->num);
    big_copy(&t3, &b->num);
    cancel(&t1, &t3);                               /* na, nb by gcd(na, nb) */
    big_copy(&t2, &b->den);
    big_copy(&t4, &a->den);
    if (!big_is_unit(&t2) && !big_is_unit(&t4)) cancel(&t2, &t4);   /* db, da */
    big_mul(&t1, &t1, &t2);                         /* (na*db) / (nb*da), sign to the top */
    big_mul(&t2, &t3, &t4);
    if (t2.neg) { big_neg(&t1, &t1); big_neg(&t2, &t2); }
    frac_set(r, &t1, &t2);
}

/* Python's Fraction: a // b = (na*db) // (da*nb), its products formed at double width, so
 * only the quotient must fit (a tiny fraction // 10**30 is 0, not "number too big"). */
static void frac_floordiv(frac_t *r, const frac_t *a, const frac_t *b) {
    require_nonzero(b);
    big_floordiv_prod(&t1, &a->num, &b->den, &a->den, &b->num);
    frac_set_int(r, &t1);
}

/* a % b: the value of Python's ((na*db) % (nb*da)) / (da*db), without any product that does
 * not fit where the result does. With g = gcd(da, db), x = da/g, y = db/g: a = A/L and
 * b = B/L over L = x*db, A = na*y, B = nb*x; a % b = R/L with R = A mod B. R shares no
 * factor with x (R = A mod x and gcd(na*y, x) = 1), so with h = gcd(R, db) the result in
 * lowest terms is (R/h) / (x * (db/h)): A, B and R are formed at double width
 * (big_mod_reduced), and only the result's numerator and denominator must fit. */
static void frac_mod(frac_t *r, const frac_t *a, const frac_t *b) {
    require_nonzero(b);
    big_gcd(&t3, &a->den, &b->den);                 /* g */
    big_divmod(&t4, 0, &a->den, &t3);               /* x = da / g */
    big_divmod(&t5, 0, &b->den, &t3);               /* y = db / g */
    big_mod_reduced(&t1, &t3, &a->num, &t5, &b->num, &t4, &b->den);   /* R/h, h */
    if (big_is_zero(&t1)) {
        big_set_u32(&t2, 1);                        /* zero is 0/1 */
    } else {
        big_divmod(&t2, 0, &b->den, &t3);           /* db / h */
        big_mul(&t2, &t2, &t4);                     /* x * (db / h) */
    }
    frac_set(r, &t1, &t2);
}

static void frac_pow(frac_t *r, const frac_t *a, const frac_t *e) {
    if (!frac_is_int(e)) big_fail(CALC_MATH, "exponent is not an integer");
    big_copy(&t3, &e->num);
    int negative = t3.neg;
    t3.neg = 0;
    if (!negative) {
        big_pow(&t1, &a->num, &t3);
        big_pow(&t2, &a->den, &t3);
    } else {
        if (big_is_zero(&a->num)) big_fail(CALC_MATH, "division by zero");
        big_pow(&t1, &a->den, &t3);   /* (n/d)**-k = d**k / n**k */
        big_pow(&t2, &a->num, &t3);
        if (t2.neg) { t2.neg = 0; big_neg(&t1, &t1); }
    }
    big_copy(&r->num, &t1);           /* coprime already: no reduction needed */
    big_copy(&r->den, &t2);
}

static void frac_gcd(frac_t *r, const frac_t *a, const frac_t *b) {
    if (!frac_is_int(a) || !frac_is_int(b)) big_fail(CALC_MATH, "gcd() needs integers");
    big_gcd(&t1, &a->num, &b->num);
    frac_set_int(r, &t1);
}

static void frac_print(const frac_t *a) {
    big_print(&a->num);
    if (!frac_is_int(a)) { putchar('/'); big_print(&a->den); }
}

/* ---- parser ----------------------------------------------------------------------- */

/* Values live on a stack: each parse function pushes exactly one value. */
#define POOL_SIZE 14
#define MAX_DEPTH 48
static frac_t pool[POOL_SIZE];
static int pool_top;
static int depth;

static const char *line_start, *pos, *line_end;

enum { T_END, T_NUM, T_GCD, T_LPAREN, T_RPAREN, T_COMMA, T_PLUS, T_MINUS, T_STAR, T_POW,
       T_SLASH, T_FLOORDIV, T_PERCENT };

static int tok;
static const char *tok_start;
static int tok_len;

static const char *const token_names[] = {
    "end of line", "a number", "'gcd'", "'('", "')'", "','", "'+'", "'-'", "'*'", "'**'",
    "'/'", "'//'", "'%'",
};

__attribute__((noreturn)) static void syntax_error(const char *expected) {
    printf("error: syntax error at column %d: expected %s, found ",
           (int)(tok_start - line_start) + 1, expected);
    if (tok >= 0) {
        print(token_names[tok]);
    } else {
        unsigned char c = (unsigned char)*tok_start;
        if (c >= 0x20 && c < 0x7f) printf("'%c'", c);
        else printf("byte 0x%02x", c);
    }
    putchar('\n');
    calc_longjmp(on_error, CALC_SYNTAX);
}

static void next_token(void) {
    while (pos < line_end && (*pos == ' ' || *pos == '\t' || *pos == '\r')) pos++;
    tok_start = pos;
    tok_len = 1;
    if (pos >= line_end) { tok = T_END; tok_len = 0; return; }
    char c = *pos;
    if (c >= '0' && c <= '9') {
        while (pos < line_end && *pos >= '0' && *pos <= '9') pos++;
        tok = T_NUM;
        tok_len = (int)(pos - tok_start);
        return;
    }
    if (line_end - pos >= 3 && pos[0] == 'g' && pos[1] == 'c' && pos[2] == 'd') {
        const char *after = pos + 3;
        int letter = after < line_end && ((*after >= 'a' && *after <= 'z') ||
                                          (*after >= 'A' && *after <= 'Z') || *after == '_');
        if (!letter) { pos = after; tok = T_GCD; tok_len = 3; return; }
    }
    pos++;
    switch (c) {
    case '(': tok = T_LPAREN; return;
    case ')': tok = T_RPAREN; return;
    case ',': tok = T_COMMA; return;
    case '+': tok = T_PLUS; return;
    case '-': tok = T_MINUS; return;
    case '%': tok = T_PERCENT; return;
    case '*':
        if (pos < line_end && *pos == '*') { pos++; tok = T_POW; tok_len = 2; }
        else tok = T_STAR;
        return;
    case '/':
        if (pos < line_end && *pos == '/') { pos++; tok = T_FLOORDIV; tok_len = 2; }
        else tok = T_SLASH;
        return;
    default:
        pos--;
        tok = -1;   /* not a token: reported by the caller that expected something */
        return;
    }
}

static void expect(int kind) {
    if (tok != kind) syntax_error(token_names[kind]);
    next_token();
}

static frac_t *push(void) {
    if (pool_top == POOL_SIZE) big_fail(CALC_TOO_BIG, "expression too complex");
    return &pool[pool_top++];
}

static void enter(void) {
    if (++depth > MAX_DEPTH) big_fail(CALC_TOO_BIG, "expression nested too deeply");
}

static void parse_expr(void);
static void parse_factor(void);

static void parse_primary(void) {
    if (tok == T_NUM) {
        if (tok_len > 1 && tok_start[0] == '0') {
            for (int i = 0; i < tok_len; i++) {
                if (tok_start[i] != '0') {   /* like Python: 00 is fine, 007 is not */
                    printf("error: syntax error at column %d: leading zeros are not allowed "
                           "in a number: %.*s\n", (int)(tok_start - line_start) + 1,
                           tok_len, tok_start);
                    calc_longjmp(on_error, CALC_SYNTAX);
                }
            }
        }
        frac_t *v = push();
        big_from_digits(&v->num, tok_start, tok_len);
        big_set_u32(&v->den, 1);
        next_token();
    } else if (tok == T_LPAREN) {
        next_token();
        parse_expr();
        expect(T_RPAREN);
    } else if (tok == T_GCD) {
        next_token();
        expect(T_LPAREN);
        parse_expr();
        expect(T_COMMA);
        parse_expr();
        expect(T_RPAREN);
        frac_gcd(&pool[pool_top - 2], &pool[pool_top - 2], &pool[pool_top - 1]);
        pool_top--;
    } else {
        syntax_error("a number, '(' or gcd");
    }
}

static void parse_power(void) {
    parse_primary();
    if (tok == T_POW) {
        next_token();
        parse_factor();
        frac_pow(&pool[pool_top - 2], &pool[pool_top - 2], &pool[pool_top - 1]);
        pool_top--;
    }
}

static void parse_factor(void) {
    enter();
    if (tok == T_MINUS || tok == T_PLUS) {
        int minus = tok == T_MINUS;
        next_token();
        parse_factor();
        if (minus) big_neg(&pool[pool_top - 1].num, &pool[pool_top - 1].num);
    } else {
        parse_power();
    }
    depth--;
}

static void parse_term(void) {
    parse_factor();
    while (tok == T_STAR || tok == T_SLASH || tok == T_FLOORDIV || tok == T_PERCENT) {
        int op = tok;
        next_token();
        parse_factor();
        frac_t *a = &pool[pool_top - 2], *b = &pool[pool_top - 1];
        if (op == T_STAR) frac_mul(a, a, b);
        else if (op == T_SLASH) frac_div(a, a, b);
        else if (op == T_FLOORDIV) frac_floordiv(a, a, b);
        else frac_mod(a, a, b);
        pool_top--;
    }
}

static void parse_expr(void) {
    enter();
    parse_term();
    while (tok == T_PLUS || tok == T_MINUS) {
        int subtract = tok == T_MINUS;
        next_token();
        parse_term();
        frac_add(&pool[pool_top - 2], &pool[pool_top - 2], &pool[pool_top - 1], subtract);
        pool_top--;
    }
    depth--;
}

/* Evaluates the line [start, end) and prints its result; returns 0 or an exit code. */
static int evaluate_line(const char *start, const char *end) {
    line_start = pos = start;
    line_end = end;
    pool_top = 0;
    depth = 0;
    int code = calc_setjmp(on_error);
    if (code) return code;
    next_token();
    parse_expr();
    if (tok != T_END) syntax_error("an operator or end of line");
    frac_print(&pool[0]);
    putchar('\n');
    return 0;
}

static int is_blank(const char *s, const char *end) {
    for (; s < end; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r') return 0;
    return 1;
}

/* ---- tool calls from the UART's input -------------------------------------------
 *
 * With an empty input buffer, calc serves calls from the UART's input (the bridge of a
 * merged model feeds a tool call's text there: docs/firmware.md). A call is its text
 * tokens, read with UART_TNEXT and UART_TXT up to a length of 0 (each token's bytes come
 * from the core's own tables: docs/cpu.md, "Text input"); when there are none, the bytes
 * on UART_RX up to a 0 byte (a bridge that feeds bytes). Both give the same text, read in
 * one of three forms by its first non-blank character:
 *
 *   '{'  the JSON ("hermes") form: {"name": "calc", "arguments": {"expression": "..."}}
 *        (other keys ignored, in any order);
 *   '<'  Qwen3.5's XML form, the text between <tool_call> and </tool_call> as its chat
 *        template renders it, read like serving stacks' qwen3_coder parser:
 *          <function=calc>
 *          <parameter=expression>
 *          2**100
 *          </parameter>
 *          </function>
 *        Whitespace (newlines too) may surround the tags; a parameter's value is the raw
 *        text up to the next </parameter> (not escaped: it may hold '<', '&', quotes,
 *        newlines), less one leading and one trailing newline; parameters in any order;
 *        nothing but whitespace after </function>;
 *   else a plain expression ("7*6"), evaluated as it is.
 *
 * The expression is evaluated as the input buffer's text would be (each line in turn). A
 * call that is malformed (not JSON, no <function=...>, an unterminated <parameter=...>,
 * no </function>, text after the call), names another tool, gives an unknown parameter,
 * lacks the expression or is longer than the buffer prints one "error: ..." line. After
 * each answer calc reads the next call, so between calls it is parked on a read of the
 * UART; an empty call after the first ends the run, with the exit code of the first
 * failing call (CALC_CALL for a malformed one). */
static char call_text[1024];
static char expression[1024];
static const char *jp;          /* the JSON scanner's position */

static calc_jmp_buf call_abort;  /* back to the serving loop, past a malformed call */

__attribute__((noreturn)) static void call_error(const char *what) {
    print("error: ");
    puts(what);
    calc_longjmp(call_abort, CALC_CALL);
}

/* After an error line printed by the caller. */
__attribute__((noreturn)) static void call_refused(void) {
    calc_longjmp(call_abort, CALC_CALL);
}

static void json_ws(void) {
    while (*jp == ' ' || *jp == '\t' || *jp == '\n' || *jp == '\r') jp++;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A JSON string at jp (decoded into out, at most cap - 1 bytes; out may be NULL). */
static void json_string(char *out, int cap) {
    int n = 0;
    if (*jp != '"') call_error("the call is not JSON: a string was expected");
    jp++;
    while (*jp != '"') {
        int c = (unsigned char)*jp++;
        if (c == 0 || c < 0x20) call_error("the call is not JSON: an unterminated string");
        if (c == '\\') {
            int e = *jp++;
            if (e == 'n') c = '\n'; else if (e == 't') c = '\t'; else if (e == 'r') c = '\r';
            else if (e == 'b') c = '\b'; else if (e == 'f') c = '\f';
            else if (e == '"' || e == '\\' || e == '/') c = e;
            else if (e == 'u') {
                c = 0;
                for (int i = 0; i < 4; i++) {
                    int h = hex_digit(*jp++);
                    if (h < 0) call_error("the call is not JSON: a bad \\u escape");
                    c = c * 16 + h;
                }
                if (c == 0 || c > 0x7f) call_error("the expression holds a character calc does not read");
            } else call_error("the call is not JSON: a bad escape");
        }
        if (out) {
            if (n >= cap - 1)
                call_error(out == expression ? "the expression is longer than 1023 bytes"
                                             : "a key or tool name in the call is too long");
            out[n] = (char)c;
        }
        n++;
    }
    jp++;
    if (out) out[n] = 0;
}

static void json_value(int depth);

/* An object at jp; with want_key, the string value of that key goes to out (found = 1). */
static int json_object(const char *want_key, char *out, int cap, const char *obj_key,
                       int depth) {
    char key[32];
    int found = 0;
    if (depth > 16) call_error("the call is nested too deeply");
    if (*jp != '{') call_error("the call is not JSON: an object was expected");
    jp++;
    json_ws();
    if (*jp == '}') { jp++; return 0; }
    for (;;) {
        json_string(key, sizeof key);
        json_ws();
        if (*jp++ != ':') call_error("the call is not JSON: ':' was expected");
        json_ws();
        if (want_key && !strcmp(key, want_key) && *jp == '"') {
            json_string(out, cap);
            found |= 1;
        } else if (obj_key && !strcmp(key, obj_key) && *jp == '{') {
            if (json_object("expression", expression, sizeof expression, 0, depth + 1))
                found |= 2;
        } else {
            json_value(depth + 1);
        }
        json_ws();
        if (*jp == ',') { jp++; json_ws(); continue; }
        if (*jp == '}') { jp++; return found; }
        call_error("the call is not JSON: ',' or '}' was expected");
    }
}

static void json_value(int depth) {
    if (depth > 16) call_error("the call is nested too deeply");
    if (*jp == '"') { json_string(0, 0); return; }
    if (*jp == '{') { json_object(0, 0, 0, 0, depth); return; }
    if (*jp == '[') {
        jp++; json_ws();
        if (*jp == ']') { jp++; return; }
        for (;;) {
            json_value(depth + 1);
            json_ws();
            if (*jp == ',') { jp++; json_ws(); continue; }
            if (*jp == ']') { jp++; return; }
            call_error("the call is not JSON: ',' or ']' was expected");
        }
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        int n = (int)strlen(words[i]);
        if (!memcmp(jp, words[i], n)) { jp += n; return; }
    }
    const char *start = jp;
    while ((*jp >= '0' && *jp <= '9') || *jp == '-' || *jp == '+' || *jp == '.' ||
           *jp == 'e' || *jp == 'E')
        jp++;
    if (jp == start) call_error("the call is not JSON: a value was expected");
}

/* ---- the XML form (Qwen3.5) ----------------------------------------------------- */

/* 1 if s starts with pat (stops at the first difference, so never reads past s's end). */
static int starts_with(const char *s, const char *pat) {
    while (*pat)
        if (*s++ != *pat++) return 0;
    return 1;
}

__attribute__((noreturn)) static void xml_error(const char *what) {
    print("error: the call is malformed: ");
    puts(what);
    call_refused();
}

/* The NAME of <function=NAME> or <parameter=NAME> at jp, up to its '>' (which jp passes),
 * without the spaces around it: its start, and its length in *len. */
static const char *xml_name(int *len, const char *unclosed) {
    const char *start = jp;
    while (*jp != '>') {
        if (*jp == 0 || *jp == '\n' || *jp == '<') xml_error(unclosed);
        jp++;
    }
    const char *end = jp++;
    while (start < end && (*start == ' ' || *start == '\t')) start++;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t')) end--;
    *len = (int)(end - start);
    return start;
}

static int is_word(const char *s, int len, const char *word) {
    return len == (int)strlen(word) && !memcmp(s, word, len);
}

/* A call in the XML form at jp: its expression (copied to `expression`). The whole call
 * is read first (a malformed one is refused as such), then its function and parameters. */
static const char *xml_call(void) {
    int name_len, key_len, value_len = 0, unknown_len = 0, twice = 0;
    const char *name, *key, *value = 0, *unknown = 0;
    if (!starts_with(jp, "<function=")) xml_error("<function=NAME> was expected");
    jp += 10;
    name = xml_name(&name_len, "<function= is not closed with '>'");
    for (;;) {
        json_ws();
        if (starts_with(jp, "</function>")) break;
        if (!*jp) xml_error("</function> is missing");
        if (!starts_with(jp, "<parameter=")) xml_error("<parameter=NAME> or </function> was expected");
        jp += 11;
        key = xml_name(&key_len, "<parameter= is not closed with '>'");
        const char *start = jp, *end = jp;
        while (*end && !starts_with(end, "</parameter>")) end++;
        if (!*end) {
            printf("error: the call is malformed: <parameter=%.*s> has no </parameter>\n",
                   key_len, key);
            call_refused();
        }
        jp = end + 12;
        if (start < end && *start == '\n') start++;       /* one newline each side */
        if (end > start && end[-1] == '\n') end--;
        if (is_word(key, key_len, "expression")) {
            twice |= value != 0;
            value = start;
            value_len = (int)(end - start);
        } else if (!unknown) {
            unknown = key;
            unknown_len = key_len;
        }
    }
    jp += 11;
    json_ws();
    if (*jp) xml_error("text after </function>");
    if (!is_word(name, name_len, "calc")) {
        printf("error: unknown tool \"%.*s\" (this computer has calc)\n", name_len, name);
        call_refused();
    }
    if (unknown) {
        printf("error: unknown parameter \"%.*s\" for calc (it takes \"expression\")\n",
               unknown_len, unknown);
        call_refused();
    }
    if (twice) call_error("the call gives <parameter=expression> twice");
    if (!value) call_error("the call has no <parameter=expression>");
    memcpy(expression, value, value_len);          /* inside call_text: fits */
    expression[value_len] = 0;
    return expression;
}

/* The text to evaluate of the next call on the UART's input (see above): "" for an empty
 * call. A call too long for the buffer is read to its end, then refused. */
static const char *uart_text(void) {
    int n = 0, c, len, tokens = 0, long_token = 0;
    while ((len = read_text_next()) != 0) {
        tokens++;
        if (len > DELTACHIP_TEXT_BYTES) {     /* only its first bytes are readable */
            long_token = 1;
            continue;
        }
        for (int j = 0; j < len; j++) {
            c = read_text_byte(j);
            if (n < (int)sizeof call_text - 1) call_text[n] = (char)c;
            n++;
        }
    }
    if (!tokens) {
        while ((c = read_input_byte()) != 0) {
            if (n < (int)sizeof call_text - 1) call_text[n] = (char)c;
            n++;
        }
    }
    if (long_token) call_error("the call has a text token longer than 32 bytes");
    if (n > (int)sizeof call_text - 1) call_error("the call is longer than 1023 bytes");
    call_text[n] = 0;
    jp = call_text;
    json_ws();
    if (*jp == '<') return xml_call();
    if (*jp != '{') return call_text;
    char name[32];
    name[0] = 0;
    int found = json_object("name", name, sizeof name, "arguments", 0);
    json_ws();
    if (*jp) call_error("the call is not JSON: text after the object");
    if (!(found & 1)) call_error("the call names no tool (\"name\": \"calc\")");
    if (strcmp(name, "calc")) {
        print("error: unknown tool \"");
        print(name);
        puts("\" (this computer has calc)");
        calc_longjmp(call_abort, CALC_CALL);
    }
    if (!(found & 2)) call_error("the call has no \"arguments\": {\"expression\": \"...\"}");
    return expression;
}

/* Evaluates every non-blank line of s; returns the exit code of the first failing one
 * (0: all succeeded), CALC_SYNTAX if there is none. */
static int evaluate_text(const char *s) {
    int status = 0, lines = 0;
    while (*s) {
        const char *end = s;
        while (*end && *end != '\n') end++;
        if (!is_blank(s, end)) {
            int code = evaluate_line(s, end);
            if (code && !status) status = code;
            lines++;
        }
        s = *end ? end + 1 : end;
    }
    if (lines == 0) {
        puts("error: no expression given (example input: 2**100)");
        return CALC_SYNTAX;
    }
    return status;
}

/* The stack at the bottom of RAM (docs/firmware.md): 5 KiB, of which the deepest allowed
 * nesting uses about 4 KiB (tests/firmware/test_calc.py checks it on the emulator's trace);
 * the 23.8 KiB of .bss take the rest of the 32 KiB. */
DELTACHIP_STACK_SIZE(5120);

static int status;              /* the first failing call's code (kept across longjmps) */
static int served;              /* calls answered so far */

int main(void) {
    const char *s = input_text();
    if (*s) return evaluate_text(s);
    for (;;) {
        int code = calc_setjmp(call_abort);
        if (code) {
            if (!status) status = code;
            served++;
            continue;
        }
        s = uart_text();
        if (!call_text[0] && served) return status;   /* an empty call, not an empty expression */
        code = evaluate_text(s);
        if (code && !status) status = code;
        served++;
    }
}
