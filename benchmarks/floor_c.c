/* The C floor distributor: what a full hit costs when the distributor does nothing but put
 * precomputed objects in place. For benchmarks only (benchmarks/floor_bench.py compiles it).
 *
 *     floor_c PRECOMPUTED_DIR JOBFILE
 *
 * Hard-links PRECOMPUTED_DIR/<i>.o to outputs[0] of the i-th job of an LLD job file. The
 * job file is scanned, not parsed: each "outputs" key is followed by its first string.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: floor_c PRECOMPUTED_DIR JOBFILE\n");
        return 2;
    }
    FILE *f = fopen(argv[argc - 1], "rb");
    if (!f) {
        perror(argv[argc - 1]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "floor_c: cannot read the job file\n");
        return 1;
    }
    fclose(f);
    text[size] = 0;
    char *out = malloc((size_t)size + 1), src[4096];
    int index = 0;
    for (char *p = text; (p = strstr(p, "\"outputs\"")) != NULL; index++) {
        p = strchr(p, '[');
        p = p ? strchr(p, '"') : NULL;
        if (!p) {
            fprintf(stderr, "floor_c: malformed job file\n");
            return 1;
        }
        size_t n = 0;
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++;
            out[n++] = *p;
        }
        out[n] = 0;
        snprintf(src, sizeof src, "%s/%d.o", argv[1], index);
        unlink(out);
        if (link(src, out)) {
            perror(out);
            return 1;
        }
    }
    return 0;
}
