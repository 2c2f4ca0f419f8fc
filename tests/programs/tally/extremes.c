#include "counts.h"

void counts_add(struct counts *c, long value) {
    if (c->n == 0 || value < c->min)
        c->min = value;
    if (c->n == 0 || value > c->max)
        c->max = value;
    c->n++;
    c->sum += value;
}

long counts_range(const struct counts *c) {
    return c->max - c->min;
}
