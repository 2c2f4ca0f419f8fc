#include <stdio.h>

#include "shapes.h"

void report(const char *name, double area) { printf("%s: area %.2f\n", name, area); }
