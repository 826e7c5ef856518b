/* printf of doubles: %f %e %g %a with flags and precisions, and arithmetic on them (needs soft-float). */
#include <stdio.h>

int main(void) {
    const double vals[] = {0.0, -0.0, 1.0, -1.5, 3.141592653589793, 2.718281828459045e10, 1e-7, 123456.789,
                           6.02214076e23, -9.109e-31, 0.1, 1.0 / 3.0, 1e300, 100.0, 0.5};
    const char *fmts[] = {"%f", "%.0f", "%.3f", "%10.2f", "%-12.4f|", "%+f", "%e", "%.2e", "%E", "%g", "%.3g",
                          "%10g", "%G", "%#g", "%a", "%.3a", "%A"};
    for (unsigned f = 0; f < sizeof fmts / sizeof *fmts; f++) {
        printf("%-9s", fmts[f]);
        for (unsigned i = 0; i < sizeof vals / sizeof *vals; i++) {
            printf(" [");
            printf(fmts[f], vals[i]);
            printf("]");
        }
        printf("\n");
    }
    double acc = 0;
    for (int i = 1; i <= 1000; i++)
        acc += 1.0 / ((double)i * i);
    printf("sum %.17g\n", acc);
    volatile double big = 1e308;
    printf("inf %f %e %g\n", big * 10, -big * 10, big * 10);
    float f = 1.1f;
    printf("float %.9g %a\n", f * 3.0f, (double)f);
    return 0;
}
