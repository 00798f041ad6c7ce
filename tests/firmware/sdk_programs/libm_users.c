/* libm in use (picolibc's, soft float): each line is "name x y result tolerance", the
 * result printed with %.17g and the relative tolerance the program claims; test_sdk.py
 * checks every result against Python's math module within it. Then, in the style of
 * Embench IoT's "cubic", the real roots of cubic equations (acos, cos, pow, sqrt, atan). */
#include <math.h>
#include <stdio.h>

#define TOL 1e-15

static void show(const char *name, double x, double y, double r) {
    printf("%s %.17g %.17g %.17g %g\n", name, x, y, r, TOL);
}

/* The real roots of x^3 + a x^2 + b x + c = 0 (Embench's cubic: the trigonometric method). */
static int solve_cubic(double a, double b, double c, double roots[3]) {
    double q = (a * a - 3.0 * b) / 9.0;
    double r = (2.0 * a * a * a - 9.0 * a * b + 27.0 * c) / 54.0;
    double r2 = r * r, q3 = q * q * q;
    if (r2 < q3) {
        double t = acos(r / sqrt(q3));
        double m = -2.0 * sqrt(q);
        roots[0] = m * cos(t / 3.0) - a / 3.0;
        roots[1] = m * cos((t + 2.0 * M_PI) / 3.0) - a / 3.0;
        roots[2] = m * cos((t - 2.0 * M_PI) / 3.0) - a / 3.0;
        return 3;
    }
    double e = -copysign(pow(fabs(r) + sqrt(r2 - q3), 1.0 / 3.0), r);
    double f = e == 0.0 ? 0.0 : q / e;
    roots[0] = e + f - a / 3.0;
    return 1;
}

int main(void) {
    const double xs[] = {0.5, 1.0, 2.5, -0.75, 10.0};
    for (int i = 0; i < 5; i++) {
        double x = xs[i];
        show("sin", x, 0, sin(x));
        show("cos", x, 0, cos(x));
        show("tan", x, 0, tan(x));
        show("atan", x, 0, atan(x));
        show("exp", x, 0, exp(x));
        show("sqrt", fabs(x), 0, sqrt(fabs(x)));
        show("log", fabs(x), 0, log(fabs(x)));
        show("pow", fabs(x), 1.7, pow(fabs(x), 1.7));
        show("atan2", x, 2.0, atan2(x, 2.0));
    }
    show("asin", 0.3, 0, asin(0.3));
    show("acos", 0.3, 0, acos(0.3));
    show("sinh", 1.5, 0, sinh(1.5));
    show("tanh", 0.7, 0, tanh(0.7));
    show("log10", 12345.0, 0, log10(12345.0));
    show("fmod", 10.5, 3.0, fmod(10.5, 3.0));
    show("floor", -2.5, 0, floor(-2.5));
    show("ceil", -2.5, 0, ceil(-2.5));
    show("hypot", 3.0, 4.0, hypot(3.0, 4.0));
    printf("float sinf %.9g sqrtf %.9g\n", (double)sinf(0.5f), (double)sqrtf(2.0f));
    const double eq[][3] = {{-6.0, 11.0, -6.0}, {-4.5, 17.0, -30.0}, {-3.5, 22.0, -31.0}, {0.0, 0.0, -8.0}};
    for (int i = 0; i < 4; i++) {
        double roots[3];
        int n = solve_cubic(eq[i][0], eq[i][1], eq[i][2], roots);
        printf("cubic %g %g %g:", eq[i][0], eq[i][1], eq[i][2]);
        for (int k = 0; k < n; k++) printf(" %.6f", roots[k]);
        printf("\n");
    }
    return 0;
}
