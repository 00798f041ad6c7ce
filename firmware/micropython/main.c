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

int main(void) {
    mp_cstack_init_with_top(__stack_top, (size_t)__stack_size);
    mp_pystack_init(pystack, pystack + MP_ARRAY_SIZE(pystack));
    gc_init(__heap_start, __heap_end);
    mp_init();
    const char *src = __input_buffer;
    int code = run_source(src, strnlen(src, (size_t)__input_size));
    mp_deinit();
    return code;
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
