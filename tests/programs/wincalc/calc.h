/* A freestanding calculator for Windows-style (COFF) links: no C library, no CRT start-up
   (linked with /nodefaultlib /entry:main), so it links on any machine with LLVM. */
#ifndef CALC_H
#define CALC_H
typedef struct { const char *text; int pos; } lexer;
int next_number(lexer *lx, long *out);
int next_op(lexer *lx);
long apply(int op, long a, long b);
long evaluate(const char *expr);
unsigned checksum(const char *s);
int word_length(const char *s);
extern const char *const expressions[];
extern int evaluations;
#endif
