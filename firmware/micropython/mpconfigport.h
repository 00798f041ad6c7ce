/* MicroPython configuration for the deltachip core (RV32IM + Zba, no OS, no F/D: soft float).
 *
 * The project's own port (docs/firmware.md, "MicroPython"): the compiler and the bytecode VM,
 * arbitrary-precision integers (mpz), double-precision floats (soft float, picolibc's libm),
 * str/bytes/list/dict/set/tuple, exceptions with tracebacks, print to the UART, the builtins
 * and the math module. The program is read from the input buffer; there is no REPL, no
 * filesystem and no import of files.
 */
#include <stdint.h>

#define MICROPY_CONFIG_ROM_LEVEL            (MICROPY_CONFIG_ROM_LEVEL_EXTRA_FEATURES)

/* the core: compiler, GC, tracebacks, big integers, floats */
#define MICROPY_ENABLE_COMPILER             (1)
#define MICROPY_ENABLE_GC                   (1)
#define MICROPY_ENABLE_SOURCE_LINE          (1)
#define MICROPY_ERROR_REPORTING             (MICROPY_ERROR_REPORTING_DETAILED)
#define MICROPY_LONGINT_IMPL                (MICROPY_LONGINT_IMPL_MPZ)
#define MICROPY_FLOAT_IMPL                  (MICROPY_FLOAT_IMPL_DOUBLE)
#define MICROPY_FLOAT_FORMAT_IMPL           (MICROPY_FLOAT_FORMAT_IMPL_EXACT)
/* Python calls Python without recursing in C (the C stack is small): the frames go on a
   separate Python stack of DELTACHIP_PYSTACK_SIZE bytes (main.c), allocated and freed in
   LIFO order, faster than the GC heap; a call that does not fit raises RuntimeError */
#define MICROPY_STACKLESS                   (1)
#define MICROPY_STACKLESS_STRICT            (1)
#define MICROPY_ENABLE_PYSTACK              (1)
#ifndef DELTACHIP_PYSTACK_SIZE
#define DELTACHIP_PYSTACK_SIZE              (6144)
#endif
#define MICROPY_STACK_CHECK                 (1)
/* deep recursion: a RuntimeError while 2 KiB of stack are left (for the calls between two
   checks and for printing the traceback), never a machine fault */
#define MICROPY_STACK_CHECK_MARGIN          (2048)
#define MICROPY_ENABLE_EMERGENCY_EXCEPTION_BUF (1)
#define MICROPY_EMERGENCY_EXCEPTION_BUF_SIZE (256)
#define MICROPY_ALLOC_PATH_MAX              (64)
#define MICROPY_ALLOC_PARSE_CHUNK_INIT      (1024)
#define MICROPY_PY_SYS_PLATFORM             "deltachip"
#define MICROPY_HW_BOARD_NAME               "deltachip"
#define MICROPY_HW_MCU_NAME                 "rv32im_zba"

/* no OS: no REPL, no files, no imports of files, no keyboard interrupt, no clock */
#define MICROPY_HELPER_REPL                 (0)
#define MICROPY_KBD_EXCEPTION               (0)
#define MICROPY_ENABLE_EXTERNAL_IMPORT      (0)
#define MICROPY_READER_VFS                  (0)
#define MICROPY_ENABLE_SCHEDULER            (0)
#define MICROPY_ENABLE_FINALISER            (0)
#define MICROPY_PY_BUILTINS_INPUT           (0)
#define MICROPY_PY_BUILTINS_HELP            (0)
#define MICROPY_PY_BUILTINS_EXECFILE        (0)
#define MICROPY_PY_SYS_STDFILES             (0)
#define MICROPY_PY_SYS_PS1_PS2              (0)
#define MICROPY_PY_IO                       (0)
#define MICROPY_PY_SELECT                   (0)
#define MICROPY_PY_OS                       (0)
#define MICROPY_PY_TIME                     (0)
#define MICROPY_PY_ASYNCIO                  (0)
#define MICROPY_PY_CMATH                    (0)
/* to fit the 256 KiB code ROM: no complex numbers, no math.erf/gamma/lgamma */
#define MICROPY_PY_BUILTINS_COMPLEX         (0)
#define MICROPY_PY_MATH_SPECIAL_FUNCTIONS   (0)
#define MICROPY_PY_UCTYPES                  (0)
#define MICROPY_PY_DEFLATE                  (0)
#define MICROPY_PY_JSON                     (0)
#define MICROPY_PY_RE                       (0)
#define MICROPY_PY_HEAPQ                    (0)
#define MICROPY_PY_HASHLIB                  (0)
#define MICROPY_PY_BINASCII                 (0)
#define MICROPY_PY_RANDOM                   (0)
#define MICROPY_PY_FRAMEBUF                 (0)
#define MICROPY_PY_PLATFORM                 (0)
#define MICROPY_PY_MACHINE                  (0)
#define MICROPY_PY_MICROPYTHON_RINGIO       (0)
#define MICROPY_PY_THREAD                   (0)

/* print goes straight to the UART (no \n -> \r\n) */
#define MP_PLAT_PRINT_STRN(str, len) mp_hal_stdout_tx_strn(str, len)

typedef long mp_off_t;
#define MP_SSIZE_MAX (0x7fffffff)
#define MP_STATE_PORT MP_STATE_VM
#include <alloca.h>
