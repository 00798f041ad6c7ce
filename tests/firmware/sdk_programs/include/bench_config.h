/* bench.c's sizes (found with -I tests/firmware/sdk_programs/include). */
#ifndef LIST_SIZE
#define LIST_SIZE 64
#endif
#ifndef MATRIX_N
#define MATRIX_N 8
#endif
