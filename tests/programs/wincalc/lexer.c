#include "calc.h"

int next_number(lexer *lx, long *out) {
    long value = 0;
    int digits = 0;
    while (lx->text[lx->pos] >= '0' && lx->text[lx->pos] <= '9') {
        value = value * 10 + (lx->text[lx->pos++] - '0');
        digits++;
    }
    *out = value;
    return digits > 0;
}

int next_op(lexer *lx) {
    char c = lx->text[lx->pos];
    if (c == '+' || c == '-' || c == '*' || c == '/') {
        lx->pos++;
        return c;
    }
    return 0;
}
