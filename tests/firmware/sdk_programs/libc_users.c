/* The C SDK's library in use, in the style of Embench IoT's programs: string.h, stdio.h
 * (snprintf, printf %d %x %s %f %e %g), stdlib.h (malloc/free/calloc/realloc, qsort,
 * bsearch, strtol, strtoul, atoi, abs, labs, div), ctype.h and setjmp.h. Each line is
 * checked by tests/firmware/test_sdk.py against the same computation in Python. */
#include <ctype.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static jmp_buf env;
static int depth_reached;

static void dive(int depth) {
    depth_reached = depth;
    if (depth == 5) longjmp(env, depth * 10);
    dive(depth + 1);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int main(void) {
    /* string.h */
    char buf[96];
    strcpy(buf, "deltachip");
    strcat(buf, " runs C");
    printf("strlen %u strcmp %d strncmp %d\n", (unsigned)strlen(buf), strcmp("abc", "abd") < 0,
           strncmp("abcdef", "abcxyz", 3));
    printf("strchr %s strrchr %s strstr %s\n", strchr(buf, 'a'), strrchr(buf, 'h'), strstr(buf, "runs"));
    char tok[] = "a,bb,,ccc";
    int ntok = 0;
    for (char *t = strtok(tok, ","); t; t = strtok(NULL, ",")) ntok++;
    printf("strtok %d memcmp %d\n", ntok, memcmp("xyz", "xya", 3) > 0);

    /* stdio.h */
    int n = snprintf(buf, sizeof buf, "[%5d|%-5d|%05d|%x|%X|%o|%c|%s|%.2s]", 42, -7, 3, 0xbeef,
                     0xBEEF, 8, 'q', "str", "truncate");
    printf("%s %d\n", buf, n);
    printf("%f %.3f %10.4f %e %g %g\n", 3.14159265358979, -2.5, 1.0 / 3.0, 12345.678, 0.0001, 1e20);
    printf("%lld %llu %ld %hhd\n", -1234567890123LL, 18446744073709551615ULL, -2147483647L - 1, (char)300);
    printf("truncated %d\n", snprintf(buf, 8, "%s", "0123456789"));
    puts(buf);

    /* stdlib.h */
    int *v = malloc(40 * sizeof *v);
    for (int i = 0; i < 40; i++) v[i] = (i * 7919) % 101 - 50;
    qsort(v, 40, sizeof *v, cmp_int);
    long sum = 0;
    for (int i = 0; i < 40; i++) sum += (long)v[i] * (i + 1);
    int key = v[17];
    int *found = bsearch(&key, v, 40, sizeof *v, cmp_int);
    printf("qsort min %d max %d weighted %ld bsearch %d\n", v[0], v[39], sum, found && *found == key);
    v = realloc(v, 400 * sizeof *v);
    int *z = calloc(100, sizeof *z);
    int zeros = 0;
    for (int i = 0; i < 100; i++) zeros += z[i] == 0;
    printf("realloc %d calloc %d\n", v != NULL && v[39] == 50, zeros);
    free(z);
    free(v);
    void *huge = malloc(64 * 1024);          /* more than the whole RAM: NULL, not a crash */
    void *small = malloc(1024);
    printf("malloc huge %s small %s\n", huge ? "yes" : "NULL", small ? "yes" : "NULL");
    free(small);
    char *end;
    long a = strtol("  -0x1fZ", &end, 16);
    printf("strtol %ld rest %s strtoul %lu atoi %d\n", a, end, strtoul("4294967295", NULL, 10), atoi("  123abc"));
    printf("strtol base0 %ld %ld %ld\n", strtol("0755", NULL, 0), strtol("0x10", NULL, 0), strtol("99", NULL, 0));
    div_t d = div(-17, 5);
    printf("abs %d labs %ld div %d %d\n", abs(-5), labs(-70000L), d.quot, d.rem);
    printf("strtod %.6f\n", strtod("2.718281828", NULL));

    /* ctype.h */
    const char *mixed = "Hello, World 42!";
    int up = 0, lo = 0, dg = 0, sp = 0, pu = 0;
    for (const char *p = mixed; *p; p++) {
        up += isupper((unsigned char)*p) != 0;
        lo += islower((unsigned char)*p) != 0;
        dg += isdigit((unsigned char)*p) != 0;
        sp += isspace((unsigned char)*p) != 0;
        pu += ispunct((unsigned char)*p) != 0;
    }
    for (int i = 0; mixed[i]; i++) buf[i] = (char)toupper((unsigned char)mixed[i]);
    buf[strlen(mixed)] = 0;
    printf("ctype %d %d %d %d %d %s %c\n", up, lo, dg, sp, pu, buf, tolower('Q'));

    /* setjmp.h */
    int r = setjmp(env);
    if (r == 0) dive(0);
    printf("longjmp %d from depth %d\n", r, depth_reached);
    return 0;
}
