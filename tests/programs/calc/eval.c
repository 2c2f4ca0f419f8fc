#include "calc.h"

static int precedence(int op) { return op == '*' || op == '/' ? 2 : 1; }

long evaluate(const char *expr) {
    lexer lx = {expr, 0};
    long values[32];
    int ops[32];
    int nv = 0, no = 0;
    next_number(&lx, &values[nv++]);
    for (int op; (op = next_op(&lx));) {
        while (no && precedence(ops[no - 1]) >= precedence(op)) {
            nv--;
            values[nv - 1] = apply(ops[--no], values[nv - 1], values[nv]);
        }
        ops[no++] = op;
        next_number(&lx, &values[nv++]);
    }
    while (no) {
        nv--;
        values[nv - 1] = apply(ops[--no], values[nv - 1], values[nv]);
    }
    return values[0];
}
