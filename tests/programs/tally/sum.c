#include "counts.h"

void counts_init(struct counts *c) {
    c->n = c->sum = 0;
    c->min = c->max = 0;
}

long counts_mean_x100(const struct counts *c) {
    return c->n ? (100 * c->sum) / c->n : 0;
}
