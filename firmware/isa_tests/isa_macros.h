/* Macros for the deltachip ISA test programs (firmware/isa_tests/*.S).
 *
 * Each program is `main` (entered from crt0 with sp set) running numbered test cases in
 * order. A case computes a value into a register and compares it with the expected value;
 * on a mismatch the program exits with the case number (ecall, a7 = 93); after the last
 * case it exits with 0. Register use: x31 holds the current case number and x30 the
 * expected value, so the cases never use x30/x31 as operands. Written from the RISC-V
 * unprivileged spec (RV32I, M, Zba); the expected values come from generate.py's model.
 */
#ifndef ISA_MACROS_H
#define ISA_MACROS_H

#define TESTNUM x31
#define EXPECT x30

#define TEST_BEGIN \
    .text; \
    .globl main; \
    .type main, @function; \
main:

#define TEST_END \
    li a0, 0; \
    li a7, 93; \
    ecall; \
fail: \
    mv a0, TESTNUM; \
    li a7, 93; \
    ecall

/* Runs `code`, then checks register `reg` against `expected`. */
#define TEST_CASE(num, reg, expected, code...) \
    li TESTNUM, num; \
    code; \
    li EXPECT, expected; \
    bne reg, EXPECT, fail

/* ---- register-register: rd = rs1 op rs2 ---- */
#define TEST_RR_OP(num, inst, result, v1, v2) \
    TEST_CASE(num, x14, result, li x1, v1; li x2, v2; inst x14, x1, x2)
#define TEST_RR_SRC1_EQ_DEST(num, inst, result, v1, v2) \
    TEST_CASE(num, x1, result, li x1, v1; li x2, v2; inst x1, x1, x2)
#define TEST_RR_SRC2_EQ_DEST(num, inst, result, v1, v2) \
    TEST_CASE(num, x2, result, li x1, v1; li x2, v2; inst x2, x1, x2)
#define TEST_RR_SRC12_EQ_DEST(num, inst, result, v1) \
    TEST_CASE(num, x1, result, li x1, v1; inst x1, x1, x1)
#define TEST_RR_ZEROSRC1(num, inst, result, v2) \
    TEST_CASE(num, x14, result, li x2, v2; inst x14, x0, x2)
#define TEST_RR_ZEROSRC2(num, inst, result, v1) \
    TEST_CASE(num, x14, result, li x1, v1; inst x14, x1, x0)
#define TEST_RR_ZEROSRC12(num, inst, result) \
    TEST_CASE(num, x14, result, li x14, 0x5a5a5a5a; inst x14, x0, x0)
/* Writing x0 must leave it zero. */
#define TEST_RR_ZERODEST(num, inst, v1, v2) \
    TEST_CASE(num, x0, 0, li x1, v1; li x2, v2; inst x0, x1, x2)

/* ---- register-immediate: rd = rs1 op imm ---- */
#define TEST_IMM_OP(num, inst, result, v1, imm) \
    TEST_CASE(num, x14, result, li x1, v1; inst x14, x1, imm)
#define TEST_IMM_SRC1_EQ_DEST(num, inst, result, v1, imm) \
    TEST_CASE(num, x1, result, li x1, v1; inst x1, x1, imm)
#define TEST_IMM_ZEROSRC1(num, inst, result, imm) \
    TEST_CASE(num, x14, result, li x14, 0x5a5a5a5a; inst x14, x0, imm)
#define TEST_IMM_ZERODEST(num, inst, v1, imm) \
    TEST_CASE(num, x0, 0, li x1, v1; inst x0, x1, imm)

/* ---- loads: rd = mem[base + offset] ---- */
#define TEST_LD_OP(num, inst, result, offset, base) \
    TEST_CASE(num, x14, result, la x1, base; inst x14, offset(x1))
/* The loaded value replaces the base register. */
#define TEST_LD_DEST_EQ_BASE(num, inst, result, offset, base) \
    TEST_CASE(num, x1, result, la x1, base; inst x1, offset(x1))
#define TEST_LD_ZERODEST(num, inst, offset, base) \
    TEST_CASE(num, x0, 0, la x1, base; inst x0, offset(x1))

/* ---- stores: store v at base + offset, then read back with `load` at `loadoff` ---- */
#define TEST_ST_OP(num, load, store, result, v, offset, loadoff, base) \
    TEST_CASE(num, x14, result, la x1, base; li x2, v; store x2, offset(x1); \
              load x14, loadoff(x1))
/* Storing x0 stores zero. */
#define TEST_ST_ZEROSRC(num, load, store, result, offset, loadoff, base) \
    TEST_CASE(num, x14, result, la x1, base; store x0, offset(x1); load x14, loadoff(x1))

/* ---- branches: taken forwards and backwards, or not taken either way ---- */
#define TEST_BR_TAKEN(num, inst, v1, v2) \
    li TESTNUM, num; \
    li x1, v1; \
    li x2, v2; \
    inst x1, x2, 2f; \
    j fail; \
1:  j 3f; \
2:  inst x1, x2, 1b; \
    j fail; \
3:

#define TEST_BR_NOT_TAKEN(num, inst, v1, v2) \
    li TESTNUM, num; \
    li x1, v1; \
    li x2, v2; \
    inst x1, x2, 1f; \
    j 2f; \
1:  j fail; \
2:  inst x1, x2, 1b

/* ---- filler: n nops (for far branch and jump offsets) ---- */
#define NOPS(n) .fill n, 4, 0x00000013

#endif
