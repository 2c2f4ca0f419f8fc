#include "calc.h"

int evaluations;
static long history[16];

static int precedence(int op) { return op == '*' || op == '/' ? 2 : 1; }

long evaluate(const char *expr) {
    lexer lx = {expr, 0};
    long values[8];
    int ops[8];
    int nv = 0, no = 0;
    long v;
    if (!next_number(&lx, &v))
        return 0;
    values[nv++] = v;
    for (int op; (op = next_op(&lx)) != 0;) {
        while (no > 0 && precedence(ops[no - 1]) >= precedence(op)) {
            long b = values[--nv], a = values[--nv];
            values[nv++] = apply(ops[--no], a, b);
        }
        ops[no++] = op;
        if (!next_number(&lx, &v))
            return 0;
        values[nv++] = v;
    }
    while (no > 0) {
        long b = values[--nv], a = values[--nv];
        values[nv++] = apply(ops[--no], a, b);
    }
    history[evaluations++ & 15] = values[0];
    return values[0];
}
