/* MicroPython on the deltachip core: runs the Python program in the input buffer.
 *
 * The program is the input buffer's text (`deltachip run mp.elf --input 'print(2**100)'`, or
 * standard input). It is compiled and run as a module named "<stdin>"; print() writes to the
 * UART. Exit code: 0 when the program ends normally; 1 after an uncaught exception, whose
 * traceback is printed on the UART (as CPython prints it on stderr); sys.exit(n) exits with
 * n (None: 0; another object is printed, then 1). The GC heap is the RAM that the stack,
 * the input buffer, .data and .bss leave (link.ld's __heap_start..__heap_end). Python calls
 * do not recurse in C: their frames go on a Python stack (`pystack`, in .bss); when it is
 * full a call raises RuntimeError("pystack space exhausted"); the C stack is checked too
 * (RuntimeError "maximum recursion depth exceeded"), so deep recursion is a Python error,
 * never a machine fault.
 *
 * With an empty input buffer it serves tool calls instead (the `python` tool of a merged
 * model: docs/firmware.md, "The python tool"): each call's text is read from the UART's
 * input (text tokens on UART_TNEXT/UART_TXT, else bytes on UART_RX up to a 0), in JSON
 * ({"name": "python", "arguments": {"code": "..."}}), Qwen3.5's XML form
 * (<function=python> <parameter=code> ... </parameter> </function>) or as plain source; its
 * code runs in the same module as the calls before it (a name one call binds is there in
 * the next), its printed output (or traceback) is the answer, and the program waits for the
 * next call. An empty call after the first ends the run (exit 0).
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "py/compile.h"
#include "py/runtime.h"
#include "py/gc.h"
#include "py/cstack.h"
#include "py/mphal.h"
#include "shared/runtime/gchelper.h"

#define UART_TX ((volatile uint8_t *)0x10000000u)
#define UART_RX ((volatile uint8_t *)0x10000004u)
#define UART_TNEXT ((volatile uint8_t *)0x10000008u)
#define UART_TXT ((volatile uint8_t *)0x10000020u)
#define TEXT_BYTES 32

/* Python frames (MICROPY_ENABLE_PYSTACK) */
static mp_obj_t pystack[DELTACHIP_PYSTACK_SIZE / sizeof(mp_obj_t)];

extern char __heap_start[], __heap_end[], __stack_top[], __stack_size[];
extern char __input_buffer[], __input_size[];

mp_uint_t mp_hal_stdout_tx_strn(const char *str, size_t len) {
    for (size_t i = 0; i < len; i++) {
        *UART_TX = (uint8_t)str[i];
    }
    return len;
}

/* the exit code for an uncaught exception (its traceback printed) or SystemExit */
static int uncaught(mp_obj_base_t *exc) {
    if (mp_obj_is_subclass_fast(MP_OBJ_FROM_PTR(exc->type), MP_OBJ_FROM_PTR(&mp_type_SystemExit))) {
        mp_obj_t val = mp_obj_exception_get_value(MP_OBJ_FROM_PTR(exc));
        if (val == mp_const_none) {
            return 0;
        }
        if (mp_obj_is_int(val)) {
            return (int)mp_obj_int_get_truncated(val);
        }
        mp_obj_print_helper(&mp_plat_print, val, PRINT_STR);
        mp_print_str(&mp_plat_print, "\n");
        return 1;
    }
    mp_obj_print_exception(&mp_plat_print, MP_OBJ_FROM_PTR(exc));
    return 1;
}

/* compile and run `len` bytes of Python source as the module "<stdin>"; the exit code */
static int run_source(const char *src, size_t len) {
    nlr_buf_t nlr;
    if (nlr_push(&nlr) == 0) {
        mp_lexer_t *lex = mp_lexer_new_from_str_len(MP_QSTR__lt_stdin_gt_, src, len, 0);
        qstr source_name = lex->source_name;
        mp_parse_tree_t tree = mp_parse(lex, MP_PARSE_FILE_INPUT);
        mp_obj_t module_fun = mp_compile(&tree, source_name, false);
        mp_call_function_0(module_fun);
        nlr_pop();
        return 0;
    }
    return uncaught((mp_obj_base_t *)nlr.ret_val);
}

/* ---- tool calls (see the top of this file) ---------------------------------------
 * A call's text goes into the input buffer (1 KiB, unused once the calls begin: no RAM
 * taken from the heap); a JSON string is decoded in place (never longer than its text). */
static char *jp;                /* the call scanner's position */
static const char *err;         /* why the call is malformed (NULL: it is not) */

static void print_str(const char *s) {
    mp_hal_stdout_tx_strn(s, strlen(s));
}

static void ws(void) {
    while (*jp == ' ' || *jp == '\t' || *jp == '\n' || *jp == '\r') jp++;
}

static int starts(const char *p, const char *w) {
    return strncmp(p, w, strlen(w)) == 0;
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* The JSON string at jp, decoded in place: its start, its length in *len (NULL: malformed) */
static char *json_string(size_t *len) {
    if (*jp != '"') { err = "the call is not JSON: a string was expected"; return NULL; }
    char *out = ++jp, *start = out;
    for (;;) {
        unsigned c = (unsigned char)*jp++;
        if (c == '"') break;
        if (c < 0x20) { err = "the call is not JSON: an unterminated string"; return NULL; }
        if (c == '\\') {
            c = (unsigned char)*jp++;
            const char *e = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", (int)c);
            if (c && e && ((e - "\"\"\\\\//b\bf\fn\nr\rt\t") & 1) == 0) {
                c = (unsigned char)e[1];
            } else if (c == 'u' && (c = (unsigned)hex4(jp)) <= 0xffff) {
                jp += 4;
                if (c >= 0xd800 && c < 0xdc00 && jp[0] == '\\' && jp[1] == 'u') {
                    int lo = hex4(jp + 2);
                    if (lo >= 0xdc00 && lo < 0xe000) {
                        c = 0x10000 + ((c - 0xd800) << 10) + ((unsigned)lo - 0xdc00);
                        jp += 6;
                    }
                }
                if (c >= 0x80) {       /* UTF-8: never longer than the escape's text */
                    int n = c < 0x800 ? 1 : c < 0x10000 ? 2 : 3;
                    *out++ = (char)((0xff80u >> n) | (c >> (6 * n)));
                    while (n--) *out++ = (char)(0x80 | ((c >> (6 * n)) & 0x3f));
                    continue;
                }
            } else {
                err = "the call is not JSON: a bad escape";
                return NULL;
            }
        }
        *out++ = (char)c;
    }
    *len = (size_t)(out - start);
    return start;
}

static int json_skip(int depth);

/* The JSON object at jp; with `key`, the string value of that key goes to *val/*vlen, and
 * an object under `obj_key` is read the same way for `obj_want`. Returns 0 or -1. */
static int json_object(int depth, const char *key, char **val, size_t *vlen,
                       const char *obj_key, const char *obj_want, char **oval, size_t *olen,
                       int *has_obj) {
    if (depth > 16) { err = "the call is nested too deeply"; return -1; }
    if (*jp != '{') { err = "the call is not JSON: an object was expected"; return -1; }
    jp++;
    ws();
    if (*jp == '}') { jp++; return 0; }
    for (;;) {
        size_t klen;
        char *k = json_string(&klen);
        if (!k) return -1;
        ws();
        if (*jp++ != ':') { err = "the call is not JSON: ':' was expected"; return -1; }
        ws();
        if (key && klen == strlen(key) && !memcmp(k, key, klen) && *jp == '"') {
            if (!(*val = json_string(vlen))) return -1;
        } else if (obj_key && klen == strlen(obj_key) && !memcmp(k, obj_key, klen)
                   && *jp == '{') {
            *has_obj = 1;
            if (json_object(depth + 1, obj_want, oval, olen, NULL, NULL, NULL, NULL, NULL))
                return -1;
        } else if (json_skip(depth + 1)) {
            return -1;
        }
        ws();
        if (*jp == '}') { jp++; return 0; }
        if (*jp++ != ',') { err = "the call is not JSON: ',' or '}' was expected"; return -1; }
        ws();
    }
}

static int json_skip(int depth) {
    size_t n;
    if (depth > 16) { err = "the call is nested too deeply"; return -1; }
    if (*jp == '"') return json_string(&n) ? 0 : -1;
    if (*jp == '{') return json_object(depth, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    if (*jp == '[') {
        jp++;
        ws();
        if (*jp == ']') { jp++; return 0; }
        for (;;) {
            if (json_skip(depth + 1)) return -1;
            ws();
            if (*jp == ']') { jp++; return 0; }
            if (*jp++ != ',') { err = "the call is not JSON: ',' or ']' was expected"; return -1; }
            ws();
        }
    }
    char *start = jp;
    while (*jp && !strchr(" \t\r\n,:]}[{\"", *jp)) jp++;
    if (jp == start) { err = "the call is not JSON: a value was expected"; return -1; }
    return 0;
}

/* The NAME of <function=NAME> or <parameter=NAME> at jp, up to its '>' (passed), blanks
 * around it dropped; NULL where it is not closed. */
static char *xml_name(size_t *len) {
    char *start = jp;
    while (*jp != '>') {
        if (*jp == 0 || *jp == '\n' || *jp == '<') return NULL;
        jp++;
    }
    char *end = jp++;
    while (start < end && (*start == ' ' || *start == '\t')) start++;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t')) end--;
    *len = (size_t)(end - start);
    return start;
}

static int is(const char *s, size_t len, const char *word) {
    return len == strlen(word) && !memcmp(s, word, len);
}

/* Reads the next call into the input buffer and finds its code (*code, *len); 0: a call
 * to run, 1: an empty call, -1: refused (the "error: ..." line printed). */
static int next_call(char **code, size_t *len) {
    char *call = __input_buffer;
    size_t cap = (size_t)__input_size, n = 0;
    int c, tlen, tokens = 0, long_token = 0;
    while ((tlen = *UART_TNEXT) != 0) {
        tokens++;
        if (tlen > TEXT_BYTES) {
            long_token = 1;
            continue;
        }
        for (int j = 0; j < tlen; j++) {
            c = UART_TXT[j];
            if (n < cap - 1) call[n] = (char)c;
            n++;
        }
    }
    if (!tokens) {
        while ((c = *UART_RX) != 0) {
            if (n < cap - 1) call[n] = (char)c;
            n++;
        }
    }
    call[n < cap - 1 ? n : cap - 1] = 0;
    err = NULL;
    if (long_token) err = "the call has a text token longer than 32 bytes";
    else if (n > cap - 1) err = "the call is longer than 1023 bytes";
    if (err) goto refused;
    if (n == 0) return 1;
    jp = call;
    ws();
    char *name = NULL, *unknown = NULL;
    size_t name_len = 0, unknown_len = 0;
    int args = 0, twice = 0;
    *code = NULL;
    if (*jp == '{') {
        if (json_object(0, "name", &name, &name_len, "arguments", "code", code, len, &args))
            goto refused;
        ws();
        if (*jp) { err = "the call is not JSON: text after the object"; goto refused; }
        if (!name) { err = "the call names no tool (\"name\": \"python\")"; goto refused; }
    } else if (*jp == '<') {
        args = 1;
        if (!starts(jp, "<function=")) { err = "<function=NAME> was expected"; goto malformed; }
        jp += 10;
        if (!(name = xml_name(&name_len))) { err = "<function= is not closed with '>'"; goto malformed; }
        for (;;) {
            ws();
            if (starts(jp, "</function>")) break;
            if (!*jp) { err = "</function> is missing"; goto malformed; }
            if (!starts(jp, "<parameter=")) { err = "<parameter=NAME> or </function> was expected"; goto malformed; }
            jp += 11;
            size_t key_len;
            char *key = xml_name(&key_len);
            if (!key) { err = "<parameter= is not closed with '>'"; goto malformed; }
            char *start = jp, *end = jp;
            while (*end && !starts(end, "</parameter>")) end++;
            if (!*end) { err = "a <parameter=...> has no </parameter>"; goto malformed; }
            jp = end + 12;
            if (start < end && *start == '\n') start++;       /* one newline each side */
            if (end > start && end[-1] == '\n') end--;
            if (is(key, key_len, "code")) {
                twice |= *code != NULL;
                *code = start;
                *len = (size_t)(end - start);
            } else if (!unknown) {
                unknown = key;
                unknown_len = key_len;
            }
        }
        jp += 11;
        ws();
        if (*jp) { err = "text after </function>"; goto malformed; }
    } else {                    /* plain source */
        *code = call;
        *len = n;
        return 0;
    }
    if (!is(name, name_len, "python")) {
        name[name_len] = 0;
        print_str("error: unknown tool \"");
        print_str(name);
        print_str("\" (this computer has python)\n");
        return -1;
    }
    if (unknown) {
        unknown[unknown_len] = 0;
        print_str("error: unknown parameter \"");
        print_str(unknown);
        print_str("\" for python (it takes \"code\")\n");
        return -1;
    }
    if (twice) { err = "the call gives <parameter=code> twice"; goto refused; }
    if (!args) { err = "the call has no \"arguments\": {\"code\": \"...\"}"; goto refused; }
    if (!*code) { err = "the call gives no code"; goto refused; }
    return 0;
malformed:
    print_str("error: the call is malformed: ");
    print_str(err);
    print_str("\n");
    return -1;
refused:
    print_str("error: ");
    print_str(err);
    print_str("\n");
    return -1;
}

int main(void) {
    mp_cstack_init_with_top(__stack_top, (size_t)__stack_size);
    mp_pystack_init(pystack, pystack + MP_ARRAY_SIZE(pystack));
    gc_init(__heap_start, __heap_end);
    mp_init();
    const char *src = __input_buffer;
    size_t n = strnlen(src, (size_t)__input_size);
    if (n) {
        int code = run_source(src, n);
        mp_deinit();
        return code;
    }
    /* tool calls: every call's code in the one module "<stdin>" (its globals persist) */
    for (int served = 0;; served++) {
        char *code;
        size_t len;
        int r = next_call(&code, &len);
        if (r == 1 && served) break;
        if (r == 0) run_source(code, len);
    }
    mp_deinit();
    return 0;
}

void gc_collect(void) {
    gc_collect_start();
    gc_helper_collect_regs_and_stack();
    gc_collect_end();
}

void nlr_jump_fail(void *val) {
    (void)val;
    static const char msg[] = "FATAL: uncaught NLR\n";
    mp_hal_stdout_tx_strn(msg, sizeof(msg) - 1);
    _exit(3);
}
