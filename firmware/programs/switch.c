/* A tiny stack-machine interpreter whose dispatch `switch` compiles to a jump table in
 * rodata (tests check the ELF's .rodata holds a table of code addresses). The bytecode
 * computes 10! = 3628800 and 2^20 - 1 = 1048575 and prints them. */
#include "deltachip.h"

enum { PUSH, ADD, SUB, MUL, DUP, SWAP, JNZ, PRINT, DROP, HALT, OVER };

/* 10!: counter n on top, accumulator below: acc *= n; n -= 1; loop while n != 0. */
static const int program[] = {
    PUSH, 1, PUSH, 10,                  /* acc n */
    SWAP, OVER, MUL, SWAP,              /* 4: acc*n n */
    PUSH, 1, SUB, DUP, JNZ, 4,          /* n-1, loop */
    DROP, PRINT,
    /* (1 << 20) - 1 by doubling: x = 1, 20 times x = x + x */
    PUSH, 1, PUSH, 20,
    SWAP, DUP, ADD, SWAP,               /* 20: x+x n */
    PUSH, 1, SUB, DUP, JNZ, 20,
    DROP, PUSH, 1, SUB, PRINT,
    HALT,
};

static int run(const int *code) {
    int stack[16];
    int sp = 0, pc = 0, steps = 0;
    for (;;) {
        steps++;
        int op = code[pc++];
        switch (op) {
        case PUSH: stack[sp++] = code[pc++]; break;
        case ADD: sp--; stack[sp - 1] += stack[sp]; break;
        case SUB: sp--; stack[sp - 1] -= stack[sp]; break;
        case MUL: sp--; stack[sp - 1] *= stack[sp]; break;
        case DUP: stack[sp] = stack[sp - 1]; sp++; break;
        case SWAP: { int t = stack[sp - 1]; stack[sp - 1] = stack[sp - 2]; stack[sp - 2] = t; break; }
        case OVER: stack[sp] = stack[sp - 2]; sp++; break;
        case JNZ: { int target = code[pc++]; if (stack[--sp]) pc = target; break; }
        case PRINT: printf("%d\n", stack[--sp]); break;
        case DROP: sp--; break;
        case HALT: return steps;
        default: printf("bad opcode %d\n", op); return -1;
        }
    }
}

int main(void) {
    int steps = run(program);
    printf("steps %d\n", steps);
    return steps > 0 ? 0 : 1;
}
