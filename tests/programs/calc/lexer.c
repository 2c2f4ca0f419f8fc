#include <ctype.h>
#include "calc.h"

int next_number(lexer *lx, long *out) {
    long v = 0;
    int any = 0;
    while (isdigit((unsigned char)lx->text[lx->pos])) {
        v = v * 10 + (lx->text[lx->pos++] - '0');
        any = 1;
    }
    *out = v;
    return any;
}

int next_op(lexer *lx) { return lx->text[lx->pos] ? lx->text[lx->pos++] : 0; }
