#ifndef CALC_H
#define CALC_H
typedef struct { const char *text; int pos; } lexer;
int next_number(lexer *lx, long *out);
int next_op(lexer *lx);
long apply(int op, long a, long b);
long evaluate(const char *expr);
unsigned checksum(const char *s);
char *join_words(const char **words, int n);
#endif
