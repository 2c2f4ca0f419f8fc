/* A running count, sum and range of whole numbers: the C static library (libcounts.a). */
#ifndef COUNTS_H
#define COUNTS_H

#ifdef __cplusplus
extern "C" {
#endif

struct counts {
    long n, sum, min, max;
};

void counts_init(struct counts *c);
void counts_add(struct counts *c, long value);
long counts_mean_x100(const struct counts *c);
long counts_range(const struct counts *c);

#ifdef __cplusplus
}
#endif

#endif
