/* A CoreMark-style benchmark on the C SDK: a linked list walk and sort, a matrix multiply, a
 * state machine over a string and a CRC-16 of the results, ITERATIONS times (-DITERATIONS=N,
 * default 2). It reads the clock (rdinstret) around the work, prints the instructions per
 * iteration, and validates its own result against the expected CRC (exit 0: valid). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "deltachip.h"
#include "bench_config.h"

#ifndef ITERATIONS
#define ITERATIONS 2
#endif

static uint16_t crc16(uint16_t crc, uint32_t v) {
    for (int i = 0; i < 32; i++) {
        int bit = ((crc ^ v) & 1);
        crc >>= 1;
        v >>= 1;
        if (bit) crc ^= 0xA001;
    }
    return crc;
}

struct node { struct node *next; int32_t key, value; };

static int cmp_key(const void *a, const void *b) {
    const struct node *x = *(struct node *const *)a, *y = *(struct node *const *)b;
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    return (x->value > y->value) - (x->value < y->value);   /* qsort is not stable */
}

static uint16_t bench_list(uint32_t seed) {
    struct node *nodes = malloc(LIST_SIZE * sizeof *nodes);
    struct node **order = malloc(LIST_SIZE * sizeof *order);
    if (!nodes || !order) { puts("out of memory"); exit(2); }
    for (int i = 0; i < LIST_SIZE; i++) {
        seed = seed * 1103515245u + 12345u;
        nodes[i].key = (int32_t)(seed >> 8) % 1000;
        nodes[i].value = i;
        order[i] = &nodes[i];
    }
    qsort(order, LIST_SIZE, sizeof *order, cmp_key);
    for (int i = 0; i + 1 < LIST_SIZE; i++) order[i]->next = order[i + 1];
    order[LIST_SIZE - 1]->next = NULL;
    uint16_t crc = 0;
    for (struct node *p = order[0]; p; p = p->next) crc = crc16(crc, (uint32_t)(p->key * 31 + p->value));
    free(order);
    free(nodes);
    return crc;
}

static uint16_t bench_matrix(uint32_t seed) {
    static int32_t a[MATRIX_N][MATRIX_N], b[MATRIX_N][MATRIX_N], c[MATRIX_N][MATRIX_N];
    for (int i = 0; i < MATRIX_N; i++)
        for (int j = 0; j < MATRIX_N; j++) {
            seed = seed * 1664525u + 1013904223u;
            a[i][j] = (int32_t)(seed >> 20) - 2048;
            b[i][j] = (int32_t)(seed & 0xFFF) - 2048;
        }
    uint16_t crc = 0;
    for (int i = 0; i < MATRIX_N; i++)
        for (int j = 0; j < MATRIX_N; j++) {
            int32_t s = 0;
            for (int k = 0; k < MATRIX_N; k++) s += a[i][k] * b[k][j];
            c[i][j] = s;
            crc = crc16(crc, (uint32_t)s);
        }
    return crc;
}

/* Counts the numbers in a string: integers, decimals, exponent forms, invalid tokens. */
static uint16_t bench_state(void) {
    static const char text[] = "5012 1.23 -874 3.14e5 +7 abc 0x1f 12e-2 -.5 9.9.9 42, 1e 77";
    enum { START, INT, FRAC, EXP_SIGN, EXP, INVALID } st = START;
    int counts[6] = {0};
    for (const char *p = text;; p++) {
        char ch = *p;
        if (ch == ' ' || ch == ',' || ch == 0) {
            if (p != text && p[-1] != ' ' && p[-1] != ',') counts[st]++;
            st = START;
            if (!ch) break;
            continue;
        }
        switch (st) {
        case START: st = (ch >= '0' && ch <= '9') || ch == '+' || ch == '-' ? INT : ch == '.' ? FRAC : INVALID; break;
        case INT: st = ch == '.' ? FRAC : (ch == 'e' || ch == 'E') ? EXP_SIGN : (ch >= '0' && ch <= '9') ? INT : INVALID; break;
        case FRAC: st = (ch == 'e' || ch == 'E') ? EXP_SIGN : (ch >= '0' && ch <= '9') ? FRAC : INVALID; break;
        case EXP_SIGN: st = (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' ? EXP : INVALID; break;
        case EXP: st = (ch >= '0' && ch <= '9') ? EXP : INVALID; break;
        default: break;
        }
    }
    uint16_t crc = 0;
    for (int i = 0; i < 6; i++) crc = crc16(crc, (uint32_t)counts[i]);
    return crc;
}

int main(void) {
    uint16_t crc = 0;
    uint32_t start = read_instret();
    for (int it = 0; it < ITERATIONS; it++) {
        crc = crc16(crc, bench_list(0x1234u + it));
        crc = crc16(crc, bench_matrix(0x5678u + it));
        crc = crc16(crc, bench_state());
    }
    uint32_t ticks = read_instret() - start;
    printf("iterations %d, list %d, matrix %dx%d\n", ITERATIONS, LIST_SIZE, MATRIX_N, MATRIX_N);
    printf("crc 0x%04x\n", crc);
    printf("instructions per iteration %lu\n", (unsigned long)(ticks / ITERATIONS));
    if (ticks == 0) { puts("error: the clock did not move"); return 3; }
#ifdef EXPECTED_CRC
    if (crc != EXPECTED_CRC) { printf("ERROR: crc 0x%04x, expected 0x%04x\n", crc, EXPECTED_CRC); return 1; }
    puts("correct operation validated");
#endif
    return 0;
}
